#include "batchwise/workload.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "batchwise/device.h"
#include "batchwise/memory.h"
#include "batchwise/models.h"
#include "check.h"
#include "compat.h"
#include "model_input.h"
#include "torch_error.h"

namespace batchwise {

// Shuffles the dataset once per epoch with its own seeded generator (like a DataLoader's sampler)
// and hands out index tensors; a batch larger than what is left of the epoch continues into the
// next one. Its tensors are host-side loader state, not counted against the device.
// Sharded (data-parallel), every rank draws the same global batch of world x batch indices from
// the same permutation and keeps its own slice, rank r the r-th: as DistributedSampler, no sample
// is seen twice in an epoch, and the ranks' batches concatenated are one process's global batch.
struct ModuleWorkload::Sampler {
  Sampler(int64_t n, uint64_t seed) : size(n), generator(at::make_generator<at::CPUGeneratorImpl>(seed)) {}
  at::Tensor next(int64_t batch) {
    if (world == 1) return draw(batch);
    return draw(batch * world).narrow(0, rank * batch, batch);
  }
  at::Tensor draw(int64_t batch) {
    std::vector<at::Tensor> parts;
    while (batch > 0) {
      if (!order.defined() || cursor == size) {
        UntrackedScope untracked;
        order = at::randperm(size, generator, at::TensorOptions().dtype(at::kLong));
        cursor = 0;
      }
      const int64_t take = std::min(batch, size - cursor);
      parts.push_back(order.narrow(0, cursor, take));
      cursor += take;
      batch -= take;
    }
    return parts.size() == 1 ? parts[0] : at::cat(parts);
  }
  int64_t size;
  at::Generator generator;
  at::Tensor order;
  int64_t cursor = 0;
  int64_t rank = 0, world = 1;
};

namespace {

struct ModuleState final : WorkloadState {
  std::vector<at::Tensor> parameters, buffers, grads;  // host copies; undefined grad: none was set
  std::vector<bool> training;                          // per module, in modules() order
  std::string optimizer;                               // torch::serialize archive
  at::Tensor rng, device_rng, sampler_rng, sampler_order;
  int64_t sampler_cursor = 0;
  double loss_scale = 0;  // fp16's scaler, put back only when no step since was good
  int good_steps = 0;
  int64_t good_total = 0;
};

at::Tensor host_copy(const at::Tensor& t) {
  return t.defined() ? t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true) : at::Tensor();
}

at::Tensor get_rng(at::Generator g) {
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

void set_rng(at::Generator g, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

}  // namespace

ModuleWorkload::ModuleWorkload(WorkloadInfo info, torch::nn::AnyModule model,
                               std::unique_ptr<torch::optim::Optimizer> optimizer, Dataset data, LossFn loss,
                               c10::Device device, uint64_t seed)
    : info_(std::move(info)),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      data_(std::move(data)),
      loss_(std::move(loss)),
      device_(device),
      sampler_(std::make_unique<Sampler>(data_.size(), seed)) {
  BATCHWISE_CHECK(data_.size() > 0, DataError, "{}: the dataset is empty", data_.name);
}

using detail::model_input;

// The input pipeline: the training thread draws each batch's indices from the sampler in order;
// `workers` threads assemble and transform them ahead, up to workers x prefetch batches; batches are
// handed out in order. The sampler is snapshot when the pipeline starts and the batches handed out
// are counted, so stopping it (before a state is saved or restored) rewinds the sampler to exactly
// where the training consumed it: prefetching never skips or repeats a sample.
struct ModuleWorkload::Loader {
  Loader(ModuleWorkload& w, int workers, int prefetch, bool augment, int64_t latency_us)
      : w(w), workers(workers), prefetch(prefetch), augment(augment), latency_us(latency_us) {}
  ~Loader() { stop(); }

  ModuleWorkload& w;
  const int workers, prefetch;
  const bool augment;
  const int64_t latency_us;

  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable work, ready_cv;
  bool stopping = false, running = false;
  int64_t batch = 0, drawn = 0, consumed = 0;
  std::deque<std::pair<int64_t, at::Tensor>> todo;
  std::map<int64_t, Batch> ready;
  std::exception_ptr error;
  at::Tensor snap_rng, snap_order;
  int64_t snap_cursor = 0;
  uint64_t seed_base = 0;

  Batch produce(const at::Tensor& index, int64_t k) {
    if (latency_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(latency_us * index.numel()));
    Batch b = w.host_batch(index, seed_base + static_cast<uint64_t>(k));
    if (w.device_.is_cuda()) b.input = b.input.pin_memory(), b.target = b.target.pin_memory();
    return b;
  }

  void worker() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      work.wait(lock, [&] { return stopping || !todo.empty(); });
      if (stopping) return;
      auto [k, index] = todo.front();
      todo.pop_front();
      lock.unlock();
      Batch b;
      std::exception_ptr failed;
      try {
        b = produce(index, k);
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && !error) error = failed;
      if (!failed) ready.emplace(k, std::move(b));
      ready_cv.notify_all();
    }
  }

  void start(int64_t size) {
    batch = size;
    drawn = consumed = 0;
    snap_rng = get_rng(w.sampler_->generator);
    snap_order = w.sampler_->order;
    snap_cursor = w.sampler_->cursor;
    seed_base = static_cast<uint64_t>(at::detail::getDefaultCPUGenerator().current_seed()) * 1000003u + 17u;
    stopping = false;
    running = true;
    for (int i = 0; i < workers; ++i) threads.emplace_back([this] { worker(); });
  }

  void stop() {
    if (!running) return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    work.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
    todo.clear();
    ready.clear();
    error = nullptr;
    running = false;
    // Back to where the training consumed the sampler.
    set_rng(w.sampler_->generator, snap_rng);
    w.sampler_->order = snap_order;
    w.sampler_->cursor = snap_cursor;
    for (int64_t i = 0; i < consumed; ++i) (void)w.sampler_->next(batch);
  }

  Batch next(int64_t size) {
    if (!running || size != batch) {
      stop();
      start(size);
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      while (drawn - consumed < static_cast<int64_t>(workers) * prefetch)
        todo.emplace_back(drawn++, w.sampler_->next(batch));
    }
    work.notify_all();
    Batch b;
    {
      std::unique_lock<std::mutex> lock(mutex);
      ready_cv.wait(lock, [&] { return error || ready.count(consumed) > 0; });
      if (error) {
        const std::exception_ptr e = error;
        lock.unlock();
        stop();
        std::rethrow_exception(e);
      }
      b = std::move(ready.at(consumed));
      ready.erase(consumed);
      ++consumed;
    }
    const bool async = w.device_.is_cuda();
    return {b.input.to(w.device_, /*non_blocking=*/async), b.target.to(w.device_, /*non_blocking=*/async)};
  }
};

ModuleWorkload::~ModuleWorkload() = default;

void ModuleWorkload::set_pipeline(int workers, int prefetch, bool augment, int64_t io_latency_us) {
  BATCHWISE_CHECK(workers >= 0 && prefetch >= 1 && io_latency_us >= 0, ConfigError,
                  "--workers {}, --prefetch {}, --io-latency-us {}: workers and latency must not be negative, prefetch "
                  "at least 1",
                  workers, prefetch, io_latency_us);
  BATCHWISE_CHECK(!augment || (data_.inputs.dim() == 4 && !data_.is_tokens()), ConfigError,
                  "--augment: random crops and flips are for image datasets ([N, C, H, W]); {} is not one", data_.name);
  if (loader_) loader_->stop();
  loader_.reset();
  if (workers > 0 || augment || io_latency_us > 0)
    loader_ = std::make_unique<Loader>(*this, std::max(workers, 0), prefetch, augment, io_latency_us);
}

std::tuple<int, int, bool, int64_t> ModuleWorkload::pipeline() const {
  if (!loader_) return {0, 2, false, 0};
  return {loader_->workers, loader_->prefetch, loader_->augment, loader_->latency_us};
}

Batch ModuleWorkload::host_batch(const at::Tensor& index, uint64_t augment_seed) const {
  at::Tensor input = data_.inputs.index_select(0, index);
  if (input.scalar_type() == at::kByte) input = input.to(at::kFloat).div_(255.0).sub_(data_.mean).div_(data_.std);
  if (loader_ && loader_->augment) {
    // Random crop with 4 pixels of zero padding, and a horizontal flip with probability 1/2.
    const int64_t n = input.size(0), h = input.size(2), wd = input.size(3);
    const at::Tensor padded = at::constant_pad_nd(input, {4, 4, 4, 4});
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(augment_seed);
    const at::Tensor offsets = at::randint(0, 9, {n, 2}, g, at::TensorOptions().dtype(at::kLong));
    const at::Tensor flips = at::randint(0, 2, {n}, g, at::TensorOptions().dtype(at::kLong));
    at::Tensor out = at::empty_like(input);
    const auto o = offsets.accessor<int64_t, 2>();
    const auto f = flips.accessor<int64_t, 1>();
    for (int64_t i = 0; i < n; ++i) {
      at::Tensor crop = padded[i].narrow(1, o[i][0], h).narrow(2, o[i][1], wd);
      out[i].copy_(f[i] ? crop.flip({2}) : crop);
    }
    input = out;
  }
  return {input, data_.targets.index_select(0, index)};
}

Batch ModuleWorkload::next_batch(int64_t batch) {
  if (loader_) {
    if (loader_->workers == 0) {  // transforms in the training thread
      const at::Tensor index = sampler_->next(batch);
      if (loader_->latency_us > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(loader_->latency_us * index.numel()));
      Batch b = host_batch(index, static_cast<uint64_t>(sampler_->cursor) * 7919u);
      return {b.input.to(device_), b.target.to(device_)};
    }
    return loader_->next(batch);
  }
  const at::Tensor index = sampler_->next(batch);
  return {model_input(data_, data_.inputs.index_select(0, index), device_),
          data_.targets.index_select(0, index).to(device_)};
}

namespace {
at::ScalarType autocast_type(const std::string& precision) {
  const std::optional<Precision> p = known_precision(precision);
  if (p == Precision::Bf16) return at::kBFloat16;
  if (p == Precision::Fp16) return at::kHalf;
  return at::ScalarType::Undefined;
}
}  // namespace

at::Tensor ModuleWorkload::forward_loss(const at::Tensor& input, const at::Tensor& target, at::Tensor* output) {
  compat::AutocastScope autocast(device_.type(), autocast_type(info_.precision));
  const at::Tensor out = model_.forward(input);
  if (output) *output = out;
  return loss_(out, target);
}

at::Tensor ModuleWorkload::train_step(const Batch& batch) {
  // A model left in eval mode would train without dropout and with frozen BatchNorm statistics,
  // which is not the step the user will run; restore_state puts the mode back afterwards.
  if (!model_.ptr()->is_training()) model_.ptr()->train();
  optimizer_->zero_grad();
  at::Tensor loss = forward_loss(batch.input, batch.target);
  step_backward(loss);
  step_optimizer();
  return loss.detach();
}

// fp16: the loss scaled up so that small gradients survive in half precision (see step_optimizer).
void ModuleWorkload::step_backward(const at::Tensor& loss) {
  if (fp16())
    (loss * loss_scale_).backward();
  else
    loss.backward();
}

// fp16: the gradients unscaled and checked for inf/NaN (then the step is skipped and the scale
// halves); the scale doubles after growth_interval_ good steps: GradScaler's policy, with the same
// ATen kernels. A good step records the scaler as it left it: what restore_state keeps.
void ModuleWorkload::step_optimizer() {
  if (!fp16()) {
    optimizer_->step();
    return;
  }
  std::vector<at::Tensor> grads;
  for (const auto& p : module().parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  at::Tensor found_inf = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device_));
  const at::Tensor inv_scale = at::full({1}, 1.0 / loss_scale_, at::TensorOptions().dtype(at::kFloat).device(device_));
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  if (found_inf.item<float>() == 0) {
    optimizer_->step();
    if (++good_steps_ >= growth_interval_) loss_scale_ *= 2, good_steps_ = 0;
    ++good_total_;
    settled_scale_ = loss_scale_, settled_good_steps_ = good_steps_;
  } else {
    loss_scale_ *= 0.5, good_steps_ = 0;
    ++skipped_total_;
  }
}

void ModuleWorkload::set_loss_scale(double scale) {
  BATCHWISE_CHECK(scale > 0 && std::isfinite(scale), ConfigError, "loss scale {:g}: must be a positive number", scale);
  loss_scale_ = settled_scale_ = scale;
  good_steps_ = settled_good_steps_ = 0;
}

void ModuleWorkload::set_loss_scale_growth_interval(int steps) {
  BATCHWISE_CHECK(steps >= 1, ConfigError, "loss scale growth interval {}: must be at least 1 step", steps);
  growth_interval_ = steps;
}

std::optional<StepPhases> ModuleWorkload::profiled_step(int64_t batch) {
  using clock = std::chrono::steady_clock;
#ifdef BATCHWISE_HAVE_DEVICE_EVENTS
  if (device_.is_cuda() && !loader_) return profiled_step_events(batch);
#endif
  auto sync = [&] {
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
  };
  auto seconds = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  if (!model_.ptr()->is_training()) model_.ptr()->train();
  StepPhases p;
  sync();
  const auto t0 = clock::now();
  at::Tensor input, target;
  auto t1 = t0;
  if (loader_) {  // the configured pipeline hands out batches already on the device: all "data"
    const Batch b = next_batch(batch);
    input = b.input, target = b.target;
    sync();
    t1 = clock::now();
  } else {
    const at::Tensor index = sampler_->next(batch);
    const at::Tensor rows = data_.inputs.index_select(0, index);
    const at::Tensor target_rows = data_.targets.index_select(0, index);
    t1 = clock::now();
    input = model_input(data_, rows, device_);
    target = target_rows.to(device_);
    sync();
  }
  const auto t2 = clock::now();
  const at::Tensor loss = forward_loss(input, target);
  sync();
  const auto t3 = clock::now();
  optimizer_->zero_grad();
  step_backward(loss);  // train_step's own backward and optimizer step (fp16: scaled, unscaled)
  sync();
  const auto t4 = clock::now();
  step_optimizer();
  (void)loss.item<double>();  // as train_step's caller does
  sync();
  const auto t5 = clock::now();
  p.data_s = seconds(t0, t1);
  p.h2d_s = seconds(t1, t2);
  p.forward_s = seconds(t2, t3);
  p.backward_s = seconds(t3, t4);
  p.optimizer_s = seconds(t4, t5);
  p.total_s = seconds(t0, t5);
  return p;
}

#ifdef BATCHWISE_HAVE_DEVICE_EVENTS
// On CUDA: the device phases between events recorded on the stream, one synchronisation at the
// end (as the training loop's loss.item()), so the profile does not stall the stream after every
// phase. The data phase is host work, timed on the host. Untested on a GPU so far: see the notes.
std::optional<StepPhases> ModuleWorkload::profiled_step_events(int64_t batch) {
  using clock = std::chrono::steady_clock;
  if (!model_.ptr()->is_training()) model_.ptr()->train();
  torch::cuda::synchronize(device_.index());
  compat::StreamMarks marks(device_);
  const auto t0 = clock::now();
  const at::Tensor index = sampler_->next(batch);
  const at::Tensor rows = data_.inputs.index_select(0, index);
  const at::Tensor target_rows = data_.targets.index_select(0, index);
  const auto t1 = clock::now();
  marks.mark();  // 0: the batch is assembled on the host
  const at::Tensor input = model_input(data_, rows, device_);
  const at::Tensor target = target_rows.to(device_);
  marks.mark();  // 1: on the device
  const at::Tensor loss = forward_loss(input, target);
  marks.mark();  // 2: forward and loss
  optimizer_->zero_grad();
  step_backward(loss);
  marks.mark();  // 3: backward
  step_optimizer();
  marks.mark();  // 4: optimizer step
  (void)loss.item<double>();
  torch::cuda::synchronize(device_.index());
  const auto t5 = clock::now();
  StepPhases p;
  p.data_s = std::chrono::duration<double>(t1 - t0).count();
  p.h2d_s = marks.seconds(0, 1);
  p.forward_s = marks.seconds(1, 2);
  p.backward_s = marks.seconds(2, 3);
  p.optimizer_s = marks.seconds(3, 4);
  p.total_s = std::chrono::duration<double>(t5 - t0).count();
  return p;
}
#endif

std::optional<StepProfile> profile_steps(Workload& workload, int64_t batch, int warmup, int steps) {
  BATCHWISE_CHECK(steps >= 1 && warmup >= 0, ConfigError, "profile: {} steps after {} warm-up: need at least one",
                  steps, warmup);
  const StateGuard restore(workload);
  StepProfile profile;
  profile.batch = batch;
  profile.steps = steps;
  for (int i = 0; i < warmup + steps; ++i) {
    const std::optional<StepPhases> p = workload.profiled_step(batch);
    if (!p) return std::nullopt;
    if (i < warmup) continue;
    profile.mean.data_s += p->data_s / steps;
    profile.mean.h2d_s += p->h2d_s / steps;
    profile.mean.forward_s += p->forward_s / steps;
    profile.mean.backward_s += p->backward_s / steps;
    profile.mean.optimizer_s += p->optimizer_s / steps;
    profile.mean.total_s += p->total_s / steps;
  }
  const StepPhases& m = profile.mean;
  profile.coverage = m.total_s > 0 ? (m.data_s + m.h2d_s + m.forward_s + m.backward_s + m.optimizer_s) / m.total_s : 0;
  return profile;
}

void ModuleWorkload::set_lr(double lr) {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
}

std::pair<double, std::optional<double>> ModuleWorkload::evaluate(const Dataset& data, int64_t batch) {
  struct Modes {  // the training mode of every module, put back however evaluation ends
    torch::nn::Module& root;
    std::vector<bool> modes;
    ~Modes() {
      size_t i = 0;
      for (const auto& m : root.modules()) m->train(modes[i++]);
    }
  } restore{module(), {}};
  for (const auto& m : module().modules()) restore.modes.push_back(m->is_training());
  module().eval();
  at::NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t correct = 0;
  const bool classes = data.targets.scalar_type() == at::kLong;
  const int64_t n = data.size();
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t len = std::min(batch, n - start);
    const at::Tensor input = model_input(data_, data.inputs.narrow(0, start, len), device_);
    const at::Tensor target = data.targets.narrow(0, start, len).to(device_);
    at::Tensor output;
    loss_sum += forward_loss(input, target, &output).item<double>() * static_cast<double>(len);
    if (classes) correct += output.argmax(1).eq(target).sum().item<int64_t>();
  }
  return {loss_sum / static_cast<double>(n),
          classes ? std::optional<double>(static_cast<double>(correct) / static_cast<double>(n)) : std::nullopt};
}

void ModuleWorkload::set_shard(int rank, int world_size) {
  BATCHWISE_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, ConfigError,
                  "shard {} of {}: the rank must be in [0, world size)", rank, world_size);
  if (loader_) loader_->stop();
  sampler_->rank = rank;
  sampler_->world = world_size;
}

void ModuleWorkload::zero_grad() { optimizer_->zero_grad(); }

at::Tensor ModuleWorkload::backward(const Batch& batch, double weight) {
  BATCHWISE_CHECK(!fp16(), ConfigError,
                  "{}: gradient accumulation and the noise scale do not support fp16 (its loss scaling) yet; use bf16 "
                  "or fp32",
                  info_.model);
  if (!model_.ptr()->is_training()) model_.ptr()->train();
  const at::Tensor loss = forward_loss(batch.input, batch.target);
  (weight == 1.0 ? loss : loss * weight).backward();
  return loss.detach();
}

void ModuleWorkload::optimizer_step() { optimizer_->step(); }

std::vector<at::Tensor> ModuleWorkload::gradients() {
  std::vector<at::Tensor> grads;
  for (const auto& p : module().parameters())
    if (p.requires_grad()) grads.push_back(p.grad());
  return grads;
}

std::unique_ptr<WorkloadState> ModuleWorkload::save_state() {
  if (loader_) loader_->stop();  // the sampler back where the training consumed it
  UntrackedScope untracked;      // the snapshot is batchwise's, not the training's
  auto state = std::make_unique<ModuleState>();
  for (const auto& p : module().parameters()) {
    state->parameters.push_back(host_copy(p));
    state->grads.push_back(host_copy(p.grad()));
  }
  for (const auto& b : module().buffers()) state->buffers.push_back(host_copy(b));
  for (const auto& m : module().modules()) state->training.push_back(m->is_training());
  torch::serialize::OutputArchive archive;
  optimizer_->save(archive);
  std::ostringstream out;
  archive.save_to(out);
  state->optimizer = out.str();
  state->rng = get_rng(at::detail::getDefaultCPUGenerator());
  if (device_.is_cuda()) state->device_rng = get_rng(at::globalContext().defaultGenerator(device_));
  state->sampler_rng = get_rng(sampler_->generator);
  state->sampler_order = sampler_->order;
  state->sampler_cursor = sampler_->cursor;
  state->loss_scale = loss_scale_;
  state->good_steps = good_steps_;
  state->good_total = good_total_;
  return state;
}

void ModuleWorkload::restore_state(const WorkloadState& saved) {
  if (loader_) loader_->stop();  // prefetched batches belong to the state being left
  const auto* state = dynamic_cast<const ModuleState*>(&saved);
  BATCHWISE_ASSERT(state != nullptr);
  torch::NoGradGuard no_grad;
  auto parameters = module().parameters();
  auto buffers = module().buffers();
  BATCHWISE_ASSERT(parameters.size() == state->parameters.size() && buffers.size() == state->buffers.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    auto& p = parameters[i];
    p.detach().copy_(state->parameters[i]);
    const at::Tensor& g = state->grads[i];
    if (!g.defined()) {
      p.mutable_grad() = at::Tensor();
    } else if (p.grad().defined()) {
      p.mutable_grad().copy_(g);
    } else {
      p.mutable_grad() = g.to(p.device(), /*non_blocking=*/false, /*copy=*/true);
    }
  }
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].detach().copy_(state->buffers[i]);
  auto modules = module().modules();
  for (size_t i = 0; i < modules.size(); ++i) modules[i]->train(state->training[i]);

  // The optimizer's state is replaced whole: states created since the snapshot must go.
  optimizer_->state().clear();
  std::istringstream in(state->optimizer);
  torch::serialize::InputArchive archive;
  archive.load_from(in, device_);
  optimizer_->load(archive);

  set_rng(at::detail::getDefaultCPUGenerator(), state->rng);
  if (device_.is_cuda()) set_rng(at::globalContext().defaultGenerator(device_), state->device_rng);
  set_rng(sampler_->generator, state->sampler_rng);
  sampler_->order = state->sampler_order;
  sampler_->cursor = state->sampler_cursor;
  // fp16's scaler is batchwise's, not the training's (see loss_scale()): a scale that a good step
  // has settled since the snapshot carries over; after only overflows, the snapshot's comes back.
  if (good_total_ > state->good_total) {
    loss_scale_ = settled_scale_, good_steps_ = settled_good_steps_;
  } else {
    loss_scale_ = state->loss_scale, good_steps_ = state->good_steps;
  }
}

namespace {
[[noreturn]] void no_gradients(const Workload& w) {
  throw ConfigError(
      fmt::format("{}: this workload does not expose its gradients (Workload::zero_grad, backward, "
                  "optimizer_step, gradients); gradient accumulation and the noise scale need them",
                  w.info().model));
}
}  // namespace

void Workload::zero_grad() { no_gradients(*this); }
at::Tensor Workload::backward(const Batch&, double) { no_gradients(*this); }
void Workload::optimizer_step() { no_gradients(*this); }
std::vector<at::Tensor> Workload::gradients() { no_gradients(*this); }

at::Tensor accumulate_gradients(Workload& workload, const Batch& batch, int64_t micro_batches) {
  const int64_t n = batch.input.size(0);
  BATCHWISE_CHECK(micro_batches >= 1 && micro_batches <= n, ConfigError,
                  "{} micro-batches of a {}-sample batch: need between 1 and {}", micro_batches, n, n);
  workload.zero_grad();
  at::Tensor total;
  for (int64_t i = 0, start = 0; i < micro_batches; ++i) {
    // Slices as equal as possible: the first n % k get one sample more.
    const int64_t len = n / micro_batches + (i < n % micro_batches ? 1 : 0);
    const double share = static_cast<double>(len) / static_cast<double>(n);
    const at::Tensor loss =
        workload.backward({batch.input.narrow(0, start, len), batch.target.narrow(0, start, len)}, share);
    total = total.defined() ? total + loss * share : loss * share;
    start += len;
  }
  return total;
}

bool uses_batchnorm(Workload& workload) {
  auto* m = dynamic_cast<ModuleWorkload*>(&workload);
  if (!m) return false;
  for (const auto& module : m->module().modules())
    if (module->name().find("BatchNorm") != std::string::npos) return true;
  for (const auto& buffer : m->module().named_buffers()) {
    const std::string& key = buffer.key();
    if (key.size() >= 12 && key.compare(key.size() - 12, 12, "running_mean") == 0) return true;
  }
  return false;
}

at::Tensor train_step_accumulated(Workload& workload, const Batch& batch, int64_t micro_batches) {
  at::Tensor loss = accumulate_gradients(workload, batch, micro_batches);
  workload.optimizer_step();
  return loss;
}

std::unique_ptr<DeviceMemory> device_memory(const Workload& workload) {
  const c10::Device d = workload.device();
  return device_memory(d.is_cuda() ? "cuda" : "cpu", d.has_index() ? d.index() : 0);
}

StateBytes ModuleWorkload::state_bytes() const {
  auto bytes = [](const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : int64_t{0}; };
  StateBytes s;
  const auto& module = *model_.ptr();
  for (const auto& p : module.parameters()) {
    s.parameter_bytes += bytes(p);
    s.gradient_bytes += bytes(p.grad());
  }
  for (const auto& b : module.buffers()) s.parameter_bytes += bytes(b);
  if (optimizer_state_bytes_) s.optimizer_state_bytes = optimizer_state_bytes_();
  for (const auto& [key, state] : optimizer_->state()) {
    if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state.get())) {
      s.optimizer_state_bytes += bytes(sgd->momentum_buffer());
    } else if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state.get())) {
      s.optimizer_state_bytes += bytes(adam->exp_avg()) + bytes(adam->exp_avg_sq()) + bytes(adam->max_exp_avg_sq());
    } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
      s.optimizer_state_bytes += bytes(adamw->exp_avg()) + bytes(adamw->exp_avg_sq()) + bytes(adamw->max_exp_avg_sq());
    }
  }
  return s;
}

}  // namespace batchwise

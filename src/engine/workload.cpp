// A ModuleWorkload: a model, its optimizer, its data and its loss, and the training step over them
// (forward, loss, backward, optimizer; fp16 loss scaling; gradient accumulation), and evaluation on
// held-out data. The input pipeline, the state snapshot and the phase profile are units of their own.
#include "batchwise/workload.h"

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>

#include "batchwise/device.h"
#include "batchwise/memory.h"
#include "batchwise/models.h"
#include "check.h"
#include "compat.h"
#include "engine/data_readers.h"
#include "engine/eval_mode.h"
#include "engine/input_pipeline.h"
#include "engine/parameter_dtype.h"
#include "model_input.h"
#include "torch_error.h"

namespace batchwise {

using detail::model_input;

ModuleWorkload::ModuleWorkload(WorkloadInfo info, torch::nn::AnyModule model,
                               std::unique_ptr<torch::optim::Optimizer> optimizer, Dataset data, LossFn loss,
                               c10::Device device, uint64_t seed)
    : ModuleWorkload(ValuesCheckedLater{}, std::move(info), std::move(model), std::move(optimizer), std::move(data),
                     std::move(loss), device, seed) {
  // A caller's dataset (the C++ API) as every reader checks its file: a NaN there had failed the trials whose batches
  // met it as "training diverged; lower --lr", and the fit had answered the batches small enough to miss it
  detail::refuse_values_the_loss_cannot_take(*this, data_, data_.name.empty() ? "the dataset" : data_.name,
                                             detail::cpp_repair);
}

ModuleWorkload::ModuleWorkload(ValuesCheckedLater, WorkloadInfo info, torch::nn::AnyModule model,
                               std::unique_ptr<torch::optim::Optimizer> optimizer, Dataset data, LossFn loss,
                               c10::Device device, uint64_t seed)
    : info_(std::move(info)),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      data_(std::move(data)),
      loss_(std::move(loss)),
      device_(device),
      sampler_(std::make_unique<Sampler>(data_.size(), seed)) {
  BATCHWISE_CHECK(data_.size() > 0, DataError, "{}the dataset is empty", data_.name.empty() ? "" : data_.name + ": ");
  // What every reader checks, checked for a dataset the caller made (the C++ API): a target per sample (90 targets
  // for 300 inputs had failed each trial with "index out of range in self")
  const int64_t targets = data_.targets.defined() && data_.targets.dim() > 0 ? data_.targets.size(0) : 0;
  BATCHWISE_CHECK(targets == data_.size(), DataError, "{}: {} inputs and {} targets; give one target per sample",
                  data_.name.empty() ? "the dataset" : data_.name, data_.size(), targets);
  // A caller's WorkloadInfo without sizes (the C++ API): the module's and the data's, as the factory fills them
  if (info_.parameter_count == 0 && info_.parameter_bytes == 0) detail::count_parameters(info_, *model_.ptr());
  if (info_.dataset_size == 0) info_.dataset_size = data_.size();
  if (info_.input_shape.empty()) info_.input_shape = data_.sample_shape();
  if (info_.num_classes == 0) info_.num_classes = data_.num_classes;
  // Each group's rate over the reference group's (set_lr). Options of a custom optimizer that do not override get_lr
  // (LibTorch's base throws) leave none: every group gets the one rate, as before.
  try {
    std::vector<double> rates;
    for (auto& group : optimizer_->param_groups()) rates.push_back(group.options().get_lr());
    const size_t reference = detail::reference_group(rates);
    for (const double r : rates) {
      const double ratio = reference < rates.size() ? r / rates[reference] : 1.0;
      lr_ratios_.push_back(std::isfinite(ratio) ? ratio : 1.0);  // a group's rate that is no number: the one rate
    }
  } catch (const c10::Error&) {
    lr_ratios_.clear();
  }
}

size_t detail::reference_group(const std::vector<double>& rates) {
  return static_cast<size_t>(
      std::find_if(rates.begin(), rates.end(), [](double r) { return r > 0 && std::isfinite(r); }) - rates.begin());
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
  largest_trained_ = std::max(largest_trained_, batch.target.size(0));
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

void ModuleWorkload::set_lr(double lr) {
  auto& groups = optimizer_->param_groups();
  for (size_t i = 0; i < groups.size(); ++i)  // a group added since the workload was made: the reference's rate
    groups[i].options().set_lr(i < lr_ratios_.size() ? lr * lr_ratios_[i] : lr);
}

namespace {

// The labels `output` got right, and how many it was judged on, where its shape says which dimension
// holds the classes: the one it has beyond `target`'s, dim 1 (torch's cross_entropy: [N, C] against
// [N], [N, C, H, W] against [N, H, W]) or the last ([N, T, V] against [N, T]: a language model's
// tokens), of two classes or more; a target [N, 1] is one label per sample. nullopt for any other shape,
// or where both could be it: the loss alone judges it (a [N, 1] target had broadcast against [N]
// predictions, an accuracy of N/2; [N, T] targets had been refused as data the model cannot evaluate).
std::optional<std::pair<int64_t, int64_t>> labels_right(const at::Tensor& output, at::Tensor target,
                                                        std::optional<int64_t> ignored) {
  if (target.dim() == 2 && target.size(1) == 1 && output.dim() == 2) target = target.squeeze(1);
  if (output.dim() != target.dim() + 1) return std::nullopt;
  std::vector<int64_t> dims;  // those whose removal leaves the target's shape, of two classes or more
  for (const int64_t dim : {int64_t{1}, output.dim() - 1}) {
    std::vector<int64_t> rest = output.sizes().vec();
    rest.erase(rest.begin() + dim);
    if (output.size(dim) >= 2 && rest == target.sizes().vec() && (dims.empty() || dims[0] != dim)) dims.push_back(dim);
  }
  // One logit (a binary classifier's [N, 1]: its argmax is always 0), or two dimensions that could hold the
  // classes ([N, T, V] with T = V): no accuracy, rather than one over the wrong dimension.
  if (dims.size() != 1) return std::nullopt;
  if (!ignored) return std::make_pair(output.argmax(dims[0]).eq(target).sum().item<int64_t>(), target.numel());
  const at::Tensor labelled = target.ne(*ignored);  // the loss's skipped label counts in no accuracy
  return std::make_pair(output.argmax(dims[0]).eq(target).logical_and(labelled).sum().item<int64_t>(),
                        labelled.sum().item<int64_t>());
}

}  // namespace

std::pair<double, std::optional<double>> ModuleWorkload::evaluate(const Dataset& data, int64_t batch) {
  const detail::EvalMode eval(module());  // each module's mode put back however evaluation ends
  at::NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t correct = 0, judged = 0;
  // Accuracy where the targets are class labels and the output has a class dimension to take the
  // largest of (a Lightning module without a forward evaluates its loss only, on a stand-in output).
  bool classes = data.targets.scalar_type() == at::kLong;
  const int64_t n = data.size();
  BATCHWISE_CHECK(batch >= 1, ConfigError, "evaluate: batch size {}: must be at least 1", batch);  // 0 had never ended
  BATCHWISE_CHECK(n > 0, DataError, "evaluate: {}: no samples to evaluate", data.name.empty() ? "the data" : data.name);
  for (int64_t start = 0; start < n;) {
    const int64_t len = std::min(batch, n - start);
    double loss = 0;
    std::optional<std::pair<int64_t, int64_t>> right;
    try {
      const at::Tensor input = model_input(data_, data.inputs.narrow(0, start, len), device_);
      const at::Tensor target = data.targets.narrow(0, start, len).to(device_);
      at::Tensor output;
      loss = forward_loss(input, target, &output).item<double>();
      if (classes) right = labels_right(output, target, ignored_label_);
    } catch (const c10::OutOfMemoryError&) {
      // The batch is the evaluation's, not a run's: halved where the memory (a budget held while it evaluates, the
      // device's) cannot take it, down to one sample
      if (len == 1) throw;
      batch = len / 2;
      continue;
    } catch (const std::exception&) {
      // A model that fails above the largest batch it trained at (a fit's limit that was an error, not memory, as
      // a model that checks its batch's size) is evaluated at that batch; it had ended a tune in its race
      if (largest_trained_ == 0 || len <= largest_trained_) throw;
      batch = largest_trained_;
      continue;
    }
    loss_sum += loss * static_cast<double>(len);
    classes = right.has_value();
    if (classes) correct += right->first, judged += right->second;
    start += len;
  }
  return {loss_sum / static_cast<double>(n),
          classes && judged > 0 ? std::optional<double>(static_cast<double>(correct) / static_cast<double>(judged))
                                : std::nullopt};
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
  largest_trained_ = std::max(largest_trained_, batch.target.size(0));
  return loss.detach();
}

void ModuleWorkload::optimizer_step() { optimizer_->step(); }

// The optimizer's parameters' gradients: a trainable parameter it does not hold (a backbone left with
// requires_grad beside an optimizer over the head) is never zeroed by its zero_grad, and its gradient
// grows over the steps; counted, it biased the noise scale.
std::vector<at::Tensor> ModuleWorkload::gradients() {
  std::vector<at::Tensor> grads;
  for (const auto& group : optimizer_->param_groups())
    for (const auto& p : group.params())
      if (p.requires_grad()) grads.push_back(p.grad());
  return grads;
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

void detail::refuse_values_the_loss_cannot_take(ModuleWorkload& w, const Dataset& d, const std::string& which,
                                                std::string (*repair)(const char* kind)) {
  for (const auto& [values, kind] : {std::pair{d.inputs, "inputs"}, std::pair{d.targets, "targets"}}) {
    if (!values.defined() || !values.is_floating_point()) continue;
    const NonFinite bad = nonfinite_rows(values, 64);
    if (bad.count == 0) continue;
    // With as many samples that hold none, in one batch: a masked loss's mean over the samples it keeps is NaN
    // where it keeps none
    std::vector<int64_t> picked = bad.rows;
    for (int64_t i = 0, added = 0; i < d.size() && added < 64; ++i)
      if (!std::binary_search(bad.rows.begin(), bad.rows.end(), i)) picked.push_back(i), ++added;
    Dataset holding = d;
    const at::Tensor rows = at::tensor(picked, at::kLong);
    holding.inputs = d.inputs.index_select(0, rows), holding.targets = d.targets.index_select(0, rows);
    bool finite = false;
    try {
      finite = std::isfinite(w.evaluate(holding, holding.size()).first);
    } catch (const c10::OutOfMemoryError&) {
      throw;
    } catch (const c10::Error&) {  // a model that cannot take these samples cannot be said to take their values
    }
    if (finite) continue;
    throw DataError(fmt::format(
        "{}: {} of its {} samples hold {} that are not finite numbers (NaN or infinity) in the model's type ({}), "
        "the first sample {}, and the loss on them is not finite: drop or repair those samples ({}), bring values "
        "past the type's range into it, or mask them in your loss",
        which, bad.count, values.size(0), kind,
        w.info().parameter_dtype.empty() ? std::string(c10::toString(values.scalar_type())) : w.info().parameter_dtype,
        bad.rows[0], repair(kind)));
  }
}

std::string detail::cpp_repair(const char* kind) {
  return fmt::format(
      "auto keep = at::isfinite(data.{}.reshape({{data.size(), -1}})).all(1); data.inputs = "
      "data.inputs.index({{keep}}); "
      "data.targets = data.targets.index({{keep}})",
      kind);
}

}  // namespace batchwise

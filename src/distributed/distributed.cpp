// Data-parallel trials on c10d (see batchwise/distributed.h). The only translation unit that sees
// c10d's headers; their differences between LibTorch releases are in compat_c10d.h.
#include "batchwise/distributed.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "batchwise/memory.h"
#include "batchwise/units.h"
#include "check.h"
#include "compat_c10d.h"
#include "distributed_detail.h"
#include "torch_error.h"

namespace batchwise {

namespace {

// An environment variable as an integer, or nullopt when unset; ConfigError when malformed.
std::optional<int> env_int(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  BATCHWISE_CHECK(end && *end == '\0' && v >= 0 && v <= 1 << 20, ConfigError,
                  "{}={}: must be a non-negative integer (set by torchrun or `batchwise --nproc N`)", name, value);
  return static_cast<int>(v);
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

// A collective's error in a sentence: Gloo's messages carry a source location and advice meant for
// PyTorch's own users ("GLHF"); what matters is whether the peer went away or went quiet.
std::string peer_problem(const std::string& what) {
  std::string line = detail::error_line(what);
  if (!line.empty() && line.front() == '[') {  // "[/path/pair.cc:545] Read error ..."
    const size_t close = line.find("] ");
    if (close != std::string::npos) line = line.substr(close + 2);
  }
  const size_t advice = line.find(". This is typically");
  if (advice != std::string::npos) line = line.substr(0, advice);
  return line;
}

}  // namespace

std::optional<GroupAddress> group_address_from_env() {
  const std::optional<int> world = env_int("WORLD_SIZE");
  if (!world) return std::nullopt;
  BATCHWISE_CHECK(*world >= 1, ConfigError, "WORLD_SIZE={}: a group has at least one process", *world);
  const std::optional<int> rank = env_int("RANK");
  BATCHWISE_CHECK(rank.has_value(), ConfigError,
                  "WORLD_SIZE={} is set but RANK is not: set RANK (0 to {}) for each process, or launch with "
                  "`batchwise --nproc N` or torchrun",
                  *world, *world - 1);
  BATCHWISE_CHECK(*rank < *world, ConfigError, "RANK={} with WORLD_SIZE={}: the rank must be below the world size",
                  *rank, *world);
  GroupAddress a;
  a.world_size = *world;
  a.rank = *rank;
  a.local_rank = env_int("LOCAL_RANK").value_or(*rank);
  a.local_world_size = std::max(1, env_int("LOCAL_WORLD_SIZE").value_or(*world));
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr)
    a.master_addr = addr;
  else
    BATCHWISE_CHECK(*world == 1, ConfigError, "WORLD_SIZE={}: MASTER_ADDR is not set; set it to rank 0's host", *world);
  const std::optional<int> port = env_int("MASTER_PORT");
  BATCHWISE_CHECK(port.has_value() || *world == 1, ConfigError,
                  "WORLD_SIZE={}: MASTER_PORT is not set; set it to a free port on rank 0's host", *world);
  if (port) {
    BATCHWISE_CHECK(*port >= 1 && *port <= 65535, ConfigError, "MASTER_PORT={}: not a TCP port", *port);
    a.master_port = *port;
  }
  return a;
}

struct Group::Impl {
  int rank = 0, size = 1;
  Backend backend = Backend::Gloo;
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  c10::Device device = c10::Device(c10::kCPU);  // NCCL's collectives take tensors on it
  mutable bool broken = false;                  // a collective failed: the group is aborted, not shut down

  [[noreturn]] void fail(const std::string& what, const std::exception& e) const {
    broken = true;
    const std::string problem = peer_problem(detail::plain_what(e));
    std::string lower = problem;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    const bool quiet = lower.find("timeout") != std::string::npos || lower.find("timed out") != std::string::npos;
    throw DistributedError(fmt::format(
        "rank {} of {}: {} did not complete: {} (--dist-timeout); see the other ranks' output (c10d: {})", rank, size,
        what,
        quiet ? fmt::format("another rank did not answer within the {:g} s timeout: it hangs, or is far slower",
                            timeout.count() / 1000.0)
              : fmt::format("another rank died: its connection broke, or it did not answer within the {:g} s timeout",
                            timeout.count() / 1000.0),
        problem));
  }
};

std::string rank_device(const std::string& requested, const GroupAddress& address, int cuda_devices) {
  if (requested == "cpu" || (requested == "auto" && cuda_devices == 0)) return "cpu";
  const int ranks = address.local_world_size;
  if (requested != "cuda" && requested != "auto") {  // cuda:N
    BATCHWISE_CHECK(ranks == 1, ConfigError,
                    "--device {} with {} ranks on this host: each rank trains on its own GPU (cuda:LOCAL_RANK); pass "
                    "--device cuda",
                    requested, ranks);
    return requested;
  }
  BATCHWISE_CHECK(ranks <= cuda_devices, ConfigError,
                  "{} ranks on this host, but it has {} CUDA device(s): each data-parallel rank needs a GPU of its own "
                  "(NCCL runs one rank per device); use --nproc {} or fewer, or --device cpu to train the ranks on the "
                  "CPU over Gloo",
                  ranks, cuda_devices, std::max(cuda_devices, 1));
  return fmt::format("cuda:{}", address.local_rank);
}

Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// NCCL's communicators are shut down (or, after a failed collective, aborted) before the process
// ends, as torch.distributed.destroy_process_group does; otherwise NCCL warns of leaked resources
// and an abort at exit can hang. Gloo's group needs nothing.
Group::~Group() {
  if (!impl_ || !impl_->pg || impl_->backend != Backend::Nccl) return;
  try {
    if (impl_->broken)
      impl_->pg->abort();
    else
      impl_->pg->shutdown();
  } catch (const std::exception&) {  // a destructor: the run's outcome is already decided
  }
}

std::shared_ptr<Group> Group::join(const GroupAddress& address, c10::Device device, std::chrono::milliseconds timeout,
                                   Backend backend) {
  BATCHWISE_CHECK(timeout.count() > 0, ConfigError, "--dist-timeout: must be positive");
  auto impl = std::make_unique<Impl>();
  impl->rank = address.rank;
  impl->size = address.world_size;
  impl->timeout = timeout;
  impl->device = device;
  impl->backend =
      backend == Backend::Auto ? (device.is_cuda() && compat::kHaveNccl ? Backend::Nccl : Backend::Gloo) : backend;
  BATCHWISE_CHECK(impl->backend != Backend::Nccl || compat::kHaveNccl, ConfigError,
                  "--dist-backend nccl: this batchwise was built without NCCL (a CPU-only LibTorch); use gloo");
  BATCHWISE_CHECK(impl->backend != Backend::Nccl || device.is_cuda(), ConfigError,
                  "--dist-backend nccl: NCCL all-reduces CUDA tensors; this run trains on {}, use gloo", device.str());
  // NCCL, and any CUDA work of this rank, use the current device: the rank's own.
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
  const std::string where = fmt::format("{}:{}", address.master_addr, address.master_port);
  try {
    impl->store = compat::make_tcp_store(address.master_addr, address.master_port, address.rank == 0,
                                         address.world_size, timeout);
  } catch (const std::exception& e) {
    throw DistributedError(fmt::format(
        "rank {} of {}: the group's store at {} could not be {}: {}; check MASTER_ADDR and MASTER_PORT (a port "
        "already in use, or rank 0 not started within the {} s timeout)",
        address.rank, address.world_size, where, address.rank == 0 ? "opened" : "reached",
        peer_problem(detail::plain_what(e)), timeout.count() / 1000.0));
  }
  try {
    impl->pg = impl->backend == Backend::Nccl
                   ? compat::make_nccl(impl->store, address.rank, address.world_size, timeout)
                   : compat::make_gloo(impl->store, address.rank, address.world_size, timeout,
                                       is_loopback(address.master_addr) ? "127.0.0.1" : "");
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    impl->fail(fmt::format("joining the {} group at {}", to_string(impl->backend), where), e);
  }
  return std::shared_ptr<Group>(new Group(std::move(impl)));
}

int Group::rank() const { return impl_->rank; }
int Group::size() const { return impl_->size; }
Backend Group::backend() const { return impl_->backend; }
std::chrono::milliseconds Group::timeout() const { return impl_->timeout; }

void Group::all_reduce_sum(at::Tensor& tensor, const std::string& what) {
  if (impl_->size == 1) return;
  try {
    std::vector<at::Tensor> tensors{tensor};
    impl_->pg->allreduce(tensors)->wait();
  } catch (const std::exception& e) {
    impl_->fail(what, e);
  }
}

void Group::broadcast(at::Tensor& tensor, int root, const std::string& what) {
  if (impl_->size == 1) return;
  try {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    impl_->pg->broadcast(tensors, options)->wait();
  } catch (const std::exception& e) {
    impl_->fail(what, e);
  }
}

std::vector<std::vector<double>> Group::all_gather(const std::vector<double>& row, const std::string& what) {
  const int64_t k = static_cast<int64_t>(row.size());
  // Each rank fills its own row of zeros; the sum is every row exactly (x + 0 == x).
  UntrackedScope untracked;  // batchwise's bookkeeping, not the training's memory
  at::Tensor table = at::zeros({impl_->size, k}, at::TensorOptions().dtype(at::kDouble));
  if (k > 0) std::memcpy(table[impl_->rank].data_ptr<double>(), row.data(), sizeof(double) * static_cast<size_t>(k));
  if (impl_->backend == Backend::Nccl) {  // NCCL reduces device tensors only
    at::Tensor on_device = table.to(impl_->device);
    all_reduce_sum(on_device, what);
    table = on_device.to(at::kCPU);
  } else {
    all_reduce_sum(table, what);
  }
  std::vector<std::vector<double>> rows(static_cast<size_t>(impl_->size));
  for (int r = 0; r < impl_->size; ++r) {
    const double* p = table[r].data_ptr<double>();
    rows[static_cast<size_t>(r)].assign(p, p + k);
  }
  return rows;
}

void Group::post(const std::string& key, const std::string& text) {
  try {
    impl_->store->set(key, std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception& e) {
    impl_->fail("posting " + key, e);
  }
}

std::string Group::read(const std::string& key) {
  try {
    const std::vector<uint8_t> v = impl_->store->get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    impl_->fail("reading " + key, e);
  }
}

// --- DataParallelWorkload ------------------------------------------------------------------------

namespace {

// The status codes a step's all-reduce carries, one slot per rank; when several ranks fail, the
// trial's outcome is the first in this order (out of memory says most about the batch).
enum Status { kOk = 0, kOom = 1, kError = 2, kTimeout = 3 };

double status_of(Outcome o) {
  return o == Outcome::Oom ? kOom : o == Outcome::Timeout ? kTimeout : o == Outcome::Ok ? kOk : kError;
}

Outcome outcome_of_status(int s) {
  return s == kOom ? Outcome::Oom : s == kTimeout ? Outcome::Timeout : s == kOk ? Outcome::Ok : Outcome::Error;
}

// The agreed outcome of per-rank statuses, and the ranks that had it.
std::pair<int, std::vector<int>> worst(const std::vector<int>& statuses) {
  int status = kOk;
  for (const int s : {kOom, kError, kTimeout})
    if (std::find(statuses.begin(), statuses.end(), s) != statuses.end()) {
      status = s;
      break;
    }
  std::vector<int> ranks;
  for (size_t r = 0; r < statuses.size(); ++r)
    if (status != kOk && statuses[r] == status) ranks.push_back(static_cast<int>(r));
  return {status, ranks};
}

// A batch of `n` rows that holds no memory, for a rank that already failed: it still walks the
// trial's steps with the others, and trains nothing.
Batch placeholder(int64_t n, c10::Device device) {
  UntrackedScope untracked;
  return {at::zeros({1}, at::TensorOptions().device(device)).expand({n}),
          at::zeros({1}, at::TensorOptions().dtype(at::kLong).device(device)).expand({n})};
}

}  // namespace

DataParallelWorkload::DataParallelWorkload(ModuleWorkload& inner, std::shared_ptr<Group> group)
    : inner_(inner), group_(std::move(group)) {
  BATCHWISE_CHECK(known_precision(inner_.info().precision) != Precision::Fp16, ConfigError,
                  "--precision fp16 with more than one process: fp16's loss scaling is not agreed across ranks yet; "
                  "use bf16 or fp32");
  inner_.set_shard(group_->rank(), group_->size());
  // Every rank starts from rank 0's weights, as DistributedDataParallel does.
  torch::NoGradGuard no_grad;
  for (const auto& p : inner_.module().parameters()) {
    at::Tensor t = p.detach();
    group_->broadcast(t, 0, "broadcasting rank 0's parameters");
  }
  for (const auto& b : inner_.module().buffers()) {
    at::Tensor t = b.detach();
    group_->broadcast(t, 0, "broadcasting rank 0's buffers");
  }
}

DataParallelWorkload::~DataParallelWorkload() = default;

void DataParallelWorkload::begin_trial(const std::string& label, double timeout_s, int64_t limit_bytes) {
  label_ = label;
  limit_bytes_ = limit_bytes;
  collective_error_ = nullptr;
  local_failure_.reset();
  own_failure_.reset();
  failure_.reset();
  allreduce_s_.clear();
  has_deadline_ = timeout_s > 0;
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
}

void DataParallelWorkload::record_local_failure(Outcome outcome, const std::string& message) {
  if (!local_failure_) local_failure_ = std::make_pair(outcome, message);
  if (!own_failure_) own_failure_ = std::make_pair(outcome, message);
  // The failed step's tensors go now, so the ranks still to agree do not hold them.
  inner_.zero_grad();
}

namespace {
int g_failing_buffers = 0;  // detail::fail_flat_buffers: allocations still to fail
}  // namespace

void detail::fail_flat_buffers(int count) { g_failing_buffers = count; }

DeviceMemory& DataParallelWorkload::memory() {
  if (!memory_) memory_ = device_memory(inner_);
  return *memory_;
}

// A rank must take part in every step's all-reduce, or the others wait in it until --dist-timeout
// (NCCL ranks fall out of step). So a buffer that does not fit is this rank's out-of-memory
// outcome, told to the others through its status slot, and the buffer is made anyway: with this
// rank's gradients dropped (record_local_failure), the cache handed back, and the trial's limit
// lifted for the one allocation. UntrackedScope alone would not do: it lifts the CPU budget, while
// on CUDA the limit is the caching allocator's memory fraction.
at::Tensor DataParallelWorkload::flat_buffer(int64_t numel, const at::TensorOptions& options) {
  auto take_one = [&] {
    if (g_failing_buffers > 0) {
      --g_failing_buffers;
      TORCH_CHECK_WITH(OutOfMemoryError, false, "the all-reduce buffer did not fit (injected by a test)");
    }
    return at::zeros({numel}, options);
  };
  try {
    return take_one();
  } catch (const std::exception& e) {
    const auto [outcome, message] = detail::classify_failure(e);
    record_local_failure(outcome, message);
  }
  memory().release_cached();
  memory().set_limit(0);
  try {
    UntrackedScope untracked;  // the failed trial's peak stays the one it reached
    at::Tensor flat = take_one();
    memory().set_limit(limit_bytes_);
    return flat;
  } catch (const std::exception& e) {
    memory().set_limit(limit_bytes_);
    collective_error_ = std::make_exception_ptr(DistributedError(fmt::format(
        "rank {} of {}: {}: the all-reduce buffer ({}) does not fit even with this rank's gradients freed and "
        "its memory limit lifted, so it cannot take part in the all-reduce and the others stop at --dist-timeout; "
        "the device is full: free it, or fit a smaller model ({})",
        group_->rank(), group_->size(), label_, format_bytes(numel * static_cast<int64_t>(options.dtype().itemsize())),
        detail::error_line(e.what()))));
    std::rethrow_exception(collective_error_);
  }
}

Batch DataParallelWorkload::next_batch(int64_t batch) {
  if (!local_failure_) {
    try {
      return inner_.next_batch(batch);
    } catch (const std::exception& e) {
      const auto [outcome, message] = detail::classify_failure(e);
      record_local_failure(outcome, message);
    }
  }
  return placeholder(batch, inner_.device());
}

void DataParallelWorkload::zero_grad() {
  if (!local_failure_) inner_.zero_grad();
}

at::Tensor DataParallelWorkload::backward(const Batch& batch, double weight) {
  if (!local_failure_) {
    try {
      at::Tensor loss = inner_.backward(batch, weight);
      step_loss_ = step_loss_.defined() ? step_loss_ + loss.detach() : loss.detach();
      return loss;
    } catch (const std::exception& e) {
      const auto [outcome, message] = detail::classify_failure(e);
      record_local_failure(outcome, message);
    }
  }
  UntrackedScope untracked;  // a placeholder loss, not the training's memory
  return at::zeros({}, at::TensorOptions().dtype(at::kFloat));
}

at::Tensor DataParallelWorkload::train_step(const Batch& batch) {
  zero_grad();
  at::Tensor loss = backward(batch, 1.0);
  optimizer_step();
  return loss;
}

void DataParallelWorkload::restore_state(const WorkloadState& state) { inner_.restore_state(state); }

void DataParallelWorkload::optimizer_step() {
  const int world = group_->size(), rank = group_->rank();
  std::vector<at::Tensor> params;
  int64_t n = 0;
  for (const auto& p : inner_.module().parameters())
    if (p.requires_grad()) params.push_back(p), n += p.numel();
  BATCHWISE_CHECK(!params.empty(), ModelError, "{}: the model has no trainable parameters to all-reduce",
                  inner_.info().model);
  if (!local_failure_ && has_deadline_ && std::chrono::steady_clock::now() > deadline_)
    record_local_failure(Outcome::Timeout, "the trial timeout passed");
  // A loss that is not a number on this rank ends the trial on every rank together, through the
  // status slot: a rank that stopped alone would leave the others waiting in the all-reduce. (On
  // CUDA reading it waits for the backward pass, as the synchronisation below would.)
  if (!local_failure_ && step_loss_.defined()) {
    const double loss = step_loss_.item<double>();
    if (!std::isfinite(loss))
      record_local_failure(Outcome::Error,
                           fmt::format("the training loss became {} on rank {} at step {}: at the first step check the "
                                       "data and the model for values that are not finite numbers, later lower the "
                                       "learning rate (--lr)",
                                       std::isnan(loss) ? "NaN" : "infinite", rank, allreduce_s_.size() + 1));
  }
  step_loss_ = at::Tensor();

  // One buffer: the gradients, flattened (as DDP's buckets), then one status slot per rank.
  const auto options = at::TensorOptions().dtype(params.front().scalar_type()).device(inner_.device());
  at::Tensor flat = flat_buffer(n + world, options);
  {
    torch::NoGradGuard no_grad;
    if (!local_failure_) {
      int64_t at = 0;
      for (const auto& p : params) {
        if (p.grad().defined()) flat.narrow(0, at, p.numel()).copy_(p.grad().reshape(-1));
        at += p.numel();
      }
    }
    flat[n + rank] = local_failure_ ? status_of(local_failure_->first) : double{kOk};
  }
  // On CUDA the backward kernels may still be queued: the clock starts once they have run, so it
  // times the collective (and the wait for the slowest rank), not this rank's backward. NCCL could
  // not start before them anyway, so the sync costs only the collective's launch.
  if (inner_.device().is_cuda()) memory().synchronize();
  const auto start = std::chrono::steady_clock::now();
  try {
    group_->all_reduce_sum(flat,
                           fmt::format("the gradient all-reduce of {}, step {}", label_, allreduce_s_.size() + 1));
  } catch (const DistributedError&) {
    // The group is broken: not a trial outcome. run_trial records it as an error, and
    // DistributedRunner rethrows it before any other collective.
    collective_error_ = std::current_exception();
    throw;
  }
  at::Tensor slots;
  {
    UntrackedScope untracked;                                    // batchwise's read-back, not the training's memory
    slots = flat.narrow(0, n, world).to(at::kCPU, at::kDouble);  // waits for the device (NCCL is asynchronous)
  }
  allreduce_s_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  std::vector<int> statuses(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    statuses[static_cast<size_t>(r)] = static_cast<int>(std::lround(slots[r].item<double>()));
  const auto [status, ranks] = worst(statuses);
  if (status != kOk) {
    Failure f;
    f.outcome = outcome_of_status(status);
    f.ranks = ranks;
    if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end() && local_failure_)
      f.message = local_failure_->second;
    failure_ = f;
    local_failure_.reset();
    throw std::runtime_error(fmt::format("{} on rank {}", to_string(f.outcome), fmt::join(ranks, ", ")));
  }
  {
    torch::NoGradGuard no_grad;
    flat.narrow(0, 0, n).div_(static_cast<double>(world));
    int64_t at = 0;
    for (auto& p : params) {
      const at::Tensor mean = flat.narrow(0, at, p.numel()).view_as(p);
      // A parameter another rank used and this one did not gets the average too, as in DDP:
      // otherwise the ranks' weights would drift apart.
      if (p.grad().defined())
        p.mutable_grad().copy_(mean);
      else if (mean.abs().max().item<double>() > 0)
        p.mutable_grad() = mean.clone();
      at += p.numel();
    }
  }
  flat = at::Tensor();
  try {
    inner_.optimizer_step();
  } catch (const std::exception& e) {  // told to the others at the next all-reduce, or at the trial's end
    const auto [outcome, message] = detail::classify_failure(e);
    record_local_failure(outcome, message);
  }
}

// --- DistributedRunner ---------------------------------------------------------------------------

namespace {
// What rank 0 shares in place of its single-process samples/s when it has none.
constexpr double kSoloFailed = -1, kSoloSkipped = -2;
}  // namespace

std::optional<std::pair<int, int>> plan_single_process_run(int warmup, int steps, double step_s, double patience_s) {
  const int wanted = warmup + steps;
  if (step_s <= 0) return std::make_pair(warmup, steps);
  // Room for one step half again as slow as measured, past the planned ones.
  const int fit = static_cast<int>(std::floor(patience_s / step_s - 1.5));
  if (fit >= wanted) return std::make_pair(warmup, steps);
  if (fit < 2) return std::nullopt;  // one warm-up and one measured step at least
  const int w = std::min(warmup, 1);
  return std::make_pair(w, fit - w);
}

DistributedRunner::DistributedRunner(DataParallelWorkload& workload, int64_t local_limit_bytes, bool measure_scaling)
    : workload_(workload), local_limit_bytes_(local_limit_bytes), measure_scaling_(measure_scaling) {}

std::vector<int64_t> DistributedRunner::gather(int64_t bytes, const std::string& what) {
  std::vector<int64_t> out;
  for (const auto& row : workload_.group().all_gather({static_cast<double>(bytes)}, what))
    out.push_back(static_cast<int64_t>(row[0]));
  return out;
}

int64_t DistributedRunner::agree_min(int64_t bytes, const std::string& what) {
  const std::vector<int64_t> all = gather(bytes, what);
  return *std::min_element(all.begin(), all.end());
}

int64_t DistributedRunner::held_bytes() {
  const std::vector<int64_t> all = gather(WorkloadRunner(workload_.inner()).held_bytes(), "agreeing on held memory");
  return *std::max_element(all.begin(), all.end());
}

int64_t DistributedRunner::default_budget_bytes() {
  return agree_min(WorkloadRunner(workload_.inner()).default_budget_bytes(), "agreeing on the default budget");
}

int64_t DistributedRunner::device_total_bytes() {
  return agree_min(WorkloadRunner(workload_.inner()).device_total_bytes(), "agreeing on the device memory");
}

Trial DistributedRunner::run(const TrialOptions& options) {
  Group& group = workload_.group();
  const int world = group.size(), rank = group.rank();
  const int trial_index = ++trials_;
  const std::string label = fmt::format("batch {}'s trial", options.batch());
  TrialOptions local = options;
  local.timeout_s(0);   // agreed at each all-reduce instead
  local.min_time_s(0);  // every rank runs the same steps: the all-reduces pair up
  if (options.limit_bytes() > 0 && local_limit_bytes_ > 0) local.limit_bytes(local_limit_bytes_);
  workload_.begin_trial(label, options.timeout_s(), local.limit_bytes());
  Trial t = run_trial(workload_, local);
  if (workload_.collective_error()) std::rethrow_exception(workload_.collective_error());

  // This rank's own status: a failure it had (reported at an all-reduce or still pending after
  // the last step), or one run_trial met outside the data-parallel step.
  int own = kOk;
  std::string own_message;
  if (const auto& f = workload_.own_failure()) {
    own = static_cast<int>(status_of(f->first));
    own_message = f->second;
  } else if (t.outcome != Outcome::Ok && !workload_.failure()) {
    own = static_cast<int>(status_of(t.outcome));
    own_message = t.message;
  }
  if (own != kOk) group.post(fmt::format("batchwise/trial/{}/rank/{}", trial_index, rank), own_message);

  const size_t k = static_cast<size_t>(options.steps());
  std::vector<double> row{static_cast<double>(own),
                          static_cast<double>(t.peak_bytes),
                          static_cast<double>(t.peak_allocated_bytes),
                          t.step_time_s_median,
                          0.0,
                          static_cast<double>(t.step_times_s.size())};
  {
    const auto& ar = workload_.allreduce_s();
    const size_t m = std::min(ar.size(), t.step_times_s.size());
    double stepped = 0, reducing = 0;
    for (double s : t.step_times_s) stepped += s;
    for (size_t i = ar.size() - m; i < ar.size(); ++i) reducing += ar[i];
    row[4] = stepped > 0 ? reducing / stepped : 0;
  }
  for (size_t i = 0; i < k; ++i) row.push_back(i < t.step_times_s.size() ? t.step_times_s[i] : 0.0);
  const auto rows = group.all_gather(row, fmt::format("agreeing on {}'s outcome", label));

  DistributedTrial d;
  d.world_size = world;
  d.backend = group.backend();
  d.global_batch = options.batch() * world;
  std::vector<int> statuses;
  double share = 0;
  for (const auto& r : rows) {
    statuses.push_back(static_cast<int>(std::lround(r[0])));
    d.rank_peak_bytes.push_back(static_cast<int64_t>(r[1]));
    d.rank_step_time_s.push_back(r[3]);
    share += r[4] / world;
    t.peak_bytes = std::max(t.peak_bytes, static_cast<int64_t>(r[1]));
    t.peak_allocated_bytes = std::max(t.peak_allocated_bytes, static_cast<int64_t>(r[2]));
  }
  d.allreduce_share = share;
  const auto [status, ranks] = worst(statuses);
  // The deadline is one for all ranks: whichever rank's clock saw it pass first, every rank's time
  // ran out, so a rank that was fine is timed out too.
  for (const int own_status : statuses)
    d.rank_outcomes.push_back(outcome_of_status(status == kTimeout && own_status == kOk ? kTimeout : own_status));
  if (status == kOk) {
    // The step is as slow as its slowest rank: step by step, the largest time.
    const size_t measured = static_cast<size_t>(rows[0][5]);
    t.step_times_s.assign(measured, 0.0);
    for (const auto& r : rows)
      for (size_t i = 0; i < measured && i < k; ++i) t.step_times_s[i] = std::max(t.step_times_s[i], r[6 + i]);
  } else {
    t.outcome = outcome_of_status(status);
    const int first = ranks.front();
    const std::string message =
        first == rank ? own_message : group.read(fmt::format("batchwise/trial/{}/rank/{}", trial_index, first));
    const std::string what = t.outcome == Outcome::Oom       ? "out of memory"
                             : t.outcome == Outcome::Timeout ? "timed out"
                                                             : "failed";
    t.message = fmt::format("{} on rank {} of {}: {}", what, fmt::join(ranks, ", "), world, message);
    t.step_times_s.clear();
  }
  t.distributed = d;
  summarize_steps(t);

  if (measure_scaling_ && t.outcome == Outcome::Ok) {
    // Rank 0 alone at the same per-device batch, the others waiting: what one process does here.
    double solo = 0;
    if (rank == 0) {
      // Within the others' patience: they wait in a collective meanwhile, and the time limit is
      // checked only between steps. So the run is planned from the step time just measured (a solo
      // step at this per-device batch is that, less the all-reduce), with room for a slower step.
      const double patience = 0.8 * static_cast<double>(group.timeout().count()) / 1000.0;
      const auto plan = plan_single_process_run(local.warmup(), local.steps(), t.step_time_s_median, patience);
      if (plan) {
        TrialOptions solo_options = local;
        solo_options.warmup(plan->first).steps(plan->second);
        solo_options.timeout_s(options.timeout_s() > 0 ? std::min(options.timeout_s(), patience) : patience);
        const Trial alone = run_trial(workload_.inner(), solo_options);
        solo = alone.outcome == Outcome::Ok ? alone.samples_per_s : kSoloFailed;
      } else {
        solo = kSoloSkipped;
      }
    }
    // One figure for every rank: samples/s, or why there is none (rank 0 alone decided).
    solo = group.all_gather({solo}, fmt::format("sharing rank 0's single-process run of {}", label))[0][0];
    if (solo > 0) {
      t.distributed->single_process_samples_per_s = solo;
      t.distributed->scaling_efficiency = t.samples_per_s / (world * solo);
    } else {
      t.distributed->single_process_note =
          solo == kSoloSkipped ? fmt::format(
                                     "not run: a step takes {:.1f} s, and rank 0's run alone must end within the other "
                                     "ranks' patience ({:.1f} s, 0.8 x --dist-timeout) with room for a slower step; a "
                                     "longer --dist-timeout measures it",
                                     t.step_time_s_median, 0.8 * static_cast<double>(group.timeout().count()) / 1000.0)
                               : "rank 0's run alone did not end ok (out of memory, a failure, or its time limit)";
    }
  }
  return t;
}

}  // namespace batchwise

// DataParallelWorkload: a ModuleWorkload's training step on every rank at once, its gradients
// all-reduced through one flat buffer per step, and a rank's failure (out of memory, a non-finite
// loss) told to the others through a status slot so that every rank agrees on the trial's outcome.
#include "batchwise/distributed.h"

#include <algorithm>

#include "batchwise/memory.h"
#include "batchwise/units.h"
#include "check.h"
#include "distributed/distributed_detail.h"
#include "torch_error.h"

namespace batchwise {

using namespace detail::status;

namespace {

// A batch of `n` rows that holds no memory, for a rank that already failed: it still walks the
// trial's steps with the others, and trains nothing.
Batch placeholder(int64_t n, c10::Device device) {
  UntrackedScope untracked;
  return {at::zeros({1}, at::TensorOptions().device(device)).expand({n}),
          at::zeros({1}, at::TensorOptions().dtype(at::kLong).device(device)).expand({n})};
}

}  // namespace

void refuse_data_parallel_precision(Precision precision) {
  BATCHWISE_CHECK(precision != Precision::Fp16, ConfigError,
                  "--precision fp16 with more than one process: fp16's loss scaling is not agreed across ranks yet; "
                  "use bf16 or fp32");
}

DataParallelWorkload::DataParallelWorkload(ModuleWorkload& inner, std::shared_ptr<Group> group)
    : inner_(inner), group_(std::move(group)) {
  refuse_data_parallel_precision(known_precision(inner_.info().precision).value_or(Precision::Fp32));
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

}  // namespace batchwise

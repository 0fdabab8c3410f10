#pragma once
/// Data-parallel trials on torch.distributed's c10d, the engine LibTorch ships: a process group
/// (Gloo on CPU, NCCL on CUDA) joined through a TCPStore as torchrun describes it, a workload that
/// trains its own shard of every global batch and all-reduces the gradients, and a runner whose
/// trials every rank agrees on, so that fit, sweep and tune make the same decisions on every rank.
///
/// Example (each of N processes, started by `batchwise --nproc N`, torchrun or any launcher that
/// sets torchrun's variables):
///
///     auto address = group_address_from_env();            // RANK, WORLD_SIZE, MASTER_ADDR, ...
///     auto group = Group::join(*address, workload->device(), std::chrono::seconds(300));
///     DataParallelWorkload dp(dynamic_cast<ModuleWorkload&>(*workload), group);
///     DistributedRunner runner(dp, my_budget_bytes);
///     FitResult r = fit(runner, FitOptions().budget_bytes(agreed_budget));  // the same on every rank
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/error.h"
#include "batchwise/memory.h"
#include "batchwise/trial.h"
#include "batchwise/workload.h"

namespace batchwise {

/// A collective did not complete: another rank died, stopped answering within the group's timeout,
/// or the group could not be formed. The group cannot be used afterwards.
class DistributedError : public Error {
 public:
  using Error::Error;
};

/// Where this process sits in a group: torchrun's environment.
struct GroupAddress {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  ///< ranks on this host (LOCAL_WORLD_SIZE; default: WORLD_SIZE)
};

/// The group torchrun's variables describe (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; LOCAL_RANK,
/// default RANK; LOCAL_WORLD_SIZE, default WORLD_SIZE). None when WORLD_SIZE is unset. Throws ConfigError naming a
/// variable that is missing, malformed or out of range (RANK 2 with WORLD_SIZE 2).
std::optional<GroupAddress> group_address_from_env();

/// The device a data-parallel rank trains on, from the `--device` asked for (cpu, cuda, cuda:N or
/// auto): CUDA ranks take one device each, cuda:LOCAL_RANK, as torchrun and DistributedDataParallel
/// do (NCCL runs one rank per device); "cpu", and "auto" on a host without CUDA, stay "cpu".
/// `cuda_devices`: the CUDA devices this host shows. Throws ConfigError, naming the fix, when the
/// host has fewer CUDA devices than local ranks, or for cuda:N with several ranks on the host.
std::string rank_device(const std::string& requested, const GroupAddress& address, int cuda_devices);

/// A c10d process group. Every collective throws DistributedError, naming what it was for, when a
/// peer does not take part within the timeout (a hung rank) or its connection breaks (a dead one).
class Group {
 public:
  /// Joins the group at `address`: rank 0 hosts the TCPStore, every rank waits up to `timeout` for
  /// the others. `backend`: Auto is nccl for a CUDA device (where LibTorch has it), gloo otherwise.
  /// Throws DistributedError when the group does not form, ConfigError for nccl where it cannot run.
  static std::shared_ptr<Group> join(const GroupAddress& address, c10::Device device, std::chrono::milliseconds timeout,
                                     Backend backend = Backend::Auto);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const;
  int size() const;
  Backend backend() const;
  std::chrono::milliseconds timeout() const;

  /// Sums `tensor` over the ranks, in place. `what`: what the collective is for, for errors.
  void all_reduce_sum(at::Tensor& tensor, const std::string& what);
  /// `tensor` becomes rank `root`'s on every rank, in place.
  void broadcast(at::Tensor& tensor, int root, const std::string& what);
  /// Every rank's `row` (the same length on every rank); result[r] is rank r's, exactly.
  std::vector<std::vector<double>> all_gather(const std::vector<double>& row, const std::string& what);
  /// A short text for the other ranks under `key` (the TCPStore), and the reading of one.
  void post(const std::string& key, const std::string& text);
  std::string read(const std::string& key);

 private:
  struct Impl;
  explicit Group(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Refuses (ConfigError) a precision data-parallel training does not support yet: fp16, whose loss
/// scaling the ranks do not agree. DataParallelWorkload checks it; a launcher says it once, before
/// the ranks start (each would say it).
void refuse_data_parallel_precision(Precision precision);

/// A ModuleWorkload trained data-parallel, the way DistributedDataParallel trains it: rank 0's
/// parameters and buffers are broadcast at the start; each step every rank takes its own
/// `batch`-sample slice of the same global batch (a distributed sampler: no sample twice in an
/// epoch); after the backward pass the gradients are all-reduced and averaged, then every rank
/// takes the same optimizer step. With accumulation the all-reduce happens once per step, after
/// the last micro-batch. BatchNorm statistics stay per rank, as in DDP without SyncBatchNorm.
///
/// Failures are agreed, never local: a rank that runs out of memory (or fails otherwise) in its
/// batch, forward or backward still takes part in the step's all-reduce and reports the failure in
/// it, so every rank raises it at the same point; a failure in the optimizer step is reported at
/// the next all-reduce. No rank ever leaves a trial alone, so none waits forever for it.
class DataParallelWorkload : public Workload {
 public:
  /// REQUIRES: `group` outlives this; every rank builds the same model. Throws ConfigError for
  /// fp16 (its loss scaling is not agreed across ranks yet).
  DataParallelWorkload(ModuleWorkload& inner, std::shared_ptr<Group> group);
  ~DataParallelWorkload() override;

  WorkloadInfo info() const override { return inner_.info(); }
  c10::Device device() const override { return inner_.device(); }
  Batch next_batch(int64_t batch) override;
  at::Tensor train_step(const Batch& batch) override;
  std::unique_ptr<WorkloadState> save_state() override { return inner_.save_state(); }
  void restore_state(const WorkloadState& state) override;
  StateBytes state_bytes() const override { return inner_.state_bytes(); }
  void zero_grad() override;
  at::Tensor backward(const Batch& batch, double weight) override;
  /// All-reduces the gradients (and every rank's status), then steps.
  void optimizer_step() override;
  std::vector<at::Tensor> gradients() override { return inner_.gradients(); }

  /// The failure the ranks agreed on in the current trial, if any: the outcome (oom before error
  /// before timeout), the lowest rank that had it, and that rank's message when it is this one.
  struct Failure {
    Outcome outcome = Outcome::Error;
    std::vector<int> ranks;
    std::string message;  ///< this rank's own message; empty when another rank failed
  };
  const std::optional<Failure>& failure() const { return failure_; }
  /// This rank's own first failure in the current trial (outcome, message), agreed yet or not: one
  /// in the last optimizer step is only told to the others by DistributedRunner at the trial's end.
  const std::optional<std::pair<Outcome, std::string>>& own_failure() const { return own_failure_; }
  /// Starts a trial: clears the failure and the all-reduce timings; `timeout_s` > 0 is a deadline
  /// the ranks agree on at each all-reduce (a local clock would let ranks stop at different steps).
  /// `limit_bytes`: the trial's memory limit on this rank (TrialOptions::limit_bytes), lifted only to
  /// take part in an all-reduce after this rank ran out of memory (see optimizer_step).
  void begin_trial(const std::string& label, double timeout_s, int64_t limit_bytes = 0);
  /// The collective failure (DistributedError) of this trial, if one happened: the group is broken.
  std::exception_ptr collective_error() const { return collective_error_; }
  /// Seconds each all-reduce of this trial took (waiting for the slowest rank included), in order.
  /// On CUDA the clock starts once the step's backward kernels have run, so it times the collective.
  const std::vector<double>& allreduce_s() const { return allreduce_s_; }

  Group& group() { return *group_; }
  ModuleWorkload& inner() { return inner_; }

 private:
  void record_local_failure(Outcome outcome, const std::string& message);
  // The step's all-reduce buffer of `numel` elements; see optimizer_step.
  at::Tensor flat_buffer(int64_t numel, const at::TensorOptions& options);
  // The rank's device memory, made once (not in every step) and only where used: on CPU it needs
  // the tracker, which a caller that runs no trial may not have installed.
  DeviceMemory& memory();
  ModuleWorkload& inner_;
  std::shared_ptr<Group> group_;
  std::unique_ptr<DeviceMemory> memory_;  // the rank's device, made when first needed (see memory())
  std::optional<std::pair<Outcome, std::string>> local_failure_;  // awaiting the next all-reduce
  at::Tensor step_loss_;  // this optimizer step's loss so far (its micro-batches summed), checked before the all-reduce
  std::optional<std::pair<Outcome, std::string>> own_failure_;
  std::optional<Failure> failure_;
  std::exception_ptr collective_error_;
  std::vector<double> allreduce_s_;
  std::string label_;
  std::chrono::steady_clock::time_point deadline_;
  bool has_deadline_ = false;
  int64_t limit_bytes_ = 0;
  int64_t steps_ = 0;
};

/// Rank 0's run alone (the scaling figure), planned to end within `patience_s` though its time
/// limit is checked only between steps: {warm-up, measured} steps of about `step_s` each, with
/// room for one step half again as slow; shortened (one warm-up) when all do not fit, nullopt
/// when not even a warm-up and a measured step fit. `step_s` 0: as asked.
std::optional<std::pair<int, int>> plan_single_process_run(int warmup, int steps, double step_s, double patience_s);

/// Runs trials data-parallel, with one outcome for all ranks: the trial fits only if it fits on
/// every rank; its peak is the largest rank's; its step times are the slowest rank's, step by
/// step; samples/s counts every rank's samples. Each trial's Trial::distributed says per rank what
/// happened. Every query a fit or sweep makes (held bytes, default budget) is agreed too, so both
/// take the same decisions on every rank.
class DistributedRunner : public TrialRunner {
 public:
  /// `local_limit_bytes`: this rank's own memory limit, enforced on its trials (ranks may have
  /// different budgets; 0: the limit the fit or sweep asks for). `measure_scaling`: after each
  /// data-parallel trial that ran, rank 0 runs the same trial alone while the others wait, for the
  /// scaling efficiency against one process at the same per-device batch.
  DistributedRunner(DataParallelWorkload& workload, int64_t local_limit_bytes = 0, bool measure_scaling = false);
  WorkloadInfo info() const override { return workload_.info(); }
  Trial run(const TrialOptions& options) override;
  int64_t held_bytes() override;
  int64_t default_budget_bytes() override;
  int64_t device_total_bytes() override;
  int64_t device_usable_bytes() override;
  bool runs_steps_exactly() const override { return true; }  // every rank the same steps

  /// The smallest of every rank's `bytes` (a budget all ranks can honour).
  int64_t agree_min(int64_t bytes, const std::string& what);
  /// Every rank's `bytes`, by rank.
  std::vector<int64_t> gather(int64_t bytes, const std::string& what);

 private:
  DataParallelWorkload& workload_;
  int64_t local_limit_bytes_;
  bool measure_scaling_;
  int trials_ = 0;
};

}  // namespace batchwise

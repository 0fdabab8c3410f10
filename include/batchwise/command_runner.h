#pragma once
/// Trials of a user's own training command (`batchwise fit|sweep|tune --cmd -- python train.py
/// --batch-size {batch}`): every trial runs the command once at one batch size (run_command), and
/// fit, sweep and tune search and rank exactly as they do for a built-in workload.
#include <string>
#include <vector>

#include "batchwise/command.h"
#include "batchwise/trial.h"

namespace batchwise {

/// Where a command's memory is measured: "cpu" (the resident memory of its process tree) or
/// "cuda" / "cuda:N" (its device memory through NVML, or its own `batchwise: peak_bytes=` lines).
/// Example: `CommandRunner({"python3", "train.py", "--batch-size", "{batch}"}, "cpu")`.
class CommandRunner : public TrialRunner {
 public:
  /// Throws ConfigError for an empty command or an unknown {placeholder}, DeviceError for "cuda"
  /// where NVML finds no device. The command's GPU is not LibTorch's: "cuda:N" is the command's
  /// N-th CUDA device (after CUDA_VISIBLE_DEVICES), found in NVML by PCI location or UUID, and
  /// "auto" is cuda when NVML finds a device, so a CPU-only LibTorch measures a GPU command.
  CommandRunner(std::vector<std::string> argv, const std::string& device = "cpu", CommandEnvironment env = {});

  /// model: the command line; dataset and optimizer: "(the command's)"; no parameter counts.
  WorkloadInfo info() const override;
  /// Runs the command at options.batch() with {steps} = warmup + steps. On CPU the budget
  /// (options.limit_bytes()) is enforced on the process tree's resident memory; on CUDA it
  /// cannot be imposed on another process, so out of memory there is the framework's own.
  Trial run(const TrialOptions& options) override;
  int64_t held_bytes() override { return 0; }                ///< nothing is held before the child starts
  bool runs_steps_exactly() const override { return true; }  ///< the command trains the steps it is given
  int64_t default_budget_bytes() override;
  int64_t device_total_bytes() override;
  bool is_cuda() const { return cuda_; }
  /// The command's device as the report's context names it: NVML's name of the GPU, or "cpu".
  std::string device_name() const;

 private:
  std::vector<std::string> argv_;
  CommandEnvironment env_;
  bool cuda_ = false;
  int cuda_index_ = 0;  // the command's CUDA numbering
  int nvml_index_ = 0;  // NVML's numbering of the same device
};

/// "python3 train.py --batch-size {batch}": argv joined with spaces, arguments with spaces quoted.
std::string command_line(const std::vector<std::string>& argv);

}  // namespace batchwise

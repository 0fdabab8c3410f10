#pragma once
/// A profile of one measured training step, as a Chrome trace (open it in https://ui.perfetto.dev
/// or chrome://tracing), from LibTorch's Kineto profiler: every operator of the forward pass, loss,
/// backward pass and optimizer step with its duration on the host and, on CUDA, the kernels and
/// copies each launched with their durations on the device (CUPTI's activity records).
#include <cstdint>
#include <string>

namespace batchwise {

class Workload;

/// What write_step_trace wrote.
struct StepTrace {
  int64_t events = 0;         ///< events in the trace (its "traceEvents")
  int64_t kernel_events = 0;  ///< of which GPU kernels (Kineto's category "kernel"); 0 on CPU
  /// On CUDA when the trace holds no kernel: why it shows the host's dispatch only. Empty otherwise.
  std::string note;
};

/// The file a trace at `path` is written to: `path`, or where its symbolic links lead. Throws ConfigError
/// where that is not a file and none can be made there: a descriptor's name (/dev/stdout, /dev/fd/N), a
/// FIFO, a device or a folder (a trace is read back once written, and renamed into place). The CLI checks
/// it before a run; write_step_trace again.
std::string trace_file(const std::string& path);

/// Trains `warmup` unmeasured steps and then one profiled step at `batch`, writes the trace to
/// `path`, and restores the workload (bit-identically, as every trial does). Throws ConfigError when
/// `path` cannot be written, Error when the step fails (out of memory included: trace a batch that
/// fits) or the profiler wrote no events.
StepTrace write_step_trace(Workload& workload, int64_t batch, const std::string& path, int warmup = 2);

}  // namespace batchwise

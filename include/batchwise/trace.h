#pragma once
/// A profile of one measured training step, as a Chrome trace (open it in https://ui.perfetto.dev
/// or chrome://tracing): every operator of the forward pass, loss, backward pass and optimizer step
/// with its duration, from LibTorch's profiler.
#include <cstdint>
#include <string>

namespace batchwise {

class Workload;

/// Trains `warmup` unmeasured steps and then one profiled step at `batch`, writes the trace to
/// `path`, and restores the workload (bit-identically, as every trial does). Returns the number of
/// events in the trace. Throws ConfigError when `path` cannot be written, Error when the step
/// fails (out of memory included: trace a batch that fits).
int64_t write_step_trace(Workload& workload, int64_t batch, const std::string& path, int warmup = 2);

}  // namespace batchwise

#include "batchwise/trace.h"

#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <fstream>

#include "batchwise/workload.h"
#include "check.h"
#include "torch_error.h"

namespace batchwise {

int64_t write_step_trace(Workload& workload, int64_t batch, const std::string& path, int warmup) {
  BATCHWISE_CHECK(batch >= 1 && warmup >= 0, ConfigError, "--trace: batch {} and warm-up {} cannot be traced", batch,
                  warmup);
  {
    std::ofstream probe(path, std::ios::trunc);
    BATCHWISE_CHECK(probe.good(), ConfigError, "--trace {}: cannot write there; check the folder exists and is writable",
                    path);
  }
  const auto saved = workload.save_state();
  std::string failure;
  try {
    for (int i = 0; i < warmup; ++i) (void)workload.train_step(workload.next_batch(batch)).item<double>();
    // The profiler writes the trace when the guard goes out of scope.
    torch::autograd::profiler::RecordProfile guard(path);
    (void)workload.train_step(workload.next_batch(batch)).item<double>();
  } catch (const std::exception& e) {
    failure = detail::error_line(detail::plain_what(e));
  }
  workload.restore_state(*saved);
  BATCHWISE_CHECK(failure.empty(), Error, "--trace: the profiled step at batch {} failed: {}", batch, failure);

  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  BATCHWISE_CHECK(trace.is_array() && !trace.empty(), Error,
                  "--trace {}: LibTorch's profiler wrote no events; this build of torch may lack its profiler", path);
  return static_cast<int64_t>(trace.size());
}

}  // namespace batchwise

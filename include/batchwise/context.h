#pragma once
/// The context block every report opens with: what measured the numbers, and where. The engine
/// (device.h) makes it; the reports (report.h) print it; it depends on neither.
#include <cstdint>
#include <string>
#include <vector>

namespace batchwise {

/// Where and with what the numbers were measured; opens every JSON report.
struct Context {
  std::string batchwise_version;
  std::string build_commit;
  std::string build_type;
  std::string torch_version;
  std::string device_type;   ///< "cpu" or "cuda"
  std::string device_name;
  int64_t device_total_bytes = 0;
  std::string host;
  std::string date;          ///< ISO 8601, UTC
  int threads = 0;           ///< intra-op threads
  int cores = 0;             ///< logical CPUs online
  std::string blas;          ///< "mkl", "openblas", ...
  std::vector<std::string> warnings;  ///< reasons to distrust the numbers (debug build, ...)
};

}  // namespace batchwise

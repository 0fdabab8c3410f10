#pragma once
/// The context block every report opens with: what measured the numbers, and where. The engine
/// (device.h) makes it; the reports (report.h) print it; it depends on neither.
#include <cstdint>
#include <string>
#include <vector>

#include "batchwise/fields.h"

namespace batchwise {

/// Where and with what the numbers were measured; opens every JSON report.
struct Context {
  std::string batchwise_version;
  std::string build_commit;
  std::string build_type;
  std::string torch_version;
  std::string device_type;  ///< "cpu" or "cuda"
  std::string device_name;
  int64_t device_total_bytes = 0;
  std::string host;
  std::string os;                     ///< operating system, kernel release and machine: "Linux 6.1.0-18-amd64 x86_64"
  std::string date;                   ///< ISO 8601, UTC
  int threads = 0;                    ///< intra-op threads
  int cores = 0;                      ///< logical CPUs this process may run on (its affinity mask)
  double cpu_quota = 0;               ///< cores' worth of CPU time its cgroup allows (cpu.max); 0: no quota
  std::string blas;                   ///< "mkl", "openblas", ...
  std::vector<std::string> warnings;  ///< reasons to distrust the numbers (debug build, ...)
};

/// The JSON fields of a Context, in JSON order (fields.h).
template <class V, class T, IfRecord<T, Context> = 0>
void fields(V& v, T& c) {
  v("batchwise_version", c.batchwise_version);
  v("build_commit", c.build_commit);
  v("build_type", c.build_type);
  v("torch_version", c.torch_version);
  v.object("device", [&](auto& d) {
    d("type", c.device_type);
    d("name", c.device_name);
    d("total_bytes", c.device_total_bytes);
  });
  v("host", c.host);
  v("os", c.os);
  v("date", c.date);
  v("threads", c.threads);
  v("cores", c.cores);
  v("cpu_quota", c.cpu_quota, When{c.cpu_quota > 0});
  v("blas", c.blas);
  v("warnings", c.warnings);
}

}  // namespace batchwise

#pragma once
/// The utilisation monitor: a background thread that samples, during every in-process trial, the
/// busy share of each CPU this process may use (/proc/stat), the process's resident memory, and on
/// GPU the `nvidia-smi dmon -s u` view through NVML (SM and memory utilisation, memory used, power,
/// SM clock, temperature). Its own cost is measured: the sampler thread's CPU time over the wall time.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace batchwise {

struct UtilisationSample {
  double t_s = 0;                    ///< since the monitor started
  double cpu_percent = 0;            ///< mean busy share of the CPUs this process may use, since the last sample
  std::vector<double> core_percent;  ///< per CPU, same order every sample
  int64_t rss_bytes = 0;             ///< this process's resident memory
  std::optional<double> gpu_sm_percent, gpu_memory_percent, gpu_power_w;
  std::optional<int64_t> gpu_memory_used_bytes;
  std::optional<int> gpu_sm_clock_mhz, gpu_temperature_c;
};

struct UtilisationStat {
  double mean = 0, min = 0, max = 0;
};

struct UtilisationSummary {
  double interval_s = 0;
  int samples = 0;
  UtilisationStat cpu_percent;
  std::vector<double> core_percent_mean;
  int64_t rss_bytes_max = 0;
  std::optional<UtilisationStat> gpu_sm_percent, gpu_memory_percent, gpu_power_w;
  std::optional<int64_t> gpu_memory_used_bytes_max;
  /// The sampler thread's CPU time over the wall time it ran, in percent of one core.
  double overhead_percent = 0;
  std::vector<UtilisationSample> timeline;
};

/// Samples from construction until finish(). Library code: never prints.
class UtilisationMonitor {
 public:
  /// Starts the sampler thread; `gpu_index` < 0: no GPU fields.
  explicit UtilisationMonitor(double interval_s = 0.1, int gpu_index = -1);
  ~UtilisationMonitor();
  UtilisationMonitor(const UtilisationMonitor&) = delete;
  UtilisationMonitor& operator=(const UtilisationMonitor&) = delete;
  /// Stops the thread after one last sample and summarises the run. Call once.
  UtilisationSummary finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace batchwise

#pragma once
/// The utilisation monitor: samples, during every in-process trial, the busy share of each CPU this
/// process may use (/proc/stat), the process's resident memory, and on GPU the `nvidia-smi dmon -s u`
/// view through NVML (SM and memory utilisation, memory used, power, SM clock, temperature).
///
/// On CPU the training loop calls step_boundary() between steps, and a sample that is due is taken
/// there, in the training thread, outside the timed steps: a background sampler waking inside a step
/// pre-empts one of the training threads, and the others wait for it at their next barrier. The
/// background thread samples only when no step boundary came for 1.5 intervals (steps longer than
/// that). On GPU the host threads mostly wait for the device, so the background thread samples.
/// Its own cost is measured: the sampler's CPU time and the time spent sampling between steps, over
/// the wall time.
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
  /// The samples taken between steps (step_boundary), in the training thread.
  int samples_between_steps = 0;
  /// The monitor's cost over the wall time it ran, in percent of one core: the background thread's
  /// CPU time plus the wall time the training thread spent sampling between steps.
  double overhead_percent = 0;
  std::vector<UtilisationSample> timeline;
};

/// Samples from construction until finish(). Library code: never prints.
class UtilisationMonitor {
 public:
  /// Starts the sampler thread; `gpu_index` (CUDA's numbering in this process, mapped to NVML's)
  /// < 0: no GPU fields (and sampling between steps).
  explicit UtilisationMonitor(double interval_s = 0.1, int gpu_index = -1);
  ~UtilisationMonitor();
  UtilisationMonitor(const UtilisationMonitor&) = delete;
  UtilisationMonitor& operator=(const UtilisationMonitor&) = delete;
  /// Between two training steps: takes the sample here if one is due (CPU monitors only). Cheap
  /// otherwise (a clock read and an uncontended lock).
  void step_boundary();
  /// Stops the thread after one last sample and summarises the run. Call once.
  UtilisationSummary finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace batchwise

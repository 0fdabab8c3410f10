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
///
/// /proc/stat counts each CPU's time in whole clock ticks (1/sysconf(_SC_CLK_TCK) s, usually 10 ms).
/// A sample taken before every CPU has counted a tick since the last one (as the last sample, taken
/// by finish(), can be) has no CPU figure: it is not recorded, and its time counts in the next one.
///
/// A reading of NVML's utilisation covers the driver's last sample period (1/6 s to 1 s), so the
/// timeline's first readings describe the time before the trial. The summary's SM and memory
/// utilisation come instead from the driver's own samples (nvmlDeviceGetSamples) whose periods lie
/// inside the trial, read at every sample.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/fields.h"

namespace batchwise {

/// The seconds this process's threads have run on a CPU, and waited, runnable, for one (the
/// scheduler's run-queue delay), summed over /proc/self/task/*/schedstat since they started.
struct SchedulerTimes {
  double running_s = 0;
  double waiting_s = 0;
};
/// Unset where Linux does not give them. Between two readings, waiting over running plus waiting is
/// the share of the time the threads wanted a CPU that they waited for one: near 0 on a quiet
/// machine, about half for one thread beside one busy loop on its core, whatever the thread count.
std::optional<SchedulerTimes> scheduler_times();

/// The share of the time between `before` and `after` (two scheduler_times readings) that the
/// threads wanted a CPU and waited for one, in [0, 1]; unset where either reading is, or no time passed.
std::optional<double> cpu_wait_share(const std::optional<SchedulerTimes>& before,
                                     const std::optional<SchedulerTimes>& after);

struct UtilisationSample {
  double t_s = 0;                    ///< since the monitor started
  double cpu_percent = 0;            ///< mean busy share of the CPUs this process may use, since the last sample
  std::vector<double> core_percent;  ///< per CPU, same order every sample
  int64_t rss_bytes = 0;             ///< this process's resident memory
  std::optional<double> gpu_sm_percent, gpu_memory_percent, gpu_power_w;
  std::optional<int64_t> gpu_memory_used_bytes;
  std::optional<int> gpu_sm_clock_mhz, gpu_temperature_c;
};

/// The JSON fields of a UtilisationSample, in JSON order (fields.h).
template <class V, class T, IfRecord<T, UtilisationSample> = 0>
void fields(V& v, T& s) {
  v("t_s", s.t_s);
  v("cpu_percent", s.cpu_percent);
  v("core_percent", s.core_percent);
  v("rss_bytes", s.rss_bytes);
  // NVML's fields, where it gives them
  v("gpu_sm_percent", s.gpu_sm_percent, When{s.gpu_sm_percent.has_value()});
  v("gpu_memory_percent", s.gpu_memory_percent, When{s.gpu_memory_percent.has_value()});
  v("gpu_memory_used_bytes", s.gpu_memory_used_bytes, When{s.gpu_memory_used_bytes.has_value()});
  v("gpu_power_w", s.gpu_power_w, When{s.gpu_power_w.has_value()});
  v("gpu_sm_clock_mhz", s.gpu_sm_clock_mhz, When{s.gpu_sm_clock_mhz.has_value()});
  v("gpu_temperature_c", s.gpu_temperature_c, When{s.gpu_temperature_c.has_value()});
}

struct UtilisationStat {
  double mean = 0, min = 0, max = 0;
};

/// The JSON fields of a UtilisationStat, in JSON order (fields.h).
template <class V, class T, IfRecord<T, UtilisationStat> = 0>
void fields(V& v, T& s) {
  v("mean", s.mean);
  v("min", s.min);
  v("max", s.max);
}

struct UtilisationSummary {
  double interval_s = 0;
  /// The timeline's length: 0 for a trial shorter than a clock tick, and then the CPU figures are 0.
  int samples = 0;
  /// Over the timeline's samples, each counting once however long its interval.
  UtilisationStat cpu_percent;
  std::vector<double> core_percent_mean;
  int64_t rss_bytes_max = 0;
  /// SM and memory utilisation over the trial, from the driver's own samples whose sample periods
  /// lie inside it (nvmlDeviceGetSamples); null when none does (a trial shorter than the driver's
  /// period, 1/6 s to 1 s) or NVML gives none, and then gpu_percent_note says why.
  std::optional<UtilisationStat> gpu_sm_percent, gpu_memory_percent;
  /// From the timeline's readings. NOTE: on Ampere and later (GA100 excepted) NVML's power reading
  /// is its average over the last second, so in a trial shorter than that it reaches back before it.
  std::optional<UtilisationStat> gpu_power_w;
  std::optional<int64_t> gpu_memory_used_bytes_max;
  /// Why gpu_sm_percent or gpu_memory_percent is null, or where they come from when NVML cannot give
  /// its samples. Empty otherwise (and on CPU).
  std::string gpu_percent_note;
  /// The samples in the timeline taken between steps (step_boundary), in the training thread.
  int samples_between_steps = 0;
  /// The monitor's cost over the wall time it ran, in percent of one core: the background thread's
  /// CPU time plus the wall time the training thread spent sampling between steps.
  double overhead_percent = 0;
  std::vector<UtilisationSample> timeline;
};

/// The JSON fields of a UtilisationSummary, in JSON order (fields.h).
template <class V, class T, IfRecord<T, UtilisationSummary> = 0>
void fields(V& v, T& u) {
  v("interval_s", u.interval_s);
  v("samples", u.samples);
  v("samples_between_steps", u.samples_between_steps);
  v("cpu_percent", u.cpu_percent, NullUnless{u.samples > 0});  // no sample, no figure (not 0 %)
  v("core_percent_mean", u.core_percent_mean);
  v("rss_bytes_max", u.rss_bytes_max, NullUnless{u.samples > 0});
  v("gpu_sm_percent", u.gpu_sm_percent);
  v("gpu_memory_percent", u.gpu_memory_percent);
  v("gpu_percent_note", u.gpu_percent_note, When{!u.gpu_percent_note.empty()});
  v("gpu_power_w", u.gpu_power_w);
  v("gpu_memory_used_bytes_max", u.gpu_memory_used_bytes_max);
  v("overhead_percent", u.overhead_percent);
  v("timeline", u.timeline);
}

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

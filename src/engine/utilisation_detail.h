#pragma once
// The utilisation monitor's CPU and GPU figures, apart from its threads, clocks and /proc so that
// tests can give them readings (tests/engine/utilisation_test.cpp).
#include <optional>
#include <utility>
#include <vector>

#include "batchwise/utilisation.h"
#include "nvml.h"

namespace batchwise::detail {

/// One CPU's counters in /proc/stat, in clock ticks (1/sysconf(_SC_CLK_TCK) s, usually 10 ms).
struct CpuTimes {
  int cpu = 0;
  unsigned long long busy = 0, total = 0;
};

/// The busy share of each CPU between successive /proc/stat readings.
class CpuShare {
 public:
  /// `first`: the reading the first share is measured from.
  explicit CpuShare(std::vector<CpuTimes> first) : last_(std::move(first)) {}
  /// The busy percent of each CPU (in the readings' order) since the reading the last share was
  /// measured from, and `now` becomes that reading. nullopt while some CPU's counters have not
  /// moved (less than a tick since): no figure, and the next share covers this time too.
  std::optional<std::vector<double>> since_last(const std::vector<CpuTimes>& now);

 private:
  std::vector<CpuTimes> last_;
};

/// The longest sample period of NVML's utilisation (1/6 s to 1 s, depending on the GPU).
constexpr double kNvmlLongestPeriod_s = 1.0;

/// Sets `u`'s gpu_sm_percent and gpu_memory_percent for a trial of `wall_s` seconds from the
/// driver's samples over the trial (`window`). Where the driver cannot give its samples, from the
/// timeline's readings of the current utilisation taken 2 kNvmlLongestPeriod_s or more into the
/// trial: a reading covers the driver's last finished period, which ends up to one period before the
/// reading and lasts up to one more, so only those lie inside the trial. A figure left out (null)
/// comes with gpu_percent_note saying why, and so does the fallback.
void summarise_gpu_percent(UtilisationSummary& u, const UtilisationWindow::Result& window, double wall_s);

}  // namespace batchwise::detail

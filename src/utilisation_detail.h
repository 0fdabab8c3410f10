#pragma once
// The utilisation monitor's GPU figures, apart from its threads and clocks so that tests can give
// them samples (tests/engine/utilisation_test.cpp).
#include "batchwise/utilisation.h"
#include "nvml.h"

namespace batchwise::detail {

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

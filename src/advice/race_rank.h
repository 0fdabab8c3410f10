// The batch race's ranking: pure functions over the entries' held-out curves (no training, no
// workload), and the thresholds it ranks by, each named with why; race.cpp trains, this judges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "advice/target.h"
#include "batchwise/race.h"

namespace batchwise::detail {

// ---- thresholds ---------------------------------------------------------------------------------

/// A rung's line through an entry's latest evaluations uses at least 2 of them: a line needs two.
constexpr size_t kLineMinPoints = 2;
/// The scatter about that line reads at least the latest 4 evaluations, so that it rests on more than
/// the one degree of freedom 3 points leave.
constexpr size_t kScatterMinPoints = 4;
/// Below 3 evaluations (after the initial one) there is no scatter: a line through 2 fits them exactly.
constexpr size_t kScatterFewestPoints = 3;
/// An entry whose loss is not falling (no time ratio) ties with the best when its loss at the horizon
/// is within 2 standard deviations of the two entries' scatter: the race cannot tell them apart.
constexpr double kWithinNoiseSd = 2;
/// The last rung's pick: a larger batch ties with the lead when its time ratio is within 1 standard
/// deviation of the race's resolution above 1 (the lead's own ratio).
constexpr double kTieSd = 1;
/// The flat range: entries predicted within 5 % of their rung's best time...
constexpr double kFlatRangeRatio = 1.05;
/// ...or within 2 standard deviations of the race's resolution more: a race of seconds resolves tens
/// of percent at best, and a narrower range would be false precision.
constexpr double kFlatRangeSd = 2;

// ---- curves -------------------------------------------------------------------------------------

using Curve = std::vector<RaceEntry::Point>;

/// The first evaluation a line through `curve` from `from` may use: the initial one (training time
/// 0, shared by every entry) only when nothing else is there.
size_t first_trained(const Curve& curve, size_t from);

/// The least-squares line (intercept, slope) in training time through the latest `points`
/// evaluations of `curve` (at least kLineMinPoints), after the initial one.
std::pair<double, double> late_line(const Curve& curve, size_t points);

/// The loss late_line predicts at `horizon`; where that is below zero and every evaluation it is read
/// through is above it (a line through a convex fall undershoots past its last point: an MSE had been
/// predicted at -0.02 and ranked first), the line through their logarithms, which stays above zero.
double loss_at(const Curve& curve, size_t points, double horizon);

/// The scatter (standard deviation, in loss) of the latest `points` evaluations (at least
/// kScatterMinPoints) about their least-squares line, and that line's slope; none with fewer than
/// kScatterFewestPoints of them.
std::optional<std::pair<double, double>> late_scatter(const Curve& curve, size_t points);

/// A late_scatter as a share of `horizon` in time (loss scatter over the slope, over the horizon):
/// how far a noisy evaluation moves the predicted time to a loss. None when the loss is not falling.
std::optional<double> time_scatter(const std::optional<std::pair<double, double>>& scatter, double horizon);

/// Where a curve first met the target after its start, interpolated in training time between the
/// evaluation before and the first at or past it (on whichever measure got there first), and that
/// interval's width, within which the crossing lies.
struct Crossing {
  double train_s = 0, interval_s = 0;
};
std::optional<Crossing> first_crossing(const Curve& curve, const HeldOutTarget& target);

/// Whether one of `entry`'s evaluations after the start is below kLeftTheStart x `loss_before`.
bool left_the_start(const RaceEntry& entry, double loss_before);

// ---- rungs --------------------------------------------------------------------------------------

/// Ranks one rung's entries (none failed; each with loss_at_horizon): those that reached `target`
/// first, by when, then the rest by loss at the horizon. Sets each one's target_s, time_ratio (its
/// time to the best's target or predicted time to the best's loss, over the horizon), time_ratio_sd
/// (the race's resolution there) and within_noise. `points`: the evaluations a line reads. Returns
/// positions in `rung`, the best first.
std::vector<size_t> rank_rung(const std::vector<RaceEntry*>& rung, double horizon, size_t points,
                              const HeldOutTarget& target, double loss_before);

/// The lead of rung `rung` (0-based) at `horizon` s of training, its samples in epochs of `epoch`.
RungLead rung_lead(const RaceEntry& lead, size_t rung, double horizon, int64_t epoch);

/// The batches within 5 % (kFlatRangeRatio, kFlatRangeSd, or within_noise) of their rung's best, and
/// every entry's batch between them, in batch order. `entries`: those that did not fail.
std::vector<int64_t> flat_range(const std::vector<const RaceEntry*>& entries);

}  // namespace batchwise::detail

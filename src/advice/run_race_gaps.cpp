// Reading the run race's compressed runs: the reference's learning curve (how much a doubling of
// its run buys, and how far behind a run that counted fewer samples ends), and each candidate's gap
// behind it, carried to the run's end.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "advice/run_race_internal.h"
#include "batchwise/run_race.h"
#include "batchwise/units.h"

namespace batchwise {

namespace {

using detail::kTrendNoise;

// How far the reference's middle run may lie off the line through its other two before the bend is
// taken for the curve's own: the bend (the second gain over the first, 2 e1 - e0 - e2) has sqrt(6)
// times one run's standard error, and an accuracy's tolerance is two of them, so this is two of the
// bend's. The loss's tolerance (2 % of it) is a fixed share, not a standard error; the same bound
// serves it.
constexpr double kBendNoise = 2.449;

}  // namespace

double deficit(const std::vector<double>& samples, const std::vector<double>& errors, double run_samples,
               double efficiency) {
  if (samples.size() != 3 || errors.size() != 3 || efficiency >= 1) return 0;
  const double d1 = errors[0] - errors[1], d2 = errors[1] - errors[2];
  if (d2 <= 0) return 0;  // the last doubling bought nothing: fewer samples cost nothing either
  if (d2 >= d1) return d2 * std::log2(1 / efficiency);  // not yet flattening: every doubling buys d2
  const double r = d2 / d1;                             // = 2^-alpha
  const double alpha = -std::log2(r);
  // Error above the floor: e(S) = e1 (S / S1)^-alpha, with e1 - e2 = d1: e1 = d1 / (1 - r).
  const double e_run = d1 / (1 - r) * std::pow(run_samples / samples[0], -alpha);
  return e_run * (std::pow(efficiency, -alpha) - 1);
}

double measured_share(const std::vector<double>& samples, const std::vector<double>& errors, double error,
                      double tolerance) {
  if (samples.size() != 3 || errors.size() != 3) return 1;
  error = std::max(errors[2], error - tolerance);  // within the held-out noise of the reference: level
  if (error <= errors[2]) return 1;
  const double d1 = errors[0] - errors[1], d2 = errors[1] - errors[2];
  if (d2 <= 0) return 0;
  double at = 0;
  if (d2 >= d1) {  // every doubling buys d2
    at = samples[2] * std::pow(2.0, -(error - errors[2]) / d2);
  } else {
    const double r = d2 / d1, alpha = -std::log2(r);
    const double scale = d1 / (1 - r), floor = errors[0] - scale;
    if (error <= floor) return 1;
    at = samples[0] * std::pow((error - floor) / scale, -1 / alpha);
  }
  return std::clamp(at / samples[2], 0.0, 1.0);
}

std::optional<double> compressed_gap(const RunRace& race, const std::optional<CompressedRun>& run, size_t l) {
  if (!run || l >= race.runs.size()) return std::nullopt;
  const CompressedRun& ref = race.runs[l];
  // Not of that length: a race's lengths double, and a run reused from an earlier round keeps the
  // length it was trained for (the same steps), so a quarter apart is another length.
  if (std::abs(run->epochs - ref.epochs) > 0.25 * ref.epochs) return std::nullopt;
  const bool on_line = l == 1 && race.middle_on_line;  // the middle run as the gaps read it
  if (race.measure == "accuracy") {
    if (!run->accuracy || !ref.accuracy) return std::nullopt;
    return (on_line ? *race.middle_on_line : *ref.accuracy) - *run->accuracy;
  }
  if (!run->loss || !ref.loss || !(*ref.loss > 0)) return std::nullopt;
  const double loss = on_line ? *race.middle_on_line : *ref.loss;
  return (*run->loss - loss) / loss;
}

std::optional<double> line_through_middle(const std::vector<double>& errors, double noise) {
  if (errors.size() != 3) return std::nullopt;
  const double bend = (errors[1] - errors[2]) - (errors[0] - errors[1]);  // the second gain over the first
  if (!(bend > 0) || !(bend <= kBendNoise * noise)) return std::nullopt;
  return 0.5 * (errors[0] + errors[2]);
}

std::optional<double> gap_trend(double shorter, double longer, double noise) {
  if (!(longer > 0) || !(shorter > kTrendNoise * noise)) return std::nullopt;
  return std::clamp(longer / shorter, kLeastGapTrend, 1.0);
}

std::vector<std::optional<CarriedGap>> carry_gaps(const std::vector<std::optional<CompressedGaps>>& gaps, double noise,
                                                  double doublings) {
  // Each candidate's trend: its own where its shorter run's gap was well beyond the held-out noise,
  // else the nearest larger batch's (a gap near the noise has no trend of its own), else none (1).
  std::vector<std::optional<double>> trends(gaps.size());
  for (size_t i = gaps.size(); i-- > 0;) {
    if (gaps[i]) trends[i] = gap_trend(gaps[i]->shorter, gaps[i]->longer, noise);
    if (!trends[i] && i + 1 < gaps.size()) trends[i] = trends[i + 1];
  }
  std::vector<std::optional<CarriedGap>> out(gaps.size());
  double widest = 0;  // the largest gap predicted for a smaller batch, and whose it is
  std::optional<size_t> widest_of;
  for (size_t i = 0; i < gaps.size(); ++i) {
    if (!gaps[i]) continue;
    CarriedGap c;
    c.trend = trends[i].value_or(1.0);
    // A larger batch is not predicted to end nearer the reference than a smaller one: at the rule's
    // rate it takes fewer steps for the same samples, and in McCandlish's model a sample counts less
    // the larger the batch. Two noisy trends can say otherwise (mlp SGD: 2,048 predicted 0.61 points
    // behind, 1,024 1.18).
    c.gap = std::max(0.0, gaps[i]->longer) * std::pow(c.trend, std::max(0.0, doublings));
    if (c.gap < widest) {
      c.gap = widest;
      c.as = widest_of;
    } else {
      widest = c.gap;
      widest_of = i;
    }
    out[i] = c;
  }
  return out;
}

std::string gap_as_note(const RunRaceEntry& e) {
  if (!e.gap_as) return "";
  return fmt::format("as batch {}'s at the end{}: a larger batch is not predicted nearer", *e.gap_as,
                     e.earlier_round ? " in the first round" : "");
}

std::string first_round_lengths_note(const RunRace& race) {
  for (const RunRaceEntry& e : race.entries)
    if (e.earlier_round && e.shorter_run && e.run)
      return fmt::format(" (the first round's to {:.3g} and {:.3g}: their gaps not shown)", e.shorter_run->epochs,
                         e.run->epochs);
  return "";
}

std::string gap_trend_text(const std::optional<double>& trend) {
  if (!trend) return "-";
  return fmt::format("{:.2f}{}", *trend, *trend <= kLeastGapTrend ? "*" : "");
}

std::string floored_trend_note(const RunRace& race) {
  for (const RunRaceEntry& e : race.entries)
    if (e.gap_trend && *e.gap_trend <= kLeastGapTrend)
      return fmt::format(
          "* the gap (its own, or the nearest larger batch's where its own is within the noise) fell faster between "
          "the two compressed runs, and is carried at x{:.2f} a doubling: a steep fall between two short, noisy runs "
          "is not taken to go on over the whole run",
          kLeastGapTrend);
  return "";
}

std::string earlier_round_note(const RunRaceEntry& e) {
  if (!e.earlier_round) return "";
  return e.run ? fmt::format("the first round's, after {}: not raced again", format_epochs(e.run->epochs, 3))
               : "the first round's: not raced again";
}

double share_for_gap(const std::vector<double>& samples, const std::vector<double>& errors, double run_samples,
                     double gap, double noise) {
  if (!(gap > 0)) return 1;
  constexpr double kLeast = 1e-6;
  if (deficit(samples, errors, run_samples, kLeast) < gap) return gap <= noise ? 1 : 0;
  double lo = kLeast, hi = 1;  // deficit falls as the share grows
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (deficit(samples, errors, run_samples, mid) > gap ? lo : hi) = mid;
  }
  return hi;
}

namespace detail {

std::vector<int64_t> within_5_percent(const std::vector<RunRaceEntry>& entries, const RunRaceEntry& pick) {
  std::vector<int64_t> batches;
  for (const RunRaceEntry& e : entries)
    if (e.good && !saves_enough(pick.full_run_s, e.full_run_s)) batches.push_back(e.batch);
  return batches;
}

}  // namespace detail

}  // namespace batchwise

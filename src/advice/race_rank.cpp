// The batch race's ranking over its entries' held-out curves: the lines through their latest
// evaluations, their scatter, each rung's order and lead, the flat range and the last rung's pick.
#include "advice/race_rank.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace batchwise {
namespace detail {

// The loss falls fastest at the start, so a line through the initial evaluation predicts a loss far
// below the entry's last evaluations and rewards whoever dropped most in the first evaluation
// interval: the entry with the most steps there, the smallest batch.
size_t first_trained(const Curve& curve, size_t from) {
  return curve.size() > kLineMinPoints && curve.front().train_s <= 0 ? std::max<size_t>(from, 1) : from;
}

namespace {

// The latest `points` evaluations of `curve` (at least `fewest`), after the initial one: what a late line reads.
Curve late_window(const Curve& curve, size_t points, size_t fewest) {
  const size_t n = curve.size();
  const size_t from = first_trained(curve, n - std::min(n, std::max(fewest, points)));
  return Curve(curve.begin() + static_cast<std::ptrdiff_t>(from), curve.end());
}

// The least-squares line (intercept, slope) in training time through every evaluation of `points`.
std::pair<double, double> line_through(const Curve& points) {
  double st = 0, sl = 0, stt = 0, stl = 0;
  const double k = static_cast<double>(points.size());
  for (const RaceEntry::Point& p : points) {
    st += p.train_s;
    sl += p.loss;
    stt += p.train_s * p.train_s;
    stl += p.train_s * p.loss;
  }
  const double denominator = k * stt - st * st;
  const double slope = denominator > 0 ? (k * stl - st * sl) / denominator : 0;
  return {(sl - slope * st) / k, slope};
}

}  // namespace

// Through the latest evaluations, so a rung is judged on where an entry is heading, not on one noisy
// point.
std::pair<double, double> late_line(const Curve& curve, size_t points) {
  return line_through(late_window(curve, points, kLineMinPoints));
}

double loss_at(const Curve& curve, size_t points, double horizon) {
  Curve late = late_window(curve, points, kLineMinPoints);
  const auto [intercept, slope] = line_through(late);
  const double line = intercept + slope * horizon;
  if (!(line < 0) || std::any_of(late.begin(), late.end(), [](const RaceEntry::Point& p) { return !(p.loss > 0); }))
    return line;
  for (RaceEntry::Point& p : late) p.loss = std::log(p.loss);
  const auto [log_intercept, log_slope] = line_through(late);
  return std::exp(log_intercept + log_slope * horizon);
}

std::optional<std::pair<double, double>> late_scatter(const Curve& curve, size_t points) {
  const Curve late = late_window(curve, points, kScatterMinPoints);
  if (late.size() < kScatterFewestPoints) return std::nullopt;
  const auto [intercept, slope] = line_through(late);
  double squares = 0;
  for (const auto& p : late) squares += std::pow(p.loss - (intercept + slope * p.train_s), 2);
  return std::make_pair(std::sqrt(squares / static_cast<double>(late.size() - 2)), slope);  // a line takes 2
}

std::optional<double> time_scatter(const std::optional<std::pair<double, double>>& scatter, double horizon) {
  if (!scatter || scatter->second >= 0 || horizon <= 0) return std::nullopt;
  return scatter->first / -scatter->second / horizon;
}

std::optional<Crossing> first_crossing(const Curve& curve, const HeldOutTarget& target) {
  for (size_t i = 1; i < curve.size(); ++i) {
    const RaceEntry::Point &a = curve[i - 1], &b = curve[i];
    if (!target.met(b.loss, b.accuracy)) continue;
    double share = 1;
    if (target.accuracy > 0 && a.accuracy && b.accuracy && *b.accuracy >= target.accuracy && *b.accuracy > *a.accuracy)
      share = (target.accuracy - *a.accuracy) / (*b.accuracy - *a.accuracy);
    if (target.loss > 0 && b.loss <= target.loss && b.loss < a.loss)
      share = std::min(share, (a.loss - target.loss) / (a.loss - b.loss));
    share = std::clamp(share, 0.0, 1.0);
    return Crossing{a.train_s + share * (b.train_s - a.train_s), b.train_s - a.train_s};
  }
  return std::nullopt;
}

// Until one entry has left the start, the entries sit on the initial plateau (mobilenet from scratch
// holds chance-level loss for most of an epoch).
bool left_the_start(const RaceEntry& e, double loss_before) {
  for (const auto& p : e.curve)
    if (p.train_s > 0 && off_the_start(p.loss, loss_before)) return true;
  return false;
}

// For a crossing, the race's resolution is its evaluation interval: a crossing lies anywhere within
// it (a uniform spread, width / sqrt 12).
std::vector<size_t> rank_rung(const std::vector<RaceEntry*>& rung, double horizon, size_t points,
                              const HeldOutTarget& target, double loss_before) {
  std::vector<size_t> ranked;
  std::vector<double> interval(rung.size(), 0);
  for (size_t i = 0; i < rung.size(); ++i) {
    RaceEntry& e = *rung[i];
    ranked.push_back(i);
    const std::optional<Crossing> c = target ? first_crossing(e.curve, target) : std::nullopt;
    e.target_s = c ? std::optional<double>(c->train_s) : std::nullopt;
    e.within_noise = false;
    if (c) interval[i] = c->interval_s;
  }
  std::sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) {
    const RaceEntry &x = *rung[a], &y = *rung[b];
    if (x.target_s || y.target_s) return x.target_s && (!y.target_s || *x.target_s < *y.target_s);
    return *x.loss_at_horizon < *y.loss_at_horizon;
  });
  if (ranked.empty()) return ranked;
  if (const std::optional<double> first = rung[ranked.front()]->target_s) {
    for (size_t i : ranked) {
      RaceEntry& e = *rung[i];
      e.time_ratio = e.target_s ? std::optional<double>(*e.target_s / *first) : std::nullopt;
      e.time_ratio_sd.reset();
      if (e.target_s)
        e.time_ratio_sd =
            std::hypot(interval[i], i == ranked.front() ? 0.0 : interval[ranked.front()]) / std::sqrt(12.0) / *first;
    }
    return ranked;
  }
  const double level = *rung[ranked.front()]->loss_at_horizon;
  const auto best_loss_scatter = late_scatter(rung[ranked.front()]->curve, points);
  const std::optional<double> best_scatter = time_scatter(best_loss_scatter, horizon);
  for (size_t i : ranked) {
    RaceEntry& e = *rung[i];
    const auto [intercept, slope] = late_line(e.curve, points);
    const auto own_loss_scatter = late_scatter(e.curve, points);
    e.within_noise = false;
    if (i == ranked.front())
      e.time_ratio = 1;
    else if (slope < 0)
      e.time_ratio = (level - intercept) / slope / horizon;
    else
      e.time_ratio.reset();
    // No time to the best's loss: compare losses, for an entry that has learned (on the plateau at
    // the start every line is flat and within the noise).
    if (i != ranked.front() && slope >= 0 && best_loss_scatter && left_the_start(e, loss_before)) {
      const double sd = std::hypot(best_loss_scatter->first, own_loss_scatter ? own_loss_scatter->first : 0.0);
      e.within_noise = *e.loss_at_horizon - level <= kWithinNoiseSd * sd;
    }
    // The best's scatter counts where its loss still falls (a converged best adds none).
    const std::optional<double> own = time_scatter(own_loss_scatter, horizon);
    if (own)
      e.time_ratio_sd = std::hypot(*own, i == ranked.front() ? 0.0 : best_scatter.value_or(0));
    else
      e.time_ratio_sd.reset();
  }
  return ranked;
}

RungLead rung_lead(const RaceEntry& e, size_t rung, double horizon, int64_t epoch) {
  return RungLead{static_cast<int>(rung) + 1,
                  horizon,
                  epoch > 0 ? horizon * e.samples_per_s / static_cast<double>(epoch) : 0,
                  e.batch,
                  *e.loss_at_horizon,
                  e.curve.back().accuracy};
}

// Within 5 %: those predicted within 1.05 of their rung's best, or that the race cannot tell from
// it (within two standard deviations of its resolution more, or a loss no longer falling but within
// the evaluations' noise of the best's: RaceEntry::within_noise), and every entry between them (time
// to a target is unimodal in the batch: if 32 and 128 are as good as the best, so is 64). A race
// of seconds resolves tens of percent at best: a range narrower than that would be false
// precision, and the pick would move out of it between seeds.
std::vector<int64_t> flat_range(const std::vector<const RaceEntry*>& entries) {
  std::optional<int64_t> low, high;
  for (const RaceEntry* e : entries)
    if ((e->time_ratio && *e->time_ratio <= kFlatRangeRatio + kFlatRangeSd * e->time_ratio_sd.value_or(0)) ||
        e->within_noise) {
      low = std::min(low.value_or(e->batch), e->batch);
      high = std::max(high.value_or(e->batch), e->batch);
    }
  std::vector<int64_t> batches;
  for (const RaceEntry* e : entries)
    if (low && e->batch >= *low && e->batch <= *high) batches.push_back(e->batch);
  std::sort(batches.begin(), batches.end());  // a reserve joins after the candidates
  return batches;
}

}  // namespace detail

LastRungPick pick_last_rung(const std::vector<const RaceEntry*>& last_rung) {
  LastRungPick pick;
  const RaceEntry* first = nullptr;  // to the target
  for (const RaceEntry* e : last_rung)
    if (e->target_s && (!first || *e->target_s < *first->target_s)) first = e;
  if (first) {
    pick.lead_batch = pick.batch = first->batch;
    return pick;
  }
  const RaceEntry* lead = nullptr;
  for (const RaceEntry* e : last_rung)
    if (e->loss_at_horizon && (!lead || *e->loss_at_horizon < *lead->loss_at_horizon)) lead = e;
  if (!lead) return pick;
  pick.lead_batch = pick.batch = lead->batch;
  const RaceEntry* chosen = lead;
  for (const RaceEntry* e : last_rung)
    if (e->batch > chosen->batch && e->loss_at_horizon && e->time_ratio &&
        *e->time_ratio <= 1 + detail::kTieSd * e->time_ratio_sd.value_or(0))
      chosen = e;
  if (chosen == lead) return pick;
  pick.batch = chosen->batch;
  pick.reason = fmt::format(
      "batch {} finished the last rung at {:.2f}x the time batch {} took to its loss, within the race's resolution "
      "(+/- {:.2f}), so the race cannot tell them apart; the larger is recommended because the batch that reaches a "
      "loss soonest grows as training goes on (the critical batch grows as the loss falls: McCandlish et al. 2018; "
      "Merrill et al. 2025), and a real run trains longer than the race",
      chosen->batch, *chosen->time_ratio, lead->batch, chosen->time_ratio_sd.value_or(0));
  return pick;
}

}  // namespace batchwise

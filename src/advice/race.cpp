// The batch race: its candidates and reserve from a sweep, and the race itself, short branched runs
// from the user's weights, each candidate at its own rate, judged by held-out loss at equal training
// time (successive halving).
#include "batchwise/race.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "advice/target.h"
#include "batchwise/workload.h"
#include "check.h"

namespace batchwise {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Probe {
  double loss = 0;
  std::optional<double> accuracy;
};

Probe probe(ModuleWorkload& w, const Dataset& held_out) {
  if (held_out.size() == 0) return {};
  const auto [loss, accuracy] = w.evaluate(held_out);
  return {loss, accuracy};
}

}  // namespace

std::vector<int64_t> race_candidates(const std::vector<Trial>& points, int count) {
  double best = 0;
  for (const auto& p : points)
    if (p.outcome == Outcome::Ok) best = std::max(best, p.samples_per_s);
  std::vector<const Trial*> ok;
  for (const auto& p : points)
    if (p.outcome == Outcome::Ok) ok.push_back(&p);
  std::sort(ok.begin(), ok.end(), [](const Trial* a, const Trial* b) { return a->batch < b->batch; });
  // A batch more than 5 % slower than a smaller one is dominated: at equal time it trains fewer
  // samples, and a sample in a bigger batch moves the loss no more than one in a smaller batch
  // (McCandlish et al. 2018). Of the rest, those with at least 40 % of the best samples/s.
  std::vector<const Trial*> kept;
  double fastest_below = 0;
  for (const Trial* p : ok) {
    if (p->samples_per_s >= 0.4 * best && p->samples_per_s >= 0.95 * fastest_below) kept.push_back(p);
    fastest_below = std::max(fastest_below, p->samples_per_s);
  }
  while (static_cast<int>(kept.size()) > std::max(1, count)) {
    if (kept.front()->samples_per_s < kept.back()->samples_per_s)
      kept.erase(kept.begin());
    else
      kept.pop_back();
  }
  std::vector<int64_t> batches;
  for (const Trial* p : kept) batches.push_back(p->batch);
  return batches;
}

std::vector<double> race_rates(const std::vector<Trial>& points, const std::vector<int64_t>& batches) {
  std::vector<double> rates;
  for (int64_t b : batches)
    for (const auto& p : points)
      if (p.batch == b && p.outcome == Outcome::Ok) rates.push_back(p.samples_per_s);
  return rates;
}

std::vector<int64_t> race_reserve(const std::vector<Trial>& points, const std::vector<int64_t>& candidates, int count) {
  if (candidates.empty()) return {};
  const int64_t smallest = *std::min_element(candidates.begin(), candidates.end());
  std::vector<int64_t> below;
  for (const auto& p : points)
    if (p.outcome == Outcome::Ok && p.batch < smallest) below.push_back(p.batch);
  std::sort(below.begin(), below.end());
  below.erase(std::unique(below.begin(), below.end()), below.end());
  if (static_cast<int>(below.size()) > std::max(0, count))
    below.erase(below.begin(), below.end() - std::max(0, count));
  return below;
}

namespace {

// The first evaluation a line may use: the initial one (training time 0, shared by every entry)
// only when nothing else is there. The loss falls fastest at the start, so a line through it
// predicts a loss far below the entry's last evaluations and rewards whoever dropped most in the
// first evaluation interval: the entry with the most steps there, the smallest batch.
size_t first_trained(const std::vector<RaceEntry::Point>& curve, size_t from) {
  return curve.size() > 2 && curve.front().train_s <= 0 ? std::max<size_t>(from, 1) : from;
}

// The least-squares line (intercept, slope) through the latest evaluations of `curve`: its last
// `points` (at least 2) after the initial one, so a rung is judged on where an entry is heading, not
// on one noisy point.
std::pair<double, double> late_line(const std::vector<RaceEntry::Point>& curve, size_t points) {
  const size_t n = curve.size();
  const size_t from = first_trained(curve, n - std::min(n, std::max<size_t>(2, points)));
  double st = 0, sl = 0, stt = 0, stl = 0;
  const double k = static_cast<double>(n - from);
  for (size_t i = from; i < n; ++i) {
    st += curve[i].train_s;
    sl += curve[i].loss;
    stt += curve[i].train_s * curve[i].train_s;
    stl += curve[i].train_s * curve[i].loss;
  }
  const double denominator = k * stt - st * st;
  const double slope = denominator > 0 ? (k * stl - st * sl) / denominator : 0;
  return {(sl - slope * st) / k, slope};
}

// The scatter (standard deviation) of the latest `points` evaluations (at least 4) about their
// least-squares line, in loss, and that line's slope; nullopt with fewer than 3 of them.
std::optional<std::pair<double, double>> late_scatter(const std::vector<RaceEntry::Point>& curve, size_t points) {
  const size_t n = curve.size();
  const size_t from = first_trained(curve, n - std::min(n, std::max<size_t>(4, points)));
  if (n - from < 3) return std::nullopt;
  std::vector<RaceEntry::Point> late(curve.begin() + static_cast<std::ptrdiff_t>(from), curve.end());
  const auto [intercept, slope] = late_line(late, late.size());
  double squares = 0;
  for (const auto& p : late) squares += std::pow(p.loss - (intercept + slope * p.train_s), 2);
  return std::make_pair(std::sqrt(squares / static_cast<double>(late.size() - 2)), slope);
}

// That scatter as a share of the horizon in time: how far a noisy evaluation moves the entry's
// predicted time to a loss. nullopt when the loss is not falling.
std::optional<double> time_scatter(const std::optional<std::pair<double, double>>& scatter, double horizon) {
  if (!scatter || scatter->second >= 0 || horizon <= 0) return std::nullopt;
  return scatter->first / -scatter->second / horizon;
}

// The entries per rung of successive halving: halve (rounding up) until one is left; a rung of two
// decides the winner.
std::vector<int> rung_sizes(int candidates) {
  std::vector<int> sizes;
  for (int n = candidates; n > 1; n = (n + 1) / 2) sizes.push_back(n);
  if (sizes.empty()) sizes.push_back(1);
  return sizes;
}

// The first rung's training time per entry, so that the rungs spend the budget: rung r gives each
// of its entries 2^r times it.
double first_slice(double budget_s, const std::vector<int>& sizes) {
  double units = 0;
  for (size_t r = 0; r < sizes.size(); ++r) units += sizes[r] * std::pow(2.0, static_cast<double>(r));
  return budget_s / units;
}

struct Candidate {
  int64_t batch = 0;
  double samples_per_s = 0;
};

// The candidates (sorted, once each) whose steps fit the first rung; those that do not are left out
// with a note, and the rungs are planned for the rest.
std::vector<Candidate> plan_candidates(const BatchRaceOptions& o, BatchRace& race) {
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < o.batches().size(); ++i) candidates.push_back({o.batches()[i], o.samples_per_s()[i]});
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) { return a.batch < b.batch; });
  candidates.erase(std::unique(candidates.begin(), candidates.end(),
                               [](const auto& a, const auto& b) { return a.batch == b.batch; }),
                   candidates.end());
  const double first = first_slice(o.budget_s(), rung_sizes(static_cast<int>(candidates.size())));
  std::vector<Candidate> kept;
  for (const Candidate& c : candidates) {
    const int64_t steps = static_cast<int64_t>(first * c.samples_per_s / static_cast<double>(c.batch));
    if (steps >= o.min_steps()) {
      kept.push_back(c);
      continue;
    }
    race.left_out.push_back(c.batch);
    race.notes.push_back(fmt::format("batch {} left out: {} steps fit the first rung's {:.2f} s, below the {} a "
                                     "comparison needs (a larger --advice-budget includes it)",
                                     c.batch, steps, first, o.min_steps()));
  }
  return kept;
}

struct Live {
  RaceEntry entry;
  std::unique_ptr<WorkloadState> state;
  bool failed = false;
};

// Where the race stands, for its progress reports.
struct RaceClock {
  Clock::time_point start;
  int rung = 0, rungs = 0, index = 0, count = 0;
  double slice = 0, planned_left = 0, wall_per_train_s = 0;
  int64_t epoch = 0;
};

// Trains entry `e` for one rung's slice of training time (from the workload's current state) at its
// advised rate, evaluating `evaluations` times; throws when the training loss is not finite.
void train_slice(ModuleWorkload& w, const Dataset& held_out, RaceEntry& e, int evaluations, const RaceClock& clock,
                 const BatchRaceOptions& o) {
  const auto entry_start = Clock::now();
  const int64_t steps = std::max<int64_t>(1, std::llround(clock.slice * e.samples_per_s / static_cast<double>(e.batch)));
  int next = 1;
  for (int64_t step = 0; step < steps; ++step) {
    w.set_lr(lr_at_step(e.lr, e.steps));
    const double loss = w.train_step(w.next_batch(e.batch)).item<double>();
    ++e.steps;
    e.samples += e.batch;
    if (!std::isfinite(loss))
      throw std::runtime_error(fmt::format("diverged: the training loss became {} at step {}", loss, e.steps));
    if ((step + 1) * evaluations < next * steps) continue;
    ++next;
    const Probe p = probe(w, held_out);
    e.train_s = static_cast<double>(e.samples) / e.samples_per_s;
    e.curve.push_back({e.train_s, p.loss, p.accuracy});
    if (!o.on_progress()) continue;
    RaceProgress progress;
    progress.rung = clock.rung;
    progress.rungs = clock.rungs;
    progress.batch = e.batch;
    progress.index = clock.index;
    progress.count = clock.count;
    progress.epochs = static_cast<double>(e.samples) / static_cast<double>(clock.epoch);
    progress.loss = p.loss;
    progress.accuracy = p.accuracy;
    progress.elapsed_s = since(clock.start);
    const double done = clock.slice * static_cast<double>(step + 1) / static_cast<double>(steps);
    const double pace = clock.wall_per_train_s > 0 ? clock.wall_per_train_s : since(entry_start) / done;
    progress.left_s = std::max(0.0, clock.planned_left - done) * pace;
    o.on_progress()(progress);
  }
}

// Where a curve first met the target after its start: between the evaluation before and the first at
// or past it, interpolated in training time (on whichever measure got there first), with that
// interval's width, within which the crossing lies.
struct Crossing {
  double train_s = 0, interval_s = 0;
};
std::optional<Crossing> first_crossing(const std::vector<RaceEntry::Point>& curve, const HeldOutTarget& target) {
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

// An entry has left the start when one of its held-out evaluations after the start is 2 % below the
// loss every entry began at. Until one has, the entries sit on the initial plateau (mobilenet from
// scratch holds chance-level loss for most of an epoch), and a ranking would be by noise.
constexpr double kLeftTheStart = 0.98;

bool left_the_start(const RaceEntry& e, double loss_before) {
  for (const auto& p : e.curve)
    if (p.train_s > 0 && p.loss < kLeftTheStart * loss_before) return true;
  return false;
}

// Ranks a rung's entries that did not fail: those that reached the target first, by when, then the
// rest by held-out loss at the horizon. Sets each one's time to the best's target or predicted time
// to the best's loss (time_ratio) and the race's resolution there (time_ratio_sd): for a crossing,
// its evaluation interval (a crossing lies anywhere within it: a uniform spread, width / sqrt 12).
std::vector<size_t> rank_rung(std::vector<Live>& entries, const std::vector<size_t>& alive, double horizon,
                              size_t points, const HeldOutTarget& target, double loss_before) {
  std::vector<size_t> ranked;
  std::vector<double> interval(entries.size(), 0);
  for (size_t i : alive) {
    if (entries[i].failed) continue;
    ranked.push_back(i);
    const std::optional<Crossing> c = target ? first_crossing(entries[i].entry.curve, target) : std::nullopt;
    entries[i].entry.target_s = c ? std::optional<double>(c->train_s) : std::nullopt;
    entries[i].entry.within_noise = false;
    if (c) interval[i] = c->interval_s;
  }
  std::sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) {
    const RaceEntry &x = entries[a].entry, &y = entries[b].entry;
    if (x.target_s || y.target_s) return x.target_s && (!y.target_s || *x.target_s < *y.target_s);
    return *x.loss_at_horizon < *y.loss_at_horizon;
  });
  if (ranked.empty()) return ranked;
  if (const std::optional<double> first = entries[ranked.front()].entry.target_s) {
    for (size_t i : ranked) {
      RaceEntry& e = entries[i].entry;
      e.time_ratio = e.target_s ? std::optional<double>(*e.target_s / *first) : std::nullopt;
      e.time_ratio_sd.reset();
      if (e.target_s)
        e.time_ratio_sd = std::hypot(interval[i], i == ranked.front() ? 0.0 : interval[ranked.front()]) /
                          std::sqrt(12.0) / *first;
    }
    return ranked;
  }
  const double level = *entries[ranked.front()].entry.loss_at_horizon;
  const auto best_loss_scatter = late_scatter(entries[ranked.front()].entry.curve, points);
  const std::optional<double> best_scatter = time_scatter(best_loss_scatter, horizon);
  for (size_t i : ranked) {
    RaceEntry& e = entries[i].entry;
    const auto [intercept, slope] = late_line(e.curve, points);
    const auto own_loss_scatter = late_scatter(e.curve, points);
    e.within_noise = false;
    if (i == ranked.front()) e.time_ratio = 1;
    else if (slope < 0) e.time_ratio = (level - intercept) / slope / horizon;
    else e.time_ratio.reset();
    // No time to the best's loss: compare losses, for an entry that has learned (on the plateau at
    // the start every line is flat and within the noise).
    if (i != ranked.front() && slope >= 0 && best_loss_scatter && left_the_start(e, loss_before)) {
      const double sd = std::hypot(best_loss_scatter->first, own_loss_scatter ? own_loss_scatter->first : 0.0);
      e.within_noise = *e.loss_at_horizon - level <= 2 * sd;
    }
    // The best's scatter counts where its loss still falls (a converged best adds none).
    const std::optional<double> own = time_scatter(own_loss_scatter, horizon);
    if (own) e.time_ratio_sd = std::hypot(*own, i == ranked.front() ? 0.0 : best_scatter.value_or(0));
    else e.time_ratio_sd.reset();
  }
  return ranked;
}

RungLead rung_lead(const RaceEntry& e, size_t rung, double horizon, int64_t epoch) {
  return RungLead{static_cast<int>(rung) + 1, horizon,
                  epoch > 0 ? horizon * e.samples_per_s / static_cast<double>(epoch) : 0, e.batch,
                  *e.loss_at_horizon, e.curve.back().accuracy};
}

// Within 5 %: those predicted within 1.05 of their rung's best, or that the race cannot tell from
// it (within two standard deviations of its resolution more, or a loss no longer falling but within
// the evaluations' noise of the best's: RaceEntry::within_noise), and every entry between them (time
// to a target is unimodal in the batch: if 32 and 128 are as good as the best, so is 64). A race
// of seconds resolves tens of percent at best: a range narrower than that would be false
// precision, and the pick would move out of it between seeds.
std::vector<int64_t> flat_range(const std::vector<Live>& entries) {
  std::optional<int64_t> low, high;
  for (const auto& live : entries)
    if (!live.failed && ((live.entry.time_ratio &&
                          *live.entry.time_ratio <= 1.05 + 2 * live.entry.time_ratio_sd.value_or(0)) ||
                         live.entry.within_noise)) {
      low = std::min(low.value_or(live.entry.batch), live.entry.batch);
      high = std::max(high.value_or(live.entry.batch), live.entry.batch);
    }
  std::vector<int64_t> batches;
  for (const auto& live : entries)
    if (low && live.entry.batch >= *low && live.entry.batch <= *high && !live.failed)
      batches.push_back(live.entry.batch);
  std::sort(batches.begin(), batches.end());  // a reserve joins after the candidates
  return batches;
}

}  // namespace

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
        *e->time_ratio <= 1 + e->time_ratio_sd.value_or(0))
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

namespace {

// Trains one entry for the clock's slice, from the initial weights in the first rung (where its rate
// is advised) and from its own state after; a failure ends the entry, not the race.
void run_entry(ModuleWorkload& w, const Dataset& held_out, Live& live, const WorkloadState& initial, bool first,
               double horizon, const RaceClock& clock, const BatchRaceOptions& o, int evaluations = 0) {
  RaceEntry& e = live.entry;
  try {
    if (first) {
      w.restore_state(initial);
      e.lr = advise_lr(w, e.batch, o.lr());
    } else {
      w.restore_state(*live.state);
    }
    train_slice(w, held_out, e, evaluations > 0 ? evaluations : o.evaluations(), clock, o);
    e.rungs = clock.rung;
    live.state = w.save_state();
    const auto [intercept, slope] = late_line(e.curve, static_cast<size_t>(o.evaluations()) + 1);
    e.loss_at_horizon = intercept + slope * horizon;
    if (!std::isfinite(*e.loss_at_horizon)) throw std::runtime_error("diverged: the held-out loss is not finite");
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& ex) {  // out of memory, a failing step, divergence: this entry ends
    const std::string what = ex.what();
    e.message = what.substr(0, what.find('\n'));
    e.rungs = clock.rung;
    e.loss_at_horizon.reset();
    live.failed = true;
    live.state.reset();
  }
}

// The race's recommendation from its last rung (`alive`): none when no entry ever left the start;
// a race cut short by its wall-clock limit takes its lead.
void decide(BatchRace& race, const std::vector<Live>& entries, const std::vector<size_t>& alive, bool cut_short,
            double horizon) {
  if (alive.empty()) return;
  const bool learned = std::any_of(entries.begin(), entries.end(), [&](const Live& live) {
    return !live.failed && left_the_start(live.entry, race.loss_before);
  });
  if (!learned) {
    race.notes.push_back(fmt::format(
        "no candidate's held-out loss fell 2 % below where all began ({:.3f}) in {:.1f} s of training each: the race "
        "cannot rank them and recommends none (a larger --advice-budget trains longer)",
        race.loss_before, horizon));
    return;
  }
  std::vector<const RaceEntry*> last;
  for (size_t i : alive) last.push_back(&entries[i].entry);
  if (cut_short) last.resize(1);
  const LastRungPick pick = pick_last_rung(last);
  if (pick.batch == 0) return;
  race.best_batch = pick.batch;
  race.lead_batch = pick.lead_batch;
  race.pick_reason = pick.reason;
  race.within_5_percent = flat_range(entries);
}

// No candidate left the start in the first rung: the reserve's batches (not among the entries) join
// it, each trained from the initial weights to the rung's horizon, appended to the entries and to
// `alive` (the race's entries are put in batch order at its end).
void join_reserve(ModuleWorkload& w, const Dataset& held_out, const WorkloadState& initial,
                  const BatchRaceOptions& o, double horizon, RaceClock& clock, BatchRace& race,
                  std::vector<Live>& entries, std::vector<size_t>& alive) {
  std::vector<Candidate> joining;
  for (size_t i = 0; i < o.reserve().size(); ++i) {
    const int64_t b = o.reserve()[i];
    const bool known = std::any_of(entries.begin(), entries.end(), [&](const Live& l) { return l.entry.batch == b; }) ||
                       std::any_of(joining.begin(), joining.end(), [&](const Candidate& c) { return c.batch == b; }) ||
                       std::count(race.left_out.begin(), race.left_out.end(), b) > 0;
    if (known) continue;
    const int64_t steps = static_cast<int64_t>(horizon * o.reserve_samples_per_s()[i] / static_cast<double>(b));
    if (steps < o.min_steps()) {
      race.left_out.push_back(b);
      race.notes.push_back(fmt::format("reserve batch {} left out: {} steps fit the first rung's {:.2f} s, below the "
                                       "{} a comparison needs",
                                       b, steps, horizon, o.min_steps()));
      continue;
    }
    joining.push_back({b, o.reserve_samples_per_s()[i]});
  }
  if (joining.empty()) return;
  std::sort(joining.begin(), joining.end(), [](const auto& a, const auto& b) { return a.batch < b.batch; });
  std::vector<int64_t> batches;
  for (const Candidate& c : joining) batches.push_back(c.batch);
  // As many evaluations as a candidate had by the horizon, so that the line a rung reads through the
  // latest of them spans as late a stretch as the candidates' does.
  int evaluations = o.evaluations();
  bool any_candidate = false;
  for (const Live& l : entries)
    if (!l.failed) evaluations = std::max(evaluations, static_cast<int>(l.entry.curve.size()) - 1), any_candidate = true;
  clock.slice = horizon;
  clock.count += static_cast<int>(joining.size());
  clock.planned_left += horizon * static_cast<double>(joining.size());
  for (const Candidate& c : joining) {
    Live live;
    live.entry.batch = c.batch;
    live.entry.samples_per_s = c.samples_per_s;
    live.entry.curve.push_back({0, race.loss_before, race.accuracy_before});
    ++clock.index;
    run_entry(w, held_out, live, initial, true, horizon, clock, o, evaluations);
    clock.planned_left -= horizon;
    entries.push_back(std::move(live));
    alive.push_back(entries.size() - 1);
  }
  const bool learned = std::any_of(entries.end() - static_cast<std::ptrdiff_t>(joining.size()), entries.end(),
                                   [&](const Live& l) { return !l.failed && left_the_start(l.entry, race.loss_before); });
  race.notes.push_back(fmt::format(
      "{} after {:.1f} s of training each, so the reserve {} (smaller batches, more steps in the same training "
      "time) joined rung 1 and trained as long from the same weights: {}",
      any_candidate ? "no candidate had left the start" : "every candidate had failed", horizon, batches,
      learned ? "one of them left it" : "none of them left it"));
}

}  // namespace

BatchRace race_batches(ModuleWorkload& w, const Dataset& held_out, const BatchRaceOptions& o) {
  BATCHWISE_CHECK(!o.batches().empty() && o.batches().size() == o.samples_per_s().size(), ConfigError,
                  "batch race: {} candidates with {} throughput figures; give one figure per candidate",
                  o.batches().size(), o.samples_per_s().size());
  BATCHWISE_CHECK(o.budget_s() > 0, ConfigError, "batch race: a budget of {:g} s; it must be positive", o.budget_s());
  BATCHWISE_CHECK(o.evaluations() >= 1 && o.min_steps() >= 1, ConfigError,
                  "batch race: at least 1 evaluation and 1 step per entry and rung");
  BATCHWISE_CHECK(held_out.size() > 0, DataError, "{}: the held-out set is empty", held_out.name);
  BATCHWISE_CHECK(o.target_accuracy() >= 0 && o.target_accuracy() <= 1 && o.target_loss() >= 0, ConfigError,
                  "batch race: a target accuracy of {:g} and loss of {:g}; an accuracy lies in (0, 1], a loss above 0 "
                  "(0: no target)",
                  o.target_accuracy(), o.target_loss());
  BATCHWISE_CHECK(o.target_accuracy() == 0 || held_out.targets.scalar_type() == at::kLong, ConfigError,
                  "{}: a target accuracy needs class labels, and its targets are not; give a target loss instead",
                  held_out.name);
  BATCHWISE_CHECK(o.reserve().size() == o.reserve_samples_per_s().size(), ConfigError,
                  "batch race: {} reserve batches with {} throughput figures; give one figure per batch",
                  o.reserve().size(), o.reserve_samples_per_s().size());
  for (size_t i = 0; i < o.batches().size(); ++i)
    BATCHWISE_CHECK(o.batches()[i] >= 1 && o.samples_per_s()[i] > 0, ConfigError,
                    "batch race: batch {} at {:g} samples/s; both must be positive", o.batches()[i],
                    o.samples_per_s()[i]);
  for (size_t i = 0; i < o.reserve().size(); ++i)
    BATCHWISE_CHECK(o.reserve()[i] >= 1 && o.reserve_samples_per_s()[i] > 0, ConfigError,
                    "batch race: reserve batch {} at {:g} samples/s; both must be positive", o.reserve()[i],
                    o.reserve_samples_per_s()[i]);
  RaceClock clock;
  clock.start = Clock::now();
  clock.epoch = w.data().size();
  const StateGuard restore(w);  // weights, optimizer (its learning rate too), data order
  const std::unique_ptr<WorkloadState> initial = w.save_state();
  BatchRace race;
  race.held_out = fmt::format("{} samples of {}", held_out.size(), held_out.name);
  const Probe before = probe(w, held_out);
  race.loss_before = before.loss;
  race.accuracy_before = before.accuracy;
  HeldOutTarget target{o.target_accuracy(), o.target_loss()};
  if (target && target.met(before.loss, before.accuracy)) {
    race.notes.push_back(fmt::format(
        "the target ({}) is met by the initial weights already (held-out loss {:.4g}{}): the race ranks by held-out "
        "loss at its horizons, as without one",
        target.text("held-out"), before.loss, before.accuracy ? fmt::format(", accuracy {:.3f}", *before.accuracy) : ""));
    target = {};
  }
  if (target) race.target = target.text("held-out");
  const std::vector<Candidate> kept = plan_candidates(o, race);
  if (kept.empty()) {
    race.wall_s = since(clock.start);
    return race;
  }
  const std::vector<int> sizes = rung_sizes(static_cast<int>(kept.size()));
  const double first = first_slice(o.budget_s(), sizes);  // the whole budget for those that run
  const size_t points = static_cast<size_t>(o.evaluations()) + 1;

  std::vector<Live> entries(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    entries[i].entry.batch = kept[i].batch;
    entries[i].entry.samples_per_s = kept[i].samples_per_s;
    entries[i].entry.curve.push_back({0, before.loss, before.accuracy});
  }
  std::vector<size_t> alive(kept.size());
  for (size_t i = 0; i < alive.size(); ++i) alive[i] = i;
  double horizon = 0;
  double extension_left = o.budget_s();  // a plateau may lengthen the race to twice its budget
  double wall_limit = o.max_wall_s();
  clock.planned_left = o.budget_s();
  clock.rungs = static_cast<int>(sizes.size());
  bool cut_short = false;
  const auto anyone_left_the_start = [&] {
    for (size_t i : alive)
      if (!entries[i].failed && left_the_start(entries[i].entry, race.loss_before)) return true;
    return false;
  };
  for (size_t rung = 0; rung < sizes.size() && !alive.empty(); ++rung) {
    if (rung > 0 && wall_limit > 0 && since(clock.start) > wall_limit) {
      race.notes.push_back(fmt::format(
          "the race stopped after rung {} of {}: it had taken {:.0f} s of wall time, past its limit of {:.0f} s (the "
          "machine trained slower than the sweep measured); the best of that rung wins",
          rung, sizes.size(), since(clock.start), wall_limit));
      alive.resize(1);
      cut_short = true;
      break;
    }
    const double planned_slice = first * std::pow(2.0, static_cast<double>(rung));
    clock.slice = planned_slice;
    clock.rung = static_cast<int>(rung) + 1;
    clock.count = static_cast<int>(alive.size());
    const double rung_start = horizon;
    for (bool extended = false;; extended = true) {
      horizon += clock.slice;
      clock.index = 0;
      for (size_t i : alive) {
        ++clock.index;
        if (entries[i].failed) continue;
        const auto entry_start = Clock::now();
        run_entry(w, held_out, entries[i], *initial, rung == 0 && !extended, horizon, clock, o);
        clock.planned_left -= clock.slice;
        const double wall = since(entry_start) / clock.slice;
        clock.wall_per_train_s = clock.wall_per_train_s > 0 ? 0.5 * (clock.wall_per_train_s + wall) : wall;
      }
      // On the plateau no ranking means anything: the rung goes on, doubling its training, while
      // the extension's budget lasts (the race then trains at most twice its budget).
      const auto live_count = static_cast<double>(std::count_if(
          alive.begin(), alive.end(), [&](size_t i) { return !entries[i].failed; }));
      if (anyone_left_the_start() || live_count == 0) break;
      const double more = std::min(horizon - rung_start, extension_left / live_count);
      if (more < 0.999 * planned_slice || (wall_limit > 0 && since(clock.start) > wall_limit)) break;
      extension_left -= more * live_count;
      wall_limit += o.max_wall_s() * more * live_count / o.budget_s();  // the limit grows with the training
      clock.slice = more;
      clock.planned_left += more * live_count;
    }
    if (horizon - rung_start > planned_slice * 1.000001)
      race.notes.push_back(fmt::format(
          "rung {} trained {:.1f} s instead of {:.1f} s: no candidate's held-out loss had fallen 2 % below where all "
          "began ({:.3f}), the plateau at the start of training, where a ranking would be by noise; {}",
          rung + 1, horizon - rung_start, planned_slice, race.loss_before,
          anyone_left_the_start() ? "then one did" : "none had when the extension's budget ran out"));
    if (rung == 0 && !anyone_left_the_start() && !o.reserve().empty() && wall_limit > 0 &&
        since(clock.start) > wall_limit) {
      race.notes.push_back(fmt::format("the reserve {} did not join: the race had taken {:.0f} s of wall time, past "
                                       "its limit of {:.0f} s",
                                       o.reserve(), since(clock.start), wall_limit));
    } else if (rung == 0 && !anyone_left_the_start() && !o.reserve().empty()) {
      const size_t before_join = entries.size();
      join_reserve(w, held_out, *initial, o, horizon, clock, race, entries, alive);
      wall_limit += o.max_wall_s() * horizon * static_cast<double>(entries.size() - before_join) / o.budget_s();
    }
    race.horizons_s.push_back(horizon);
    // Rank this rung's entries (by the time to the target where one reached it, else by held-out
    // loss at the horizon); the better half goes on.
    const std::vector<size_t> ranked = rank_rung(entries, alive, horizon, points, target, race.loss_before);
    if (!ranked.empty() && anyone_left_the_start())  // a lead on the plateau would be noise
      race.rung_leads.push_back(rung_lead(entries[ranked.front()].entry, rung, horizon, clock.epoch));
    if (!ranked.empty() && entries[ranked.front()].entry.target_s) {  // measured: nothing left to predict
      const RaceEntry& first = entries[ranked.front()].entry;
      if (rung + 1 < sizes.size())
        race.notes.push_back(fmt::format(
            "the race ended after rung {} of {}: batch {} reached the target ({}) after {:.1f} s of training, and no "
            "other entry of the rung got there sooner (each trained to {:.1f} s); the rest would train past it",
            rung + 1, sizes.size(), first.batch, race.target, *first.target_s, horizon));
      alive = ranked;
      break;
    }
    const size_t keep = rung + 1 < sizes.size() ? static_cast<size_t>(sizes[rung + 1]) : ranked.size();
    alive.assign(ranked.begin(), ranked.begin() + std::min(keep, ranked.size()));
    for (size_t i = 0; i < entries.size(); ++i)  // the dropped keep their last figures
      if (std::find(alive.begin(), alive.end(), i) == alive.end()) entries[i].state.reset();
  }
  decide(race, entries, alive, cut_short, horizon);
  for (auto& live : entries) race.entries.push_back(std::move(live.entry));
  std::sort(race.entries.begin(), race.entries.end(), [](const auto& a, const auto& b) { return a.batch < b.batch; });
  race.wall_s = since(clock.start);
  return race;
}

}  // namespace batchwise

// The batch race: its candidates and reserve from a sweep, and the race itself, short branched runs
// from the user's weights, each candidate at its own rate, judged by held-out loss at equal training
// time (successive halving); the ranking is race_rank.cpp's.
#include "batchwise/race.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "advice/race_rank.h"
#include "advice/target.h"
#include "batchwise/units.h"
#include "batchwise/validate.h"
#include "batchwise/workload.h"
#include "check.h"
#include "engine/held_out_probe.h"

namespace batchwise {

namespace {

// A batch more than 5 % slower than a smaller one is dominated: at equal time it trains fewer
// samples, and a sample in a bigger batch moves the loss no more than one in a smaller batch
// (McCandlish et al. 2018).
constexpr double kDominated = 0.95;
// Of the rest, the candidates are those with at least 40 % of the best samples/s.
constexpr double kShareOfFastest = 0.4;

}  // namespace

std::vector<int64_t> race_candidates(const std::vector<Trial>& points, int count) {
  double best = 0;
  for (const auto& p : points)
    if (p.outcome == Outcome::Ok) best = std::max(best, p.samples_per_s);
  std::vector<const Trial*> ok;
  for (const auto& p : points)
    if (p.outcome == Outcome::Ok) ok.push_back(&p);
  std::sort(ok.begin(), ok.end(), [](const Trial* a, const Trial* b) { return a->batch < b->batch; });
  std::vector<const Trial*> kept;
  double fastest_below = 0;
  for (const Trial* p : ok) {
    if (p->samples_per_s >= kShareOfFastest * best && p->samples_per_s >= kDominated * fastest_below) kept.push_back(p);
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

std::vector<Trial> within_dataset(const std::vector<Trial>& points, int64_t dataset, std::vector<int64_t>& larger) {
  larger.clear();
  std::vector<Trial> kept;
  for (const Trial& p : points)
    if (p.batch <= dataset)
      kept.push_back(p);
    else
      larger.push_back(p.batch);
  return kept;
}

std::string larger_than_dataset_note(const std::vector<int64_t>& larger, int64_t dataset) {
  if (larger.empty()) return "";
  return fmt::format(
      "{} {} not raced: larger than the {} training samples, a step would repeat samples (the fit and "
      "the sweep measured {})",
      larger.size() > 1 ? "batches" : "batch", fmt::join(larger, ", "), dataset, larger.size() > 1 ? "them" : "it");
}

std::string larger_than_dataset_warning(const std::vector<Trial>& sweep_points, int64_t dataset) {
  std::vector<int64_t> larger;
  if (dataset > 0) (void)within_dataset(sweep_points, dataset, larger);
  return larger_than_training_set_warning(larger, dataset);  // validate's words, one text for both
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
  if (static_cast<int>(below.size()) > std::max(0, count)) below.erase(below.begin(), below.end() - std::max(0, count));
  return below;
}

namespace {

using detail::left_the_start;

struct Probe {
  double loss = 0;
  std::optional<double> accuracy;
};

Probe probe(ModuleWorkload& w, const Dataset& held_out) {
  if (held_out.size() == 0) return {};
  const auto [loss, accuracy] = w.evaluate(held_out);
  return {loss, accuracy};
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
// with a note, and the rungs are planned for the rest. The rung is shared: the fewer race, the longer
// each one's share, so the race keeps the most candidates that each fit min_steps in the share their
// number leaves (those with the most steps per second first), not those that would fit beside all of them
// (a race of 16 and 32 gave each a share in which 64, left out beside 128, had had its steps).
std::vector<Candidate> plan_candidates(const BatchRaceOptions& o, BatchRace& race) {
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < o.batches().size(); ++i) candidates.push_back({o.batches()[i], o.samples_per_s()[i]});
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) { return a.batch < b.batch; });
  candidates.erase(std::unique(candidates.begin(), candidates.end(),
                               [](const auto& a, const auto& b) { return a.batch == b.batch; }),
                   candidates.end());
  const auto slice = [&](size_t n) { return first_slice(o.budget_s(), rung_sizes(static_cast<int>(n))); };
  const auto steps = [](const Candidate& c, double s) {
    return static_cast<int64_t>(s * c.samples_per_s / static_cast<double>(c.batch));
  };
  std::vector<Candidate> by_pace = candidates;  // the most steps per second first
  std::stable_sort(by_pace.begin(), by_pace.end(), [](const Candidate& a, const Candidate& b) {
    return a.samples_per_s / static_cast<double>(a.batch) > b.samples_per_s / static_cast<double>(b.batch);
  });
  size_t kept_count = by_pace.size();
  while (kept_count > 0 && steps(by_pace[kept_count - 1], slice(kept_count)) < o.min_steps()) --kept_count;
  // A candidate left out would, raced beside the kept ones, share the rung one more entry leaves.
  const double with_one_more = slice(kept_count + 1);
  std::vector<Candidate> kept;
  for (const Candidate& c : candidates) {
    const auto at =
        std::find_if(by_pace.begin(), by_pace.end(), [&](const Candidate& p) { return p.batch == c.batch; });
    if (static_cast<size_t>(at - by_pace.begin()) < kept_count) {
      kept.push_back(c);
      continue;
    }
    race.left_out.push_back(c.batch);
    race.notes.push_back(
        fmt::format("batch {} left out: raced beside the {} kept, {} steps would fit its share of the first "
                    "rung ({:.2f} s), below the {} a comparison needs (a larger --advice-budget includes it)",
                    c.batch, kept_count, steps(c, with_one_more), with_one_more, o.min_steps()));
  }
  return kept;
}

}  // namespace

std::vector<int64_t> first_rung_batches(const BatchRaceOptions& o) {
  BATCHWISE_CHECK(o.batches().size() == o.samples_per_s().size() && o.budget_s() > 0, ConfigError,
                  "batch race: {} candidates with {} throughput figures and a budget of {:g} s; give one figure per "
                  "candidate and a positive budget",
                  o.batches().size(), o.samples_per_s().size(), o.budget_s());
  BatchRace scratch;  // what plan_candidates notes of the others
  std::vector<int64_t> batches;
  for (const Candidate& c : plan_candidates(o, scratch)) batches.push_back(c.batch);
  return batches;
}

namespace {

struct Live {
  RaceEntry entry;
  std::unique_ptr<WorkloadState> state;
  bool failed = false;
  bool untrained = false;  // left out of the first rung at the wall limit: no entry, in left_out
  double advise_s = 0;     // the range test's wall time, apart from the training's pace
};

// Where the race stands, for its progress reports.
struct RaceClock {
  std::function<double()> read;  // BatchRaceOptions::clock
  double start = 0;
  int rung = 0, rungs = 0, index = 0, count = 0;
  double slice = 0, planned_left = 0, wall_per_train_s = 0;
  int64_t epoch = 0;

  double now() const {
    if (read) return read();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  double since_start() const { return now() - start; }
};

// Trains entry `e` for one rung's slice of training time (from the workload's current state) at its
// advised rate, evaluating `evaluations` times; throws when the training loss is not finite.
void train_slice(ModuleWorkload& w, const Dataset& held_out, RaceEntry& e, int evaluations, const RaceClock& clock,
                 const BatchRaceOptions& o) {
  const double entry_start = clock.now();
  const int64_t steps =
      std::max<int64_t>(1, std::llround(clock.slice * e.samples_per_s / static_cast<double>(e.batch)));
  int next = 1;
  for (int64_t step = 0; step < steps; ++step) {
    w.set_lr(lr_at_step(e.lr, e.steps));
    const double loss = w.train_step(w.next_batch(e.batch)).item<double>();
    ++e.steps;
    e.samples += e.batch;
    if (!std::isfinite(loss))
      throw std::runtime_error(fmt::format("diverged: the training loss became {} at step {}",
                                           std::isnan(loss) ? "NaN" : "infinite", e.steps));
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
    progress.elapsed_s = clock.since_start();
    const double done = clock.slice * static_cast<double>(step + 1) / static_cast<double>(steps);
    const double pace = clock.wall_per_train_s > 0 ? clock.wall_per_train_s : (clock.now() - entry_start) / done;
    progress.left_s = std::max(0.0, clock.planned_left - done) * pace;
    o.on_progress()(progress);
  }
}

// Trains one entry for the clock's slice, from the initial weights in the first rung (where its rate
// is advised) and from its own state after; a failure ends the entry, not the race.
void run_entry(ModuleWorkload& w, const Dataset& held_out, Live& live, const WorkloadState& initial, bool first,
               double horizon, const RaceClock& clock, const BatchRaceOptions& o, int evaluations = 0) {
  RaceEntry& e = live.entry;
  try {
    if (first) {
      w.restore_state(initial);
      const double advise_start = clock.now();
      e.lr = advise_lr(w, e.batch, o.lr());
      live.advise_s = clock.now() - advise_start;
    } else {
      w.restore_state(*live.state);
    }
    train_slice(w, held_out, e, evaluations > 0 ? evaluations : o.evaluations(), clock, o);
    e.rungs = clock.rung;
    live.state = w.save_state();
    e.loss_at_horizon = detail::loss_at(e.curve, static_cast<size_t>(o.evaluations()) + 1, horizon);
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

// A held-out loss this far above the initial weights' is a model made worse, not a noisy one: a candidate near its
// rate's limit bounces 10 % either side of where it began (the regression's batch 8 at a third of its limit read 1.54,
// 2.34, 2.22 from 2.05) and still trains.
constexpr double kWorseThanTheStart = 1.25;

// Every candidate that trained ended the race worse than the initial weights: its held-out loss more than
// kWorseThanTheStart times where all began, and its accuracy (where measured) no higher. Training at their rates made
// the model worse (a race had crowned batch 4 at a held-out loss of 4.41 against 2.31 before it; another gave "the
// plateau's answer" for losses of 2.4 to 11.8): no answer, and the note why. "" where one did not.
std::string ended_worse(const BatchRace& race, const std::vector<Live>& entries) {
  if (!(race.loss_before > 0)) return "";  // a loss that can be negative (a custom one) has no "times worse"
  const RaceEntry* least = nullptr;
  double least_loss = 0;
  for (const Live& live : entries) {
    if (live.failed || live.untrained || live.entry.curve.empty()) continue;
    const RaceEntry::Point& end = live.entry.curve.back();
    if (end.loss <= kWorseThanTheStart * race.loss_before ||
        (race.accuracy_before && end.accuracy && *end.accuracy > *race.accuracy_before))
      return "";
    if (!least || end.loss < least_loss) least = &live.entry, least_loss = end.loss;
  }
  if (!least) return "";
  return fmt::format(
      "every candidate ended the race with a held-out loss above where all began ({:.3f}; the least, batch {}, at "
      "{:.3f}): training at their rates made the model worse (a rate too high, or data whose held-out labels its "
      "training set does not predict); the race recommends none: lower --lr, or check the data",
      race.loss_before, least->batch, least_loss);
}

// The race's recommendation from its last rung (`alive`): none when no entry ever left the start;
// a race cut short by its wall-clock limit takes its lead.
void decide(BatchRace& race, const std::vector<Live>& entries, const std::vector<size_t>& alive, bool cut_short,
            double horizon) {
  if (alive.empty()) return;
  if (const std::string worse = ended_worse(race, entries); !worse.empty()) {
    race.ended_worse = true;
    return race.notes.push_back(worse);
  }
  const bool learned = std::any_of(entries.begin(), entries.end(), [&](const Live& live) {
    return !live.failed && !live.untrained && left_the_start(live.entry, race.loss_before);
  });
  if (!learned) {
    race.stuck = true;
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
  std::vector<const RaceEntry*> trained;
  for (const Live& live : entries)
    if (!live.failed && !live.untrained) trained.push_back(&live.entry);
  race.within_5_percent = detail::flat_range(trained);
}

// No candidate left the start in the first rung: the reserve's batches (not among the entries) join
// it, each trained from the initial weights to the rung's horizon, appended to the entries and to
// `alive` (the race's entries are put in batch order at its end).
void join_reserve(ModuleWorkload& w, const Dataset& held_out, const WorkloadState& initial, const BatchRaceOptions& o,
                  double horizon, RaceClock& clock, BatchRace& race, std::vector<Live>& entries,
                  std::vector<size_t>& alive) {
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
      race.notes.push_back(
          fmt::format("reserve batch {} left out: {} steps fit the first rung's {:.2f} s, below the "
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
    if (!l.failed)
      evaluations = std::max(evaluations, static_cast<int>(l.entry.curve.size()) - 1), any_candidate = true;
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
  const bool learned =
      std::any_of(entries.end() - static_cast<std::ptrdiff_t>(joining.size()), entries.end(),
                  [&](const Live& l) { return !l.failed && left_the_start(l.entry, race.loss_before); });
  race.notes.push_back(fmt::format(
      "{} after {:.1f} s of training each, so the reserve {} (smaller batches, more steps in the same training "
      "time) joined rung 1 and trained as long from the same weights: {}",
      any_candidate ? "no candidate had left the start" : "every candidate had failed", horizon,
      fmt::join(batches, ", "), learned ? "one of them left it" : "none of them left it"));
}

// The options' checks: a message for each that names what was wrong.
void check_options(const Dataset& held_out, const BatchRaceOptions& o) {
  BATCHWISE_CHECK(!o.batches().empty() && o.batches().size() == o.samples_per_s().size(), ConfigError,
                  "batch race: {} candidates with {} throughput figures; give one figure per candidate",
                  o.batches().size(), o.samples_per_s().size());
  BATCHWISE_CHECK(o.budget_s() > 0, ConfigError, "batch race: a budget of {:g} s; it must be positive", o.budget_s());
  BATCHWISE_CHECK(o.evaluations() >= 1 && o.min_steps() >= 1, ConfigError,
                  "batch race: at least 1 evaluation and 1 step per entry and rung");
  BATCHWISE_CHECK(held_out.size() > 0, DataError, "{}the held-out set is empty",
                  held_out.name.empty() ? "" : held_out.name + ": ");
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
}

// The target the race ranks by: the options', or none when the initial weights (race.loss_before,
// accuracy_before) meet it already, with a note.
HeldOutTarget race_target(const BatchRaceOptions& o, BatchRace& race) {
  HeldOutTarget target{o.target_accuracy(), o.target_loss()};
  if (target && target.met(race.loss_before, race.accuracy_before)) {
    race.notes.push_back(fmt::format(
        "the target ({}) is met by the initial weights already (held-out loss {:.4g}{}): the race ranks by held-out "
        "loss at its horizons, as without one",
        target.text("held-out"), race.loss_before,
        race.accuracy_before ? fmt::format(", accuracy {:.3f}", *race.accuracy_before) : ""));
    target = {};
  }
  if (target) race.target = target.text("held-out");
  return target;
}

// One race under way: its entries (the candidates, then any reserve), those still in it, and where
// its rungs stand. race_batches runs the rungs in turn: train (and extend on the plateau), rank, halve.
struct RaceRun {
  ModuleWorkload& w;
  const Dataset& held_out;
  const BatchRaceOptions& o;
  const WorkloadState& initial;
  RaceClock& clock;
  BatchRace& race;
  const HeldOutTarget target;
  const std::vector<int> sizes;  // entries per rung
  const double first;            // the first rung's training time per entry: the whole budget for those that run
  const size_t points;           // the evaluations a rung's lines read
  std::vector<Live> entries;
  std::vector<size_t> alive;  // indices into entries of those still racing
  double horizon = 0;
  double extension_left;  // a plateau may lengthen the race to twice its budget
  double wall_limit;
  double wall_budget;  // the planned wall time (BatchRaceOptions::wall_budget_s), 0: none
  bool cut_short = false;
  // The wall limit ended the first rung before every entry trained, ended a plateau's extension, or
  // kept the reserve out: the race trained less than it would have (BatchRace::stopped_at_wall_limit).
  bool hit_wall_limit = false;

  // `kept` (plan_candidates) all in the race, from the same weights and the initial held-out loss.
  RaceRun(ModuleWorkload& w, const Dataset& held_out, const BatchRaceOptions& o, const WorkloadState& initial,
          RaceClock& clock, BatchRace& race, HeldOutTarget target, const std::vector<Candidate>& kept)
      : w(w),
        held_out(held_out),
        o(o),
        initial(initial),
        clock(clock),
        race(race),
        target(target),
        sizes(rung_sizes(static_cast<int>(kept.size()))),
        first(first_slice(o.budget_s(), sizes)),
        points(static_cast<size_t>(o.evaluations()) + 1),
        entries(kept.size()),
        alive(kept.size()),
        extension_left(o.budget_s()),
        wall_limit(o.max_wall_s()),
        wall_budget(o.wall_budget_s()) {
    for (size_t i = 0; i < kept.size(); ++i) {
      entries[i].entry.batch = kept[i].batch;
      entries[i].entry.samples_per_s = kept[i].samples_per_s;
      entries[i].entry.curve.push_back({0, race.loss_before, race.accuracy_before});
    }
    std::iota(alive.begin(), alive.end(), size_t{0});
    clock.planned_left = o.budget_s();
    clock.rungs = static_cast<int>(sizes.size());
  }

  bool anyone_left_the_start() const {
    for (size_t i : alive)
      if (!entries[i].failed && left_the_start(entries[i].entry, race.loss_before)) return true;
    return false;
  }

  // Past the wall-clock limit before rung `rung` (0-based) starts: the race stops, and the best of the
  // last finished rung wins.
  bool out_of_wall_time(size_t rung) {
    if (wall_limit <= 0 || clock.since_start() <= wall_limit) return false;
    race.notes.push_back(fmt::format(
        "the race stopped after rung {} of {}: it had taken {:.0f} s of wall time, past its limit of {:.0f} s (the "
        "machine trained slower than the sweep measured); the best of that rung wins",
        rung, sizes.size(), clock.since_start(), wall_limit));
    alive.resize(1);
    cut_short = true;
    return true;
  }

  // Past the wall-clock limit within a rung after the first, before an entry trains: the rest of the
  // rung does not, and the race ends as if cut before the rung (train_rung puts back every entry's
  // figures from the last rung's end, so the best of that rung wins and no figure is from a horizon
  // the rung did not reach; the first rung is out_of_wall_time_in_first_rung's). A rung's
  // entries train one after another, the later rungs' for longer, so a machine slowed in one would
  // otherwise run it to its end.
  bool out_of_wall_time_within_rung() {
    if (clock.rung <= 1 || wall_limit <= 0 || clock.since_start() <= wall_limit) return false;
    race.notes.push_back(fmt::format(
        "the race stopped during rung {} of {}: it had taken {:.0f} s of wall time, past its limit of {:.0f} s (the "
        "machine trained slower than the sweep measured); the best of rung {} wins, and every entry keeps its figures "
        "from there",
        clock.rung, sizes.size(), clock.since_start(), wall_limit, clock.rung - 1));
    cut_short = true;
    return true;
  }

  // Past the wall-clock limit within the first rung, before alive[k] trains, once two entries have
  // trained (the least a ranking needs): the rest of the rung does not train. They leave the race
  // without an entry (left_out, and a note), and the rung ranks the ones that trained. Without this a
  // machine slowed k times ran the first rung k times longer. A two-candidate race is one rung of two
  // entries, both trained: its bound is those two.
  bool out_of_wall_time_in_first_rung(size_t k) {
    if (clock.rung != 1 || wall_limit <= 0 || clock.since_start() <= wall_limit) return false;
    std::vector<int64_t> left;
    for (size_t j = k; j < alive.size(); ++j) {
      entries[alive[j]].untrained = true;
      left.push_back(entries[alive[j]].entry.batch);
    }
    race.left_out.insert(race.left_out.end(), left.begin(), left.end());
    race.notes.push_back(fmt::format(
        "the race passed its wall limit during its first rung: it had taken {:.0f} s of wall time, past its limit of "
        "{:.0f} s (the machine trained slower than the sweep measured), so {} {} did not race; the rung ranks "
        "those that trained",
        clock.since_start(), wall_limit, left.size() > 1 ? "batches" : "batch", fmt::join(left, ", ")));
    alive.resize(k);
    hit_wall_limit = true;
    return true;
  }

  // Rung `rung`'s training per entry as planned: the first rung's, doubling at each rung.
  double planned_slice(size_t rung) const { return first * std::pow(2.0, static_cast<double>(rung)); }

  // Rung `rung`'s training per entry: its share of the budget, less where the rungs left would not
  // fit the wall time left at the pace measured so far (wall_budget_s); never below min_steps'
  // worth for the slowest entry still in.
  double fitted_slice(size_t rung) {
    const double planned = planned_slice(rung);
    if (rung == 0 || wall_budget <= 0 || clock.wall_per_train_s <= 0) return planned;
    double units = 0;  // the rungs left, in this rung's slices per entry
    for (size_t r = rung; r < sizes.size(); ++r) units += sizes[r] * std::pow(2.0, static_cast<double>(r - rung));
    const double fits = (wall_budget - clock.since_start()) / (units * clock.wall_per_train_s);
    if (fits >= planned) return planned;
    double floor = 0;
    for (size_t i : alive)
      floor =
          std::max(floor, o.min_steps() * static_cast<double>(entries[i].entry.batch) / entries[i].entry.samples_per_s);
    const double slice = std::max(fits, floor);
    race.notes.push_back(fmt::format(
        "rung {} trained {:.2f} s per entry instead of {:.2f} s: the race had taken {:.0f} s of the {:.0f} s planned "
        "(training ran at {:.2f} s of wall time per second planned), and the rungs left were fitted to the rest",
        rung + 1, slice, planned, clock.since_start(), wall_budget, clock.wall_per_train_s));
    return slice;
  }

  // Trains the rung's entries to its horizon, and on over the plateau at the start (extend); after the
  // first rung, the reserve joins where no candidate has left the start.
  void train_rung(size_t rung) {
    const double planned_slice = fitted_slice(rung);
    clock.slice = planned_slice;
    clock.rung = static_cast<int>(rung) + 1;
    clock.count = static_cast<int>(alive.size());
    const double rung_start = horizon;
    std::vector<std::pair<RaceEntry, bool>> before;  // alive's figures and failures at the last rung's end
    for (size_t i : alive) before.emplace_back(entries[i].entry, entries[i].failed);
    for (bool extended = false;; extended = true) {
      horizon += clock.slice;
      train_alive(rung == 0 && !extended);
      if (cut_short || !extend(rung_start, planned_slice)) break;
    }
    if (cut_short) {  // as if cut before the rung: no figure from a horizon it did not reach
      for (size_t k = 0; k < alive.size(); ++k) std::tie(entries[alive[k]].entry, entries[alive[k]].failed) = before[k];
      horizon = rung_start;
      return;
    }
    if (horizon - rung_start > planned_slice * 1.000001)
      race.notes.push_back(fmt::format(
          "rung {} trained {} instead of {}: no candidate's held-out loss had fallen 2 % below where all "
          "began ({:.3f}), the plateau at the start of training, where a ranking would be by noise; {}",
          rung + 1, format_seconds(horizon - rung_start), format_seconds(planned_slice), race.loss_before,
          anyone_left_the_start() ? "then one did"
          : hit_wall_limit        ? fmt::format("none had when the race passed its wall limit ({:.0f} s)", wall_limit)
                                  : "none had when the extension's budget ran out"));
    if (rung == 0) join_reserve_if_stuck();
  }

  // Each entry still in the race trains the clock's slice: from the initial weights (its rate advised
  // then) when `from_initial`, else from its own state.
  void train_alive(bool from_initial) {
    clock.index = 0;
    int trained = 0;  // entries this pass trained that did not fail
    for (size_t k = 0; k < alive.size(); ++k) {
      const size_t i = alive[k];
      ++clock.index;
      if (entries[i].failed) continue;
      if (out_of_wall_time_within_rung()) return;
      if (from_initial && trained >= 2 && out_of_wall_time_in_first_rung(k)) return;
      const double entry_start = clock.now();
      entries[i].advise_s = 0;
      run_entry(w, held_out, entries[i], initial, from_initial, horizon, clock, o);
      clock.planned_left -= clock.slice;
      const double wall = (clock.now() - entry_start - entries[i].advise_s) / clock.slice;
      clock.wall_per_train_s = clock.wall_per_train_s > 0 ? 0.5 * (clock.wall_per_train_s + wall) : wall;
      if (!entries[i].failed) ++trained;
    }
  }

  // On the plateau no ranking means anything: the rung goes on, doubling its training, while the
  // extension's budget lasts (the race then trains at most twice its budget). Sets the next slice and
  // returns true to train on.
  bool extend(double rung_start, double planned_slice) {
    const auto live_count =
        static_cast<double>(std::count_if(alive.begin(), alive.end(), [&](size_t i) { return !entries[i].failed; }));
    if (anyone_left_the_start() || live_count == 0) return false;
    const double more = std::min(horizon - rung_start, extension_left / live_count);
    if (more < 0.999 * planned_slice) return false;
    if (wall_limit > 0 && clock.since_start() > wall_limit) {  // trained no further: the race was cut
      hit_wall_limit = true;
      return false;
    }
    extension_left -= more * live_count;
    wall_limit += o.max_wall_s() * more * live_count / o.budget_s();  // the limit grows with the training
    wall_budget += o.wall_budget_s() * more * live_count / o.budget_s();
    clock.slice = more;
    clock.planned_left += more * live_count;
    return true;
  }

  void join_reserve_if_stuck() {
    if (anyone_left_the_start() || o.reserve().empty()) return;
    if (wall_limit > 0 && clock.since_start() > wall_limit) {
      race.notes.push_back(
          fmt::format("the reserve {} did not join: the race had taken {:.0f} s of wall time, past "
                      "its limit of {:.0f} s",
                      fmt::join(o.reserve(), ", "), clock.since_start(), wall_limit));
      hit_wall_limit = true;
      return;
    }
    const size_t before_join = entries.size();
    join_reserve(w, held_out, initial, o, horizon, clock, race, entries, alive);
    wall_limit += o.max_wall_s() * horizon * static_cast<double>(entries.size() - before_join) / o.budget_s();
    wall_budget += o.wall_budget_s() * horizon * static_cast<double>(entries.size() - before_join) / o.budget_s();
  }

  // Ranks the rung's entries (by the time to the target where one reached it, else by held-out loss
  // at the horizon) and keeps the better half; returns true when the race ends here (an entry
  // reached the target: nothing left to predict).
  bool rank(size_t rung) {
    std::vector<size_t> trained;
    std::vector<RaceEntry*> rung_entries;
    for (size_t i : alive)
      if (!entries[i].failed) trained.push_back(i), rung_entries.push_back(&entries[i].entry);
    std::vector<size_t> ranked;
    for (size_t k : detail::rank_rung(rung_entries, horizon, points, target, race.loss_before))
      ranked.push_back(trained[k]);
    if (!ranked.empty() && anyone_left_the_start())  // a lead on the plateau would be noise
      race.rung_leads.push_back(detail::rung_lead(entries[ranked.front()].entry, rung, horizon, clock.epoch));
    if (!ranked.empty() && entries[ranked.front()].entry.target_s) {
      const RaceEntry& lead = entries[ranked.front()].entry;
      if (rung + 1 < sizes.size())
        race.notes.push_back(fmt::format(
            "the race ended after rung {} of {}: batch {} reached the target ({}) after {:.1f} s of training, and no "
            "other entry of the rung got there sooner (each trained to {:.1f} s); the rest would train past it",
            rung + 1, sizes.size(), lead.batch, race.target, *lead.target_s, horizon));
      alive = ranked;
      return true;
    }
    const size_t keep = rung + 1 < sizes.size() ? static_cast<size_t>(sizes[rung + 1]) : ranked.size();
    alive.assign(ranked.begin(), ranked.begin() + std::min(keep, ranked.size()));
    for (size_t i = 0; i < entries.size(); ++i)  // the dropped keep their last figures
      if (std::find(alive.begin(), alive.end(), i) == alive.end()) entries[i].state.reset();
    return false;
  }
};

}  // namespace

double race_overhead_s(const BatchRaceOptions& o, int64_t held_out_size, const std::function<double(int64_t)>& step_s) {
  double range_tests = 0;
  for (int64_t b : o.batches()) range_tests += o.lr().steps() * step_s(b);
  double evaluations = 1;
  for (int entries : rung_sizes(static_cast<int>(o.batches().size()))) evaluations += entries * o.evaluations();
  const double evaluation = static_cast<double>(held_out_size) / 1024 * step_s(1024) / 3;
  return range_tests + evaluations * evaluation;
}

BatchRace race_batches(ModuleWorkload& w, const Dataset& held_out, const BatchRaceOptions& o) {
  check_options(held_out, o);
  detail::probe_held_out(w, held_out);
  RaceClock clock;
  clock.read = o.clock();
  clock.start = clock.now();
  clock.epoch = w.data().size();
  const StateGuard restore(w);  // weights, optimizer (its learning rate too), data order
  const std::unique_ptr<WorkloadState> initial = w.save_state();
  BatchRace race;
  race.held_out = fmt::format("{} samples of {}", held_out.size(), held_out.name);
  race.on_training_data = held_out.training_sample;
  const Probe before = probe(w, held_out);
  race.loss_before = before.loss;
  race.accuracy_before = before.accuracy;
  const HeldOutTarget target = race_target(o, race);
  const std::vector<Candidate> kept = plan_candidates(o, race);
  if (kept.empty()) {
    race.wall_s = clock.since_start();
    return race;
  }
  RaceRun run(w, held_out, o, *initial, clock, race, target, kept);
  for (size_t rung = 0; rung < run.sizes.size() && !run.alive.empty(); ++rung) {
    if (rung > 0 && run.out_of_wall_time(rung)) break;
    run.train_rung(rung);
    if (run.cut_short) break;  // within the rung: its horizon was not reached
    race.horizons_s.push_back(run.horizon);
    race.planned_horizons_s.push_back((rung > 0 ? race.planned_horizons_s.back() : 0) + run.planned_slice(rung));
    if (run.rank(rung)) break;
  }
  decide(race, run.entries, run.alive, run.cut_short, run.horizon);
  race.stopped_at_wall_limit = run.cut_short || run.hit_wall_limit;
  for (auto& live : run.entries)
    if (!live.untrained) race.entries.push_back(std::move(live.entry));
  std::sort(race.entries.begin(), race.entries.end(), [](const auto& a, const auto& b) { return a.batch < b.batch; });
  race.wall_s = clock.since_start();
  return race;
}

}  // namespace batchwise

// The recommendation's confidence: how sure the answer is, from what it rests on (a validation, the
// run race, the batch race, or the sweep alone), and what would make it surer (with_confidence).
#include "batchwise/recommend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "batchwise/sweep.h"
#include "batchwise/units.h"

namespace batchwise {

const char* to_string(Confidence c) {
  switch (c) {
    case Confidence::High:
      return "high";
    case Confidence::Medium:
      return "medium";
    case Confidence::Low:
      return "low";
  }
  return "low";
}

namespace {

struct Assessed {
  Confidence level;
  std::string reason;
};

// From a validation: the candidates trained in full (or to the target).
Assessed from_validation(const ValidationResult& v, int64_t batch) {
  const std::string how = v.epochs > 0 ? "full runs of " + format_epochs(v.epochs) : "training to " + v.target;
  if (!v.fastest_batch && v.epochs > 0 && v.any_fixed_run_finished())
    return {Confidence::Low,
            fmt::format("the validation's {} left the plateau at the start at none of its fixed batches, so nothing "
                        "checked the answer; a longer --epochs trains past it",
                        how)};
  if (!v.fastest_batch)
    return {Confidence::Low, fmt::format("the validation's {} finished none of its candidates, so nothing checked the "
                                         "answer; give a reachable target or more --max-epochs",
                                         how)};
  if (*v.fastest_batch != batch)  // a batch-size schedule's saving is reported beside it, never the answer
    return {Confidence::Medium,
            fmt::format("validated by {}, but batch {} was the fastest there", how, *v.fastest_batch)};
  int64_t smallest = 0;  // the smallest fixed batch trained
  for (const auto& r : v.runs)
    if (r.schedule.empty() && (smallest == 0 || r.batch < smallest)) smallest = r.batch;
  if (v.epochs > 0 && v.best_batch == smallest && smallest > 1) {
    std::vector<int64_t> below{std::max<int64_t>(1, smallest / 4), smallest / 2, smallest};
    below.erase(std::unique(below.begin(), below.end()), below.end());
    return {Confidence::Medium,
            fmt::format("validated by {}, but the best final quality was at batch {}, the smallest trained: a smaller "
                        "batch may end better still (`batchwise validate --batch-sizes {} --epochs {:g} --lr-schedule "
                        "{} --extend-below 2` says)",
                        how, smallest, fmt::join(below, ","), v.epochs, v.lr_schedule)};
  }
  return {Confidence::High, fmt::format("validated: {} trained it and its neighbours, and it was the fastest{}", how,
                                        v.epochs > 0 ? " without a worse model" : "")};
}

// The --advice-budget that trains a race `factor` times longer than one that took `wall_s`: about
// its wall time that many times over (its fixed costs, the range tests, do not grow with it, which
// leaves room), up to a whole 10 s; "a larger --advice-budget" where the race's wall time is not known.
// `shared_s`: the time it took where that was more, sharing the CPU.
std::string larger_budget(double wall_s, double factor, double shared_s = 0) {
  if (!(wall_s > 0) || !(factor > 1) || !std::isfinite(factor)) return "a larger --advice-budget";
  return fmt::format("--advice-budget {:.0f} (about {:.3g}x this race's {:.0f} s{})",
                     std::ceil(wall_s * factor / 10) * 10, factor, wall_s,
                     shared_s > wall_s ? fmt::format(" on its own: it took {:.0f} s sharing the CPU", shared_s) : "");
}

// The run race's wall time as this machine takes it alone: less the share its threads waited for a core
// where it shared the CPU (an --advice-budget from its whole time had asked 4.6x a race slowed 9x by another
// process's work).
double quiet_wall_s(const RunRace& race) {
  const double waited = race.cpu_wait_share && *race.cpu_wait_share > kSharedCpuShare ? *race.cpu_wait_share : 0;
  return race.wall_s * (1 - waited);
}

// The run race's compressed runs snap to a grid of steps that may cost a third of their budget
// (on_step_grid): a budget this much larger still sees what it is asked to.
constexpr double kStepGridMargin = 1.5;

// From the run race (tune --epochs): a prediction for the user's run from compressed runs; low
// where its gaps were carried over more than kFarthestCarry doublings (the race saw less than an
// eighth of the run: lenet's 15 epochs from 0.4, where 64-256's gaps had not begun to shrink and
// its full runs end level).
constexpr double kFarthestCarry = 3;

Assessed from_run_race(const RunRace& race) {
  std::vector<int64_t> good;
  for (const auto& e : race.entries)
    if (e.good) good.push_back(e.batch);
  const std::vector<int64_t> unjudged = past_wall_limit(race);
  if (race.stopped_at_wall_limit)
    return {
        Confidence::Low,
        fmt::format("the run race stopped at its wall limit (the machine trained far slower than the sweep "
                    "measured) {} (no worse: {}); tune again on a quiet machine, or --validate trains the full runs",
                    unjudged.empty() ? "before it raced on to check its answer"
                                     : fmt::format("before it judged {}", fmt::join(unjudged, ", ")),
                    fmt::join(good, ", "))};
  const std::string judged =
      fmt::format("{} judged no worse: {}", good.size() == 1 ? "one batch" : fmt::format("{} batches", good.size()),
                  fmt::join(good, ", "));
  const double seen = race.lengths_epochs.empty() ? 0 : race.lengths_epochs.back();
  const double doublings = seen > 0 ? std::log2(race.epochs / seen) : 0;  // carried past the longest run
  if (doublings > kFarthestCarry)
    return {Confidence::Low,
            fmt::format("predicted for your {:g}-epoch run from compressed runs of at most {} ({:.1f} % of "
                        "it): each batch's gap was carried over {:.1f} doublings of the run ({}); {} sees an eighth of "
                        "it, and --validate trains the full runs",
                        race.epochs, format_epochs(seen, 2), 100 * seen / race.epochs, doublings, judged,
                        larger_budget(quiet_wall_s(race),
                                      kStepGridMargin * race.epochs / std::exp2(kFarthestCarry) / seen, race.wall_s))};
  if (race.whole_run())  // its longest run was the user's: measured, one run a batch, one seed
    return {Confidence::Medium,
            fmt::format("measured, not predicted: each batch trained your whole {:g}-epoch run once from your weights "
                        "({}), so one seed's spread is not in it; `batchwise validate --epochs {:g} --lr-schedule {} "
                        "--batch-sizes {} --seed S` with another seed trains them again from other weights",
                        race.epochs, judged, race.epochs, race.lr_schedule, fmt::join(good, ","))};
  return {Confidence::Medium,
          fmt::format("predicted for your {:g}-epoch run from compressed runs ({}), not trained in full; --validate "
                      "trains the candidates' full runs to check it",
                      race.epochs, judged)};
}

// From the batch race: resolved or within noise, and for how long a run.
Assessed from_race(const BatchRace& race) {
  const double epochs = race.rung_leads.empty() ? 0 : race.rung_leads.back().epochs;
  if (race.stopped_at_wall_limit)
    return {Confidence::Low,
            fmt::format("the race stopped at its wall limit (the machine trained far slower than the sweep "
                        "measured){}, so batch {} is the best of what it had trained, about {}; tune "
                        "again on a quiet machine",
                        race.left_out.empty() ? ""
                                              : fmt::format("; left out: {} {} (its notes say why)",
                                                            race.left_out.size() > 1 ? "batches" : "batch",
                                                            fmt::join(race.left_out, ", ")),
                        *race.best_batch, format_epochs(epochs, 2))};
  // Every candidate ended worse than where all began (the lead's loss is the lowest): it had left the
  // start on the way (a dip 2 % below it), so the race ranked them, but it ranked the least worse.
  if (!race.rung_leads.empty() && race.loss_before > 0 && race.rung_leads.back().loss > race.loss_before)
    return {
        Confidence::Low,
        fmt::format("every candidate's held-out loss ended above the {:.4g} all began at (the lead's {:.4g}): their "
                    "models got worse over the race (a rate that diverges, or overfitting), so batch {} is the "
                    "least worse, not a good one; lower the base --lr, or check with --validate",
                    race.loss_before, race.rung_leads.back().loss, *race.best_batch)};
  // A race behind its planned wall time fits its later rungs to what is left, down to a few steps
  // each: a lenet race stopped for 95 s trained its rungs 2 and 3 for 0.09 and 0.05 s per entry
  // instead of 2.2 and 4.4 s, and ranked there.
  if (const size_t n = race.horizons_s.size();
      n > 0 && race.planned_horizons_s.size() == n && race.horizons_s.back() < 0.5 * race.planned_horizons_s.back())
    return {Confidence::Low,
            fmt::format("the race fell behind its planned wall time and fitted its later rungs to what was left, so "
                        "batch {} leads after {:.3g} s of training per candidate, not the {:.3g} s planned (its notes "
                        "say where); tune again on a quiet machine, or give the race a larger --advice-budget",
                        *race.best_batch, race.horizons_s.back(), race.planned_horizons_s.back())};
  if (epochs < 0.1)
    return {Confidence::Low,
            fmt::format("the race trained each candidate for {}, the first minutes of a run, and its lead "
                        "may not hold for longer; {} trains them for 0.1 epochs, or --epochs N answers for your run",
                        format_epochs(epochs, 2), larger_budget(race.wall_s, 0.1 / epochs))};
  // The pick is the largest batch raced, and larger candidates were left out before the first rung (too
  // few steps fitted it): no larger batch was compared, so the lead is not known to be the best (a
  // race of 16 and 32 picked 32 as "resolved", where the same tune with 64 raced picked 64).
  std::vector<int64_t> larger;
  for (const int64_t b : race.left_out)
    if (b > *race.best_batch) larger.push_back(b);
  const bool at_the_top = std::none_of(race.entries.begin(), race.entries.end(),
                                       [&](const RaceEntry& e) { return e.batch > *race.best_batch && e.rungs > 0; });
  if (!larger.empty() && at_the_top)
    return {Confidence::Medium,
            fmt::format("measured among the batches the race trained, but batch {} is the largest of them: {} {} {} "
                        "left out before its first rung (too few steps fitted it; its notes say why), so no larger "
                        "batch was compared; a larger --advice-budget races {} too",
                        *race.best_batch, larger.size() > 1 ? "batches" : "batch", fmt::join(larger, ", "),
                        larger.size() > 1 ? "were" : "was", larger.size() > 1 ? "them" : "it")};
  if (race.within_5_percent.size() > 1)
    return {Confidence::Medium,
            fmt::format("measured, but within the race's noise of batches {}: any of them trains about as fast, for "
                        "about {}; --epochs N answers for your run's length",
                        fmt::join(race.within_5_percent, ", "), format_epochs(epochs, 2))};
  if (epochs < 1)
    return {Confidence::Medium, fmt::format("measured and resolved, but for about {} of training; --epochs N "
                                            "answers for your run's length",
                                            format_epochs(epochs, 2))};
  return {Confidence::High, fmt::format("measured and resolved over {} of training", format_epochs(epochs, 2))};
}

}  // namespace

namespace {

// A command that printed no step line was timed by its whole run, start-up and imports in it: nothing says it
// trained, and no figure of it is a step's (an answer had rested on a script that only slept, "confidence low" for
// the race it could not run, without a word of it). Empty where every batch that trained printed its steps.
std::string wall_timed(const SweepResult& sweep) {
  std::vector<int64_t> wall;
  for (const Trial& t : sweep.points)
    if (t.wall_timing && t.outcome == Outcome::Ok) wall.push_back(t.batch);
  const auto ok =
      std::count_if(sweep.points.begin(), sweep.points.end(), [](const Trial& t) { return t.outcome == Outcome::Ok; });
  if (wall.empty()) return "";
  if (static_cast<long>(wall.size()) == ok)
    return "; and no batch of the sweep printed a step line, so each was timed by its whole run (start-up and imports "
           "in it) and nothing says it trained: print `batchwise: step` lines (docs/cmd.md)";
  const bool many = wall.size() > 1;
  return fmt::format(
      "; and batch{} {} printed no step line, so {} timed by {} whole run (start-up and imports in it) and nothing "
      "says {} trained: print `batchwise: step` lines (docs/cmd.md)",
      many ? "es" : "", fmt::join(wall, ", "), many ? "they were" : "it was", many ? "their" : "its",
      many ? "they" : "it");
}

}  // namespace

Recommendation with_confidence(Recommendation rec, const Evidence& e) {
  Assessed a{Confidence::Low, ""};
  // A validation stopped before its runs ended (a Ctrl-C) checked nothing: the answer is the races'.
  const ValidationResult* checked = e.validation && !e.validation->interrupted ? e.validation : nullptr;
  if (checked)
    a = from_validation(*checked, rec.batch);
  else if (e.run_race && e.run_race->best_batch)
    a = from_run_race(*e.run_race);
  else if (e.run_race && e.race && e.race->best_batch)  // the batch race after a run race that saw no learning
    a = {Confidence::Low,
         fmt::format("the run race's compressed runs never left the plateau at the start, so batch {} is the batch "
                     "race's: the one that left it first at a constant rate, not judged on your run's final model; "
                     "check it with --validate",
                     *e.race->best_batch)};
  else if (e.race && e.race->best_batch)
    a = from_race(*e.race);
  else if (e.race && e.race->stuck)
    a = {Confidence::Low,
         fmt::format("no race saw a batch leave the plateau at the start, so batch {} is the plateau's answer (the "
                     "smallest batch the race trained longest), not a measured ranking: check it with --validate, "
                     "or train the races longer with a larger --advice-budget",
                     rec.batch)};
  else if (e.run_race && e.run_race->stopped_at_wall_limit)
    a = {Confidence::Low,
         fmt::format("the run race stopped at its wall limit before its reference's runs finished (the machine "
                     "trained far slower than the sweep measured), so the answer is {}; tune again on a quiet machine",
                     e.goodput ? "the noise scale's goodput" : "the throughput knee")};
  else if (e.race && e.race->ended_worse)
    a = {Confidence::Low,
         fmt::format("every candidate of the batch race ended worse than the initial weights (its notes say by how "
                     "much), so the answer is {}, which no training progress supports: lower --lr, or check the data",
                     e.goodput ? "the noise scale's goodput" : "the throughput knee")};
  else if (e.race || e.run_race)
    a = {Confidence::Low,
         fmt::format("the {} could not rank its candidates (its notes say why), so the answer is {}; a "
                     "larger --advice-budget trains them longer",
                     e.run_race ? "run race" : "batch race",
                     e.goodput ? "the noise scale's goodput" : "the throughput knee")};
  else if (e.goodput)
    a = {Confidence::Medium,
         fmt::format("from the noise scale's goodput, a model of training progress, not progress measured ({} ran no "
                     "race)",
                     e.no_race_reason.empty() ? "this run" : e.no_race_reason)};
  else
    a = {Confidence::Low, fmt::format("throughput alone: no training progress was compared ({}), and the fastest batch "
                                      "per sample is not the one that trains soonest",
                                      e.no_race_reason.empty() ? "no race ran" : e.no_race_reason)};
  const bool the_knee =
      !checked && !(e.run_race && e.run_race->best_batch) && !(e.race && e.race->best_batch) && !e.goodput;
  if (the_knee && e.sweep && !e.sweep->unsettled.empty()) {  // the answer is the knee, and the knee is noise's
    a.level = Confidence::Low;
    a.reason += fmt::format(
        "; and the sweep's figures at {} are noise's (its repetitions disagreed): run on a quiet "
        "machine",
        fmt::join(e.sweep->unsettled, ", "));
  }
  if (const std::string wall = e.sweep ? wall_timed(*e.sweep) : std::string(); !wall.empty())
    a.level = Confidence::Low, a.reason += wall;
  // A sweep that shared the CPU read its larger batches slower than they are (sweep.h): an answer not
  // validated rests on its figures, the candidates a race trained and the times it weighed them by.
  if (!checked && e.sweep && !e.sweep->shared_cpu_warning.empty()) {
    a.level = Confidence::Low;
    a.reason += fmt::format(
        "; and the sweep shared the CPU (its threads waited for a core {:.0f} % of the time they were ready to "
        "run), which skews its figures (on a CPU the larger batches read slower than they are) and with them the "
        "knee and the candidates{}",
        100 * cpu_wait_share(*e.sweep),
        a.reason.find("quiet machine") == std::string::npos ? ": tune again on a quiet machine" : "");
  }
  if (e.validation && e.validation->interrupted)  // the answer stands as the races gave it
    a.reason += "; the validation was stopped before all its runs ended, so it checked nothing";
  // A validation that shared the CPU timed its runs with another process's share in them, and its
  // times chose the fastest good batch (its final qualities are not skewed).
  if (const double most = checked ? most_cpu_wait_share(*checked) : 0;
      most > kSharedCpuShare && a.level != Confidence::Low) {
    a.level = Confidence::Low;
    a.reason += fmt::format(
        "; but the validation shared the CPU (a run's threads waited for a core {:.0f} % of the time they were ready "
        "to run), which skews the times that chose the fastest good batch: validate again on a quiet machine",
        100 * most);
  }
  rec.confidence = a.level;
  rec.confidence_reason = std::move(a.reason);
  return rec;
}

}  // namespace batchwise

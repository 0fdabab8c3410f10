// tune: fit, sweep, noise scale, goodput, the batch race or the run race, and the answer, in the
// order `batchwise tune` prints them; the follow-ups (loader search, validation, learning rate and
// run plan, precision comparison) are in follow_ups.cpp. Each stage is a function; tune() only
// sequences them. To add a stage: a function that reads what the report already holds and adds its
// own record, called from tune().
#include "batchwise/tune.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "batchwise/device.h"
#include "batchwise/doctor.h"
#include "batchwise/lr.h"
#include "batchwise/plan.h"
#include "batchwise/race.h"
#include "batchwise/recommend.h"
#include "batchwise/schedule.h"
#include "batchwise/time_plan.h"
#include "batchwise/units.h"
#include "check.h"
#include "torch_error.h"
#include "tune/answer_checks.h"
#include "tune/follow_ups.h"
#include "tune/laps.h"
#include "tune/race_entries.h"
#include "tune/race_time.h"
#include "tune/retime.h"
#include "tune/stages.h"

namespace batchwise {

namespace {

using namespace detail;

// Before a race, once: the plan stated again where what is left of it is far off the figure stated (restated_plan: a
// sweep that stopped sooner or went further than the fit's step times said, a machine that slowed), with its new end;
// and always before a batch race the plan did not count (`unplanned`: after a run race stuck on the plateau).
void restate_the_plan(const TuneOptions& o, Laps& laps, const char* race, double wall_s, double most_s,
                      bool unplanned = false) {
  if (!(laps.timing().expected_s > 0) || (!laps.first_restatement() && !unplanned)) return;
  const std::vector<PhaseTime> since = laps.since_plan();
  double on_top_s = 0;  // the profile's: not in the plan
  for (const PhaseTime& p : since) on_top_s += p.expected_s > 0 ? 0 : p.wall_s;
  TuneStage plan;
  const bool more = o.validate() || o.compare_precision();
  plan.what = unplanned ? unplanned_race_plan(wall_s, most_s, more)
                        : restated_plan(laps.timing().expected_s - laps.elapsed_s() + on_top_s, wall_s, most_s, since,
                                        laps.expected(race), more);
  plan.expected_s = wall_s;
  plan.plan = true;
  if (plan.what.empty()) return;
  laps.restated(laps.elapsed_s() + wall_s);
  if (o.on_stage()) o.on_stage()(plan);
}

// The phases this tune will run, as far as its options say (one may still find nothing to do), and
// the caller's on_stage wrapped to number them: "3 of 5" keeps its 5 however the run goes.
TuneOptions numbered_stages(TuneOptions o, bool reused_fit, bool noise, bool raced, bool validated, bool precisions) {
  if (!o.on_stage()) return o;
  std::vector<Phase> planned;
  if (!reused_fit) planned.push_back(Phase::Fit);
  planned.push_back(Phase::Sweep);
  if (noise) planned.push_back(Phase::Noise);
  if (raced) planned.push_back(Phase::Race);
  if (validated) planned.push_back(Phase::Validate);
  if (precisions) planned.push_back(Phase::Precision);
  return o.on_stage([user = o.on_stage(), planned](const TuneStage& t) {
    TuneStage numbered = t;
    if (t.phase < 0) {
      static constexpr const char* kNames[] = {"", "fit", "sweep", "noise", "race", "validation", "precisions"};
      numbered.name = kNames[-t.phase];
      const auto at = std::find(planned.begin(), planned.end(), static_cast<Phase>(-t.phase));
      numbered.phase = at == planned.end() ? 0 : static_cast<int>(at - planned.begin()) + 1;
      numbered.phases = static_cast<int>(planned.size());
    }
    user(numbered);
  });
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The fit (or the one reused), and the sweep of doublings up to it that follows: nothing when the
// fit found no batch.
std::optional<SweepOptions> fit_phase(TrialRunner& runner, const TuneOptions& o, int64_t dataset, Report& report,
                                      Laps& laps) {
  const FitOptions& f = o.fit();
  if (!o.reuse_fit())
    stage(o, Phase::Fit,
          fmt::format("fit: the largest batch from {} to {} within {:.0f} % of {} ({} mode)", f.min(), f.max(),
                      100 * f.target(), format_bytes(f.budget_bytes()), to_string(f.mode())));
  report.fit = o.reuse_fit() ? *o.reuse_fit() : fit(runner, f);
  laps("fit", !o.reuse_fit());
  if (report.fit->outcome != FitOutcome::Fits) return std::nullopt;
  SweepOptions s = o.sweep();
  // The batches the caller named are all swept; doublings tune chose stop where samples/s flattens.
  if (s.stop_after_flat() == 0) s.stop_after_flat(s.batch_sizes().empty() ? 3 : -1);  // < 0: never
  if (s.batch_sizes().empty()) {
    // Doublings of the smallest allowed batch (a multiple of --multiple-of) up to the fit, none larger
    // than the training set: such a batch repeats samples within a step, which no run does.
    const int64_t m = o.fit().multiple_of(), first = (o.fit().min() + m - 1) / m * m;
    s.batch_sizes(doublings(first, std::min(*report.fit->batch, std::max(first, dataset))));
  }
  if (s.budget_bytes() == 0) s.budget_bytes(report.fit->budget_bytes);
  return s;
}

// The sweep, and the knee's recommendation.
void sweep_phase(TrialRunner& runner, const TuneOptions& o, SweepOptions s, int64_t dataset, Report& report, Laps& laps,
                 double expected_s) {
  // fit_phase's doublings stopped below the fit at the training set
  const bool below =
      o.sweep().batch_sizes().empty() && dataset >= s.batch_sizes().front() && dataset < *report.fit->batch;
  stage(o, Phase::Sweep,
        fmt::format("sweep: samples/s at {} batch{} from {} to {}{}, {} repetition{} interleaved{}{}",
                    s.batch_sizes().size(), s.batch_sizes().size() == 1 ? "" : "es", s.batch_sizes().front(),
                    s.batch_sizes().back(), below ? fmt::format(" (none above the {} training samples)", dataset) : "",
                    s.repetitions(), s.repetitions() == 1 ? "" : "s",
                    s.stop_after_flat() > 0 ? ", stopping where it flattens" : "",
                    expected_s > 0 ? fmt::format(" (about {})", duration_text(expected_s)) : ""),
        expected_s);
  report.sweep = sweep(runner, s);
  laps("sweep");
  for (const std::string& w : report.sweep->warnings()) report.context.warnings.push_back(w);
  report.recommendation = recommend(report.fit, report.sweep);
}

// The noise scale's batch: the largest swept up to 1024 and no larger than the training set
// (`dataset`; a larger batch repeats samples, and its gradient is not one of B independent ones);
// its micro-batch about an eighth of it (one that divides it). {0, 0}: none (no batch of 2 or more).
std::pair<int64_t, int64_t> noise_batches(const std::vector<Trial>& points, int64_t dataset) {
  int64_t b = 0;
  for (const auto& p : points)
    if (p.outcome == Outcome::Ok && p.batch <= std::min<int64_t>(1024, dataset)) b = std::max(b, p.batch);
  if (b < 2) return {0, 0};
  int64_t micro = std::max<int64_t>(1, b / 8);
  while (b % micro != 0) --micro;
  return {b, micro};
}

// The noise scale at the largest batch swept (at most 1024), in micro-batches of about an eighth
// of it (those fit, being smaller than a batch that ran), and goodput from it.
void noise_and_goodput(const TuneSubject& subject, const TuneOptions& o, Report& report, Laps& laps) {
  if (subject.world_size > 1) {
    report.context.warnings.push_back(
        "no noise scale or goodput in a data-parallel run (the noise scale is the model's and the data's, not the "
        "devices'): measure it in one process with `batchwise noise`; the recommendation is the throughput knee");
    return;
  }
  if (fp16(subject)) {
    report.context.warnings.push_back(
        "no noise scale or goodput with --precision fp16 (its loss scaling is not "
        "supported there yet): the recommendation is the throughput knee");
    return;
  }
  const auto [b, micro] = noise_batches(report.sweep->points, training_samples(subject));
  if (b == 0) return;
  const double expected = noise_scale_seconds(step_cost(report.sweep->points), b, micro, o.noise_steps());
  laps.expect("noise scale", expected);
  stage(o, Phase::Noise,
        fmt::format("noise scale: {} training steps at batch {} in micro-batches of {} (about {})", o.noise_steps(), b,
                    micro, duration_text(expected)),
        expected);
  try {  // held to the budget, as every trial is
    report.noise = measure_noise_scale(
        *subject.workload,
        NoiseOptions().batch(b).micro_batch(micro).steps(o.noise_steps()).limit_bytes(report.budget_bytes));
  } catch (const ConfigError& e) {  // a Workload of the user's without the gradient primitives
    return report.context.warnings.push_back(fmt::format("no noise scale or goodput: {}", first_line(e.what())));
  } catch (const std::exception& e) {          // out of memory (the budget, ulimit -v, oneDNN's): the answer goes on
    if (!detail::ran_out_of_memory(e)) throw;  // anything else (the user's code, a device error, a stop) ends it
    const bool past = dynamic_cast<const c10::OutOfMemoryError*>(&e) && !detail::says_host_refused(e.what());
    return report.context.warnings.push_back(
        fmt::format("no noise scale or goodput: batch {} in micro-batches of {} {} the {} budget ({})", b, micro,
                    past ? "does not fit" : "could not allocate within", format_bytes(report.budget_bytes),
                    first_line(detail::plain_what(e))));
  }
  std::vector<int64_t> larger;  // goodput at the batches a run can train: a larger one repeats samples in a step
  report.goodput = goodput(within_dataset(report.sweep->points, training_samples(subject), larger), *report.noise);
  if (report.noise->b_simple && !report.goodput)
    report.context.warnings.push_back(fmt::format(
        "no goodput: the noise scale's band reaches infinity (over its {} steps the gradient could not be told from "
        "its noise: its squared norm within two standard errors of 0, or so with one step left out), so it cannot "
        "weigh the batches; more --noise-steps may narrow it",
        report.noise->steps));
}

// TuneSubject::held_out's default: the test split of the subject's dataset, read and checked once,
// by the first stage that needs it (the plan, the races and the validation each ask).
std::function<Dataset()> held_out_once(const TuneSubject& subject) {
  auto cache = std::make_shared<Dataset>();
  ModuleWorkload* w = module_of(subject);
  const WorkloadOptions options = subject.options.value_or(WorkloadOptions().dataset("none"));
  return [cache, w, options] {
    if (cache->size() == 0) {
      *cache = held_out_or_training_sample(options, w->data());
      check_held_out(*cache, *w);
    }
    return *cache;
  };
}

// The run race ran, and no reference of it left the plateau at the start (within its wall limit:
// one that passed it says the machine is slower than planned, and a batch race would be too).
bool run_race_stuck(const Report& report) {
  return report.run_race && report.run_race->reference_stuck && !report.run_race->stopped_at_wall_limit;
}

// The batch race: successive halving over the sweep's fast batches, each from the user's weights at its own advised
// rate, on held-out loss at equal training time; its rungs fitted to the wall time it states.
void race(const TuneSubject& subject, const TuneOptions& o, double spent_s, Report& report, Laps& laps) {
  ModuleWorkload* w = module_of(subject);
  // Held back: the two largest batches below the candidates, which race only when none of these
  // leaves the plateau at the start; after a run race stuck on it, they race from the first rung.
  std::vector<int64_t> larger;
  const std::vector<Trial> points = within_dataset(report.sweep->points, w->data().size(), larger);
  const detail::RaceEntries entries = detail::race_entries(points, run_race_stuck(report));
  const std::vector<int64_t>& candidates = entries.candidates;
  if (candidates.size() < 2) {
    if (!larger.empty()) report.context.warnings.push_back(larger_than_dataset_note(larger, w->data().size()));
    if (run_race_stuck(report))  // its warning said a batch race follows
      report.context.warnings.push_back(fmt::format(
          "no batch race followed the run race: the sweep has {} to race; the recommendation falls back to the "
          "noise scale's goodput and the throughput knee",
          candidates.empty() ? "no batch" : "one batch only"));
    return;
  }
  const std::vector<double> rates = race_rates(points, candidates);
  const Dataset test = head(subject.held_out(), 2048);
  const RaceTime t =
      race_time(o, report, points, step_cost(report.sweep->points), spent_s, w->data().size(), test.size());
  restate_the_plan(o, laps, "race", t.wall_s, batch_race_most_s(t), run_race_stuck(report));
  laps.expect("race", t.wall_s);
  const BatchRaceOptions race_options = batch_race_options(o, report, candidates, rates)
                                            .budget_s(t.train_s)
                                            // --advice-budget is kept to; the default only to the most stated
                                            // (twice the training over a plateau): a guess is not worth evidence
                                            .wall_budget_s(o.race_budget_s() > 0 ? t.wall_s : t.wall_s + t.train_s)
                                            .max_wall_s(batch_race_most_s(t))
                                            .target_accuracy(o.target_accuracy())
                                            .target_loss(o.target_loss())
                                            .reserve(entries.reserve)
                                            .reserve_samples_per_s(race_rates(points, entries.reserve))
                                            .on_progress(o.on_race());
  // The batches its first rung trains, as it will: one that fits too few steps there is left out (a note says so)
  const std::vector<int64_t> first = first_rung_batches(race_options);
  std::vector<int64_t> out;
  for (const int64_t b : candidates)
    if (std::count(first.begin(), first.end(), b) == 0) out.push_back(b);
  const std::string over =
      first.empty() ? fmt::format("none of {} (each fits too few steps in the first rung)", fmt::join(out, ", "))
      : out.empty() ? fmt::format("{}", fmt::join(first, ", "))
                    : fmt::format("{} ({} left out: too few steps in the first rung)", fmt::join(first, ", "),
                                  fmt::join(out, ", "));
  stage(o, Phase::Race,
        fmt::format("batch race over {}: {} of training in rungs of successive halving (about {} with its range "
                    "tests and evaluations)",
                    over, format_seconds(t.train_s), duration_text(t.wall_s)),
        t.wall_s);
  report.race = race_batches(*w, test, race_options);
  if (!larger.empty()) report.race->notes.push_back(larger_than_dataset_note(larger, w->data().size()));
  if (!entries.early.empty())
    report.race->notes.insert(report.race->notes.begin(),
                              fmt::format("the reserve {} raced from the first rung: the run race's compressed runs, "
                                          "longer than this rung, never left the plateau at the start",
                                          fmt::join(entries.early, ", ")));
  if (report.race->stopped_at_wall_limit)
    report.context.warnings.push_back(wall_limit_warning(
        "the batch race", 0,  // a plateau may have raised its limit: the note says where it stood
        report.race->best_batch ? "it trained less than planned (its notes say where it stopped), and its answer is "
                                  "the best of what it had"
                                : "it trained less than planned (its notes say where it stopped)"));
  if (report.race->entries.empty())
    report.context.warnings.push_back(fmt::format(
        "the batch race trained no batch: each of {} fits too few steps in its first rung; the recommendation falls "
        "back to the noise scale's goodput and the throughput knee",
        fmt::join(candidates, ", ")));
  if (!report.race->best_batch && !report.race->entries.empty())
    report.context.warnings.push_back(
        report.race->stuck
            ? "the batch race recommends no batch: no batch left the plateau at the start (its notes say so); the "
              "answer is the smallest batch it trained longest, with low confidence: check it with --validate"
            : "the batch race recommends no batch (its notes say why); the recommendation falls back to the noise "
              "scale's goodput and the throughput knee");
}

// The run race (--epochs): the smallest of the sweep's fast batches trains the user's schedule compressed to three
// fractions of the run, the others the longest of them; the noise scale along the way and the learning curve say which
// batch ends no worse, soonest. The same candidates and budget as the batch race.
void race_the_run(const TuneSubject& subject, const TuneOptions& o, double spent_s, Report& report, Laps& laps) {
  ModuleWorkload* w = module_of(subject);
  std::vector<int64_t> larger;
  const std::vector<Trial> points = within_dataset(report.sweep->points, w->data().size(), larger);
  const std::vector<int64_t> candidates = race_candidates(points);
  if (candidates.size() < 2) {
    if (!larger.empty()) report.context.warnings.push_back(larger_than_dataset_note(larger, w->data().size()));
    return;
  }
  const std::vector<double> rates = race_rates(points, candidates);
  const Dataset test = subject.held_out();
  const RaceTime t =
      run_race_time(o, report, points, step_cost(report.sweep->points), spent_s, w->data().size(), test.size());
  const double wall_limit_s = run_race_most_s(t);
  restate_the_plan(o, laps, "run race", t.wall_s, wall_limit_s);
  laps.expect("run race", t.wall_s);
  stage(o, Phase::Race,
        fmt::format("run race over {}: your {:g}-epoch {} run compressed three times at batch {} and twice at the "
                    "others, {} of training (about {} with its range tests, noise scales and evaluations; up to "
                    "{} more of training where it races again: faster batches longer, or smaller ones; up to "
                    "three times that where its reference stays on the plateau at the start; it stops at {} of "
                    "wall time, should the machine train slower than the sweep measured){}",
                    fmt::join(t.raced, ", "), o.epochs(), to_string(o.lr_schedule()), candidates.front(),
                    format_seconds(t.raced_train_s), duration_text(t.wall_s), format_seconds(t.train_s),
                    duration_text(wall_limit_s),
                    t.not_raced.empty() ? ""
                                        : fmt::format("; {} not raced: larger than the fastest by the sweep, and no "
                                                      "faster, so none could be the pick",
                                                      fmt::join(t.not_raced, ", "))),
        t.wall_s);
  // Held back, as in the batch race: the two largest batches below the candidates, which race only
  // when the reference never leaves the start, or trains the whole run and ends ahead of the rest.
  const std::vector<int64_t> reserve = race_reserve(points, candidates);
  report.run_race = race_runs(*w, test,
                              run_race_options(o, report, candidates, rates)
                                  .budget_s(t.train_s)
                                  .reserve(reserve)
                                  .reserve_samples_per_s(race_rates(points, reserve))
                                  .on_progress(o.on_run_race())
                                  .on_step([&o](const RunRaceStep& p) {
                                    if (o.on_run_race()) o.on_run_race()(run_race_step_text(o.epochs(), p));
                                  })
                                  .on_round([&o](const std::string& why) {
                                    stage(o, Phase::Race, "run race: " + why);  // a line in every mode
                                  })
                                  .max_wall_s(wall_limit_s));
  if (!larger.empty()) report.run_race->notes.push_back(larger_than_dataset_note(larger, w->data().size()));
  if (report.run_race->stopped_at_wall_limit)
    report.context.warnings.push_back(wall_limit_warning(
        "the run race", wall_limit_s,
        report.run_race->best_batch
            ? "the candidates it had not finished are not judged, and the answer is the best of those it had"
            : "its reference's runs did not finish, so the recommendation falls back to the noise scale's goodput and "
              "the throughput knee"));
  else if (!report.run_race->best_batch && !report.run_race->reference_diverged)  // nothing_trained's warning
    report.context.warnings.push_back(
        report.run_race->plateau_round_failed
            ? "the run race recommends no batch: its reference's compressed runs did not leave the plateau at the "
              "start, and then failed run longer (its notes say how); the batch race follows, to find the batch that "
              "leaves the plateau first, and answers with low confidence: check it with --validate"
        : report.run_race->reference_stuck
            ? "the run race recommends no batch: no reference's compressed runs left the plateau at the start (its "
              "notes say so); the batch race follows, to find the batch that leaves it first, and answers with low "
              "confidence: check it with --validate"
            : "the run race recommends no batch (its notes say why); the recommendation falls back to the noise "
              "scale's goodput and the throughput knee");
}

// The context, workload and budget the caller left empty.
void fill_context(const TuneSubject& subject, const TuneOptions& o, Report& report) {
  if (report.context.batchwise_version.empty())
    report.context = make_context(subject.workload && subject.workload->device().is_cuda()
                                      ? resolve_device(subject.workload->device().str())
                                      : DeviceSpec{});
  if (report.context.device_total_bytes == 0) report.context.device_total_bytes = subject.runner->device_total_bytes();
  if (report.workload.model.empty()) report.workload = subject.runner->info();
  if (report.budget_bytes == 0)
    report.budget_bytes = o.fit().budget_bytes() > 0 ? o.fit().budget_bytes() : subject.runner->default_budget_bytes();
  report.target = o.fit().target();
}

// What the recommendation rests on, for its confidence.
Evidence evidence(const TuneSubject& subject, const TuneOptions& o, const Report& report) {
  Evidence e;
  e.sweep = report.sweep ? &*report.sweep : nullptr;
  e.race = report.race ? &*report.race : nullptr;
  e.run_race = report.run_race ? &*report.run_race : nullptr;
  e.validation = report.validation ? &*report.validation : nullptr;
  e.goodput = report.goodput && report.goodput->best_batch && report.noise && report.noise->b_simple;
  e.no_race_reason = !o.race()                ? "--no-race"
                     : !module_of(subject)    ? "a training command, which batchwise cannot race"
                     : subject.world_size > 1 ? "data-parallel ranks"
                     : fp16(subject)          ? "--precision fp16"
                                              : "fewer than 2 candidates to race";
  return e;
}

// Once the fit has timed the steps: what the rest of tune should take (the sweep of `s` as far as
// the step times say it goes, the noise scale and the race on the points they predict), stated on
// one line and kept for the report's timing. The sweep counts its time left from the same figures.
// Validation and the precision comparison are not in it: the line says they come on top.
SweepOptions state_the_plan(const TuneSubject& subject, const TuneOptions& o, SweepOptions s, const Report& report,
                            bool noise, bool raced, Laps& laps) {
  const StepCost cost = step_cost(report.fit->trials);
  if (cost.empty()) return s;
  const int warmup = s.warmup(), steps = s.steps();
  const double min_time = subject.runner->runs_steps_exactly() ? 0 : s.min_time_s();  // ranks, a command: --steps
  const auto trial_s = [cost, warmup, steps, min_time](int64_t b) {
    return sweep_trial_seconds(cost, b, warmup, steps, min_time);
  };
  s.expected_trial_s(trial_s);
  // Likely: as far as the step times say samples/s rises; at most: every batch (the fit's few trials
  // cannot see every bump in the curve, and the sweep goes on while samples/s rises).
  const std::vector<int64_t> batches = expected_sweep_batches(cost, s);
  double sweep_s = 0, sweep_most_s = 0;
  for (int64_t b : batches) sweep_s += trial_s(b) * s.repetitions();
  for (int64_t b : s.batch_sizes()) sweep_most_s += trial_s(b) * s.repetitions();
  const std::vector<Trial> points = expected_points(cost, batches);
  double noise_s = 0;
  RaceTime race;
  if (noise) {
    const auto [b, micro] = noise_batches(points, training_samples(subject));
    if (b > 0) noise_s = noise_scale_seconds(cost, b, micro, o.noise_steps());
  }
  if (raced) {
    ModuleWorkload* w = module_of(subject);
    const double spent_s = laps.elapsed_s() + sweep_s + noise_s;
    std::vector<int64_t> larger;  // the races train only batches within the training set, as planned here
    const std::vector<Trial> raced_points = within_dataset(points, w->data().size(), larger);
    race = o.epochs() > 0
               ? run_race_time(o, report, raced_points, cost, spent_s, w->data().size(), subject.held_out().size())
               : race_time(o, report, raced_points, cost, spent_s, w->data().size(), subject.held_out().size());
  }
  // A batch race on the plateau at the start trains up to twice its budget (race.h); a run race whose
  // reference does not leave the start races its reserve for one more (run_race.h), then its runs
  // twice as long within kPlateauBudgets more of wall time (in place of the batch race, which follows only
  // where they give no answer); one with contested candidates runs them longer, within its budget.
  const double race_most_s = o.epochs() > 0 ? run_race_most_s(race) : batch_race_most_s(race);
  const double retime_s = o.epochs() > 0 ? kRetimeShare * race.wall_s : 0;  // at most: it stops at its budget
  laps.expect("sweep", sweep_s);
  if (race.wall_s > 0) laps.expect(o.epochs() > 0 ? "run race" : "race", race.wall_s);
  // The retiming is a ceiling (it often ends sooner, or has nothing close to time): in "at most" only.
  const double rest = sweep_s + noise_s + race.wall_s, most = sweep_most_s + noise_s + retime_s + race_most_s;
  laps.expect_total(laps.elapsed_s() + rest, laps.elapsed_s() + most);
  std::vector<std::string> parts{fmt::format("sweep {}", duration_text(sweep_s))};
  if (noise_s > 0) parts.push_back(fmt::format("noise scale {}", duration_text(noise_s)));
  if (retime_s > 0) parts.push_back(fmt::format("the close batches timed again, at most {}", duration_text(retime_s)));
  if (race.wall_s > 0)
    parts.push_back(fmt::format("{} {}", o.epochs() > 0 ? "run race" : "race", duration_text(race.wall_s)));
  const bool more = o.validate() || o.compare_precision();
  if (o.on_stage()) {
    TuneStage t;
    t.what = fmt::format("expected: about {} more, at most {} ({}; from the fit's step times{})", duration_text(rest),
                         duration_text(most), fmt::join(parts, ", "),
                         more ? "; the validation and the precision comparison come on top" : "");
    t.expected_s = rest;
    t.plan = true;
    o.on_stage()(t);
  }
  return s;
}

// The report as tune returns it: its phases' times, and what a pass could not put back said.
Report ended(const TuneSubject& subject, Laps& laps, Report report) {
  report.timing = laps.done();
  if (subject.workload)
    for (std::string& w : subject.workload->take_restore_failures()) report.context.warnings.push_back(std::move(w));
  return report;
}

}  // namespace

bool slowed_past_its_plan(const Report& report) {
  if ((report.run_race && report.run_race->stopped_at_wall_limit) ||
      (report.race && report.race->stopped_at_wall_limit))
    return true;
  if (!report.timing || report.timing->at_most_s <= 0) return false;
  // The phases the most stated counts (state_the_plan): those timed before it (the doctor, the fit)
  // and those it stated a figure for; the rest (the profile, the loader search, the validation, the
  // learning rate, the precision comparison) come on top of it.
  double planned_s = 0;
  bool stated = false;
  for (const PhaseTime& p : report.timing->phases) {
    stated = stated || p.expected_s > 0;
    if (!stated || p.expected_s > 0) planned_s += p.wall_s;
  }
  return planned_s > 2 * report.timing->at_most_s + kFixedCostSlackS;
}

Report tune(TuneSubject subject, const TuneOptions& o, Report report) {
  BATCHWISE_CHECK(subject.runner != nullptr, ConfigError, "tune: no trial runner");
  const auto start = Clock::now();
  Laps laps(start, o.should_stop());
  fill_context(subject, o, report);
  check_the_ask(o, report.workload.dataset_size);
  if (!subject.held_out && module_of(subject)) subject.held_out = held_out_once(subject);
  const bool own_step = subject.workload != nullptr;  // batchwise trains the model itself
  if (o.doctor() && own_step && subject.world_size == 1) {
    // The doctor's warnings first: a slow BLAS or too few threads distort every figure that follows.
    // Not for data-parallel ranks, which share the cores by design.
    for (const auto& w : run_doctor(DoctorOptions().gemm(report.context.device_type != "cuda")).warnings()) {
      if (w.check == "threads") drop_own_threads_warning(report.context);  // the doctor's says it, with its fix
      stage(o, fmt::format("doctor: warning: {}\n  fix: {}", w.detail, w.fix));
      report.context.warnings.push_back(fmt::format("doctor: {} (fix: {})", w.detail, w.fix));
    }
    laps("doctor");
  }
  FitOptions f = o.fit();
  const bool raced = o.race() && module_of(subject) && subject.world_size == 1 && !fp16(subject);
  const bool noise = o.noise() && own_step && subject.world_size == 1 && !fp16(subject);
  const bool precisions = o.compare_precision() && subject.options && subject.release && subject.world_size == 1;
  TuneOptions options =
      numbered_stages(o, o.reuse_fit().has_value(), noise, raced, o.validate() && module_of(subject), precisions);
  options.fit(f.budget_bytes(report.budget_bytes));
  std::optional<SweepOptions> sweep_options =
      fit_phase(*subject.runner, options, training_samples(subject), report, laps);
  if (!sweep_options) return ended(subject, laps, std::move(report));
  sweep_options = state_the_plan(subject, options, *sweep_options, report, noise, raced, laps);
  sweep_phase(*subject.runner, options, *sweep_options, training_samples(subject), report, laps,
              laps.expected("sweep"));
  if (o.profile() && own_step)
    report.step_profile = profile_sweep(*subject.workload, *report.sweep, report.context.warnings);
  laps("profile", !report.step_profile.empty());
  if (o.noise() && own_step) noise_and_goodput(subject, options, report, laps);
  laps("noise scale", report.noise.has_value());
  const double spent_s = seconds_since(start);  // the race's budget follows it, not the retiming's
  if (raced && o.epochs() > 0) {
    if (std::string w = retime_close(*subject.runner, *sweep_options, *report.sweep, training_samples(subject),
                                     kRetimeShare * laps.expected("run race"),
                                     [&](const std::string& l) { stage(options, Phase::Race, l); });
        !w.empty())
      report.context.warnings.push_back(std::move(w));
    laps("retiming", !report.sweep->retimed.empty());
    race_the_run(subject, options, spent_s, report, laps);
    laps("run race", report.run_race.has_value());
    // No reference of the run race left the start: the batch race, at a constant rate, trains on over the plateau and
    // finds which batch leaves it first, the one fact there is to go on; the reserve races from its first rung.
    if (run_race_stuck(report)) race(subject, options, spent_s, report, laps);
    laps("race", report.race.has_value());
  } else {
    if (raced) race(subject, options, spent_s, report, laps);
    laps("race", report.race.has_value());
  }
  if ((report.race || report.run_race) && subject.held_out().training_sample)  // the CLI's --epochs refuses it
    report.context.warnings.push_back(fmt::format(
        "the {} judged on a sample of the training data ({} has no test split): it measured how fast each batch fits "
        "the data, not held-out quality; give a test split (--held-out-split 0.1 or --test-data-file; in Python, "
        "held_out=...)",
        report.run_race ? "run race" : "batch race", module_of(subject)->data().name));
  if (o.epochs() > 0 && !report.run_race && (!report.sweep || report.sweep->knee_batch))  // else none trained: said
    report.context.warnings.push_back(
        "--epochs was not used to choose the batch: only the run race uses it for that, and none ran (--no-race, a "
        "training command, data-parallel ranks, fp16, or fewer than 2 candidates)");
  if ((o.target_accuracy() > 0 || o.target_loss() > 0) && !report.race && !o.validate() &&
      (!report.sweep || report.sweep->knee_batch))  // else no batch trained: the sweep's warning says why
    report.context.warnings.push_back(
        "the target was not used: without --validate only the batch race uses it, and no race ran (--no-race, a "
        "training command, data-parallel ranks, fp16, or fewer than 2 candidates)");
  report.recommendation =
      report.run_race && report.run_race->reference_diverged ? std::nullopt  // its rate diverged (nothing_trained)
      : report.run_race && report.run_race->best_batch       ? recommend(*report.run_race)
      : report.race && report.race->best_batch
          ? recommend(report.fit, report.sweep, *report.race, run_race_stuck(report) ? o.epochs() : 0)
      // Nothing left the plateau: the noise scale at the initial weights says nothing about leaving it
      : report.race && report.race->stuck
          ? recommend_on_the_plateau(*report.race, run_race_stuck(report) ? o.epochs() : 0)
          : recommend(report.fit, report.sweep, report.noise, report.goodput, training_samples(subject));
  if (!report.recommendation) return ended(subject, laps, std::move(report));
  const int64_t dataset = module_of(subject) ? module_of(subject)->data().size() : 0;  // a command's: its own
  const bool judged = (report.race && report.race->best_batch) || (report.run_race && report.run_race->best_batch);
  for (std::string& w :
       answer_size_warnings(report.recommendation->batch, dataset, o.epochs(), judged ? subject.held_out().size() : 0))
    report.context.warnings.push_back(std::move(w));
  if (std::string w = report.sweep ? diverged_beside_warning(*report.sweep, report.recommendation->batch) : "";
      !judged && !w.empty())
    report.context.warnings.push_back(std::move(w));
  if (subject.world_size > 1)
    report.recommendation->reason += fmt::format("; batches are per device: the global batch is {} over {} ranks",
                                                 report.recommendation->batch * subject.world_size, subject.world_size);
  if (o.loader_search() && module_of(subject)) follow_loader(subject, options, report);
  laps("loader", report.loader.has_value());
  if (o.validate() && module_of(subject)) validate_around(subject, options, report);
  laps("validation", report.validation.has_value());
  report.recommendation = with_confidence(*report.recommendation, evidence(subject, o, report));
  learning_rate(subject, options, report);
  plan_the_run(subject, options, report);
  laps("learning rate", report.lr.has_value());
  const bool stopped = stop_asked(o, report);
  if (precisions && stopped)
    report.context.warnings.push_back(
        "the precisions were not compared: a stop was asked in the validation before them");
  if (precisions && !stopped) compare_precisions(subject, options, report);
  laps("precisions", precisions && !stopped);
  return ended(subject, laps, std::move(report));
}

}  // namespace batchwise

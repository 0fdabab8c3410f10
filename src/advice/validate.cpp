// Time to a target metric at each candidate batch size: real training, held-out evaluation.
#include "batchwise/validate.h"

#include <ATen/ATen.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <tuple>

#include "advice/target.h"
#include "batchwise/schedule.h"
#include "batchwise/sweep.h"
#include "batchwise/units.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"
#include "check.h"
#include "engine/held_out_probe.h"
#include "engine/memory_limit.h"
#include "torch_error.h"

namespace batchwise {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool reached(const ValidateOptions& o, const ValidationPoint& p) {
  return HeldOutTarget{o.target_accuracy(), o.target_loss()}.met(p.loss, p.accuracy);
}

// The rate and warm-up a candidate trains with: advised as tune advises it, or the rule alone.
LrAdvice candidate_lr(ModuleWorkload& w, const ValidateOptions& o, double base_lr, int64_t batch) {
  if (o.measure_lr()) return advise_lr(w, batch, LrAdviceOptions(o.base_batch(), base_lr));
  LrAdvice a = unmeasured_lr(rule_optimizer(w.info()), o.base_batch(), base_lr, batch);
  // The rule's warm-up (5 epochs for linear scaling), capped so that a short validation still
  // trains most of its budget at the scaled rate.
  const double epochs = std::min<double>(a.scaled.warmup_epochs, (o.epochs() > 0 ? o.epochs() : o.max_epochs()) / 4);
  a.warmup_steps = static_cast<int64_t>(std::ceil(epochs * static_cast<double>(w.data().size()) / batch));
  a.warmup_from_lr = base_lr;
  a.warmup_epochs = epochs;
  return a;
}

// Thrown out of a run when ValidateOptions::should_stop says so; not an std::exception, so that no
// handler of a failed run takes it for one.
struct Stopped {};

void stop_if_asked(const ValidateOptions& o) {
  if (o.should_stop() && o.should_stop()()) throw Stopped{};
}

struct Race {  // what the candidates before this one achieved, for stop_slower_than and progress
  int index = 0, count = 0;
  std::optional<double> fastest_s;
  Clock::time_point start;
};

// Where a candidate's training stops: a full run's last step, or the target mode's limits.
struct Limits {
  int64_t max_samples = 0;
  int64_t total_steps = 0;  ///< full runs: the run's length in steps; 0: the target mode
  double slower_s = INFINITY;
};

// The progress report after an evaluation.
ValidateProgress progress(const ValidateOptions& o, const ValidationRun& run, const Race& race, const Limits& limits,
                          int64_t samples, int64_t epoch, double train_s) {
  ValidateProgress p;
  p.batch = run.batch;
  p.schedule = run.schedule;
  p.index = race.index;
  p.count = race.count;
  p.epochs = static_cast<double>(samples) / static_cast<double>(epoch);
  p.train_s = train_s;
  p.loss = run.curve.back().loss;
  p.accuracy = run.curve.back().accuracy;
  const double by_epochs = train_s / static_cast<double>(samples) * static_cast<double>(limits.max_samples - samples);
  const bool full = limits.total_steps > 0;
  p.limit_left_s =
      std::max(0.0, std::min({by_epochs, !full && o.max_seconds() > 0 ? o.max_seconds() - train_s : INFINITY,
                              limits.slower_s - train_s}));
  if (!full) p.target_left_s = time_to_target(run.curve, o.target_accuracy(), o.target_loss());
  p.elapsed_s = since(race.start);
  return p;
}

// A schedule's warm-up is its first phase's, and within that phase: one past the next phase's start had ramped on
// towards that phase's rate, jumping 5x at the change, and reported the first batch's steps, not those it took.
// At least one step where there is one (a second phase within the first step had left none).
void within_first_phase(ValidationRun& run, const std::vector<BatchPhase>& phases, int64_t epoch) {
  if (phases.size() < 2 || run.warmup_steps <= 0) return;
  const auto first_phase = static_cast<int64_t>(phases[1].from_epoch * static_cast<double>(epoch));
  run.warmup_steps = std::clamp<int64_t>(first_phase / phases[0].batch, 1, run.warmup_steps);
}

// How long a candidate trains, and its warm-up (set on `run`): a full run of --epochs (a schedule's
// in samples, its warm-up the one its first batch's own full run takes), or up to --max-epochs.
Limits run_limits(const ValidateOptions& o, ValidationRun& run, int64_t epoch, const Race& race, bool scheduled) {
  Limits limits;
  if (o.epochs() > 0) {
    limits.total_steps = run_steps(o.epochs(), epoch, run.batch);
    limits.max_samples = scheduled ? run_samples(o.epochs(), epoch) : limits.total_steps * run.batch;
    run.warmup_steps = run_warmup_steps(run.lr, limits.total_steps);
  } else {
    // Whole steps up to --max-epochs (at least one): a last step past it had given a batch larger than the data 3.2
    // epochs at --max-epochs 2, and each candidate up to a step more than the others
    const auto most = static_cast<int64_t>(std::ceil(o.max_epochs() * static_cast<double>(epoch)));
    limits.max_samples = std::max<int64_t>(1, most / run.batch) * run.batch;
    run.warmup_steps = run.lr.warmup_steps;
    if (o.stop_slower_than() > 0 && race.fastest_s) limits.slower_s = o.stop_slower_than() * *race.fastest_s;
  }
  return limits;
}

// One candidate: a fixed batch, or (`phases` not empty, full runs only) a batch-size schedule whose
// first phase's batch is `batch`, each phase at its batch's advised rate.
// The budget holds while it trains (its range tests too) and evaluates: the evaluation's batch is batchwise's, halved
// where the budget cannot hold it (it had been lifted, and a model past it at 1,024 samples took the machine's memory).
ValidationRun run_one(ModuleWorkload& w, const Dataset& probe, const Dataset& held_out, const ValidateOptions& o,
                      int64_t batch, const Race& race, const std::vector<BatchPhase>& phases = {}) {
  const detail::MemoryLimit limit(w, o.limit_bytes());
  ValidationRun run;
  run.batch = batch;
  const double base_lr = o.base_lr() > 0 ? o.base_lr() : w.info().lr;
  run.lr = candidate_lr(w, o, base_lr, batch);
  std::vector<LrAdvice> phase_lr;
  for (const auto& p : phases) phase_lr.push_back(p.batch == batch ? run.lr : candidate_lr(w, o, base_lr, p.batch));
  stop_if_asked(o);  // the range tests train too, for seconds
  const int64_t epoch = w.data().size();
  const bool full = o.epochs() > 0;
  if (full && !phases.empty()) {
    run.schedule = schedule_text(phases);
    for (const auto& a : phase_lr) run.phase_lrs.push_back(a.lr);
  }
  const Limits limits = run_limits(o, run, epoch, race, !phases.empty());
  within_first_phase(run, phases, epoch);
  const double warmup_samples = phases.empty() ? 0.0 : static_cast<double>(run.warmup_steps * batch);
  run.warmup_epochs = static_cast<double>(run.warmup_steps * batch) / static_cast<double>(epoch);
  const int64_t eval_every = o.eval_every_samples() > 0 ? o.eval_every_samples()
                             : full                     ? std::max<int64_t>(1, limits.max_samples / 10)
                                                        : std::max<int64_t>(1, epoch / 20);

  const std::optional<SchedulerTimes> before = w.device().is_cpu() ? scheduler_times() : std::nullopt;
  int64_t samples = 0, next_eval = eval_every;
  double train_s = 0;
  double lr_now = run.lr.lr;  // the phase's rate, for a message (a schedule's later phase has its own)
  while (true) {
    int64_t step_batch = batch;
    if (!phases.empty()) {  // the phase this step is in: its batch, its rate at this point of the run
      const double done = static_cast<double>(samples);
      const size_t k = &phase_at(phases, done / static_cast<double>(epoch)) - phases.data();
      step_batch = phases[k].batch;
      lr_now = phase_lr[k].lr;
      w.set_lr(phased_lr(phase_lr[k].lr, run.lr.warmup_from_lr, o.lr_schedule(), done, static_cast<double>(step_batch),
                         warmup_samples, static_cast<double>(limits.max_samples)));
    } else {
      w.set_lr(full ? scheduled_lr(run.lr, o.lr_schedule(), run.steps, limits.total_steps)
                    : lr_at_step(run.lr, run.steps));
    }
    const auto start = Clock::now();
    const Batch b = w.next_batch(step_batch);
    const double loss = w.train_step(b).item<double>();  // reading it waits for the device
    train_s += since(start);
    samples += step_batch;
    ++run.steps;
    if (samples < limits.max_samples) stop_if_asked(o);  // a run whose last step is done finishes
    if (!std::isfinite(loss)) {
      run.message = fmt::format("the training loss became {} after {} steps: this learning rate ({:.4g}) diverges",
                                std::isnan(loss) ? "NaN" : "infinite", run.steps, lr_now);  // not "-nan"
      run.outcome = Outcome::Error;
      break;
    }
    if (samples >= next_eval || samples >= limits.max_samples) {
      next_eval = samples + eval_every;
      const auto eval_start = Clock::now();
      const auto [held_loss, accuracy] = w.evaluate(probe);
      run.eval_s += since(eval_start);
      run.curve.push_back({samples, run.steps, train_s, held_loss, accuracy});
      if (!full && reached(o, run.curve.back())) {
        run.reached = true;
        break;
      }
      if (o.on_progress()) o.on_progress()(progress(o, run, race, limits, samples, epoch, train_s));
    }
    if (samples >= limits.max_samples) {
      if (!full) run.message = fmt::format("not reached within --max-epochs {:g}", o.max_epochs());
      break;
    }
    if (!full && o.max_seconds() > 0 && train_s >= o.max_seconds()) {
      run.message = fmt::format("not reached within --max-seconds {:g}", o.max_seconds());
      break;
    }
    if (train_s >= limits.slower_s) {
      run.message = fmt::format("stopped at {}: {:g}x the fastest so far ({}), it cannot come within it",
                                format_seconds(train_s), o.stop_slower_than(), format_seconds(*race.fastest_s));
      break;
    }
  }
  run.train_s = train_s;
  if (before) run.cpu_wait_share = cpu_wait_share(before, scheduler_times());
  run.epochs = static_cast<double>(samples) / static_cast<double>(epoch);
  if (!run.curve.empty()) run.last = run.curve.back();
  if (full && run.message.empty()) {  // the final quality, on the whole held-out set
    const auto eval_start = Clock::now();
    const auto [loss, accuracy] = w.evaluate(held_out);
    run.eval_s += since(eval_start);
    if (std::isfinite(loss)) {
      run.final_loss = loss, run.final_accuracy = accuracy;
    } else {
      run.message = fmt::format("the held-out loss after the last step is {}: the last steps diverged at lr {:.4g}",
                                std::isnan(loss) ? "NaN" : "infinite", lr_now);
      run.outcome = Outcome::Error;
    }
  }
  if (full && !phases.empty()) {
    run.lr.warmup_steps = run.warmup_steps;
    run.lr.warmup_epochs = run.warmup_epochs;
    std::vector<std::string> each;
    for (size_t k = 0; k < phases.size(); ++k)
      each.push_back(
          fmt::format("batch {} from epoch {:g} at lr {:.4g}", phases[k].batch, phases[k].from_epoch, phase_lr[k].lr));
    run.lr.advice = fmt::format(
        "the schedule {}: {}; warm-up over the first {}, then the {} schedule over "
        "the {:g}-epoch run",
        run.schedule, fmt::join(each, ", "), format_epochs(run.warmup_epochs), to_string(o.lr_schedule()), o.epochs());
  } else if (full) {  // the advice as this run applied it
    const int64_t advised = run.lr.warmup_steps;
    run.lr.warmup_steps = run.warmup_steps;
    run.lr.warmup_epochs = run.warmup_epochs;
    run.lr.advice += fmt::format(
        "; in this {:g}-epoch run ({} steps): {}{}, then the {} schedule", o.epochs(), limits.total_steps,
        run.warmup_steps > 0 ? fmt::format("warm-up over its first {}", run.warmup_steps) : std::string("no warm-up"),
        run.warmup_steps < advised ? " (a quarter of the run at most)" : "", to_string(o.lr_schedule()));
  }
  return run;
}

// A full run whose final held-out loss is not kLeftTheStart below the initial weights', nor its
// accuracy above theirs beyond the split's noise, ended on the plateau at the start, and a ranking
// among such runs is by noise (0.001 epochs of lenet: one step at each batch, 0.0558 and 0.0547,
// "batch 64, the best"). The accuracy counts too: a run can learn to classify while its held-out
// loss rises (synthetic mlp at a high rate: accuracy 0.10 to 0.25, loss 2.30 to 2.68).
bool run_left_the_start(const ValidationRun& r, const ValidationResult& v, int64_t held_out_size) {
  if (!r.final_loss) return false;
  if (!v.loss_before || off_the_start(*r.final_loss, *v.loss_before)) return true;
  return r.final_accuracy && v.accuracy_before &&
         *r.final_accuracy > *v.accuracy_before + accuracy_tolerance(*v.accuracy_before, held_out_size);
}

// Full runs: the best final quality (accuracy where there are class labels, else loss) of the runs
// that left the start, and the runs within the held-out set's noise of it; the fastest of those.
void judge_full_runs(ValidationResult& result, int64_t held_out_size) {
  result.best_batch.reset();
  result.fastest_batch.reset();
  result.schedule_saving.reset();
  result.good_batches.clear();
  for (auto& r : result.runs)
    if (r.final_loss && !run_left_the_start(r, result, held_out_size))
      r.message = fmt::format(
          "did not leave the start in {}: held-out loss {:.4f}, not {:.0f} % below the initial weights' "
          "{:.4f}{}",
          format_epochs(result.epochs), *r.final_loss, 100 * (1 - kLeftTheStart), *result.loss_before,
          r.final_accuracy && result.accuracy_before
              ? fmt::format(", nor accuracy {:.4f} above theirs ({:.4f}) beyond the split's noise", *r.final_accuracy,
                            *result.accuracy_before)
              : std::string());
  const ValidationRun* best = nullptr;
  const auto better = [](const ValidationRun& a, const ValidationRun& b) {
    return a.final_accuracy ? *a.final_accuracy > *b.final_accuracy : *a.final_loss < *b.final_loss;
  };
  for (const auto& r : result.runs)
    if (run_left_the_start(r, result, held_out_size) && r.schedule.empty() && (!best || better(r, *best))) best = &r;
  if (!best) return;
  result.best_batch = best->batch;
  const ValidationRun* fastest = nullptr;
  ValidationRun* schedule = nullptr;
  for (auto& r : result.runs) {
    if (!run_left_the_start(r, result, held_out_size)) continue;
    if (best->final_accuracy) {
      const double a = *best->final_accuracy;
      r.good = r.final_accuracy && *r.final_accuracy >= a - accuracy_tolerance(a, held_out_size);
    } else {
      r.good = *r.final_loss <= *best->final_loss * (1 + kLossTolerance);
    }
    if (!r.schedule.empty()) {
      schedule = &r;
      continue;
    }
    if (!r.good) continue;
    result.good_batches.push_back(r.batch);
    if (!fastest || r.train_s < fastest->train_s) fastest = &r;
  }
  std::sort(result.good_batches.begin(), result.good_batches.end());  // a halving below trains last
  if (fastest) result.fastest_batch = fastest->batch;
  if (fastest && schedule && schedule->good) result.schedule_saving = 1 - schedule->train_s / fastest->train_s;
}

}  // namespace

std::vector<int64_t> halvings_below(const std::vector<int64_t>& batch_sizes, int extend_below) {
  std::vector<int64_t> below;
  if (batch_sizes.empty()) return below;
  for (int64_t b = *std::min_element(batch_sizes.begin(), batch_sizes.end());
       static_cast<int>(below.size()) < extend_below && b >= 2; b /= 2)
    below.push_back(b / 2);
  return below;
}

std::string halvings_below_text(const std::vector<int64_t>& batch_sizes, int extend_below) {
  const std::vector<int64_t> below = halvings_below(batch_sizes, extend_below);
  if (below.empty()) return "";
  const int64_t smallest = *std::min_element(batch_sizes.begin(), batch_sizes.end());
  std::string text = fmt::format(" ({} too where {} ends best", below[0], smallest);
  for (size_t k = 1; k < below.size(); ++k) text += fmt::format(", then {} where {} does", below[k], below[k - 1]);
  return text + ")";
}

std::vector<std::string> not_trained_names(const ValidationResult& v, const std::string& schedule) {
  std::vector<std::string> rest;
  for (const int64_t b : v.not_trained) rest.push_back(std::to_string(b));
  if (v.schedule_not_trained) rest.push_back(schedule);
  return rest;
}

double most_cpu_wait_share(const ValidationResult& v) {
  double most = 0;
  for (const ValidationRun& r : v.runs) most = std::max(most, r.cpu_wait_share.value_or(0.0));
  return most;
}

std::string larger_than_training_set_warning(const std::vector<int64_t>& batch_sizes, int64_t training_samples) {
  std::vector<int64_t> larger;
  for (const int64_t b : batch_sizes)
    if (training_samples > 0 && b > training_samples) larger.push_back(b);
  std::sort(larger.begin(), larger.end());
  if (larger.empty()) return {};
  const bool many = larger.size() > 1;
  return fmt::format(
      "{} {} {} larger than the {} training samples: each step repeats samples, which a run of yours would not; {} "
      "measured here, but not as a batch of that many distinct samples",
      many ? "batches" : "batch", fmt::join(larger, ", "), many ? "are" : "is", training_samples,
      many ? "they are" : "it is");
}

std::string shared_cpu_warning(const ValidationResult& v) {
  const double most = most_cpu_wait_share(v);
  if (most <= kSharedCpuShare) return {};
  std::vector<std::string> runs;
  for (const ValidationRun& r : v.runs)
    if (r.cpu_wait_share && *r.cpu_wait_share > kSharedCpuShare)
      runs.push_back(r.schedule.empty() ? std::to_string(r.batch) : "the schedule " + r.schedule);
  return fmt::format(
      "validation shared the CPU: the {} of {} waited for a core up to {:.0f} % of the time {} threads were ready to "
      "run (Linux's run-queue delay), held by another process or by more threads than cores; {} train_s, and with it "
      "which good batch is fastest, carries that: validate again on a quiet machine (top shows what else runs)",
      runs.size() > 1 ? "runs" : "run", fmt::join(runs, ", "), 100 * most, runs.size() > 1 ? "their" : "its",
      runs.size() > 1 ? "their" : "its");
}

std::vector<std::string> validation_warnings(const ValidationResult& v) {
  std::vector<std::string> out;
  if (std::string w = shared_cpu_warning(v); !w.empty()) out.push_back(std::move(w));
  if (v.epochs <= 0 && v.held_out_samples > 0 && v.held_out_samples < kFewHeldOutSamples)
    out.push_back(fmt::format(
        "validation judged the target on {} held-out sample{}: an accuracy or a loss over so few moves by chance "
        "between evaluations, by more than the batches differ, so a run can reach the target early or late by luck; "
        "give a held-out set of at least a few hundred, or evaluate on more of it (--held-out-samples)",
        v.held_out_samples, v.held_out_samples == 1 ? "" : "s"));
  return out;
}

const ValidationRun* fixed_run(const ValidationResult& v, int64_t batch) {
  for (const auto& run : v.runs)
    if (run.batch == batch && run.schedule.empty()) return &run;
  return nullptr;
}

void check_targets(double epochs, double target_accuracy, double target_loss) {
  BATCHWISE_CHECK(target_accuracy == 0 || target_loss == 0, ConfigError,
                  "--target-accuracy {:g} and --target-loss {:g}: one target at a time; give one of them",
                  target_accuracy, target_loss);
  BATCHWISE_CHECK(epochs <= 0 || (target_accuracy == 0 && target_loss == 0), ConfigError,
                  "--epochs {:g} and --target-{} {:g}: --epochs trains full runs and compares their final quality, a "
                  "target stops each run when it is met; give one of them",
                  epochs, target_accuracy != 0 ? "accuracy" : "loss",
                  target_accuracy != 0 ? target_accuracy : target_loss);
}

namespace {

// The options validate refuses, each naming its flag and the fix.
void check_options(const ValidateOptions& o, const Dataset& held_out) {
  const bool full = o.epochs() > 0;
  BATCHWISE_CHECK(o.epochs() >= 0 && std::isfinite(o.epochs()), ConfigError, "--epochs {:g}: must be positive",
                  o.epochs());
  BATCHWISE_CHECK(full || o.target_accuracy() > 0 || o.target_loss() > 0, ConfigError,
                  "validate: no target and no run length; give --target-accuracy (e.g. 0.85) or --target-loss (e.g. "
                  "0.4) to time each batch to a target, or --epochs N to train full runs and compare their final "
                  "quality");
  check_targets(o.epochs(), o.target_accuracy(), o.target_loss());
  BATCHWISE_CHECK(full || o.lr_schedule() == LrSchedule::Constant, ConfigError,
                  "--lr-schedule {}: a decaying rate decays over a run of known length; give --epochs N (or "
                  "--lr-schedule constant with a target)",
                  to_string(o.lr_schedule()));
  BATCHWISE_CHECK(o.target_accuracy() <= 1, ConfigError, "--target-accuracy {}: must be at most 1",
                  o.target_accuracy());
  BATCHWISE_CHECK(o.target_accuracy() == 0 || held_out.targets.scalar_type() == at::kLong, ConfigError,
                  "--target-accuracy: the held-out targets are floating-point values, not class labels, so there is "
                  "no accuracy to reach; use --target-loss");
  BATCHWISE_CHECK(!o.batch_sizes().empty(), ConfigError, "validate: no candidate batch sizes");
  for (const int64_t b : o.batch_sizes())  // before the rate rule, whose message named itself
    BATCHWISE_CHECK(b >= 1, ConfigError, "--batch-sizes: batch {} must be at least 1", b);
  BATCHWISE_CHECK(o.batch_schedule().empty() || full, ConfigError,
                  "--batch-schedule {}: a schedule's phases are epochs of a run of known length; give --epochs N",
                  schedule_text(o.batch_schedule()));
  check_schedule_within(o.batch_schedule(), o.epochs());
  BATCHWISE_CHECK(o.epochs() > 0 || o.max_epochs() > 0, ConfigError, "--max-epochs {}: must be positive",
                  o.max_epochs());
  BATCHWISE_CHECK(held_out.size() > 0, DataError, "{}the held-out set is empty",
                  held_out.name.empty() ? "" : held_out.name + ": ");

  BATCHWISE_CHECK(o.held_out_samples() >= 0, ConfigError, "--held-out-samples {}: must not be negative",
                  o.held_out_samples());
  BATCHWISE_CHECK(o.stop_slower_than() == 0 || o.stop_slower_than() >= 1, ConfigError,
                  "--stop-slower-than {:g}: a multiple of the fastest time, at least 1 (or 0: never)",
                  o.stop_slower_than());
}

}  // namespace

void check_eval_interval(const ValidateOptions& o, int64_t dataset) {
  if (o.epochs() > 0 || o.eval_every_samples() <= 0 || dataset <= 0) return;
  // Each run ends at its whole steps within --max-epochs (run_limits), and is evaluated there: the batch whose run
  // ends soonest
  const auto most = static_cast<int64_t>(std::ceil(o.max_epochs() * static_cast<double>(dataset)));
  int64_t batch = 0, ends = std::numeric_limits<int64_t>::max();
  for (const int64_t b : o.batch_sizes())
    if (const int64_t end = std::max<int64_t>(1, most / b) * b; b > 0 && end < ends) ends = end, batch = b;
  BATCHWISE_CHECK(batch == 0 || o.eval_every_samples() < ends, ConfigError,
                  "--eval-every {}: at or past the end of batch {}'s run to the target ({} samples, its whole steps "
                  "within --max-epochs {:g} of {} samples), so it is judged once, at its end, where any batch "
                  "\"reaches\" the target and the soonest is the fastest by samples/s; give an interval well below it "
                  "(the default is a twentieth of an epoch, {} samples)",
                  o.eval_every_samples(), batch, ends, o.max_epochs(), dataset, std::max<int64_t>(1, dataset / 20));
}

void check_target_unmet_at_start(Workload& workload, const Dataset& held_out, const ValidateOptions& o) {
  auto* w = dynamic_cast<ModuleWorkload*>(&workload);
  if (!w || o.epochs() > 0 || !HeldOutTarget{o.target_accuracy(), o.target_loss()}) return;
  const Dataset probe = head(held_out, o.held_out_samples());
  const auto [loss, accuracy] = w->evaluate(probe);  // eval mode, no gradient: nothing trains
  const HeldOutTarget target{o.target_accuracy(), o.target_loss()};
  if (!target.met(loss, accuracy)) return;
  const bool by_accuracy = o.target_accuracy() > 0 && accuracy && *accuracy >= o.target_accuracy();
  const std::string flag = by_accuracy ? fmt::format("--target-accuracy {:g}", o.target_accuracy())
                                       : fmt::format("--target-loss {:g}", o.target_loss());
  throw ConfigError(fmt::format(
      "{}: the initial weights already reach it (test {} {:.4g} before any step, on {} held-out samples), so every "
      "run would reach it at its first evaluation and the soonest would say nothing; give a target past where "
      "training starts ({} {:.4g})",
      flag, by_accuracy ? "accuracy" : "loss", by_accuracy ? *accuracy : loss, probe.size(),
      by_accuracy ? "above" : "below", by_accuracy ? *accuracy : loss));
}

ValidationResult validate(Workload& workload, const Dataset& held_out, const ValidateOptions& o) {
  auto* w = dynamic_cast<ModuleWorkload*>(&workload);
  BATCHWISE_CHECK(w != nullptr, ConfigError,
                  "validate: {} is not a torch::nn module workload; time-to-accuracy needs batchwise's own training "
                  "loop and evaluation",
                  workload.info().model);
  check_options(o, held_out);
  detail::probe_held_out(*w, held_out);
  check_run_length(o.epochs(), w->data().size());
  check_schedule_steps(o.batch_schedule(), o.epochs(), w->data().size());
  const bool full = o.epochs() > 0;
  check_batches_within_run(o.batch_sizes(), o.epochs(), w->data().size());
  check_eval_interval(o, w->data().size());
  const Dataset probe = head(held_out, o.held_out_samples());
  ValidationResult result;
  if (full) {
    result.target = fmt::format("full runs of {}, {} rate", format_epochs(o.epochs()), to_string(o.lr_schedule()));
    result.epochs = o.epochs();
    result.lr_schedule = to_string(o.lr_schedule());
  } else {
    result.target = HeldOutTarget{o.target_accuracy(), o.target_loss()}.text("test");
  }
  result.held_out_samples = probe.size();
  result.held_out =
      probe.size() == held_out.size() ? fmt::format("{} test split, {} samples", held_out.name, held_out.size())
      : full ? fmt::format("{} test split, its first {} of {} samples along each run, all {} at its end", held_out.name,
                           probe.size(), held_out.size(), held_out.size())  // the final quality is the whole split's
             : fmt::format("{} test split, its first {} of {} samples", held_out.name, probe.size(), held_out.size());
  // However validate ends (a setting no candidate can run with is thrown mid-grid), the weights,
  // the optimizer (its rate too) and the data order are as they were.
  const StateGuard initial(workload);
  if (full)  // where every run starts, on the split its final quality is measured on
    if (const auto [loss, accuracy] = w->evaluate(held_out); std::isfinite(loss))
      result.loss_before = loss, result.accuracy_before = accuracy;
  if (!o.target_checked()) check_target_unmet_at_start(workload, held_out, o);
  const double lr_before = w->info().lr;
  Race race;
  race.start = Clock::now();
  // The grid's fixed batches, then the schedule (its first phase's batch in its place).
  std::vector<std::pair<int64_t, std::vector<BatchPhase>>> candidates;
  for (const int64_t batch : o.batch_sizes()) candidates.push_back({batch, {}});
  if (!o.batch_schedule().empty()) candidates.push_back({o.batch_schedule().front().batch, o.batch_schedule()});
  race.count = static_cast<int>(candidates.size());
  const auto not_trained = [&](int64_t batch, const std::vector<BatchPhase>& phases) {
    if (phases.empty())
      result.not_trained.push_back(batch);
    else {
      result.schedule_not_trained = true;
      result.untrained_schedule = schedule_text(phases);
    }
  };
  const auto train = [&](int64_t batch, const std::vector<BatchPhase>& phases) {
    if (result.interrupted) return not_trained(batch, phases);  // stopped: the later candidates are named
    workload.restore_state(initial.state());  // every candidate starts from the same weights and data order
    try {
      stop_if_asked(o);
      result.runs.push_back(run_one(*w, probe, held_out, o, batch, race, phases));
      const ValidationRun& done = result.runs.back();
      if (done.reached && (!race.fastest_s || done.train_s < *race.fastest_s)) race.fastest_s = done.train_s;
      ++race.index;
    } catch (const Stopped&) {
      result.interrupted = true;
      not_trained(batch, phases);
    } catch (const ConfigError&) {
      throw;                                       // a setting that no candidate can run with
    } catch (const std::exception& e) {            // out of memory at this batch, or a failing step: a result
      if (o.should_stop() && o.should_stop()()) {  // a step the stop cut short (Python's Ctrl-C in forward)
        result.interrupted = true;
        return not_trained(batch, phases);
      }
      ValidationRun failed;
      failed.batch = batch;
      failed.lr =
          unmeasured_lr(rule_optimizer(w->info()), o.base_batch(), o.base_lr() > 0 ? o.base_lr() : lr_before, batch);
      const std::string what = e.what();
      failed.message = "failed: " + what.substr(0, what.find('\n'));
      failed.outcome = detail::classify_failure(e).first;
      failed.schedule = phases.empty() ? "" : schedule_text(phases);
      result.runs.push_back(failed);
      ++race.index;
    }
  };
  for (const auto& [batch, phases] : candidates) train(batch, phases);
  if (full) {
    judge_full_runs(result, held_out.size());
    int64_t smallest = *std::min_element(o.batch_sizes().begin(), o.batch_sizes().end());
    for (const int64_t below : halvings_below(o.batch_sizes(), o.extend_below())) {
      if (result.interrupted || result.best_batch != smallest) break;
      smallest = below;  // the best at the grid's lower edge: one batch below it too
      ++race.count;
      train(smallest, {});
      judge_full_runs(result, held_out.size());
    }
    if (result.runs.size() > candidates.size())  // batches added below: all in batch order, a schedule's run last
      std::stable_sort(result.runs.begin(), result.runs.end(), [](const ValidationRun& a, const ValidationRun& b) {
        return a.schedule.empty() != b.schedule.empty() ? a.schedule.empty() : a.schedule.empty() && a.batch < b.batch;
      });
    return result;
  }
  const ValidationRun* fastest = nullptr;
  for (const auto& r : result.runs)
    if (r.reached && (!fastest || r.train_s < fastest->train_s)) fastest = &r;
  if (fastest) result.fastest_batch = fastest->batch;
  return result;
}

std::optional<double> time_to_target(const std::vector<ValidationPoint>& curve, double target_accuracy,
                                     double target_loss) {
  if (curve.empty() || curve.back().train_s <= 0) return std::nullopt;
  const double now = curve.back().train_s;
  // The evaluations of the latest half of the training time, at least the last two (after the start).
  std::vector<const ValidationPoint*> late;
  for (const auto& p : curve)
    if (p.train_s > 0 && p.train_s >= now / 2) late.push_back(&p);
  if (late.size() < 2) {
    late.clear();
    for (size_t i = curve.size(); i-- > 0 && late.size() < 2;)
      if (curve[i].train_s > 0) late.insert(late.begin(), &curve[i]);
  }
  if (late.size() < 2) return std::nullopt;
  // value = a + b ln t through them; the target is reached at t = exp((target - a) / b), if b moves
  // the value towards it (`sign` +1: a rising accuracy, -1: a falling loss).
  const auto left = [&](const auto& value, double target, double sign) -> std::optional<double> {
    double sx = 0, sv = 0, sxx = 0, sxv = 0;
    const auto k = static_cast<double>(late.size());
    for (const ValidationPoint* p : late) {
      const std::optional<double> v = value(*p);
      if (!v) return std::nullopt;
      const double x = std::log(p->train_s);
      sx += x, sv += *v, sxx += x * x, sxv += x * *v;
    }
    const double denominator = k * sxx - sx * sx;
    if (denominator <= 0) return std::nullopt;
    const double b = (k * sxv - sx * sv) / denominator;
    if (sign * b <= 0) return std::nullopt;
    const double at = std::exp((target - (sv - b * sx) / k) / b);
    if (!std::isfinite(at)) return std::nullopt;
    return std::max(0.0, at - now);
  };
  std::optional<double> by_accuracy, by_loss;
  if (target_accuracy > 0) by_accuracy = left([](const ValidationPoint& p) { return p.accuracy; }, target_accuracy, 1);
  if (target_loss > 0)
    by_loss = left([](const ValidationPoint& p) { return std::optional<double>(p.loss); }, target_loss, -1);
  if (by_accuracy && by_loss) return std::min(*by_accuracy, *by_loss);
  return by_accuracy ? by_accuracy : by_loss;
}

}  // namespace batchwise

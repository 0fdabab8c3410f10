// tune's phases after the answer: the loader search for an input-bound batch, the validation around
// the recommendation, the learning rate and run plan at it, and the precision comparison. tune()
// (tune.cpp) calls them in that order.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "batchwise/loader.h"
#include "batchwise/lr.h"
#include "batchwise/plan.h"
#include "batchwise/recommend.h"
#include "batchwise/schedule.h"
#include "batchwise/units.h"
#include "tune/answer_checks.h"
#include "tune/follow_ups.h"
#include "tune/precisions.h"
#include "tune/race_time.h"
#include "tune/stages.h"

namespace batchwise::detail {

// The recommended batch waits for its input: find the pipeline setting that feeds it.
void follow_loader(const TuneSubject& subject, const TuneOptions& o, Report& report) {
  for (const auto& p : report.sweep->points) {
    if (p.batch != report.recommendation->batch || !p.input_bound) continue;
    if (subject.world_size > 1) {  // each rank's pipeline is its own; tune it in one process
      report.context.warnings.push_back(fmt::format(
          "batch {} is input-bound: {:.0f} % of its step waits for data; find the loader setting in one process "
          "with `batchwise loader --batch {}`",
          p.batch, 100 * p.data_wait_share, p.batch));
      continue;
    }
    stage(o, fmt::format("batch {} is input-bound ({:.0f} % of the step waits for data): trying loader settings",
                         p.batch, 100 * p.data_wait_share));
    report.loader = search_loader(*module_of(subject), TrialOptions(p.batch)
                                                           .warmup(o.sweep().warmup())
                                                           .steps(o.sweep().steps())
                                                           .limit_bytes(report.budget_bytes)
                                                           .timeout_s(o.sweep().trial_timeout_s()));
    report.context.warnings.push_back(fmt::format("batch {} is input-bound: {:.0f} % of its step waits for data; {}",
                                                  p.batch, 100 * p.data_wait_share, report.loader->advice));
  }
}

// Candidates: the recommendation, the throughput knee, and half and twice the recommendation (within
// the fit), each trained to the target (or for the run: then up to kValidateBelow halvings below the
// smallest where it ends best); the one that got there soonest (without a worse model) is recommended.
constexpr int kValidateBelow = 2;

void validate_around(const TuneSubject& subject, const TuneOptions& o, Report& report) {
  const int64_t rec = report.recommendation->batch;
  std::vector<int64_t> candidates{rec};
  if (report.sweep && report.sweep->knee_batch)  // the knee an answer takes: within the training set
    candidates.push_back(*knee_within(*report.sweep, training_samples(subject)));
  if (rec / 2 >= std::max<int64_t>(1, o.fit().min())) candidates.push_back(rec / 2);
  if (!report.fit || !report.fit->batch || rec * 2 <= *report.fit->batch) candidates.push_back(rec * 2);
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  // Not runs the user would do (validation_bound); the answer past the training set is checked as it stands
  const int64_t dataset = training_samples(subject);
  const ValidationBound bound = validation_bound(dataset, o.validate()->epochs());
  if (bound.run > 0 && rec > bound.run)  // every run would compare with the answer's
    return report.context.warnings.push_back(
        fmt::format("the validation did not run: batch {} is {}", rec, bound.past_run));
  const auto kept_end = std::stable_partition(candidates.begin(), candidates.end(),
                                              [&](int64_t b) { return b <= bound.most || b == rec; });
  const std::vector<int64_t> larger(kept_end, candidates.end());
  candidates.erase(kept_end, candidates.end());
  if (!larger.empty())
    report.context.warnings.push_back(fmt::format("the validation trains no {} {}: {}",
                                                  larger.size() > 1 ? "batches" : "batch", fmt::join(larger, ", "),
                                                  bound.beyond));
  ValidateOptions v = *o.validate();
  // Full runs whose best is the smallest batch trained also train one and two halvings below it:
  // "no worse a model" means little against the best of batches that are all too large.
  if (v.epochs() > 0 && v.extend_below() == 0) v.extend_below(kValidateBelow);
  // A batch-size schedule the run race proposed trains beside them, measured the same way, if each phase gets a step
  if (v.epochs() > 0 && report.run_race && report.run_race->schedule && report.run_race->epochs == v.epochs()) {
    if (const std::string none = phase_without_a_step(report.run_race->schedule->phases, v.epochs(), dataset);
        none.empty())
      v.batch_schedule(report.run_race->schedule->phases);
    else
      report.context.warnings.push_back(
          fmt::format("the validation trains no batch-size schedule: the run race's {}", none));
  }
  // A target the initial weights meet (the CLI refuses it first): the answer stands unvalidated, and says why
  if (v.epochs() <= 0) {
    try {
      check_eval_interval(ValidateOptions(v).batch_sizes(candidates), dataset);  // each run judged more than once
      if (!v.target_checked()) check_target_unmet_at_start(*subject.workload, subject.held_out(), v);
    } catch (const ConfigError& e) {
      report.context.warnings.push_back(fmt::format("the validation did not run: {}", e.what()));
      return;
    }
    v.target_checked(true);
  }
  if (v.epochs() > 0) {
    stage(o, Phase::Validate,
          fmt::format(
              "validating: full runs of {} at each of {}{}{}", format_epochs(v.epochs()), fmt::join(candidates, ", "),
              halvings_below_text(candidates, v.extend_below()),
              v.batch_schedule().empty() ? "" : ", and the batch-size schedule " + schedule_text(v.batch_schedule())));
  } else {
    stage(o, Phase::Validate,
          fmt::format("validating: training to the target at each of {}", fmt::join(candidates, ", ")));
  }
  report.validation = validate(*subject.workload, subject.held_out(),
                               v.batch_sizes(candidates).base_batch(o.base_batch()).limit_bytes(report.budget_bytes));
  for (std::string& w : validation_warnings(*report.validation)) report.context.warnings.push_back(std::move(w));
  report.recommendation = confirm(*report.recommendation, *report.validation);
  if (o.on_stage()) {  // its end: the CLI's Ctrl-C stops only the validation's runs
    TuneStage ended;
    ended.what = fmt::format("validation: {} of its runs ended{}", report.validation->runs.size(),
                             report.validation->interrupted ? ", then it was stopped" : "");
    ended.name = "validation ended";
    o.on_stage()(ended);
  }
}

// The learning rate at the recommended batch (its global batch across ranks): the rate a validation or the race trained
// it with, else advised from a range test, else the rule alone. A stop asked in the validation (the CLI's Ctrl-C; one
// in its last step lets it end whole): no phase trains after it.
bool stop_asked(const TuneOptions& o, const Report& report) {
  if (!report.validation) return false;
  return report.validation->interrupted || (o.validate()->should_stop() && o.validate()->should_stop()());
}

void learning_rate(const TuneSubject& subject, const TuneOptions& o, Report& report) {
  const std::optional<Optimizer> optimizer = known_optimizer(report.workload.optimizer);
  if (!report.recommendation || report.workload.lr <= 0 || !optimizer) return;
  const int64_t batch = report.recommendation->batch * subject.world_size;
  if (report.validation)
    for (const auto& run : report.validation->runs)
      if (run.batch == batch && run.schedule.empty()) report.lr = run.lr;
  bool fitted = report.lr && report.validation && report.validation->epochs > 0;  // a full run's: the run's already
  if (report.race && !report.lr)
    for (const auto& e : report.race->entries)
      if (e.batch == batch && e.rungs > 0) report.lr = e.lr;
  if (report.run_race && !report.lr)
    for (const auto& e : report.run_race->entries)
      if (e.batch == batch && e.lr.lr > 0) report.lr = e.lr, fitted = true;
  ModuleWorkload* w = module_of(subject);
  if (!report.lr && w && subject.world_size == 1 && !fp16(subject) && !stop_asked(o, report))  // a range test trains
    report.lr = advise_lr(*w, batch, LrAdviceOptions(o.base_batch(), report.workload.lr));
  else if (!report.lr)
    report.lr = unmeasured_lr(*optimizer, o.base_batch(), report.workload.lr, batch);
  // --epochs where no run race answered (--no-race, fp16, one candidate, a plateau the batch race answered):
  // the advice still fits the run it names, its warm-up at most a quarter of it (an epoch's had been all of one).
  if (o.epochs() > 0 && !fitted && report.workload.dataset_size > 0)
    report.lr = for_the_run(*report.lr, o.epochs(), report.workload.dataset_size, batch, o.lr_schedule());
}

// The run plan: the base setting, the batch to train with, and the others as good as it.
void plan_the_run(const TuneSubject& subject, const TuneOptions& o, Report& report) {
  if (!report.lr) return;
  const Optimizer optimizer = rule_optimizer(report.workload);
  std::vector<std::pair<std::string, LrAdvice>> rows{
      {"base", unmeasured_lr(optimizer, o.base_batch(), report.workload.lr, o.base_batch())}};
  if (report.lr->scaled.batch != o.base_batch()) rows.emplace_back("recommended", *report.lr);
  for (const LrAdvice& flat :
       flat_range_rates(report, report.lr->scaled.batch, o.base_batch(), o.epochs(), o.lr_schedule()))
    rows.emplace_back("within 5 %", flat);  // the race's flat range, as the recommendation states it
  std::sort(rows.begin() + 1, rows.end(),
            [](const auto& a, const auto& b) { return a.second.scaled.batch < b.second.scaled.batch; });
  report.run_plan = plan_run(optimizer_settings(optimizer, module_of(subject)), report.workload.dataset_size, rows);
}

// Every precision this device trains in, at the batch just recommended (the same batch for all, so
// the figures compare). fp16 on a CPU only as the run's own: few CPUs have half-precision units.
void compare_precisions(TuneSubject& subject, const TuneOptions& o, Report& report) {
  PrecisionPoint own;
  own.precision = subject.options->precision();
  own.fit_batch = report.fit ? report.fit->batch : std::nullopt;
  own.fit_limited_by_max = report.fit && report.fit->limited_by_max;
  own.batch = report.recommendation->batch;
  for (const auto& p : report.sweep->points)
    if (p.batch == own.batch) own.samples_per_s = p.samples_per_s, own.peak_bytes = p.peak_bytes;
  own.verdict = "the run's own precision";
  report.precisions.push_back(own);
  const bool cuda = report.context.device_type == "cuda";
  const WorkloadOptions options = *subject.options;
  // The fits below measure peaks of the whole process: this precision's model goes first.
  subject.release();
  subject.own_runner.reset();
  subject.runner = nullptr;
  subject.workload = nullptr;
  subject.held_out = nullptr;  // its default reads the released workload's data
  for (const Precision precision : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    if (precision == own.precision || (precision == Precision::Fp16 && !cuda)) continue;
    stage(o, Phase::Precision, fmt::format("precision {}: fit, then batch {}", to_string(precision), own.batch));
    report.precisions.push_back(
        detail::measure_precision(precision, options, o, own, report.budget_bytes, report.context.warnings));
  }
}

}  // namespace batchwise::detail

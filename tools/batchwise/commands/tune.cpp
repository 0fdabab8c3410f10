// batchwise tune: the library's tune (fit, sweep, noise scale, goodput, the batch race, the learning
// rate and run plan, and the follow-ups) with the CLI's progress lines, --reuse from the history,
// and the report.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "../cli.h"
#include "../launch.h"
#include "../session.h"
#include "batchwise/error.h"
#include "batchwise/history.h"
#include "batchwise/report.h"
#include "batchwise/schedule.h"
#include "batchwise/tune.h"

namespace batchwise::cli {
namespace {

// What tune's interrupted validation kept and did not train, and how to validate the answer.
std::string interrupted_warning(const Report& report, const std::string& signal) {
  const ValidationResult& v = *report.validation;
  // The schedule the run race proposed, trained beside the fixed batches (validate_around).
  const std::string schedule = v.schedule_not_trained && report.run_race && report.run_race->schedule
                                   ? " --batch-schedule " + schedule_text(report.run_race->schedule->phases)
                                   : "";
  std::vector<int64_t> grid = v.not_trained;  // the fixed batches it was to train, in order
  for (const auto& r : v.runs)
    if (r.schedule.empty()) grid.push_back(r.batch);
  std::sort(grid.begin(), grid.end());
  const std::vector<std::string> rest = not_trained_names(v);
  const size_t ended = v.runs.size();
  return fmt::format(
      "the validation was interrupted ({}) with {} of {} runs ended: {}; {} {} not trained, so tune's answer "
      "stands, not validated (to validate it: the same tune --validate again, or batchwise validate --batch-sizes {}{} "
      "with this tune's workload and run options)",
      signal, ended, ended + rest.size(),
      ended == 0   ? "none had ended"
      : ended == 1 ? "the run that had ended is kept"
                   : "the runs that had ended are kept, judged among themselves",
      fmt::join(rest, ", "), rest.size() > 1 ? "were" : "was", fmt::join(grid, ","), schedule);
}

class Tune : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand("tune", "Fit, sweep doublings of --min up to the fit, and recommend a batch");
    w_.add(cmd);
    fit_.add(cmd);
    sweep_.add(cmd);
    dist_.add(cmd);
    cmd->add_option("--steps", sweep_.steps, "measured steps per sweep trial")->capture_default_str();
    cmd->add_option("--fit-steps", fit_.steps, "training steps per fit trial")->capture_default_str();
    cmd->add_flag("--reuse", reuse_,
                  "skip the fit when the history holds one for the same workload, device, versions and target, "
                  "a budget within 1 % (its batch within this run's target), no older than --reuse-max-age");
    cmd->add_option("--reuse-max-age", reuse_max_age_h_, "hours a stored fit stays reusable")->capture_default_str();
    cmd->add_flag("--sweep-all", sweep_.sweep_all,
                  "sweep every doubling up to the fit (default: stop once 3 in a row do not raise samples/s by the "
                  "knee tolerance; --batch-sizes are always all swept)");
    cmd->footer(
        "Example:\n  batchwise tune                      # lenet on Fashion-MNIST on the best device\n"
        "  batchwise tune --epochs 10 --lr-schedule cosine   # the answer for a 10-epoch cosine run\n"
        "  batchwise tune --model resnet18 --dataset synthetic --max 512 --json tune.json\n"
        "Ctrl-C (SIGINT, SIGTERM or SIGHUP) once while --validate's runs train: stops after the step under way and "
        "writes the report with the runs that ended (tune's answer stands, not validated; exit 128 + the "
        "signal); in any other phase, or twice: ends at once, writing nothing.");
    cmd->add_flag("--verbose,-v", verbose_,
                  "print every table (fit, sweep, noise scale, goodput, race, run plan) and a line per trial; without "
                  "it, tune prints a phase line each, the why in five lines and the answer (the reports hold "
                  "everything)");
    cmd->add_flag(
        "--no-noise", no_noise_,
        "skip the gradient noise scale, and with it goodput (with --no-race: recommend the throughput knee; with "
        "--epochs the run race still measures it along its runs, for a batch-size schedule)");
    cmd->add_option("--noise-steps", noise_steps_, "training steps measuring the noise scale")->capture_default_str();
    cmd->add_option("--base-batch", base_batch_,
                    "the batch --lr is meant for; the recommended batch's learning rate is scaled from it")
        ->capture_default_str();
    auto* no_race = cmd->add_flag(
        "--no-race", no_race_,
        "skip the races (the batch race of branched runs from the same weights; with --epochs, the run race of "
        "compressed runs too): recommend from the noise scale's goodput");
    cmd->add_option(
           "--advice-budget", race_budget_s_,
           "seconds the race may take, wall-clock, its range tests and evaluations included (default: "
           "twice what tune took before it (doctor, fit, sweep, --profile, noise scale), at least 30 s, at most 4 "
           "epochs at the best samples/s, plus what its range tests and evaluations are expected to take; "
           "with --epochs, raised where the reference's shortest compressed run would train under 32 "
           "steps)")
        ->excludes(no_race);  // the race's budget: with no race it had been ignored
    cmd->add_flag("--compare-precision", compare_precision_,
                  "also fit and measure bf16 (and fp16 on CUDA) at the recommended batch, and say whether it pays");
    cmd->add_flag("--validate", validate_,
                  fmt::format("train to a target (--target-accuracy, default {}) at the recommended batch, the knee, "
                              "and half and twice the recommendation; recommend the one that got there soonest",
                              kDefaultTargetAccuracy));
    v_.add(cmd);
    v_.add_run(cmd);
    cmd->get_option("--epochs")
        ->description(
            "the epochs your run will train: the answer is the batch that finishes them soonest without a "
            "worse final model (the run race: your --lr-schedule compressed into fractions of the run, and the "
            "noise scale along them); with --validate, full runs of this length check it");
    cmd->get_option("--target-accuracy")
        ->description(
            "your run's held-out accuracy target: the batch race measures the time to it where a candidate "
            "gets there within the race (and stops there; it never trains longer for it); --validate trains " +
            fmt::format("to it (default {})", kDefaultTargetAccuracy));
    cmd->get_option("--target-loss")
        ->description("your run's held-out loss target, as --target-accuracy (one target at a time: not beside it)");
    return cmd;
  }
  int nproc() const override { return dist_.nproc; }
  std::string device() const override { return w_.workload.device(); }
  void refuse_for_ranks(int world_size) const override {
    w_.refuse_for_ranks(world_size);
    const bool race_target = v_.target_accuracy != 0 || v_.target_loss != 0;
    refuse_in_data_parallel({{sweep_.profile, "--profile"},
                             {compare_precision_, "--compare-precision"},
                             {validate_, "--validate"},
                             {reuse_, "--reuse"},
                             {race_target, "--target-accuracy/--target-loss"},
                             {v_.epochs != 0, "--epochs"}},
                            world_size);
  }
  double dist_timeout_s() const override { return dist_.timeout_s; }

  int run() override {
    check();
    Session s("tune", w_, &dist_, /*test_split=*/validate_ || race_target_ || v_.epochs > 0);
    s.set_brief(!verbose_);
    if (fit_.max == 0) {
      fit_.max = s.cuda() ? 65536 : 4096;  // on CPU throughput has long flattened by 4096
      if (fit_.min > fit_.max)  // a --max not given: its default, said so (the fit's had read as a --max passed)
        throw ConfigError(
            fmt::format("--min {} is above --max {} (tune's default on this device); lower --min, or "
                        "raise --max",
                        fit_.min, fit_.max));
    }
    const std::optional<FitResult> reused = reuse_ ? reused_fit(s) : std::nullopt;
    TuneSubject subject(s.runner(), s.workload());
    if (!w_.use_cmd) subject.options = w_.workload;
    subject.world_size = s.world_size();
    subject.held_out = [&] { return s.held_out(); };
    if (!s.data_parallel()) subject.release = [&] { s.release(); };
    std::optional<StopOnSignal> stop;  // armed while the validation runs
    TuneOptions options = TuneOptions()
                              .fit(s.with_progress(fit_.options(w_, s.report.budget_bytes)))
                              .sweep(s.with_progress(sweep_.options(w_, s.report.budget_bytes)))
                              .reuse_fit(reused)
                              .profile(sweep_.profile)
                              .noise(!no_noise_)
                              .noise_steps(noise_steps_)
                              .race(!no_race_)
                              .race_budget_s(race_budget_s_)
                              .target_accuracy(race_target_ ? v_.target_accuracy : 0)
                              .target_loss(race_target_ ? v_.target_loss : 0)
                              .base_batch(base_batch_)
                              .epochs(v_.epochs)
                              .lr_schedule(parse_lr_schedule(v_.lr_schedule))
                              .on_run_race([&](const std::string& text) { s.on_run_race(text); })
                              .compare_precision(compare_precision_)
                              .on_stage([&](const TuneStage& t) {
                                // The validation's full runs take hours: a first Ctrl-C in it keeps the runs
                                // that finished. The other phases end at a Ctrl-C, as before.
                                if (t.name == "validation")
                                  stop.emplace("tune",
                                               "the validation's runs that finished are kept and written, "
                                               "the one under way is dropped; tune's answer stands, not validated");
                                else if (t.name == "validation ended" && stop && !stop->requested())
                                  stop->release();  // from here a signal ends tune at once, as in its other phases
                                if (stop && stop->requested()) stop->mute_broken_outputs();  // a `| tee` it ended
                                s.stage(t);
                              })
                              .on_race([&](const RaceProgress& p) { s.on_race(p); });
    if (validate_)
      options.validate(v_.options({}, base_batch_)
                           .on_progress([&](const ValidateProgress& p) {
                             if (!(stop && stop->requested())) s.on_validate(p);  // its reader may be gone
                           })
                           .should_stop([&] { return stop && stop->requested(); }));
    // A validation target the initial weights meet: refused before anything trains, not after the race
    if (validate_ && v_.epochs <= 0) {
      check_target_unmet_at_start(*s.workload(), s.held_out(), v_.options({}, base_batch_));
      options.validate()->target_checked(true);
    }
    if (!w_.no_history) state_the_last(s);
    s.report = tune(subject, options, s.report);
    if (std::string w = reused ? "" : fit_.first_step_warning(s.report.fit, false); !w.empty())  // none measured
      s.report.context.warnings.push_back(w);
    if (std::string w = s.report.fit && !reused ? unseen_batch_warning(*s.report.fit) : ""; !w.empty())
      s.report.context.warnings.push_back(w);
    const bool stopped = stop && stop->requested();
    if (stopped) stop->mute_broken_outputs();
    s.clear_line();
    if (stopped && s.report.validation && s.report.validation->interrupted)  // else its last step ended it whole
      s.report.context.warnings.push_back(interrupted_warning(s.report, stop->name()));
    if (s.report.validation) s.print_validation(*s.report.validation);
    plan_for_device(fit_, w_, s.report);
    if (stopped) stop->mute_broken_outputs();
    const int code = s.finish();
    if (stopped) stop->end_by_it();
    return code;
  }

 private:
  void check() {
    w_.resolve();
    w_.check("tune");
    fit_.check();
    (void)sweep_.options(w_, 0);  // the batch sizes are checked before the data is loaded
    if (!fit_.plan_for.empty()) (void)parse_plan_device(fit_.plan_for);
    race_target_ = v_.target_accuracy != 0 || v_.target_loss != 0;  // before check() sets validate's default
    refuse_with_cmd(w_.use_cmd, {{race_target_, "--target-accuracy/--target-loss"}, {v_.epochs != 0, "--epochs"}});
    if (validate_ || race_target_ || v_.epochs != 0 || v_.lr_schedule != "constant") v_.check(w_);
    for (const CLI::Option* only : v_.runs_only)  // silently unused before (--rule-lr had trained nothing at the rule)
      if (!validate_ && only->count() > 0)
        throw ConfigError(fmt::format(
            "{}: only the validation's runs read it, and tune runs none without --validate; add --validate, or drop it",
            only->get_name()));
    const auto given = [&](const char* flag) { return w_.app && w_.app->count(flag) > 0; };  // silently unread
    refuse_with_cmd(w_.use_cmd, {{compare_precision_, "--compare-precision"},
                                 {sweep_.profile, "--profile"},
                                 {reuse_, "--reuse"},
                                 {given("--base-batch"), "--base-batch"},
                                 {given("--advice-budget"), "--advice-budget"},
                                 {given("--noise-steps"), "--noise-steps"}});
    refuse_in_data_parallel({{sweep_.profile, "--profile"},
                             {compare_precision_, "--compare-precision"},
                             {validate_, "--validate"},
                             {reuse_, "--reuse"},
                             {race_target_, "--target-accuracy/--target-loss"},
                             {v_.epochs != 0, "--epochs"}});
  }

  // Before the fit: what the last tune of the same kind here took (same workload and device; the same
  // race, validation and precision comparison asked for, where a tune asking for a race that its sweep
  // left fewer than 2 candidates for counts as one without: that is the time it took), when the
  // history holds one; tune states its own figure once the fit has timed the steps. Nothing with
  // --advice-budget, which sets the race's time anew. A tune slowed past its plan (another process on
  // the cores: a race stopped at its wall limit, or past the most it stated) is passed over.
  // A line of progress, read from the history: a history whose rows cannot be read now, or a row this batchwise
  // cannot read, says nothing here (one such row had ended every later tune of its workload, exit 3); the run's end
  // writes the history, and says there what fails.
  void state_the_last(Session& s) {
    if (race_budget_s_ > 0) return;
    std::vector<HistoryEntry> runs;
    History& history = s.history();  // one that cannot be opened is refused here, before the run (ConfigError)
    try {
      runs = history.find_runs("tune", to_json(s.report));
    } catch (const Error&) {
      return;
    }
    for (const HistoryEntry& e : runs) {
      Report last;
      try {
        last = report_from_json(e.report_json, "history: the report");
      } catch (const Error&) {
        continue;
      }
      const bool same = last.timing && last.timing->total_s > 0 && !slowed_past_its_plan(last) &&
                        (v_.epochs > 0 ? last.run_race && last.run_race->epochs == v_.epochs : !last.run_race) &&
                        last.validation.has_value() == validate_ && last.precisions.empty() == !compare_precision_ &&
                        !last.step_profile.empty() == sweep_.profile && (last.race || last.run_race) != no_race_;
      if (!same) continue;
      s.stage(
          fmt::format("expected: about {:.0f} s in all, as the last such tune here took (run {}, {}); stated "
                      "again once the fit has timed the steps",
                      last.timing->total_s, e.id, e.date));
      return;
    }
  }

  // --reuse: the fit of a matching run in the history (same workload, device, versions and target, a
  // budget within 1 %, young enough: History::find_fit), as a fit result without trials.
  std::optional<FitResult> reused_fit(Session& s) {
    const FitOptions search = fit_.options(w_, s.report.budget_bytes);
    const std::optional<HistoryEntry> entry = s.history().find_fit(
        to_json(s.report), reuse_max_age_h_ * 3600,
        FitBounds{search.min(), search.max(), search.multiple_of(), search.mode() == FitMode::Power});
    s.stage(entry ? fmt::format("reusing the fit of run {} ({}): batch {}", entry->id, entry->date, *entry->fit_batch)
                  : std::string("--reuse: no matching fit in the history; fitting"));
    if (!entry) return std::nullopt;
    // Its search as stored: a reuse of this one must know it stopped at its --max (it had read "not cut
    // short" once reused, and answered a larger --max with it) and how it searched.
    const Report stored = report_from_json(entry->report_json, "the history's run " + std::to_string(entry->id));
    FitResult r;
    r.mode = stored.fit ? stored.fit->mode : parse_fit_mode(fit_.mode);
    r.limited_by_max = stored.fit && stored.fit->limited_by_max;
    r.outcome = FitOutcome::Fits;
    r.batch = *entry->fit_batch;
    r.budget_bytes = s.report.budget_bytes;
    r.target = w_.target;
    r.multiple_of = fit_.multiple_of;
    r.message = fmt::format("reused from run {} of {} in {} (--reuse): no fit trials ran", entry->id, entry->date,
                            history_path(w_.history));
    return r;
  }

  WorkloadFlags w_;
  FitFlags fit_;
  SweepFlags sweep_;
  DistFlags dist_;
  ValidateFlags v_;
  bool verbose_ = false, reuse_ = false, no_noise_ = false, no_race_ = false, compare_precision_ = false,
       validate_ = false;
  bool race_target_ = false;  // --target-accuracy or --target-loss given: the race ranks by it
  double reuse_max_age_h_ = 168, race_budget_s_ = 0;
  int noise_steps_ = 20;
  int64_t base_batch_ = kDefaultBaseBatch;
};

}  // namespace

std::unique_ptr<Command> tune_command() { return std::make_unique<Tune>(); }

}  // namespace batchwise::cli

// batchwise validate: real time to a held-out target at each candidate batch, or full runs of the
// user's length and schedule compared on final quality and time, each at its advised learning rate.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "../cli.h"
#include "../launch.h"
#include "../session.h"
#include "batchwise/error.h"
#include "batchwise/recommend.h"
#include "batchwise/schedule.h"
#include "batchwise/units.h"

namespace batchwise::cli {
namespace {

// What an interrupted validation kept and what it did not train, and how to train the rest.
std::string interrupted_warning(const ValidationResult& v, const std::string& signal,
                                const std::vector<BatchPhase>& schedule) {
  const std::vector<std::string> rest = not_trained_names(v, "the schedule " + schedule_text(schedule));
  // Judged among themselves: a second validate of the rest would not weigh them against the runs kept.
  const std::string again =
      v.schedule_not_trained || v.not_trained.empty() || v.runs.empty()  // none kept: the same command is the rest
          ? "to finish it: the same validate again"
          : fmt::format(
                "to finish it: the same validate again; --batch-sizes {} trains only the rest, but judges "
                "them among themselves, not against the runs kept here",
                fmt::join(v.not_trained, ","));
  const size_t ended = v.runs.size();
  const std::string kept = ended == 0   ? "none had ended"
                           : ended == 1 ? "the run that had ended is kept"
                                        : "the runs that had ended are kept, judged among themselves";
  return fmt::format(
      "interrupted ({}) with {} of {} runs ended: {}; {} {} not trained, so no batch is recommended ({})", signal,
      ended, ended + rest.size(), kept, fmt::join(rest, ", "), rest.size() > 1 ? "were" : "was", again);
}

class Validate : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand(
        "validate",
        "Train to a target test accuracy or loss at each batch size, or full runs of --epochs, with its scaled "
        "learning rate");
    w_.add(cmd);
    w_.hide_cmd();  // it trains batchwise's own loop only
    w_.not_read(
        {{"--trial-timeout", "validate trains whole runs, which --max-epochs and --max-seconds bound (or --epochs)"},
         {"--no-monitor", "validate samples no utilisation"},
         {"--target",
          "validate fits no batch: it trains the batches given within the whole --memory-budget; the held-out "
          "accuracy to train to is --target-accuracy (or --target-loss)"}});
    cmd->add_option("--batch-sizes", batch_sizes_,
                    "the candidates: a list or range, e.g. 32,128,512; each trains from the same weights, "
                    "smallest first")
        ->required();
    v_.add(cmd);
    v_.add_run(cmd);
    schedule_flag_ = cmd->add_option(
        "--batch-schedule", batch_schedule_,
        "with --epochs: also train this batch-size schedule over the same run, BATCH:FROM_EPOCH phases "
        "(e.g. 64:0,256:2: 64 from the start, 256 from epoch 2), each phase at its batch's advised rate; "
        "its time saved against the fastest good fixed batch is reported (tune --epochs proposes one "
        "where it pays)");
    cmd->add_option("--extend-below", extend_below_,
                    "with --epochs: where the best final quality is at the smallest batch trained, also train half of "
                    "it, and again, at most N times (a best at the grid's edge says only that a smaller batch may be "
                    "better still; tune --validate sets 2)");
    cmd->add_option("--base-batch", base_batch_, "the batch --lr is meant for")->capture_default_str();
    cmd->footer(
        "Example:\n  batchwise validate --model lenet --batch-sizes 32,128,512 --target-accuracy 0.85 "
        "--json validate.json\n  batchwise validate --model lenet --batch-sizes 32,128,512 --epochs 5 "
        "--lr-schedule cosine\n  batchwise validate --model lenet --batch-sizes 64,256 --epochs 5 "
        "--lr-schedule cosine --batch-schedule 64:0,256:2\n  batchwise validate --model mlp --batch-sizes "
        "256,512 --epochs 10 --lr-schedule cosine --extend-below 2\n"
        "Ctrl-C (SIGINT, SIGTERM or SIGHUP) once: stops after the step under way and writes the runs that ended "
        "(no batch is recommended from them; exit 128 + the signal); twice: ends at once, writing nothing.");
    return cmd;
  }

  int run() override {
    w_.resolve();
    w_.check("validate");
    const std::vector<int64_t> candidates = parse_batch_sizes(batch_sizes_, "--batch-sizes");
    v_.check(w_);
    const std::vector<BatchPhase> schedule = schedule_flag_->count() == 0
                                                 ? std::vector<BatchPhase>{}
                                                 : parse_batch_schedule(batch_schedule_, "--batch-schedule");
    if (!schedule.empty() && v_.epochs <= 0)
      throw ConfigError(
          fmt::format("--batch-schedule {}: a schedule's phases are epochs of a run of known length; "
                      "give --epochs N",
                      batch_schedule_));
    check_schedule_within(schedule, v_.epochs);  // before the stage line names it
    if (extend_below_ > 0 && v_.epochs <= 0)
      throw ConfigError(
          fmt::format("--extend-below {}: it extends full runs, whose best is judged at the run's end; "
                      "give --epochs N",
                      extend_below_));
    Session s("validate", w_, nullptr, /*test_split=*/true);
    check_run_length(v_.epochs, s.workload()->info().dataset_size);  // validate() does too, after the stage line
    check_schedule_steps(schedule, v_.epochs, s.workload()->info().dataset_size);
    check_batches_within_run(candidates, v_.epochs, s.workload()->info().dataset_size);
    if (v_.epochs <= 0)  // a target the initial weights meet: refused before the stage line
      check_target_unmet_at_start(*s.workload(), s.held_out(), v_.options(candidates, base_batch_));
    std::vector<int64_t> trained = candidates;  // every batch a step of them takes
    for (const BatchPhase& p : schedule)
      if (std::find(trained.begin(), trained.end(), p.batch) == trained.end()) trained.push_back(p.batch);
    // trained as asked, and said: a step of them repeats samples
    if (std::string w = larger_than_training_set_warning(trained, s.workload()->info().dataset_size); !w.empty())
      s.report.context.warnings.push_back(std::move(w));
    const std::string in_order = fmt::format("{}", fmt::join(candidates, ", "));  // as they train: sorted
    s.stage(v_.epochs > 0
                ? fmt::format("validating: full runs of {} ({} rate) at each of {}{}{}", format_epochs(v_.epochs),
                              v_.lr_schedule, in_order, halvings_below_text(candidates, extend_below_),
                              schedule.empty() ? "" : " and the schedule " + schedule_text(schedule))
                : fmt::format("validating: training to the target at each of {}", in_order));
    // A grid of full runs takes hours: a first Ctrl-C keeps the runs that finished.
    const StopOnSignal stop("validate", "the runs that finished are kept and written, the one under way is dropped");
    s.report.validation = validate(*s.workload(), s.held_out(),
                                   v_.options(candidates, base_batch_)
                                       .target_checked(v_.epochs <= 0)  // above
                                       .batch_schedule(schedule)
                                       .extend_below(extend_below_)
                                       .limit_bytes(s.report.budget_bytes)
                                       .on_progress([&](const ValidateProgress& p) {
                                         if (!stop.requested()) s.on_validate(p);  // its reader may be gone
                                       })
                                       .should_stop([&] { return stop.requested(); }));
    if (stop.requested()) stop.mute_broken_outputs();
    const ValidationResult& v = *s.report.validation;
    for (std::string& w : validation_warnings(v)) s.report.context.warnings.push_back(std::move(w));
    if (v.interrupted) s.report.context.warnings.push_back(interrupted_warning(v, stop.name(), schedule));
    s.print_validation(v);
    if (!v.interrupted) s.report.recommendation = recommend(v);  // not from a part of the grid
    if (s.report.recommendation) s.report.lr = fixed_run(v, s.report.recommendation->batch)->lr;
    if (stop.requested()) stop.mute_broken_outputs();
    const int code = s.finish();
    stop.end_by_it();
    return code;
  }

 private:
  WorkloadFlags w_;
  ValidateFlags v_;
  std::string batch_sizes_;
  std::string batch_schedule_;
  CLI::Option* schedule_flag_ = nullptr;  // given, even as "": parsed (an empty one is refused, not ignored)
  int extend_below_ = 0;
  int64_t base_batch_ = kDefaultBaseBatch;
};

}  // namespace

std::unique_ptr<Command> validate_command() { return std::make_unique<Validate>(); }

}  // namespace batchwise::cli

// batchwise fit: the largest batch whose peak memory stays within target x budget.
#include "../cli.h"
#include "../session.h"
#include "batchwise/recommend.h"
#include "batchwise/validate.h"

namespace batchwise::cli {

namespace {

class Fit : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand("fit", "Find the largest batch whose peak memory stays within target x budget");
    w_.add(cmd);
    w_.not_read({{"--test-data-file",
                  "fit evaluates nothing held out: only validate, tune --epochs and tune's races read a test split"},
                 {"--test-labels-file",
                  "fit evaluates nothing held out: only validate, tune --epochs and tune's races read a test split"}});
    fit_.add(cmd);
    dist_.add(cmd);
    cmd->add_option("--fit-steps", fit_.steps, "training steps per fit trial")->capture_default_str();
    renamed(cmd, "--steps", "--fit-steps", fit_.steps,
            "--steps counts a sweep trial's measured steps in sweep and tune");
    cmd->add_option("--warmup", fit_.warmup,
                    "extra steps before the --fit-steps ones (they count towards the peak too)")
        ->capture_default_str()
        ->group("Fit");  // fit's own, not the sweep's --warmup the table lists
    cmd->footer(
        "Example:\n  batchwise fit --model lenet --memory-budget 512MiB --mode binsearch --multiple-of 8 --json "
        "fit.json\n"
        "  batchwise fit --model mlp --nproc 2 --memory-budget 1GiB   # the per-device batch, data-parallel");
    return cmd;
  }
  int nproc() const override { return dist_.nproc; }
  std::string device() const override { return w_.workload.device(); }
  void refuse_for_ranks(int world_size) const override { w_.refuse_for_ranks(world_size); }
  double dist_timeout_s() const override { return dist_.timeout_s; }

  int run() override {
    w_.resolve();
    w_.check("fit");
    fit_.check();
    if (!fit_.plan_for.empty()) (void)parse_plan_device(fit_.plan_for);
    Session s("fit", w_, &dist_);
    if (fit_.max == 0) fit_.max = 65536;
    s.report.fit = fit(s.runner(), s.with_progress(fit_.options(w_, s.report.budget_bytes)));
    s.report.recommendation = recommend(s.report.fit, std::nullopt);
    if (std::string w = fit_.first_step_warning(s.report.fit, true); !w.empty()) s.report.context.warnings.push_back(w);
    if (std::string w = unseen_batch_warning(*s.report.fit); !w.empty()) s.report.context.warnings.push_back(w);
    if (s.report.fit->batch)  // it fits the memory; a run of these data would not take it, and is told so
      if (std::string w = larger_than_training_set_warning({*s.report.fit->batch}, s.report.workload.dataset_size);
          !w.empty())
        s.report.context.warnings.push_back(std::move(w));
    rule_learning_rate(s, kDefaultBaseBatch);
    plan_for_device(fit_, w_, s.report);
    return s.finish();
  }

 private:
  WorkloadFlags w_;
  FitFlags fit_;
  DistFlags dist_;
};

}  // namespace

std::unique_ptr<Command> fit_command() { return std::make_unique<Fit>(); }

}  // namespace batchwise::cli

// batchwise sweep: samples/s, step time and peak memory at each batch size, and the knee.

#include <string>
#include <vector>

#include "../cli.h"
#include "../session.h"
#include "batchwise/error.h"
#include "batchwise/race.h"
#include "batchwise/recommend.h"

namespace batchwise::cli {

namespace {

class Sweep : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand("sweep", "Measure samples/s, step time and peak memory at each batch size");
    w_.add(cmd);
    w_.not_read(
        {{"--test-data-file",
          "sweep evaluates nothing held out: only validate, tune --epochs and tune's races read a test split"},
         {"--test-labels-file",
          "sweep evaluates nothing held out: only validate, tune --epochs and tune's races read a test split"}});
    sweep_.add(cmd);
    dist_.add(cmd);
    cmd->add_option("--steps", sweep_.steps, "measured steps per trial")->capture_default_str();
    cmd->add_option("--accumulation-steps", sweep_.accumulation_steps,
                    "train each batch as this many accumulated micro-batches (as `plan` would)")
        ->capture_default_str();
    cmd->footer(
        "Example:\n  batchwise sweep --model mlp --range 16-1024*2 --repetitions 3 --json sweep.json\n"
        "  batchwise sweep --model lenet --nproc 2 --batch-sizes 32,128,512   # scaling and all-reduce share");
    return cmd;
  }
  int nproc() const override { return dist_.nproc; }
  std::string device() const override { return w_.workload.device(); }
  void refuse_for_ranks(int world_size) const override {
    w_.refuse_for_ranks(world_size);
    refuse_in_data_parallel({{sweep_.profile, "--profile"}}, world_size);
  }
  double dist_timeout_s() const override { return dist_.timeout_s; }

  int run() override {
    w_.resolve();
    w_.check("sweep");
    (void)sweep_.options(w_, 0);  // the batch sizes are checked before the data is loaded
    if (sweep_.batch_sizes.empty() && sweep_.range.empty())
      throw ConfigError("no batch sizes to sweep; pass --batch-sizes 16,32,64 or --range 8-4096*2");
    if (w_.workload.precision() == Precision::Fp16 && sweep_.accumulation_steps > 1)
      throw ConfigError(
          "--accumulation-steps with --precision fp16: accumulation does not support fp16's loss scaling "
          "yet; use bf16 or fp32");
    if (sweep_.profile && sweep_.accumulation_steps > 1)
      throw ConfigError(
          "--profile with --accumulation-steps: the profile times plain steps; profile without accumulation");
    refuse_with_cmd(w_.use_cmd,
                    {{sweep_.profile, "--profile"}, {sweep_.accumulation_steps > 1, "--accumulation-steps"}});
    refuse_in_data_parallel({{sweep_.profile, "--profile"}});
    Session s("sweep", w_, &dist_);
    s.report.sweep = sweep(s.runner(), s.with_progress(sweep_.options(w_, s.report.budget_bytes)));
    for (const std::string& w : s.report.sweep->warnings()) s.report.context.warnings.push_back(w);
    // A batch larger than the training set repeats samples within a step, which no run does: measured
    // as asked, said so, and not the answer where a batch within it was swept (as tune answers).
    const int64_t samples = per_device_training_samples(s.report);  // data-parallel, each rank's share
    if (std::string w = larger_than_dataset_warning(s.report.sweep->points, samples); !w.empty())
      s.report.context.warnings.push_back(std::move(w));
    // within --target of the budget too, as fit and tune answer
    SweepAnswer answer = recommend_sweep(*s.report.sweep, samples, s.report.budget_bytes, s.report.target);
    s.report.recommendation = answer.recommendation;
    for (std::string& w : answer.warnings) s.report.context.warnings.push_back(std::move(w));
    if (sweep_.profile)
      s.report.step_profile = profile_sweep(*s.workload(), *s.report.sweep, s.report.context.warnings);
    rule_learning_rate(s, kDefaultBaseBatch);
    return s.finish(answer.none_within_target ? kExitDoesNotFit : kExitOk);  // no batch fits it, as fit says
  }

 private:
  WorkloadFlags w_;
  SweepFlags sweep_;
  DistFlags dist_;
};

}  // namespace

std::unique_ptr<Command> sweep_command() { return std::make_unique<Sweep>(); }

}  // namespace batchwise::cli

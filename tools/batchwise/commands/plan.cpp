// batchwise plan: micro-batch x accumulation steps x devices that keep a global batch exact, with
// its learning rate and the run plan.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "../cli.h"
#include "../session.h"
#include "batchwise/convergence.h"

namespace batchwise::cli {
namespace {

class Plan : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand(
        "plan", "Micro-batch x accumulation steps x devices that keep a global batch exact, with its learning rate");
    w_.add(cmd);
    w_.not_read({{"--trace", "plan recommends no batch, so no step would be traced; trace one with sweep or tune"},
                 {"--test-data-file",
                  "plan evaluates nothing held out: only validate, tune --epochs and tune's races read a test split"},
                 {"--test-labels-file",
                  "plan evaluates nothing held out: only validate, tune --epochs and tune's races read a test split"}});
    fit_.add(cmd);
    dist_.add(cmd);
    cmd->add_option("--global-batch", global_batch_, "samples per optimizer step over all devices")->required();
    cmd->add_option("--world-size", world_size_, "devices (data-parallel ranks)")
        ->capture_default_str()
        ->excludes("--nproc");  // the ranks --nproc starts are the world (--world-size 4 had been dropped)
    cmd->add_option("--max-micro-batch", max_micro_batch_,
                    "the largest batch one device runs (default: fit it now, with the fit flags)");
    cmd->add_option("--last-batch", last_batch_, "an epoch's short last batch: drop (drop_last), pad or keep")
        ->capture_default_str();
    cmd->add_option("--base-batch", base_batch_, "the batch --lr is meant for")->capture_default_str();
    cmd->add_option("--fit-steps", fit_.steps, "training steps per fit trial")->capture_default_str();
    cmd->footer(
        "Example:\n  batchwise plan --global-batch 4096 --world-size 2 --memory-budget 2GiB\n"
        "  batchwise plan --global-batch 1000 --max-micro-batch 96 --multiple-of 8 --last-batch pad");
    cmd_ = cmd;
    return cmd;
  }
  int nproc() const override { return dist_.nproc; }
  std::string device() const override { return w_.workload.device(); }
  void refuse_for_ranks(int world_size) const override { w_.refuse_for_ranks(world_size); }
  double dist_timeout_s() const override { return dist_.timeout_s; }

  int run() override {
    w_.resolve();
    w_.check("plan");
    fit_.check();
    (void)parse_last_batch(last_batch_, "--last-batch");
    if (max_micro_batch_ > 0)  // given, nothing is fitted: the flags that shape the fit would be dropped
      for (const char* flag : {"--mode", "--min", "--max", "--fit-steps", "--plan-for", "--target"})
        if (cmd_->count(flag) > 0)
          throw ConfigError(fmt::format(
              "{} with --max-micro-batch {}: given the micro-batch, plan fits nothing, and {} shapes the fit; "
              "leave {} out, or leave out --max-micro-batch to fit it",
              flag, max_micro_batch_, flag, flag));
    if (!fit_.plan_for.empty()) (void)parse_plan_device(fit_.plan_for);
    // A launcher's group is the devices planned for: another --world-size had been dropped, unsaid
    if (const char* world = std::getenv("WORLD_SIZE");
        world && std::atoi(world) > 1 && cmd_->count("--world-size") > 0 && world_size_ != std::atoi(world))
      throw ConfigError(
          fmt::format("--world-size {}: this run's group has {} ranks (WORLD_SIZE), and plan plans for "
                      "them; leave --world-size out, or launch {} ranks",
                      world_size_, world, world_size_));
    Session s("plan", w_, &dist_);
    if (s.data_parallel()) world_size_ = s.world_size();
    // The fit answers one question: does a device's share of the global batch fit (no accumulation
    // needed), and if not, how large a micro-batch does. It searches no further than that share.
    const int64_t share = (global_batch_ + world_size_ - 1) / std::max<int64_t>(1, world_size_);
    if (fit_.max == 0)
      fit_.max = std::max<int64_t>(fit_.min, (share + fit_.multiple_of - 1) / fit_.multiple_of * fit_.multiple_of);
    int64_t max_micro = max_micro_batch_;
    if (max_micro == 0) {  // the largest micro-batch is what fits: measure it
      s.report.fit = fit(s.runner(), s.with_progress(fit_.options(w_, s.report.budget_bytes)));
      if (s.report.fit->batch) max_micro = *s.report.fit->batch;
      if (std::string w = fit_.first_step_warning(s.report.fit, false); !w.empty())
        s.report.context.warnings.push_back(w);
    }
    if (max_micro > 0)
      s.report.accumulation = plan_accumulation(PlanRequest(global_batch_, max_micro)
                                                    .world_size(world_size_)
                                                    .multiple_of(fit_.multiple_of)
                                                    .dataset_size(s.report.workload.dataset_size)
                                                    .last_batch(parse_last_batch(last_batch_, "--last-batch"))
                                                    .batchnorm(s.workload() && uses_batchnorm(*s.workload())));
    learning_rate(s);
    plan_for_device(fit_, w_, s.report);
    return s.finish();
  }

 private:
  // The learning rate at the global batch, measured when it is one plain step on this device (no
  // accumulation, one rank; an accumulated or multi-device step is not range-tested here), else the
  // rule's; and the run plan from the base batch to it.
  void learning_rate(Session& s) const {
    Report& r = s.report;
    const std::optional<Optimizer> optimizer = known_optimizer(r.workload.optimizer);
    if (!r.accumulation || r.workload.lr <= 0 || !optimizer) return;
    const int64_t batch = r.accumulation->global_batch;
    const bool one_step = r.accumulation->accumulation_steps == 1 && r.accumulation->world_size == 1;
    if (one_step && s.module() && !s.data_parallel() && w_.workload.precision() != Precision::Fp16)
      r.lr = advise_lr(*s.module(), batch,  // held to the budget: --max-micro-batch is taken on trust
                       LrAdviceOptions(base_batch_, r.workload.lr)
                           .limit_bytes(static_cast<int64_t>(r.target * static_cast<double>(r.budget_bytes))));
    else
      r.lr = unmeasured_lr(*optimizer, base_batch_, r.workload.lr, batch);
    std::vector<std::pair<std::string, LrAdvice>> rows{
        {"base", unmeasured_lr(*optimizer, base_batch_, r.workload.lr, base_batch_)}};
    if (batch != base_batch_) rows.emplace_back("planned", *r.lr);
    r.run_plan = plan_run(optimizer_settings(*optimizer, s.module()), r.workload.dataset_size, rows);
    // Its steps per epoch are the plan's, counted once, with the --last-batch policy; the base batch's
    // under the same policy (drop_last trains no short last step, and none at all of a batch larger than the data:
    // a base batch of 32 on 7 samples had read 1 step an epoch).
    const bool drop = parse_last_batch(last_batch_, "--last-batch") == LastBatch::Drop;
    for (RunPlanRow& row : r.run_plan->rows)
      if (row.batch == batch)
        row.steps_per_epoch = r.accumulation->steps_per_epoch;
      else if (drop && row.batch > 0 && r.workload.dataset_size > 0)
        row.steps_per_epoch = r.workload.dataset_size / row.batch;
  }

  WorkloadFlags w_;
  FitFlags fit_;
  DistFlags dist_;
  int64_t global_batch_ = 0, world_size_ = 1, max_micro_batch_ = 0, base_batch_ = kDefaultBaseBatch;
  std::string last_batch_ = "drop";
  CLI::App* cmd_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> plan_command() { return std::make_unique<Plan>(); }

}  // namespace batchwise::cli

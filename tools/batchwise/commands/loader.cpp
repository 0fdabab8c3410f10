// batchwise loader: the input-pipeline setting (workers, prefetch) that keeps the step fed.
#include <fmt/format.h>

#include "../cli.h"
#include "../session.h"
#include "batchwise/error.h"
#include "batchwise/loader.h"
#include "batchwise/units.h"
#include "batchwise/validate.h"

namespace batchwise::cli {
namespace {

class Loader : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand(
        "loader", "Find the input-pipeline setting (workers, prefetch) that keeps the training step fed");
    w_.add(cmd);
    w_.hide_cmd();  // it trains batchwise's own loop only
    w_.not_read(
        {{"--trace", "loader recommends no batch, so no step would be traced; trace one with sweep or tune"},
         {"--no-monitor", "loader's trials sample no utilisation"},
         {"--target", "loader fits no batch: its settings train at --batch within the whole --memory-budget"},
         {"--test-data-file",
          "loader evaluates nothing held out: only validate, tune --epochs and tune's races read a test split"},
         {"--test-labels-file",
          "loader evaluates nothing held out: only validate, tune --epochs and tune's races read a test split"}});
    cmd->add_option("--batch", batch_, "the batch size to feed")->capture_default_str();
    cmd->add_option("--warmup", warmup_, "unmeasured steps per setting (at least its workers: their first burst)")
        ->capture_default_str();
    cmd->add_option("--steps", steps_, "measured steps per setting (rounded up to a multiple of its workers)")
        ->capture_default_str();
    cmd->footer(
        "Example:\n  batchwise loader --model resnet18 --dataset cifar10 --data-dir cifar-10-batches-bin "
        "--augment --batch 128");
    return cmd;
  }

  int run() override {
    w_.resolve();
    w_.check("loader");
    if (w_.use_cmd)
      throw ConfigError(
          "loader: batchwise tunes its own input pipeline; with --cmd, tune your DataLoader's "
          "num_workers inside your command");
    Session s("loader", w_, nullptr);
    // searched as asked, and said: a step of it repeats samples, which the user's loader would not
    if (std::string w = larger_than_training_set_warning({batch_}, s.workload()->info().dataset_size); !w.empty())
      s.report.context.warnings.push_back(std::move(w));
    s.stage(fmt::format("trying input-pipeline settings at batch {}", batch_));
    s.report.loader = search_loader(
        *s.module(),
        TrialOptions(batch_)
            .warmup(warmup_)
            .steps(steps_)
            .limit_bytes(s.report.budget_bytes)
            .timeout_s(w_.trial_timeout_s),
        {}, {}, [&](const LoaderTrial& t, int i, int n) {
          s.stage(fmt::format(
              "[setting {}/{}] {} worker{}, prefetch {}: {}", i, n, t.workers, t.workers == 1 ? "" : "s", t.prefetch,
              t.outcome == Outcome::Ok ? fmt::format("{} samples/s, {:.0f} % of the step waiting for data",
                                                     format_grouped(t.samples_per_s), 100 * t.data_wait_share)
                                       : fmt::format("{}: {}", to_string(t.outcome), t.message)));
        });
    return s.finish();
  }

 private:
  WorkloadFlags w_;
  int64_t batch_ = 256;
  int warmup_ = 2, steps_ = 5;
};

}  // namespace

std::unique_ptr<Command> loader_command() { return std::make_unique<Loader>(); }

}  // namespace batchwise::cli

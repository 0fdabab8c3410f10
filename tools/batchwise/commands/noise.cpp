// batchwise noise: the gradient noise scale (critical batch) along a stretch of real training.
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <string>

#include "../cli.h"
#include "../session.h"
#include "batchwise/convergence.h"
#include "batchwise/error.h"
#include "batchwise/noise_text.h"

namespace batchwise::cli {
namespace {

class Noise : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand("noise", "Measure the gradient noise scale (critical batch) during real training");
    w_.add(cmd);
    w_.hide_cmd();  // it trains batchwise's own loop only
    w_.not_read(
        {{"--trace", "noise recommends no batch, so no step would be traced; trace one with sweep or tune"},
         {"--trial-timeout", "noise runs no trials; --noise-steps bounds it"},
         {"--no-monitor", "noise samples no utilisation"},
         {"--target", "noise fits no batch: it trains at --batch within the whole --memory-budget"},
         {"--test-data-file",
          "noise evaluates nothing held out: only validate, tune --epochs and tune's races read a test split"},
         {"--test-labels-file",
          "noise evaluates nothing held out: only validate, tune --epochs and tune's races read a test split"}});
    cmd->add_option("--batch", batch_, "B: samples per training step")->capture_default_str();
    cmd->add_option("--micro-batch", micro_batch_, "b: the small batch; divides --batch")->capture_default_str();
    cmd->add_option("--noise-steps", steps_, "training steps measured")->capture_default_str();
    renamed(cmd, "--steps", "--noise-steps", steps_, "as tune names it; --steps counts a sweep trial's measured steps");
    cmd->add_flag("--fixed-weights", fixed_weights_, "measure without optimizer steps (at the initial weights)");
    bound(cmd->add_option("--smoothing", smoothing_,
                          "moving-average factor of |G|^2 and tr(Sigma), each smoothed on its own (0: none; nearer 1: "
                          "steadier, slower to follow the noise scale as it grows)")
              ->capture_default_str(),
          0, 0.999);
    cmd->footer(
        "Example:\n  batchwise noise --model lenet --batch 512 --micro-batch 32 --noise-steps 100 --json noise.json");
    return cmd;
  }

  int run() override {
    w_.resolve();
    w_.check("noise");
    if (w_.use_cmd)
      throw ConfigError(
          "noise: the noise scale needs the gradients of batchwise's own training step; it cannot be "
          "measured through --cmd");
    if (w_.workload.precision() == Precision::Fp16)
      throw ConfigError(
          "noise with --precision fp16: the noise scale does not support fp16's loss scaling yet; use "
          "bf16 or fp32");
    const NoiseOptions options = NoiseOptions()
                                     .batch(batch_)
                                     .micro_batch(micro_batch_)
                                     .steps(steps_)
                                     .train(!fixed_weights_)
                                     .smoothing(smoothing_);
    check_noise_options(options, 0);  // before the data is loaded
    Session s("noise", w_, nullptr);
    check_noise_options(options, s.report.workload.dataset_size);  // and before it says what it will measure
    s.stage(fmt::format("measuring the gradient noise scale: {} training steps at batch {} in micro-batches of {}",
                        steps_, batch_, micro_batch_));
    try {
      s.report.noise = measure_noise_scale(*s.workload(), NoiseOptions(options).limit_bytes(s.report.budget_bytes));
    } catch (const c10::OutOfMemoryError& e) {  // the budget, or the device's own memory
      const std::string what = e.what_without_backtrace();
      const std::string why =
          detail::noise_does_not_fit(batch_, s.report.budget_bytes, what.substr(0, what.find('\n')));
      tell("batchwise noise: {}\n", why);
      s.report.context.warnings.push_back(why);  // the report is still written, and says why it holds no noise scale
      return s.finish(kExitDoesNotFit);
    }
    return s.finish(s.report.noise->diverged ? kExitFailed : kExitOk);  // a NaN loss measured nothing
  }

 private:
  WorkloadFlags w_;
  int64_t batch_ = 256, micro_batch_ = 32;
  int steps_ = 50;
  bool fixed_weights_ = false;
  double smoothing_ = 0.9;
};

}  // namespace

std::unique_ptr<Command> noise_command() { return std::make_unique<Noise>(); }

}  // namespace batchwise::cli

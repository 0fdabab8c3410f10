// run_trial on real (small) workloads: real training steps that lower the loss, on every built-in
// model, refused options, a model in eval mode trained and put back bit-identical, and fp16's
// skipped steps: reported, settled once, and run again by the runner.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "batchwise/error.h"
#include "batchwise/memory.h"
#include "batchwise/models.h"
#include "batchwise/trial.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"
#include "support/busy_core.h"
#include "support/workloads.h"
#include "torch_error.h"

namespace batchwise {
namespace {

using namespace test;

TEST(Trial, RunsRealTrainingSteps) {
  CpuMemoryTracker::install();
  auto w =
      make_workload(WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(1024).lr(0.1).device("cpu"));
  const Trial t = run_trial(*w, TrialOptions(64).warmup(0).steps(40));
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  EXPECT_EQ(t.steps_run, 40);
  EXPECT_EQ(t.step_times_s.size(), 40u);
  EXPECT_GT(t.samples_per_s, 0);
  EXPECT_LE(t.samples_per_s_min, t.samples_per_s);
  EXPECT_GE(t.samples_per_s_max, t.samples_per_s);
  // Forty optimizer steps on a learnable task lower the loss: the steps trained.
  EXPECT_LT(t.loss_last, t.loss_first * 0.9) << t.loss_first << " -> " << t.loss_last;
  // The peak includes the batch, activations, gradients and momentum: more than the parameters twice over.
  EXPECT_GT(t.peak_bytes, 2 * w->info().parameter_bytes);
}

TEST(Trial, ZeroMeasuredStepsIsRefused) {
  auto w = small();
  EXPECT_THROW(run_trial(*w, TrialOptions(8).steps(0)), ConfigError);
  EXPECT_THROW(run_trial(*w, TrialOptions(0)), ConfigError);
}

TEST(Trial, ShortStepsAreMeasuredUntilTheyAddUpToTheMinimumTime) {
  auto w = small();
  const Trial t = run_trial(*w, TrialOptions(8).warmup(1).steps(2).min_time_s(0.05));
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  double measured = 0;
  for (double s : t.step_times_s) measured += s;
  EXPECT_GE(measured, 0.05);
  EXPECT_GE(t.step_times_s.size(), 2u);
  EXPECT_EQ(t.steps, 2) << "the steps asked for, as asked";
  EXPECT_EQ(t.steps_run, 1 + static_cast<int>(t.step_times_s.size()));
  EXPECT_THROW(run_trial(*w, TrialOptions(8).min_time_s(-1)), ConfigError);
}

// Of the time its threads were ready to run, the share a trial waited for a CPU: the contention is
// injected, a busy child process on the one core the trial's thread is pinned to, where the two
// share it about half and half (a quiet machine reads under 2 %, which a test on a loaded machine
// cannot assert).
TEST(Trial, SaysHowMuchOfItsTimeItWaitedForACpuAnotherProcessHeld) {
  if (!scheduler_times()) GTEST_SKIP() << "Linux gives no run-queue delay here (/proc/self/task/*/schedstat)";
  CpuMemoryTracker::install();
  auto w =
      make_workload(WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(1024).lr(0.01).device("cpu"));
  // One core for this thread (and the threads it starts) and the busy child; both put back however
  // the test ends, and the child dies with this process if the test never gets there.
  struct Shared {
    cpu_set_t allowed;
    int threads = at::get_num_threads();
    bool pinned = false;
    std::optional<support::BusyCore> busy;
    Shared() {
      CPU_ZERO(&allowed);
      if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
      const int core = support::first_allowed_core();
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(core, &one);
      at::set_num_threads(1);
      pinned = sched_setaffinity(0, sizeof(one), &one) == 0;
      if (pinned) busy.emplace(core);
    }
    ~Shared() {
      busy.reset();
      sched_setaffinity(0, sizeof(allowed), &allowed);
      at::set_num_threads(threads);
    }
  };
  Trial t;
  {
    const Shared shared;
    if (!shared.pinned) GTEST_SKIP() << "this thread cannot be pinned to one core (sched_setaffinity)";
    ASSERT_TRUE(shared.busy && shared.busy->pid() > 0) << "fork failed";
    t = run_trial(*w, TrialOptions(64).warmup(2).steps(20).min_time_s(0.3));
  }
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  ASSERT_TRUE(t.cpu_wait_share.has_value());
  EXPECT_GT(*t.cpu_wait_share, 0.25) << "one thread beside a busy process on its core";
  EXPECT_LE(*t.cpu_wait_share, 1.0);
}

TEST(Trial, OneDelayedStepBarelyMovesTheSpread) {
  Trial t;
  t.batch = 32;
  t.outcome = Outcome::Ok;
  t.step_times_s = {0.005, 0.005, 0.005, 0.005, 0.145};  // another process took the cores for one step
  summarize_steps(t);
  EXPECT_DOUBLE_EQ(t.step_time_s_median, 0.005);
  EXPECT_NEAR(step_spread(t), 0.0, 1e-9);
  EXPECT_GT(t.step_time_s_stddev / t.step_time_s_median, 10) << "the stddev, which reports no longer print";
  t.step_times_s = {0.004, 0.005, 0.006, 0.007};
  summarize_steps(t);
  EXPECT_NEAR(t.step_time_s_iqr, 0.0015, 1e-12);  // quartiles 0.00475 and 0.00625, as numpy's
}

// The two failures a new user meets first come with what to do: torch's own text, then the fix.
TEST(Trial, ChannelMismatchAndBatchNormAtOneSampleSayWhatToDo) {
  const std::string conv =
      "Given groups=1, weight of size [16, 3, 3, 3], expected input[64, 1, 28, 28] to have 3 channels, but got 1 "
      "channels instead";
  EXPECT_EQ(detail::failure_hint(conv),
            "; the model's first layer takes 3 channels and the data has 1: export the model for 1 "
            "(examples/export_torchscript.py --in-channels 1), or give data with 3 channels");
  const auto [outcome, message] = detail::classify_failure(std::runtime_error(conv));
  EXPECT_EQ(outcome, Outcome::Error);
  EXPECT_NE(message.find("to have 3 channels, but got 1 channels instead; the model's first layer takes 3"),
            std::string::npos)
      << message;
  EXPECT_NE(detail::failure_hint("Expected more than 1 value per channel when training, got input size [1, 16]")
                .find("pass --min 2 or more"),
            std::string::npos);
  EXPECT_EQ(detail::failure_hint("mat1 and mat2 shapes cannot be multiplied (64x784 and 100x10)"), "");
}

// An allocation the process itself could not make (under ulimit -v) is out of memory, said so: it had ended
// tune with "terminate called after throwing an instance of 'std::bad_alloc'".
TEST(Trial, AFailedAllocationOfTheProcessIsOutOfMemory) {
  const auto [outcome, message] = detail::classify_failure(std::bad_alloc());
  EXPECT_EQ(outcome, Outcome::Oom);
  EXPECT_EQ(message.find("the process could not allocate memory (std::bad_alloc)"), 0u) << message;
}

// Every row of the table of built-in models (batchwise/models.h), a new one included.
// A file of any name is a model's path where no built-in model has that name: a TorchScript file
// saved without an extension was "unknown model" (a path is what was given).
TEST(Models, AFileOfAnyNameThatNoBuiltInModelHasIsAPath) {
  namespace fs = std::filesystem;
  const fs::path was = fs::current_path(),
                 dir = fs::temp_directory_path() / fmt::format("bw-model-path-{}", ::getpid());
  fs::create_directories(dir);
  fs::current_path(dir);
  std::ofstream("mnv3_noext") << "a TorchScript file saved without an extension";
  std::ofstream("mlp") << "a file that shares a built-in model's name";
  fs::create_directories("exported");
  EXPECT_TRUE(is_model_path("mnv3_noext"));
  EXPECT_TRUE(is_model_path("exported"));  // a folder: load_torchscript says it is one
  EXPECT_FALSE(is_model_path("mlp"));      // the built-in model
  EXPECT_FALSE(is_model_path("nope"));     // nothing of that name: an unknown model
  EXPECT_TRUE(is_model_path("nope.pt"));
  try {
    (void)load_torchscript("exported");
    ADD_FAILURE() << "loaded a folder";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("--model exported: is a folder"), std::string::npos) << e.what();
  }
  fs::current_path(was);
  fs::remove_all(dir);
}

TEST(Trial, EveryBuiltInModelTrains) {
  EXPECT_GE(model_names().size(), 4u);
  for (const std::string& model : model_names()) {
    auto w = small(model, "adamw");
    const Trial t = run_trial(*w, TrialOptions(4).warmup(0).steps(1));
    EXPECT_EQ(t.outcome, Outcome::Ok) << model << ": " << t.message;
    EXPECT_TRUE(std::isfinite(t.loss_first)) << model;
    EXPECT_GT(t.peak_bytes, w->info().parameter_bytes) << model;
  }
}

// A loss that is not a number ends the trial as an error of its own kind, saying where it came
// from: at the first step (nothing updated yet) the data or the model; later, the rate.
TEST(Trial, ALossThatIsNotANumberEndsTheTrialAndSaysWhere) {
  auto w = small();
  {
    at::NoGradGuard no_grad;
    as_module(*w).module().parameters()[0].fill_(std::nan(""));  // a model whose outputs are NaN
  }
  const Trial t = run_trial(*w, TrialOptions(8).warmup(1).steps(3));
  EXPECT_EQ(t.outcome, Outcome::Error);
  EXPECT_TRUE(t.non_finite);
  EXPECT_EQ(t.steps_run, 0);
  EXPECT_TRUE(t.step_times_s.empty());
  EXPECT_EQ(t.samples_per_s, 0);
  EXPECT_NE(t.message.find("the training loss is NaN at the first step, before any update: the data or the model"),
            std::string::npos)
      << t.message;

  CpuMemoryTracker::install();
  auto diverging =
      make_workload(WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(256).lr(1e6).device("cpu"));
  const Trial d = run_trial(*diverging, TrialOptions(32).warmup(0).steps(30));
  EXPECT_EQ(d.outcome, Outcome::Error) << d.loss_last;
  EXPECT_TRUE(d.non_finite);
  EXPECT_GT(d.steps_run, 0);
  EXPECT_NE(d.message.find("training diverged; the learning rate is too high for this batch"), std::string::npos)
      << d.message;
}

TEST(Trial, TrainsAnEvalModeModelAndPutsTheModeBack) {
  auto w = small("resnet18");
  as_module(*w).module().eval();
  const Copy before = copy_of(as_module(*w));
  const Trial t = run_trial(*w, TrialOptions(4).warmup(0).steps(1));
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  expect_identical(before, copy_of(as_module(*w)));
  EXPECT_FALSE(as_module(*w).module().is_training());
}

// fp16 on the CPU (autocast to float16, GradScaler's policy): the mlp with Adam from a loss scale
// so large that its first steps overflow, after two steps that gave Adam its state.
constexpr int kHugeScaleExponent = 40;
constexpr int kSteps = 24;  // enough for 2^40 to settle: the mlp's steps fit from 2^30 or so

std::unique_ptr<Workload> fp16_mlp() {
  CpuMemoryTracker::install();
  auto w = make_workload(WorkloadOptions()
                             .model("mlp")
                             .dataset("synthetic")
                             .synthetic_size(512)
                             .optimizer(Optimizer::Adam)
                             .precision(Precision::Fp16)
                             .device("cpu"));
  for (int i = 0; i < 2; ++i) w->train_step(w->next_batch(16));
  as_module(*w).set_loss_scale(std::ldexp(1.0, kHugeScaleExponent));
  return w;
}

// The trial reports the steps it skipped; the scale they settled carries over (the scaler is
// batchwise's, see ModuleWorkload::loss_scale), so the next trial skips none; the model, Adam's
// state, the global RNG and the data order come back bit-identical all the same.
TEST(Trial, Fp16SkippedStepsAreReportedAndTheSettledScaleCarriesOver) {
  auto w = fp16_mlp(), twin = fp16_mlp();
  auto& m = as_module(*w);
  const Copy before = copy_of(m);
  ASSERT_FALSE(before.adam.empty());
  const at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  const Trial first = run_trial(*w, TrialOptions(16).warmup(2).steps(kSteps));
  ASSERT_EQ(first.outcome, Outcome::Ok) << first.message;
  EXPECT_GT(first.skipped_steps, 2);  // 2^40 halves past 2^30 before a step fits
  EXPECT_LT(first.skipped_steps, first.steps_run);
  // Each skipped step halved the scale; no growth in so few steps.
  const double settled = m.loss_scale();
  EXPECT_EQ(settled, std::ldexp(1.0, kHugeScaleExponent - first.skipped_steps));
  EXPECT_EQ(m.skipped_steps(), first.skipped_steps);
  expect_identical(before, copy_of(m));
  EXPECT_TRUE(at::equal(at::detail::getDefaultCPUGenerator().get_state(), rng)) << "the global RNG moved";
  EXPECT_TRUE(at::equal(w->next_batch(16).input, twin->next_batch(16).input)) << "the data order moved";

  const Trial second = run_trial(*w, TrialOptions(16).warmup(2).steps(4));
  ASSERT_EQ(second.outcome, Outcome::Ok) << second.message;
  EXPECT_EQ(second.skipped_steps, 0);
  EXPECT_EQ(m.loss_scale(), settled);
}

// A trial whose every step overflowed settled nothing: the scale it halved to is not kept (a
// diverging trial would otherwise leave a collapsed scale behind), and the runner does not run it
// again (it would skip the same steps).
TEST(Trial, Fp16TrialThatOnlyOverflowedKeepsTheScaleItStartedFrom) {
  auto w = fp16_mlp();
  const Trial t = WorkloadRunner(*w).run(TrialOptions(16).warmup(0).steps(2));
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  EXPECT_EQ(t.skipped_steps, 2);
  EXPECT_EQ(t.steps_run, 2);
  EXPECT_EQ(t.message, "");
  EXPECT_EQ(as_module(*w).loss_scale(), std::ldexp(1.0, kHugeScaleExponent));
}

// fit, sweep and tune run their trials through the runner: a trial that skipped steps while the
// scale settled runs again from the settled scale, and the report shows that run with a note. (The
// settled scale sits just below overflow, as GradScaler's does, so a later step of the second run
// may still overflow once as training moves on: then the run is flagged, and not run a third time.)
TEST(Trial, RunnerRunsAgainATrialWhoseStepsWereSkippedWhileTheScaleSettled) {
  auto w = fp16_mlp();
  const Trial t = WorkloadRunner(*w).run(TrialOptions(16).warmup(2).steps(kSteps));
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  EXPECT_EQ(t.steps_run, kSteps + 2);
  const int64_t first = as_module(*w).skipped_steps() - t.skipped_steps;
  EXPECT_GT(first, 2);
  EXPECT_LT(t.skipped_steps, first);
  EXPECT_EQ(t.message, fmt::format("ran twice: the first run skipped {} of its {} steps while fp16's loss scale "
                                   "settled",
                                   first, kSteps + 2));
}

// The measured step costs nothing of batchwise's own (issue #32): per step, run_trial's loop makes as
// many tensor allocations as a plain LibTorch loop over the same model, optimizer and batches (zero
// grad, forward, loss, backward, step, the loss read back), so no per-step bookkeeping, copy or
// timing allocates. Counted by the CPU tracker's allocation counter, as the difference between two
// trials of different lengths (a trial's fixed work, its state snapshot and restore, cancels out).
TEST(Trial, TheMeasuredStepAllocatesNoMoreThanAPlainLoop) {
  auto& tracker = CpuMemoryTracker::install();
  for (const char* model : {"mlp", "lenet"}) {
    SCOPED_TRACE(model);
    auto w = make_workload(WorkloadOptions().model(model).dataset("synthetic").synthetic_size(512).device("cpu"));
    auto* m = dynamic_cast<ModuleWorkload*>(w.get());
    ASSERT_NE(m, nullptr);
    const auto allocations_of = [&](int steps) {
      const int64_t before = tracker.allocations();
      const Trial t = run_trial(*w, TrialOptions(16).warmup(1).steps(steps));
      EXPECT_EQ(t.outcome, Outcome::Ok) << t.message;
      return tracker.allocations() - before;
    };
    (void)allocations_of(1);  // lazily made state (optimizer buffers, oneDNN's primitives) first
    const int64_t measured = (allocations_of(11) - allocations_of(1)) / 10;

    const auto plain_loop = [&](int steps) {
      const int64_t before = tracker.allocations();
      for (int i = 0; i < steps; ++i) {
        const Batch b = m->next_batch(16);
        m->optimizer().zero_grad();
        at::Tensor loss = m->loss()(m->model().forward(b.input), b.target);
        loss.backward();
        m->optimizer().step();
        (void)loss.item<double>();
      }
      return tracker.allocations() - before;
    };
    (void)plain_loop(2);
    const int64_t plain = (plain_loop(11) - plain_loop(1)) / 10;
    EXPECT_GT(plain, 0);
    EXPECT_LE(measured, plain) << "run_trial's step allocates " << measured << " tensors, a plain loop's " << plain;
  }
}

}  // namespace
}  // namespace batchwise

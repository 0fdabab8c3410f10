// run_trial on real (small) workloads: real training steps that lower the loss, on every built-in
// model, refused options, and a model in eval mode trained and put back bit-identical.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "batchwise/error.h"
#include "batchwise/memory.h"
#include "batchwise/trial.h"
#include "batchwise/workload.h"
#include "support/workloads.h"

namespace batchwise {
namespace {

using namespace test;

TEST(Trial, RunsRealTrainingSteps) {
  CpuMemoryTracker::install();
  auto w = make_workload(WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(1024).lr(0.1).device("cpu"));
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

TEST(Trial, EveryBuiltInModelTrains) {
  for (const std::string model : {"mlp", "lenet", "resnet18", "transformer"}) {
    auto w = small(model, "adamw");
    const Trial t = run_trial(*w, TrialOptions(4).warmup(0).steps(1));
    EXPECT_EQ(t.outcome, Outcome::Ok) << model << ": " << t.message;
    EXPECT_TRUE(std::isfinite(t.loss_first)) << model;
    EXPECT_GT(t.peak_bytes, w->info().parameter_bytes) << model;
  }
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

}  // namespace
}  // namespace batchwise

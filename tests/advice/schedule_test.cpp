// The rate over a run of known length, and validate's full runs: every candidate trains the same
// epochs under the schedule and is judged on its final held-out quality, then its time.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "batchwise/error.h"
#include "batchwise/memory.h"
#include "batchwise/report.h"
#include "batchwise/schedule.h"
#include "batchwise/validate.h"
#include "batchwise/workload.h"

namespace batchwise {
namespace {

LrAdvice advice(double lr, double from, int64_t warmup_steps) {
  LrAdvice a;
  a.lr = lr;
  a.warmup_from_lr = from;
  a.warmup_steps = warmup_steps;
  return a;
}

// Warm-up from the base rate, then the shape over the remaining steps: cosine halves the rate half
// way and ends near 0; step decays tenfold at a half and again at three quarters.
TEST(Schedule, WarmsUpThenDecaysOverTheRestOfTheRun) {
  const LrAdvice a = advice(0.4, 0.1, 4);
  const int64_t total = 104;  // 4 warm-up steps, 100 after
  EXPECT_DOUBLE_EQ(scheduled_lr(a, LrSchedule::Cosine, 0, total), 0.175);
  EXPECT_DOUBLE_EQ(scheduled_lr(a, LrSchedule::Cosine, 3, total), 0.4);
  EXPECT_DOUBLE_EQ(scheduled_lr(a, LrSchedule::Cosine, 4, total), 0.4);
  EXPECT_NEAR(scheduled_lr(a, LrSchedule::Cosine, 54, total), 0.2, 1e-12);
  EXPECT_LT(scheduled_lr(a, LrSchedule::Cosine, 103, total), 0.001);
  EXPECT_DOUBLE_EQ(scheduled_lr(a, LrSchedule::Step, 53, total), 0.4);
  EXPECT_DOUBLE_EQ(scheduled_lr(a, LrSchedule::Step, 54, total), 0.04);
  EXPECT_DOUBLE_EQ(scheduled_lr(a, LrSchedule::Step, 79, total), 0.004);
  EXPECT_DOUBLE_EQ(scheduled_lr(a, LrSchedule::Constant, 103, total), 0.4);
}

// The advised warm-up (an epoch of samples) takes at most a quarter of a short run.
TEST(Schedule, TheWarmUpTakesAtMostAQuarterOfTheRun) {
  const LrAdvice a = advice(0.4, 0.1, 100);
  EXPECT_EQ(run_warmup_steps(a, 40), 10);
  EXPECT_EQ(run_warmup_steps(a, 1000), 100);
  EXPECT_DOUBLE_EQ(scheduled_lr(a, LrSchedule::Constant, 9, 40), 0.4);
}

std::unique_ptr<Workload> mlp(int64_t samples) {
  CpuMemoryTracker::install();
  return make_workload(
      WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(samples).device("cpu").seed(3));
}

// Full runs: each batch trains exactly the epochs asked (its last batch may run past the data's
// end), is evaluated after its last step on the whole held-out set, and the answer is the fastest
// of those within the held-out set's noise of the best; the workload comes back as it was.
TEST(Validate, FullRunsTrainTheEpochsAndCompareFinalQuality) {
  auto w = mlp(1000);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  const auto before = dynamic_cast<ModuleWorkload&>(*w).module().parameters()[0].clone();
  const ValidationResult v =
      validate(*w, held_out,
               ValidateOptions({16, 100}).epochs(2).lr_schedule(LrSchedule::Cosine).measure_lr(false).held_out_samples(200));
  EXPECT_TRUE(at::equal(before, dynamic_cast<ModuleWorkload&>(*w).module().parameters()[0]));
  EXPECT_EQ(v.epochs, 2);
  EXPECT_EQ(v.lr_schedule, "cosine");
  ASSERT_EQ(v.runs.size(), 2u);
  EXPECT_EQ(v.runs[0].steps, 125);  // ceil(2 x 1000 / 16)
  EXPECT_EQ(v.runs[1].steps, 20);
  for (const ValidationRun& r : v.runs) {
    ASSERT_TRUE(r.final_loss.has_value()) << r.batch << ": " << r.message;
    ASSERT_TRUE(r.final_accuracy.has_value());
    EXPECT_TRUE(std::isfinite(*r.final_loss));
    EXPECT_LE(r.warmup_steps, r.steps / 4);
    EXPECT_FALSE(r.reached);
    EXPECT_EQ(r.curve.back().samples, r.steps * r.batch);  // the last evaluation after the last step
    EXPECT_EQ(r.curve.size(), 10u);
  }
  ASSERT_TRUE(v.best_batch.has_value());
  ASSERT_TRUE(v.fastest_batch.has_value());
  EXPECT_NE(std::find(v.good_batches.begin(), v.good_batches.end(), *v.best_batch), v.good_batches.end());
  EXPECT_NE(std::find(v.good_batches.begin(), v.good_batches.end(), *v.fastest_batch), v.good_batches.end());
  double fastest_s = 1e300;
  for (const ValidationRun& r : v.runs)
    if (r.good) fastest_s = std::min(fastest_s, r.train_s);
  for (const ValidationRun& r : v.runs)
    if (r.batch == *v.fastest_batch) EXPECT_EQ(r.train_s, fastest_s);
  // The JSON carries the full runs' fields.
  Report report;
  report.validation = v;
  const std::string json = to_json(report);
  for (const char* field : {"\"final_loss\"", "\"final_accuracy\"", "\"good_batches\"", "\"best_batch\"",
                            "\"lr_schedule\": \"cosine\""})
    EXPECT_NE(json.find(field), std::string::npos) << field;
}

// A decaying rate needs the run's length, and a full run is not stopped at a target.
TEST(Validate, FullRunsAndTargetsAreRefusedTogetherAndASchedulesNeedsEpochs) {
  auto w = mlp(200);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  try {
    validate(*w, held_out, ValidateOptions({16}).lr_schedule(LrSchedule::Cosine).target_accuracy(0.5));
    FAIL() << "a schedule without epochs was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("give --epochs N"), std::string::npos) << e.what();
  }
  try {
    validate(*w, held_out, ValidateOptions({16}).epochs(1).target_accuracy(0.5));
    FAIL() << "a target beside --epochs was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("give one of them"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace batchwise

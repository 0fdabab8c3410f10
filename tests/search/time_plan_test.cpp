// tune's time plan: step times read from trials, a sweep's and a noise scale's predicted seconds,
// and the time left (Eta) that never grows while the trials keep to their predicted proportions.
#include "batchwise/time_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "batchwise/sweep.h"

namespace batchwise {
namespace {

Trial ok_trial(int64_t batch, std::vector<double> steps, double wall_s) {
  Trial t;
  t.batch = batch;
  t.outcome = Outcome::Ok;
  t.step_times_s = std::move(steps);
  t.wall_s = wall_s;
  return t;
}

TEST(TimePlan, StepTimesComeFromTheFastestStepOfEachTrialThatRan) {
  Trial oom = ok_trial(8192, {}, 0.5);
  oom.outcome = Outcome::Oom;
  // A cold first step (0.05) is not the batch's time; the overhead is wall - steps, the median.
  const StepCost cost = step_cost(
      {ok_trial(32, {0.05, 0.004}, 0.064), ok_trial(128, {0.02, 0.01}, 0.04), ok_trial(4096, {0.6, 0.32}, 0.93), oom});
  ASSERT_EQ(cost.step_s.size(), 3u);
  EXPECT_DOUBLE_EQ(cost.at(32), 0.004);
  EXPECT_DOUBLE_EQ(cost.at(4096), 0.32);
  EXPECT_DOUBLE_EQ(cost.at(1), 0.004);                       // below the smallest: latency-bound, its step time
  EXPECT_DOUBLE_EQ(cost.at(8192), 0.64);                     // above the largest: its time per sample
  EXPECT_NEAR(cost.at(64), std::sqrt(0.004 * 0.01), 1e-12);  // log-log between 32 and 128
  EXPECT_NEAR(cost.trial_overhead_s, 0.01, 1e-12);
}

TEST(TimePlan, ASweepTrialRunsItsStepsOrItsMinimumTimeWhicheverIsLonger) {
  const StepCost cost = step_cost({ok_trial(1, {0.001}, 0.011), ok_trial(1024, {0.1}, 0.11)});
  // Batch 1: 0.1 s of 1 ms steps is 100 steps, plus 2 of warm-up and the 10 ms overhead.
  EXPECT_NEAR(sweep_trial_seconds(cost, 1, 2, 5, 0.1), 0.01 + 102 * 0.001, 1e-9);
  // Batch 1024: 5 steps take longer than 0.1 s.
  EXPECT_NEAR(sweep_trial_seconds(cost, 1024, 2, 5, 0.1), 0.01 + 7 * 0.1, 1e-9);
  const SweepOptions o = SweepOptions().batch_sizes({1, 1024}).repetitions(3);
  EXPECT_NEAR(sweep_seconds(cost, o), 3 * (0.112 + 0.71), 1e-9);
  // Noise scale at 1024 in micro-batches of 128: 8 micro-batches a step.
  EXPECT_NEAR(noise_scale_seconds(cost, 1024, 128, 20), 20 * 8 * cost.at(128), 1e-12);
}

TEST(TimePlan, TheSweepIsExpectedToStopWhereThePredictedSamplesPerSecondFlatten) {
  // Step time 1 ms + 10 us a sample: samples/s rise to 1e5 and flatten past about 1024.
  std::vector<Trial> trials;
  for (int64_t b : {1, 16, 256, 4096, 65536}) trials.push_back(ok_trial(b, {1e-3 + 1e-5 * static_cast<double>(b)}, 0));
  const StepCost cost = step_cost(trials);
  std::vector<int64_t> doublings;
  for (int64_t b = 1; b <= 65536; b *= 2) doublings.push_back(b);
  SweepOptions o = SweepOptions().batch_sizes(doublings).stop_after_flat(3);
  const std::vector<int64_t> expected = expected_sweep_batches(cost, o);
  ASSERT_FALSE(expected.empty());
  EXPECT_LT(expected.back(), 65536);
  EXPECT_GE(expected.back(), 1024);
  o.stop_after_flat(-1);  // never stops: every batch
  EXPECT_EQ(expected_sweep_batches(cost, o), doublings);
  const std::vector<Trial> points = expected_points(cost, {16, 1024});
  ASSERT_EQ(points.size(), 2u);
  EXPECT_NEAR(points[1].samples_per_s, 1024 / cost.at(1024), 1e-6);
}

// A sweep's trials grow with the batch. The pace over trials (elapsed / done x left) under-counts
// what is left while the cheap trials run and then grows; the Eta, over predicted seconds, is right
// after the first trial when the prediction is off by a factor, and never grows by more than the
// trials' noise.
TEST(TimePlan, TheTimeLeftNeverGrowsByMoreThanTheNoiseWhereThePaceOverTrialsDoes) {
  std::vector<double> predicted;
  for (int rep = 0; rep < 3; ++rep)
    for (int k = 0; k < 13; ++k) predicted.push_back(0.1 + 1e-3 * std::pow(2.0, rep % 2 == 0 ? k : 12 - k));
  double planned = 0;
  for (double p : predicted) planned += p;
  Eta eta(planned);
  double elapsed = 0, last_eta = 1e300, worst_eta_growth = 0, worst_pace_growth = 0, last_pace = 1e300;
  for (size_t i = 0; i < predicted.size(); ++i) {
    const double noise = i % 3 == 0 ? 1.05 : 0.95;     // +-5 %
    const double actual = 1.7 * predicted[i] * noise;  // this machine runs 1.7x slower than predicted
    elapsed += actual;
    eta.finished(predicted[i], actual);
    const double left = eta.left_s();
    const double pace = elapsed / static_cast<double>(i + 1) * static_cast<double>(predicted.size() - i - 1);
    if (i > 0) {
      worst_eta_growth = std::max(worst_eta_growth, left / last_eta);
      worst_pace_growth = std::max(worst_pace_growth, pace / last_pace);
    }
    last_eta = left;
    last_pace = pace;
    if (i == 0) {  // right after the first trial: the true time left, within the noise
      double truth = 0;
      for (size_t j = 1; j < predicted.size(); ++j) truth += 1.7 * predicted[j];
      EXPECT_NEAR(left / truth, 1.0, 0.06);
    }
  }
  EXPECT_LT(worst_eta_growth, 1.11);
  EXPECT_GT(worst_pace_growth, 1.5);
  EXPECT_EQ(eta.left_s(), 0);
}

TEST(TimePlan, TrialsThatWillNotRunLeaveThePlan) {
  Eta eta(10);
  eta.finished(1, 2);  // twice as slow as predicted
  EXPECT_DOUBLE_EQ(eta.left_s(), 18);
  eta.dropped(6);  // the sweep stopped: those trials will not run
  EXPECT_DOUBLE_EQ(eta.left_s(), 6);
  EXPECT_DOUBLE_EQ(Eta(5).left_s(), 5);  // nothing finished: the prediction as it is
}

}  // namespace
}  // namespace batchwise

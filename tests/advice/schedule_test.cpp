// The rate over a run of known length: the advised warm-up, then the schedule's shape.
#include <gtest/gtest.h>

#include "batchwise/schedule.h"

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

}  // namespace
}  // namespace batchwise

// The learning-rate range test and the advised rate, on the closed-form regression
// (support/regression.h): the range test finds its stability limit, the advice caps the rule below it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "batchwise/lr.h"
#include "support/regression.h"

namespace batchwise {
namespace {

using test::Regression;
using test::stability_limit;

// The range test's last rate before the loss ran away brackets the closed-form limit at every
// batch: within a factor of two below it (at batch 4 one batch's loss is noisy enough to cross the
// line early) and not far above it (the run-away takes a few steps to show).
TEST(LrRangeTest, FindsTheClosedFormStabilityLimit) {
  for (int64_t batch : {4, 32, 512}) {
    Regression problem(1.0, 0.01);
    const LrRange r = lr_range_test(*problem.workload, LrRangeOptions(batch).lr_low(0.01).lr_high(10).steps(48));
    ASSERT_TRUE(r.diverged_lr.has_value()) << batch;
    ASSERT_TRUE(r.stable_lr.has_value()) << batch;
    const double limit = stability_limit(batch);
    EXPECT_GE(*r.stable_lr, 0.5 * limit) << "batch " << batch;
    EXPECT_LE(*r.stable_lr, 2.5 * limit) << "batch " << batch;
    EXPECT_GT(*r.diverged_lr, *r.stable_lr);
  }
}

// The rule's rate is capped below the limit where it would run away, and the capped rate trains;
// where the rule stays at or below the base rate nothing is measured or capped.
TEST(LrAdvice, CapsTheRuleBelowTheClosedFormLimit) {
  Regression problem(1.0, 0.2);
  const auto options = LrAdviceOptions(32, 0.2).warmup_samples(4096);
  const LrAdvice big = advise_lr(*problem.workload, 1024, options);  // the rule says 6.4
  EXPECT_DOUBLE_EQ(big.scaled.lr, 6.4);
  ASSERT_TRUE(big.capped) << big.advice;
  EXPECT_LT(big.lr, stability_limit(1024));
  EXPECT_GT(big.lr, stability_limit(1024) / 4);
  EXPECT_EQ(big.warmup_steps, 4);  // 4096 samples of warm-up at 1024
  EXPECT_NE(big.advice.find("capped at"), std::string::npos) << big.advice;
  EXPECT_LT(problem.expected_loss(big, 1024, 200), 1.05);  // trains to the noise floor
  const LrAdvice small = advise_lr(*problem.workload, 16, options);
  EXPECT_DOUBLE_EQ(small.lr, 0.1);
  EXPECT_FALSE(small.range.has_value());
  EXPECT_FALSE(small.capped);
  EXPECT_EQ(small.warmup_steps, 0);
}

// A cap below the base rate leaves the rate at the base (the user's own), and the advice says so: it
// had read "capped at" the cap, and a factor of 3 below the run-away that held for the cap, not the rate.
TEST(LrAdvice, ACapBelowTheBaseRateKeepsTheBaseAndSaysSo) {
  const double base = 0.9 * stability_limit(1024);
  Regression problem(1.0, base);
  const LrAdvice a = advise_lr(*problem.workload, 1024, LrAdviceOptions(32, base).warmup_samples(4096));
  ASSERT_TRUE(a.cap_lr.has_value()) << a.advice;
  ASSERT_LT(*a.cap_lr, base) << a.advice;
  EXPECT_TRUE(a.capped);
  EXPECT_DOUBLE_EQ(a.lr, base);
  EXPECT_EQ(a.warmup_steps, 0);  // nothing to warm up to
  EXPECT_NE(
      a.advice.find(fmt::format("; kept at the base rate {:.4g}: a learning-rate range test at batch 1024", base)),
      std::string::npos)
      << a.advice;
  EXPECT_NE(a.advice.find("which puts the cap"), std::string::npos) << a.advice;
  EXPECT_EQ(a.advice.find("capped at"), std::string::npos) << a.advice;
}

// Without a set warm-up, one epoch of the workload's data (200,000 samples: 195 steps at 1024).
// The range test's own ramp (a handful of steps here) is not enough on real networks.
TEST(LrAdvice, WarmsUpOverOneEpochByDefault) {
  Regression problem(1.0, 0.2);
  const LrAdvice big = advise_lr(*problem.workload, 1024, LrAdviceOptions(32, 0.2));
  ASSERT_GT(big.lr, 0.2) << big.advice;
  EXPECT_EQ(big.warmup_steps, 200000 / 1024);
  EXPECT_DOUBLE_EQ(big.warmup_epochs, 195 * 1024.0 / 200000);
  EXPECT_NE(big.advice.find("over the first 195 steps"), std::string::npos) << big.advice;
  EXPECT_LT(problem.expected_loss(big, 1024, 400), 1.05);  // trains to the noise floor
}

// The rate schedule: a linear warm-up from the base rate, then the advised rate.
TEST(LrAdvice, WarmsUpLinearlyFromTheBaseRate) {
  LrAdvice a;
  a.lr = 0.4;
  a.warmup_from_lr = 0.1;
  a.warmup_steps = 3;
  EXPECT_DOUBLE_EQ(lr_at_step(a, 0), 0.2);
  EXPECT_DOUBLE_EQ(lr_at_step(a, 1), 0.3);
  EXPECT_DOUBLE_EQ(lr_at_step(a, 2), 0.4);
  EXPECT_DOUBLE_EQ(lr_at_step(a, 50), 0.4);
}

}  // namespace
}  // namespace batchwise

// The rate over a run of known length: the advised warm-up, then the schedule's shape.
#include <gtest/gtest.h>

#include <string>

#include "batchwise/error.h"

#include "batchwise/lr.h"
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

// The rule alone (no range test: fp16, a command) states Goyal et al.'s 5 epochs of warm-up: in a 2-epoch run of
// 1,000 samples at batch 64 (32 steps) that is a quarter of the run, 8 steps from the base rate, where the
// run's advice had read "no warm-up" after the rule had asked for one.
TEST(Schedule, TheRulesWarmUpInEpochsIsCountedInTheRunsSteps) {
  LrAdvice rule = unmeasured_lr(Optimizer::Sgd, 32, 0.01, 64);
  ASSERT_EQ(rule.warmup_steps, 0);
  ASSERT_DOUBLE_EQ(rule.warmup_epochs, 5);
  const LrAdvice run = for_the_run(rule, 2, 1000, 64, LrSchedule::Step);
  EXPECT_EQ(run.warmup_steps, 8);
  EXPECT_DOUBLE_EQ(run.warmup_from_lr, 0.01);
  EXPECT_DOUBLE_EQ(run.warmup_epochs, 8.0 * 64 / 1000);
  EXPECT_NE(run.advice.find("in your 2-epoch run (32 steps): warm-up over its first 8 (a quarter of the run at most)"),
            std::string::npos)
      << run.advice;
  // A run whose epochs do not end on a whole batch: batchwise's batches run across their ends (ceil(20 x 10,000 /
  // 512) = 391 steps), a loader's end each epoch on a partial one (20 x 20 = 400): both are said
  EXPECT_NE(for_the_run(rule, 20, 10000, 512, LrSchedule::Cosine)
                .advice.find("in your 20-epoch run (391 steps, 400 where each epoch ends on a partial batch): "),
            std::string::npos);
  // a long run takes the whole 5 epochs: 5 x 1,000 / 64, rounded up
  EXPECT_EQ(for_the_run(rule, 90, 1000, 64, LrSchedule::Cosine).warmup_steps, 79);
  // no warm-up asked (the base batch): none given
  EXPECT_EQ(for_the_run(unmeasured_lr(Optimizer::Sgd, 32, 0.01, 32), 2, 1000, 32, LrSchedule::Step).warmup_steps, 0);
}

// A run's steps and samples: ceil, at least 1, and a whole number a last bit off is that number. 1.1 x
// 50,000 is 55,000.000000000007 in doubles: validate's schedule once trained one step more than the
// fixed batches beside it.
TEST(Schedule, ARunsStepsAndSamplesAreCountedAlike) {
  EXPECT_GT(1.1 * 50000.0, 55000.0);
  EXPECT_EQ(run_samples(1.1, 50000), 55000);
  EXPECT_EQ(run_steps(1.1, 50000, 500), 110);
  EXPECT_EQ(run_steps(1.1, 50000, 1000), 55);
  EXPECT_EQ(run_steps(1, 1000, 16), 63);  // 62.5
  EXPECT_EQ(run_samples(0.0001, 1000), 1);
  EXPECT_EQ(run_steps(0.0001, 1000, 64), 1);
  EXPECT_THROW(check_run_length(1e-300, 60000), ConfigError);
  EXPECT_NO_THROW(check_run_length(1.0 / 60000, 60000));
  EXPECT_NO_THROW(check_run_length(0, 60000));  // no run given: nothing to check
}

// A batch-size schedule as --batch-schedule spells it, read back as written; the phase a point of
// the run is in.
TEST(Schedule, ABatchScheduleReadsAsWritten) {
  const auto phases = parse_batch_schedule("64:0,256:2.5,1024:3", "--batch-schedule");
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[1].batch, 256);
  EXPECT_DOUBLE_EQ(phases[1].from_epoch, 2.5);
  EXPECT_EQ(schedule_text(phases), "64:0,256:2.5,1024:3");
  EXPECT_EQ(phase_at(phases, 0).batch, 64);
  EXPECT_EQ(phase_at(phases, 2.49).batch, 64);
  EXPECT_EQ(phase_at(phases, 2.5).batch, 256);
  EXPECT_EQ(phase_at(phases, 9).batch, 1024);
}

// Each bad spelling is refused with the flag, what is wrong and the form to write.
TEST(Schedule, ABadBatchScheduleIsRefusedWithTheFix) {
  const auto refused = [](const std::string& text, const std::string& why) {
    try {
      parse_batch_schedule(text, "--batch-schedule");
      ADD_FAILURE() << text << " was accepted";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(why), std::string::npos) << text << ": " << what;
      EXPECT_NE(what.find("--batch-schedule"), std::string::npos) << what;
      EXPECT_NE(what.find("e.g. 64:0,256:2"), std::string::npos) << what;
    }
  };
  refused("64,256", "has no ':'");
  refused("x:0,256:2", "'x' in 'x:0,256:2' is not a batch size");
  refused("0:0,256:2", "'0' in '0:0,256:2' is not a batch size");
  refused("64:0,256:two", "'two' in '64:0,256:two' is not an epoch");
  refused("64:0,256:-1", "'-1' in '64:0,256:-1' is not an epoch");
  refused("64:1,256:2", "starts at epoch 1; it starts the run, at 0");
  refused("64:0,256:2,512:2", "later and later epochs (epoch 2 does not come after 2)");
  refused("64:0,64:2", "two phases of '64:0,64:2' in a row train batch 64: one phase");
  refused("", "has no ':'");
  refused("64:0,99999999999:1", "batch 99999999999 in '64:0,99999999999:1' is more than the most batchwise takes");
  try {
    parse_batch_schedule("64:0", "--batch-schedule");
    ADD_FAILURE() << "one phase was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("one phase, a fixed batch; give it in --batch-sizes"), std::string::npos)
        << e.what();
  }
}

// A schedule's rate in samples: the warm-up linear to the current phase's rate (reached at the
// step that ends it), then the shape over the rest of the run's samples: for one batch, the same
// rates scheduled_lr gives in steps, so a schedule's first phase replays that batch's own run.
TEST(Schedule, APhasedRateFollowsTheShapeInSamples) {
  EXPECT_DOUBLE_EQ(phased_lr(0.4, 0.1, LrSchedule::Cosine, 0, 10, 100, 1100), 0.13);
  EXPECT_DOUBLE_EQ(phased_lr(0.4, 0.1, LrSchedule::Cosine, 40, 10, 100, 1100), 0.25);
  EXPECT_DOUBLE_EQ(phased_lr(0.4, 0.1, LrSchedule::Cosine, 90, 10, 100, 1100), 0.4);
  EXPECT_NEAR(phased_lr(0.4, 0.1, LrSchedule::Cosine, 600, 10, 100, 1100), 0.2, 1e-12);  // half way after it
  EXPECT_NEAR(phased_lr(0.8, 0.1, LrSchedule::Cosine, 600, 40, 100, 1100), 0.4, 1e-12);  // a later phase's own rate
  EXPECT_NEAR(phased_lr(0.4, 0.1, LrSchedule::Cosine, 1100, 10, 100, 1100), 0, 1e-12);
  EXPECT_DOUBLE_EQ(phased_lr(0.4, 0.1, LrSchedule::Step, 700, 10, 100, 1100), 0.04);
  EXPECT_DOUBLE_EQ(phased_lr(0.4, 0.1, LrSchedule::Constant, 1000, 10, 100, 1100), 0.4);
  EXPECT_DOUBLE_EQ(phased_lr(0.4, 0.1, LrSchedule::Cosine, 0, 10, 0, 1000), 0.4);  // no warm-up
  const LrAdvice a = advice(0.4, 0.1, 10);
  for (const LrSchedule shape : {LrSchedule::Cosine, LrSchedule::Step, LrSchedule::Constant})
    for (int64_t step = 0; step < 110; ++step)
      EXPECT_NEAR(phased_lr(0.4, 0.1, shape, 10.0 * step, 10, 100, 1100), scheduled_lr(a, shape, step, 110), 1e-12)
          << to_string(shape) << " step " << step;
}

}  // namespace
}  // namespace batchwise

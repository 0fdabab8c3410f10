// Convergence-aware rules: the learning-rate rules at documented values, accumulation plans that
// keep the global batch, and goodput (Pollux's statistical efficiency) with the recommendation it
// moves.
#include <gtest/gtest.h>

#include <cmath>

#include "batchwise/advice.h"
#include "batchwise/convergence.h"
#include "batchwise/error.h"
#include "batchwise/recommend.h"
#include "batchwise/sweep.h"
#include "batchwise/workload.h"

namespace batchwise {
namespace {

// ---- learning rate ------------------------------------------------------------------------------

TEST(LrScaling, SgdIsLinearWithWarmUpWhenGrowing) {
  EXPECT_DOUBLE_EQ(scale_lr(Optimizer::Sgd, 128, 0.1, 256).lr, 0.2);
  EXPECT_DOUBLE_EQ(scale_lr(Optimizer::Sgd, 128, 0.1, 512).lr, 0.4);
  EXPECT_DOUBLE_EQ(scale_lr(Optimizer::Sgd, 128, 0.1, 64).lr, 0.05);
  EXPECT_EQ(scale_lr(Optimizer::Sgd, 128, 0.1, 512).warmup_epochs, 5);
  EXPECT_EQ(scale_lr(Optimizer::Sgd, 128, 0.1, 64).warmup_epochs, 0);
  EXPECT_EQ(scale_lr(Optimizer::Sgd, 128, 0.1, 256).rule, "linear");
  EXPECT_NE(scale_lr(Optimizer::Sgd, 128, 0.1, 512).advice.find("first 5 epochs"), std::string::npos);
}

TEST(LrScaling, AdamFamilyIsSquareRoot) {
  for (const Optimizer opt : {Optimizer::Adam, Optimizer::AdamW}) {
    EXPECT_DOUBLE_EQ(scale_lr(opt, 128, 1e-3, 256).lr, 1e-3 * std::sqrt(2.0)) << to_string(opt);
    EXPECT_DOUBLE_EQ(scale_lr(opt, 128, 1e-3, 512).lr, 2e-3) << to_string(opt);
    EXPECT_DOUBLE_EQ(scale_lr(opt, 128, 1e-3, 64).lr, 1e-3 / std::sqrt(2.0)) << to_string(opt);
    EXPECT_EQ(scale_lr(opt, 128, 1e-3, 512).rule, "sqrt");
    EXPECT_EQ(scale_lr(opt, 128, 1e-3, 512).warmup_epochs, 0);
  }
}

TEST(LrScaling, BadInputsAreConfigErrors) {
  WorkloadInfo lamb;
  lamb.optimizer = "lamb";  // a Workload of the user's may train with anything; the rules cover three
  EXPECT_THROW(rule_optimizer(lamb), ConfigError);
  EXPECT_THROW(parse_optimizer("lamb"), ConfigError);
  EXPECT_THROW(scale_lr(Optimizer::Sgd, 0, 0.1, 256), ConfigError);
  EXPECT_THROW(scale_lr(Optimizer::Sgd, 128, 0, 256), ConfigError);
}

// ---- accumulation plans -------------------------------------------------------------------------

TEST(Plan, KeepsTheGlobalBatchExactWithTheFewestSteps) {
  struct Case {
    int64_t global, max_micro, world, multiple_of, micro, steps;
  } cases[] = {
      {4096, 256, 1, 1, 256, 16}, {4096, 300, 1, 1, 256, 16}, {4096, 256, 2, 1, 256, 8},  {4096, 8192, 4, 1, 1024, 1},
      {1000, 64, 1, 8, 40, 25},   {96, 32, 3, 1, 32, 1},      {4097, 256, 1, 1, 241, 17},
  };
  for (const auto& c : cases) {
    const auto p = plan_accumulation(PlanRequest(c.global, c.max_micro).world_size(c.world).multiple_of(c.multiple_of));
    EXPECT_TRUE(p.exact) << c.global;
    EXPECT_EQ(p.global_batch, c.global);
    EXPECT_EQ(p.micro_batch, c.micro) << c.global << " over " << c.world;
    EXPECT_EQ(p.accumulation_steps, c.steps) << c.global;
    EXPECT_EQ(p.micro_batch * p.accumulation_steps * p.world_size, p.global_batch);
    EXPECT_LE(p.micro_batch, c.max_micro);
    EXPECT_EQ(p.micro_batch % c.multiple_of, 0);
  }
}

TEST(Plan, SaysWhyWhenTheGlobalBatchCannotBeKept) {
  // 1000 does not divide over 3 devices: 999 (333 each, 3 x 111) is nearest.
  auto p = plan_accumulation(PlanRequest(1000, 256).world_size(3));
  EXPECT_FALSE(p.exact);
  EXPECT_EQ(p.global_batch, 999);
  EXPECT_EQ(p.micro_batch * p.accumulation_steps * 3, 999);
  EXPECT_NE(p.reason.find("1000 samples do not divide evenly over 3 devices"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("nearest that can is 999"), std::string::npos) << p.reason;
  // Micro-batches must be multiples of 16: 1000 is not, 992 and 1008 are equally near; the fewer steps, 1008 = 144 x 7
  // (992 takes 32 x 31)
  p = plan_accumulation(PlanRequest(1000, 256).multiple_of(16));
  EXPECT_FALSE(p.exact);
  EXPECT_EQ(p.global_batch, 1008);
  EXPECT_EQ(p.accumulation_steps, 7);
  EXPECT_EQ(p.micro_batch % 16, 0);
  EXPECT_NE(p.reason.find("a multiple of 16"), std::string::npos) << p.reason;
  EXPECT_THROW(plan_accumulation(PlanRequest(1000, 8).multiple_of(16)), ConfigError);
  EXPECT_THROW(plan_accumulation(PlanRequest(0, 8)), ConfigError);
  // The nearest that splits is the nearest multiple of world_size x multiple_of, found at once: 16,500,000 over 7
  // devices in multiples of 65,535 (the search had tried every batch on either side in turn, each as long as it).
  p = plan_accumulation(PlanRequest(16500000, 65536).world_size(7).multiple_of(65535));
  EXPECT_EQ(p.global_batch, 16514820);  // 36 x 7 x 65,535: 14,820 above, where the multiple below is 443,925 below
  EXPECT_EQ(p.micro_batch, 65535);
  EXPECT_EQ(p.accumulation_steps, 36);
  // Nearest past plan's bound (2^32 for 2^24 over 65,536 devices in multiples of 65,536): refused, not planned
  try {
    (void)plan_accumulation(PlanRequest(16777216, 65536).world_size(65536).multiple_of(65536));
    ADD_FAILURE() << "planned";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(
        e.what(),
        "--global-batch 16777216: 256 per device has no factor that is at most 65536 and a multiple of 65536; "
        "the nearest that can be kept, 4294967296 (a multiple of 65536 devices x --multiple-of 65536), is past "
        "the most plan takes, 16777216; lower --multiple-of or --world-size");
  }
  // A prime per-device batch splits into micro-batches of 1, its count of steps: found from the largest micro down
  p = plan_accumulation(PlanRequest(16777213, 3));
  EXPECT_TRUE(p.exact);
  EXPECT_EQ(p.micro_batch, 1);
  EXPECT_EQ(p.accumulation_steps, 16777213);
}

// A global batch whose per-device batch is prime (or has no factor near the largest micro-batch) splits exactly into
// micro-batches of 1: kept, as asked, with a warning naming the nearest batch that takes the fewest steps; where the
// asked batch cannot be kept, a tie goes to the split with fewer steps; more devices than samples is refused.
TEST(Plan, AFewFactorsSplitWarnsWithTheNearestThatSplitsWell) {
  AccumulationPlan p = plan_accumulation(PlanRequest(1021, 512));
  EXPECT_TRUE(p.exact);
  EXPECT_EQ(p.micro_batch, 1);
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_EQ(p.warnings[0],
            "1021 per device has no factor above 1 that is at most 512, so each optimizer step runs 1021 micro-batches "
            "of 1 where micro-batches as large as fit would take 2: the same samples in many more, smaller passes; "
            "1020 (-1) is the nearest global batch that takes 2: 510 x 2 accumulation steps");
  EXPECT_TRUE(plan_accumulation(PlanRequest(4096, 512)).warnings.empty());
  EXPECT_TRUE(plan_accumulation(PlanRequest(4097, 256)).warnings.empty());  // 241 x 17: the fewest steps
  // 4099 over 2 devices: 4098 (3 x 683 x 2) and 4100 (410 x 5 x 2) are as near; the fewer steps
  p = plan_accumulation(PlanRequest(4099, 512).world_size(2));
  EXPECT_FALSE(p.exact);
  EXPECT_EQ(p.global_batch, 4100);
  EXPECT_EQ(p.micro_batch, 410);
  EXPECT_EQ(p.accumulation_steps, 5);
  EXPECT_TRUE(p.warnings.empty()) << p.warnings[0];
  try {
    (void)plan_accumulation(PlanRequest(4096, 512).world_size(8192));
    ADD_FAILURE() << "planned";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--world-size 8192: more devices than the --global-batch's 4096 samples, and each device takes at "
                 "least one a step; give a --global-batch of at least 8192, or at most 4096 devices");
  }
}

TEST(Plan, StatesTheLastBatchPolicyWithItsNumbers) {
  // Fashion-MNIST's 60,000 samples at a global batch of 4096: 14 full steps and 2656 left over.
  auto drop = plan_accumulation(PlanRequest(4096, 256).world_size(2).dataset_size(60000));
  EXPECT_EQ(drop.steps_per_epoch, 14);
  EXPECT_EQ(drop.dropped_samples, 2656);
  EXPECT_NE(drop.last_batch_note.find("the last 2656 samples are dropped"), std::string::npos) << drop.last_batch_note;
  auto pad = plan_accumulation(PlanRequest(4096, 256).world_size(2).dataset_size(60000).last_batch(LastBatch::Pad));
  EXPECT_EQ(pad.steps_per_epoch, 15);
  EXPECT_EQ(pad.padded_samples, 1440);
  EXPECT_NE(pad.last_batch_note.find("topped up with 1440 repeated samples"), std::string::npos);
  auto keep = plan_accumulation(PlanRequest(4096, 256).world_size(2).dataset_size(60000).last_batch(LastBatch::Keep));
  EXPECT_EQ(keep.last_step_samples, 2656);
  EXPECT_NE(keep.last_batch_note.find("1328 per device"), std::string::npos) << keep.last_batch_note;
  EXPECT_TRUE(keep.warnings.empty());
  // One sample left for two devices: one of them gets nothing.
  auto empty = plan_accumulation(PlanRequest(4096, 256).world_size(2).dataset_size(4097).last_batch(LastBatch::Keep));
  ASSERT_FALSE(empty.warnings.empty());
  EXPECT_NE(empty.warnings[0].find("1 of 2 devices with an empty batch"), std::string::npos) << empty.warnings[0];
  // BatchNorm: a last micro-batch of one sample; and micro-batches smaller than the global batch.
  auto bn =
      plan_accumulation(PlanRequest(512, 256).dataset_size(512 * 3 + 257).last_batch(LastBatch::Keep).batchnorm(true));
  bool single = false;
  for (const auto& w : bn.warnings) single |= w.find("single-sample micro-batch") != std::string::npos;
  EXPECT_TRUE(single);
  EXPECT_NE(bn.warnings[0].find("BatchNorm normalises each micro-batch of 256"), std::string::npos);
  EXPECT_NE(plan_accumulation(PlanRequest(5000, 256).dataset_size(4000)).warnings.at(0).find("no step ever runs"),
            std::string::npos);
}

// ---- goodput ------------------------------------------------------------------------------------

// Batches 32, 64 and 128 at 1000, 1900 and 2200 samples/s.
std::vector<Trial> three_points() {
  std::vector<Trial> points(3);
  const double speeds[] = {1000, 1900, 2200};
  for (int i = 0; i < 3; ++i) {
    points[i].batch = 32 << i;
    points[i].outcome = Outcome::Ok;
    points[i].samples_per_s = speeds[i];
  }
  return points;
}

TEST(Goodput, EfficiencyFollowsPollux) {
  EXPECT_DOUBLE_EQ(statistical_efficiency(100, 32, 32), 1.0);
  EXPECT_DOUBLE_EQ(statistical_efficiency(100, 32, 100), 132.0 / 200.0);
  const std::vector<Trial> points = three_points();
  const Goodput g = goodput(points, 100);
  ASSERT_EQ(g.points.size(), 3u);
  EXPECT_EQ(g.base_batch, 32);
  EXPECT_DOUBLE_EQ(g.points[2].goodput, 2200 * 132.0 / 228.0);
  EXPECT_EQ(*g.best_batch, 64);  // 1900 x 0.8049 = 1529 beats 2200 x 0.5789 = 1274

  // The recommendation moves from the throughput knee (128) to the goodput optimum, and says why.
  SweepResult sweep;
  sweep.points = points;
  sweep.knee_batch = 128;
  sweep.budget_bytes = 1 << 30;
  NoiseResult noise;
  noise.b_simple = 100;
  noise.b_simple_low = 80;
  noise.b_simple_high = 120;
  const auto rec = recommend(std::nullopt, sweep, noise, g);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->batch, 64);
  EXPECT_NE(rec->reason.find("1900 samples/s x 80 % statistical efficiency"), std::string::npos) << rec->reason;
  EXPECT_NE(rec->reason.find("the throughput knee is batch 128"), std::string::npos) << rec->reason;
  // Without a noise scale: the knee, as before.
  EXPECT_EQ(recommend(std::nullopt, sweep, std::nullopt, std::nullopt)->batch, 128);

  // A noise scale weighs the batches where its band is bounded; one that reaches infinity (a step left
  // out leaves the gradient indistinguishable from its noise) fits any noise scale, and gives no goodput.
  ASSERT_TRUE(goodput(points, noise).has_value());
  EXPECT_EQ(goodput(points, noise)->best_batch, 64);
  noise.b_simple_high = INFINITY;
  EXPECT_FALSE(goodput(points, noise).has_value());
  EXPECT_FALSE(goodput(points, NoiseResult{}).has_value());  // none measured
}

// Within a training set of 100 samples the answer weighs only the batches up to it: the knee among
// them, or goodput's best among them; the reason says the larger ones were not weighed.
TEST(Goodput, TheAnswerKeepsToTheTrainingSet) {
  const std::vector<Trial> points = three_points();
  SweepResult sweep;
  sweep.points = points;
  sweep.knee_batch = 128;
  EXPECT_EQ(knee_within(sweep, 100), 64);
  EXPECT_EQ(knee_within(sweep, 128), 128);  // the sweep's, within it
  EXPECT_EQ(knee_within(sweep, 16), 128);   // none within: the sweep's
  EXPECT_EQ(knee_within(sweep, 0), 128);    // not known
  const auto knee = recommend(std::nullopt, sweep, std::nullopt, std::nullopt, 100);
  ASSERT_TRUE(knee.has_value());
  EXPECT_EQ(knee->batch, 64);
  const std::string left_out =
      "; batches above the 100 training samples were not weighed, a step would repeat samples (the fastest of them, "
      "batch 128, at 2200 samples/s)";
  EXPECT_NE(knee->reason.find(left_out), std::string::npos) << knee->reason;
  // not "the fastest measured": batch 128 ran faster, past the training set
  EXPECT_EQ(knee->reason.rfind("batch 64 is the fastest measured within the 100 training samples at ", 0), 0u)
      << knee->reason;
  EXPECT_EQ(recommend(std::nullopt, sweep, std::nullopt, std::nullopt, 128)->batch, 128);
  EXPECT_EQ(recommend(std::nullopt, sweep, std::nullopt, std::nullopt, 16)->batch, 128);
  sweep.knee_batch = 64;  // the knee within, a faster batch above: the knee stands, measured against it
  EXPECT_EQ(recommend(std::nullopt, sweep, std::nullopt, std::nullopt, 100)->reason.find("not weighed"),
            std::string::npos);
  sweep.knee_batch = 128;
  // Goodput among the batches within it, given over all of them: at B_simple 1, batch 32's 1000
  // samples/s beat 64's 1900 x 33/65 = 965 (the knee within is 64, the sweep's 128).
  NoiseResult noise;
  noise.b_simple = 1;
  noise.b_simple_high = 2;
  const auto good = recommend(std::nullopt, sweep, noise, goodput(points, 1), 100);
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->batch, 32);
  EXPECT_NE(good->reason.find("makes the most training progress per second"), std::string::npos) << good->reason;
  EXPECT_NE(good->reason.find(left_out), std::string::npos) << good->reason;
}

}  // namespace
}  // namespace batchwise

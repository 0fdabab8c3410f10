// fit --mode model: the same exact maximum as binsearch in fewer trials, honest predictions, an
// exact breakdown of the training state, and never a batch at or above one that failed.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <map>

#include "batchwise/error.h"
#include "batchwise/fit.h"
#include "batchwise/memory.h"
#include "batchwise/recommend.h"
#include "batchwise/models.h"
#include "batchwise/sweep.h"
#include "batchwise/workload.h"

namespace batchwise {
namespace {

struct Case {
  std::string model, optimizer;
  int64_t budget_mib;
  bool simple;  // memory is linear from the first probes on: the answer takes at most 4 trials
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.model << "/" << c.optimizer; }

std::unique_ptr<Workload> workload(const Case& c) {
  CpuMemoryTracker::install();
  return make_workload(WorkloadOptions()
                           .model(c.model)
                           .optimizer(parse_optimizer(c.optimizer))
                           .dataset("synthetic")
                           .synthetic_size(1024)
                           .seq_len(16)
                           .device("cpu"));
}

// Asserted from the trial list: once a batch failed, nothing at or above it ran.
void expect_never_at_or_above_a_failure(const FitResult& r) {
  std::optional<int64_t> failed;
  for (const auto& t : r.trials) {
    if (failed) EXPECT_LT(t.batch, *failed) << "batch " << t.batch << " tried after " << *failed << " failed";
    if (!*t.within_target) failed = failed ? std::min(*failed, t.batch) : t.batch;
  }
}

class ModelMode : public ::testing::TestWithParam<Case> {};

TEST_P(ModelMode, SameExactMaximumAsBinsearchInFewerTrials) {
  const Case c = GetParam();
  auto w = workload(c);
  const auto options = FitOptions().budget_bytes(c.budget_mib << 20).multiple_of(4);
  const FitResult binsearch = fit(*w, FitOptions(options).mode(FitMode::Binsearch));
  const FitResult model = fit(*w, FitOptions(options).mode(FitMode::Model));
  ASSERT_EQ(binsearch.outcome, FitOutcome::Fits) << binsearch.message;
  ASSERT_EQ(model.outcome, FitOutcome::Fits) << model.message;
  ASSERT_FALSE(binsearch.limited_by_max);
  EXPECT_EQ(*model.batch, *binsearch.batch);
  EXPECT_LT(model.trials.size(), binsearch.trials.size());
  if (c.simple) EXPECT_LE(model.trials.size(), 4u);
  expect_never_at_or_above_a_failure(model);
  expect_never_at_or_above_a_failure(binsearch);

  // Out of sample: the memory model of every other trial predicts the fitted batch's peak within 3 %.
  std::vector<Trial> others;
  const Trial* fitted = nullptr;
  for (const auto& t : model.trials) {
    if (t.batch == *model.batch) {
      fitted = &t;
    } else {
      others.push_back(t);
    }
  }
  ASSERT_NE(fitted, nullptr);
  const auto line = fit_memory_model(others);
  ASSERT_TRUE(line.has_value());
  EXPECT_NEAR(static_cast<double>(line->predict(fitted->batch)), static_cast<double>(fitted->peak_bytes),
              0.03 * static_cast<double>(fitted->peak_bytes));
  if (fitted->predicted_peak_bytes) {  // and so did the prediction made before its trial ran, if one was
    EXPECT_NEAR(static_cast<double>(*fitted->predicted_peak_bytes), static_cast<double>(fitted->peak_bytes),
                0.03 * static_cast<double>(fitted->peak_bytes));
  }
}

INSTANTIATE_TEST_SUITE_P(EightWorkloads, ModelMode,
                         ::testing::Values(Case{"mlp", "sgd", 48, false}, Case{"mlp", "adam", 48, false},
                                           Case{"mlp", "adamw", 48, false}, Case{"lenet", "sgd", 48, true},
                                           Case{"lenet", "adam", 48, true}, Case{"lenet", "adamw", 48, true},
                                           Case{"transformer", "sgd", 48, false},
                                           Case{"transformer", "adam", 48, false}),
                         [](const auto& info) { return info.param.model + "_" + info.param.optimizer; });

// mlp on 1x28x28: 784*512+512 + 512*256+256 + 256*10+10 = 535,818 fp32 parameters.
constexpr int64_t kMlpParameterBytes = 535818 * 4;

std::unique_ptr<Workload> mlp_with(std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)> make) {
  CpuMemoryTracker::install();
  Dataset data = make_synthetic_images({1, 28, 28}, 10, 512, 0);
  auto model = make_model("mlp", ModelSpec{{1, 28, 28}, false, 0, 10});
  auto optimizer = make(model.ptr()->parameters());
  WorkloadInfo info;
  info.model = "mlp";
  return std::make_unique<ModuleWorkload>(
      info, std::move(model), std::move(optimizer), std::move(data),
      [](const at::Tensor& out, const at::Tensor& y) { return torch::nn::functional::cross_entropy(out, y); },
      c10::Device(c10::DeviceType::CPU), 0);
}

void expect_breakdown(Workload& w, int64_t optimizer_state_bytes) {
  const FitResult r = fit(w, FitOptions().budget_bytes(48 << 20));
  ASSERT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  ASSERT_TRUE(r.breakdown.has_value());
  EXPECT_EQ(r.breakdown->parameter_bytes, kMlpParameterBytes);
  EXPECT_EQ(r.breakdown->gradient_bytes, kMlpParameterBytes);
  EXPECT_EQ(r.breakdown->optimizer_state_bytes, optimizer_state_bytes);
  EXPECT_GT(r.breakdown->activation_bytes_per_sample, 0);
}

TEST(Breakdown, PlainSgdKeepsNoState) {
  auto w = mlp_with([](auto p) { return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.01)); });
  expect_breakdown(*w, 0);
}

TEST(Breakdown, SgdWithMomentumKeepsOneBufferPerParameter) {
  auto w = mlp_with(
      [](auto p) { return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.01).momentum(0.9)); });
  expect_breakdown(*w, kMlpParameterBytes);
}

TEST(Breakdown, AdamKeepsTwoStatesPerParameter) {
  auto w = mlp_with([](auto p) { return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-3)); });
  expect_breakdown(*w, 2 * kMlpParameterBytes);
}

// A search-logic double: peak memory is a line that jumps by 6 MiB at batch 1000 (a workspace or
// an algorithm switch), exactly as a trial would measure it.
class SteppedMemory final : public TrialRunner {
 public:
  static int64_t peak(int64_t b) { return (8 << 20) + b * 10240 + (b >= 1000 ? 6 << 20 : 0); }
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t;
    t.batch = o.batch();
    t.peak_bytes = std::min(peak(o.batch()), o.limit_bytes());
    t.outcome = peak(o.batch()) > o.limit_bytes() ? Outcome::Oom : Outcome::Ok;
    t.state.parameter_bytes = 4 << 20;
    t.state.gradient_bytes = 4 << 20;
    return t;
  }
  int64_t held_bytes() override { return 4 << 20; }
  int64_t default_budget_bytes() override { return 64 << 20; }
  int64_t device_total_bytes() override { return 64 << 20; }
};

TEST(ModelModeEdges, ALineThatBreaksIsDetectedAndRefittedLocally) {
  SteppedMemory runner;
  const auto options = FitOptions().budget_bytes(40 << 20).target(0.9);
  const FitResult model = fit(runner, FitOptions(options).mode(FitMode::Model));
  const FitResult binsearch = fit(runner, FitOptions(options).mode(FitMode::Binsearch));
  ASSERT_EQ(model.outcome, FitOutcome::Fits);
  EXPECT_EQ(model.batch, binsearch.batch);
  EXPECT_GT(*model.batch, 1000);  // the answer lies past the jump
  EXPECT_LE(SteppedMemory::peak(*model.batch), static_cast<int64_t>(0.9 * (40 << 20)));
  EXPECT_GT(SteppedMemory::peak(*model.batch + 1), static_cast<int64_t>(0.9 * (40 << 20)));
  ASSERT_TRUE(model.memory_model.has_value());
  ASSERT_FALSE(model.memory_model->breaks.empty());
  EXPECT_GE(model.memory_model->breaks.front().batch, 1000);  // where the prediction from below the jump missed
  EXPECT_GE(model.memory_model->batch_a, 1000);  // the final line is the local one, past the jump
  EXPECT_NEAR(model.memory_model->per_sample_bytes, 10240, 1);
  expect_never_at_or_above_a_failure(model);
}

// Out of memory in one repetition only (the allocator's state differs between passes): batch 64
// runs out of memory in the second, reversed pass, after 128 ran in the first.
class FlakyMemory final : public TrialRunner {
 public:
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t;
    t.batch = o.batch();
    t.repetitions = 1;
    t.samples_per_s = 100.0 * static_cast<double>(o.batch());
    t.step_times_s = {static_cast<double>(o.batch()) / t.samples_per_s};
    t.peak_bytes = o.batch() << 10;
    const int pass = ++runs_[o.batch()];
    t.outcome = o.batch() == 64 && pass == 2 ? Outcome::Oom : Outcome::Ok;
    return t;
  }
  int64_t held_bytes() override { return 0; }
  int64_t default_budget_bytes() override { return 64 << 20; }
  int64_t device_total_bytes() override { return 64 << 20; }

 private:
  std::map<int64_t, int> runs_;
};

TEST(SweepEdges, NothingAboveABatchThatRanOutOfMemoryIsRecommended) {
  FlakyMemory runner;
  const SweepResult s = sweep(runner, SweepOptions().batch_sizes({16, 32, 64, 128}).repetitions(2).budget_bytes(64 << 20));
  ASSERT_EQ(s.points.size(), 4u);
  EXPECT_EQ(s.points[2].outcome, Outcome::Oom);
  EXPECT_EQ(s.points[3].outcome, Outcome::Oom) << "128 ran in the first pass, but 64 ran out of memory";
  EXPECT_NE(s.points[3].message.find("batch 64 (smaller) ran out of memory"), std::string::npos) << s.points[3].message;
  ASSERT_TRUE(s.knee_batch.has_value());
  EXPECT_LE(*s.knee_batch, 32);
  const auto rec = recommend(std::nullopt, s);
  ASSERT_TRUE(rec.has_value());
  EXPECT_LE(rec->batch, 32);
}

// A fit reused from the history has its answer but no trials; with a sweep that has no ok point the
// recommendation is the fit's answer, said so, and no internal assertion.
TEST(SweepEdges, AReusedFitWithoutTrialsStillRecommends) {
  FitResult reused;
  reused.outcome = FitOutcome::Fits;
  reused.batch = 256;
  reused.budget_bytes = 1 << 30;
  SweepResult failed;
  Trial t;
  t.batch = 256;
  t.outcome = Outcome::Error;
  failed.points = {t};
  const auto rec = recommend(reused, failed);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->batch, 256);
  EXPECT_NE(rec->reason.find("the fit's answer alone"), std::string::npos) << rec->reason;
}

TEST(ModelModeEdges, StopsAtMaxAndAtNothingFits) {
  auto w = workload(Case{"mlp", "sgd", 0, false});
  const FitResult capped = fit(*w, FitOptions().budget_bytes(256 << 20).max(100));
  EXPECT_EQ(*capped.batch, 100);
  EXPECT_TRUE(capped.limited_by_max);
  EXPECT_LE(capped.trials.size(), 2u);  // a probe at 32, then --max
  const FitResult none = fit(*w, FitOptions().budget_bytes(3 << 20));
  EXPECT_EQ(none.outcome, FitOutcome::DoesNotFit);
  EXPECT_FALSE(none.batch.has_value());
  ASSERT_EQ(none.trials.size(), 2u);  // the probe at 32, then the minimum
  EXPECT_EQ(none.trials.back().batch, 1);
  EXPECT_NE(none.message.find("batch 1 "), std::string::npos) << none.message;
}

}  // namespace
}  // namespace batchwise

namespace batchwise {
namespace {

TEST(PlanFor, PresetsAndSizes) {
  EXPECT_EQ(parse_plan_device("h100").bytes, 80ll << 30);
  EXPECT_EQ(parse_plan_device("h200").bytes, 141ll << 30);
  EXPECT_EQ(parse_plan_device("t4").bytes, 16ll << 30);
  EXPECT_EQ(parse_plan_device("24GiB").bytes, 24ll << 30);
  EXPECT_EQ(parse_plan_device("24GiB").name, "24.0 GiB");
  EXPECT_THROW(parse_plan_device("tpu"), ConfigError);
}

TEST(PlanFor, ArithmeticByHand) {
  FitResult fit;
  fit.memory_model = MemoryModel{};
  fit.memory_model->fixed_bytes = 1ll << 30;         // 1 GiB
  fit.memory_model->per_sample_bytes = 1ll << 20;    // 1 MiB per sample
  const Plan p = plan_for(fit, parse_plan_device("24GiB"), 0.9, 8);
  // usable = 0.9 x (24 GiB - 512 MiB) = 21.15 GiB; minus 64 MiB of workspace, over 1.1, minus 1 GiB:
  // (22709869363.2 - 67108864) / 1.1 - 1073741824 = 19510949127.5 bytes = 18607.07 MiB -> 18600 (x8)
  ASSERT_TRUE(p.batch.has_value());
  EXPECT_EQ(*p.batch, 18600);
  EXPECT_LE(p.predicted_peak_bytes, static_cast<int64_t>(0.9 * static_cast<double>((24ll << 30) - (512ll << 20))));
  EXPECT_EQ(p.assumptions.size(), 5u);
}

TEST(PlanFor, NeedsAMemoryModel) {
  FitResult fit;
  EXPECT_THROW(plan_for(fit, parse_plan_device("h100"), 0.9), ConfigError);
}

}  // namespace
}  // namespace batchwise

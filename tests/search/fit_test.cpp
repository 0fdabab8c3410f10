// fit on real (small) workloads and on search-logic doubles: the exact maximum by binsearch, by
// doublings and by the memory model (the same answer in fewer trials, honest predictions, never a
// batch at or above one that failed), state and memory that come back bit-identical after out of
// memory, an exact breakdown of the training state, and the plan for another device.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "batchwise/error.h"
#include "batchwise/fit.h"
#include "batchwise/memory.h"
#include "batchwise/models.h"
#include "batchwise/sweep.h"
#include "batchwise/workload.h"
#include "support/workloads.h"

namespace batchwise {
namespace {

using namespace test;

TEST(Fit, BinsearchFindsTheExactMaximum) {
  auto w = small();
  const int64_t budget = 48ll << 20;
  const FitResult r = fit(*w, FitOptions().mode(FitMode::Binsearch).budget_bytes(budget).target(0.9).multiple_of(8));
  ASSERT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(*r.batch % 8, 0);
  EXPECT_FALSE(r.limited_by_max);
  const double allowed = 0.9 * static_cast<double>(budget);
  const auto found =
      std::find_if(r.trials.begin(), r.trials.end(), [&](const Trial& t) { return t.batch == *r.batch; });
  ASSERT_NE(found, r.trials.end());
  EXPECT_LE(static_cast<double>(found->peak_bytes), allowed);
  // One multiple further goes over: the answer is exact.
  const Trial next = run_trial(*w, TrialOptions(*r.batch + 8).warmup(0).steps(2).limit_bytes(budget));
  EXPECT_TRUE(next.outcome == Outcome::Oom || static_cast<double>(next.peak_bytes) > allowed)
      << "batch " << *r.batch + 8 << " peaks at " << next.peak_bytes;
}

TEST(Fit, PowerModeStopsAtTheLastDoublingThatFitted) {
  auto w = small();
  const FitResult r = fit(*w, FitOptions().mode(FitMode::Power).budget_bytes(48ll << 20));
  ASSERT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  EXPECT_EQ(*r.batch & (*r.batch - 1), 0) << "a power of two";
  EXPECT_FALSE(*r.trials.back().within_target);
  EXPECT_EQ(r.trials.back().batch, *r.batch * 2);
}

TEST(Fit, StateAndMemoryComeBackAfterOutOfMemory) {
  auto w = small("mlp", "adam");
  auto& m = as_module(*w);
  // Give the optimizer state and the parameters gradients, so there is something to keep.
  for (int i = 0; i < 2; ++i) w->train_step(w->next_batch(32));
  auto& tracker = *CpuMemoryTracker::get();
  const Copy before = copy_of(m);
  const int64_t held = tracker.current_bytes();
  // Target 1.0: every batch that does not fit fails by running out of memory; binsearch meets
  // several of them.
  const FitResult r = fit(*w, FitOptions().mode(FitMode::Binsearch).budget_bytes(40ll << 20).target(1.0));
  ASSERT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  EXPECT_GE(count(r.trials, Outcome::Oom), 2);
  expect_identical(before, copy_of(m));
  EXPECT_EQ(tracker.current_bytes(), held);
}

TEST(Fit, FreshOptimizerStaysFresh) {
  auto w = small("mlp", "adam");
  auto& m = as_module(*w);
  const int64_t held = CpuMemoryTracker::get()->current_bytes();
  fit(*w, FitOptions().budget_bytes(40ll << 20).target(1.0).max(4096));
  EXPECT_TRUE(m.optimizer().state().empty());
  for (const auto& p : m.module().parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_EQ(CpuMemoryTracker::get()->current_bytes(), held);
}

// The optimizer's whole state (momentum buffers, step counts, learning rate) in its own bytes.
std::string optimizer_bytes(ModuleWorkload& w) {
  UntrackedScope untracked;
  torch::serialize::OutputArchive archive;
  w.optimizer().save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

TEST(Fit, SgdMomentumLearningRateDataOrderAndRngComeBack) {
  auto w = small("mlp", "sgd");
  auto twin = small("mlp", "sgd");
  auto& m = as_module(*w);
  for (auto* x : {w.get(), twin.get()})
    for (int i = 0; i < 2; ++i) x->train_step(x->next_batch(16));
  static_cast<torch::optim::SGDOptions&>(m.optimizer().param_groups()[0].options()).lr(0.123);
  const std::string before = optimizer_bytes(m);
  const Copy params = copy_of(m);
  torch::manual_seed(42);
  const at::Tensor rng_before = at::rand({4});
  torch::manual_seed(42);
  fit(*w, FitOptions().budget_bytes(40ll << 20).target(1.0));
  EXPECT_TRUE(at::equal(at::rand({4}), rng_before)) << "the global RNG moved";
  EXPECT_EQ(optimizer_bytes(m), before);
  EXPECT_DOUBLE_EQ(static_cast<torch::optim::SGDOptions&>(m.optimizer().param_groups()[0].options()).lr(), 0.123);
  expect_identical(params, copy_of(m));
  // The data order continues where it was, as if no fit had run.
  const Batch after = w->next_batch(32);
  const Batch expected = twin->next_batch(32);
  EXPECT_TRUE(at::equal(after.target, expected.target));
  EXPECT_TRUE(at::equal(after.input, expected.input));
}

TEST(Fit, ConvolutionModelOutOfMemoryIsCleanToo) {
  // lenet's convolutions run through oneDNN, whose buffers come from the same allocator.
  auto w = small("lenet", "adam");
  auto& m = as_module(*w);
  w->train_step(w->next_batch(8));
  const Copy before = copy_of(m);
  const int64_t held = CpuMemoryTracker::get()->current_bytes();
  const FitResult r = fit(*w, FitOptions().budget_bytes(24ll << 20).target(1.0).mode(FitMode::Binsearch));
  ASSERT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  EXPECT_GE(count(r.trials, Outcome::Oom), 2);
  expect_identical(before, copy_of(m));
  EXPECT_EQ(CpuMemoryTracker::get()->current_bytes(), held);
}

TEST(Fit, NothingFitsIsAnOutcomeWithoutABatch) {
  auto w = small();
  const FitResult r = fit(*w, FitOptions().budget_bytes(3ll << 20));
  EXPECT_EQ(r.outcome, FitOutcome::DoesNotFit);
  EXPECT_FALSE(r.batch.has_value());
  ASSERT_EQ(r.trials.size(), 2u);  // the probe at 32, then the minimum
  EXPECT_EQ(r.trials[1].batch, 1);
  EXPECT_EQ(r.trials[1].outcome, Outcome::Oom);
  EXPECT_NE(r.message.find("batch 1 did not complete"), std::string::npos) << r.message;
}

TEST(Fit, BudgetBelowTheModelIsAConfigError) {
  auto w = small("resnet18");
  try {
    fit(*w, FitOptions().budget_bytes(1 << 20));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is below the model's own size"), std::string::npos) << e.what();
  }
}

TEST(Fit, ImpossibleOptions) {
  auto w = small();
  EXPECT_THROW(fit(*w, FitOptions().budget_bytes(64 << 20).min(100).max(10)), ConfigError);
  EXPECT_THROW(fit(*w, FitOptions().budget_bytes(64 << 20).min(100).max(120).multiple_of(64)), ConfigError);
  EXPECT_THROW(fit(*w, FitOptions().budget_bytes(64 << 20).target(1.5)), ConfigError);
  // A negative budget had read as "none given" and fitted against the device's default, unsaid
  EXPECT_THROW(fit(*w, FitOptions().budget_bytes(-5)), ConfigError);
  // a negative or NaN limit had been taken as none
  EXPECT_THROW(fit(*w, FitOptions().budget_bytes(64 << 20).trial_timeout_s(-1)), ConfigError);
  EXPECT_THROW(fit(*w, FitOptions().budget_bytes(64 << 20).trial_timeout_s(std::nan(""))), ConfigError);
  EXPECT_THROW(sweep(*w, SweepOptions().batch_sizes({8}).trial_timeout_s(-1)), ConfigError);
  // and a batch of no samples is refused by name (it was torch's "torch.cat(): expected a non-empty list")
  EXPECT_THROW(w->next_batch(0), ConfigError);
}

TEST(Fit, StopsAtMaxAndSaysSo) {
  auto w = small();
  const FitResult r = fit(*w, FitOptions().budget_bytes(256 << 20).max(48));
  ASSERT_EQ(r.outcome, FitOutcome::Fits);
  EXPECT_EQ(*r.batch, 48);
  EXPECT_TRUE(r.limited_by_max);
  EXPECT_EQ(r.trials.back().batch, 48);
}

// A workload whose step fails (not out of memory) from batch 64 on.
class Failing final : public Workload {
 public:
  explicit Failing(std::unique_ptr<Workload> inner) : inner_(std::move(inner)) {}
  WorkloadInfo info() const override { return inner_->info(); }
  c10::Device device() const override { return inner_->device(); }
  Batch next_batch(int64_t b) override { return inner_->next_batch(b); }
  at::Tensor train_step(const Batch& b) override {
    if (b.input.size(0) >= 64) throw std::runtime_error("shape mismatch in the user's step");
    return inner_->train_step(b);
  }
  std::unique_ptr<WorkloadState> save_state() override { return inner_->save_state(); }
  void restore_state(const WorkloadState& s) override { inner_->restore_state(s); }

 private:
  std::unique_ptr<Workload> inner_;
};

TEST(Fit, AnErrorBeforeAnyFitIsTheOutcomeAndNoBatchIsReported) {
  Failing w(small());
  const FitResult r = fit(w, FitOptions().budget_bytes(256 << 20).min(64));
  EXPECT_EQ(r.outcome, FitOutcome::Error);
  EXPECT_FALSE(r.batch.has_value());
  EXPECT_EQ(r.trials.back().outcome, Outcome::Error);
  EXPECT_EQ(r.trials.back().message, "shape mismatch in the user's step");
}

// A crash at a larger batch (a training command that dies at 64) is a result: that batch counts
// as not fitting, the search goes on below it, and the answer says so.
TEST(Fit, AnErrorAfterAFitIsListedAndCountsAsNotFitting) {
  Failing w(small());
  const FitResult r = fit(w, FitOptions().budget_bytes(256 << 20).mode(FitMode::Binsearch));
  ASSERT_EQ(r.outcome, FitOutcome::Fits);
  EXPECT_EQ(r.batch, 63);
  const auto failed =
      std::find_if(r.trials.begin(), r.trials.end(), [](const Trial& t) { return t.outcome == Outcome::Error; });
  ASSERT_NE(failed, r.trials.end());
  EXPECT_EQ(failed->batch, 64);
  EXPECT_NE(
      r.message.find("batch 64 failed with an error (shape mismatch in the user's step); it counts as not fitting"),
      std::string::npos)
      << r.message;
}

// A trial that ran out of time says nothing of memory: before any batch fitted it stops the fit (as an
// error does: not "no batch fits", exit 6), after one it counts as not fitting and the answer says so.
class Hangs final : public TrialRunner {
 public:
  explicit Hangs(int64_t from) : from_(from) {}
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t;
    t.batch = o.batch();
    t.outcome = o.batch() >= from_ ? Outcome::Timeout : Outcome::Ok;
    t.peak_bytes = (1 << 20) + o.batch() * 1024;
    if (t.outcome == Outcome::Timeout) t.message = "still running at the 1 s timeout after 1 of 7 steps";
    return t;
  }
  int64_t held_bytes() override { return 0; }
  int64_t default_budget_bytes() override { return 256 << 20; }
  int64_t device_total_bytes() override { return 256 << 20; }

 private:
  int64_t from_;
};

TEST(Fit, ATimeoutIsNoMemoryVerdict) {
  Hangs always(1);  // model mode probes 32 first, then the minimum, 1
  const FitResult none = fit(always, FitOptions().budget_bytes(256 << 20).max(256));
  EXPECT_EQ(none.outcome, FitOutcome::Error);
  EXPECT_EQ(none.message,
            "batch 1 timed out, so no batch size is reported: still running at the 1 s timeout after 1 of 7 steps");
  // A probe that timed out above the minimum says nothing of the minimum: the search goes on there.
  Hangs probe(32);
  const FitResult below = fit(probe, FitOptions().budget_bytes(256 << 20).max(256));
  ASSERT_EQ(below.outcome, FitOutcome::Fits) << below.message;
  EXPECT_EQ(below.batch, 31);
  Hangs large(101);
  const FitResult some = fit(large, FitOptions().budget_bytes(256 << 20).max(256).mode(FitMode::Binsearch));
  ASSERT_EQ(some.outcome, FitOutcome::Fits);
  EXPECT_EQ(some.batch, 100);
  EXPECT_NE(some.message.find("timed out (still running at the 1 s timeout after 1 of 7 steps); it counts as not "
                              "fitting"),
            std::string::npos)
      << some.message;
}

// ---- model mode ---------------------------------------------------------------------------------

struct Case {
  std::string model, optimizer;
  int64_t budget_mib;
  bool simple;  // memory is linear from the first probes on: the answer takes at most 4 trials
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.model << "/" << c.optimizer; }

std::unique_ptr<Workload> workload(const Case& c) { return small(c.model, c.optimizer); }

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

std::unique_ptr<Workload> mlp_with(
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)> make) {
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

// A search-logic double: each trial measures `peak(batch)` exactly, and runs out of memory where that
// is above the trial's limit; its model holds `state_bytes` of parameters and as many of gradients.
class CurveMemory final : public TrialRunner {
 public:
  CurveMemory(int64_t (*peak)(int64_t), int64_t state_bytes, int64_t total_bytes)
      : peak_(peak), state_bytes_(state_bytes), total_bytes_(total_bytes) {}
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t;
    t.batch = o.batch();
    t.peak_bytes = std::min(peak_(o.batch()), o.limit_bytes());
    t.outcome = peak_(o.batch()) > o.limit_bytes() ? Outcome::Oom : Outcome::Ok;
    t.state.parameter_bytes = state_bytes_;
    t.state.gradient_bytes = state_bytes_;
    return t;
  }
  int64_t held_bytes() override { return state_bytes_; }
  int64_t default_budget_bytes() override { return total_bytes_; }
  int64_t device_total_bytes() override { return total_bytes_; }

 private:
  int64_t (*peak_)(int64_t);
  int64_t state_bytes_, total_bytes_;
};

// Peak memory is a line that jumps by 6 MiB at batch 1000 (a workspace or an algorithm switch).
int64_t stepped_peak(int64_t b) { return (8 << 20) + b * 10240 + (b >= 1000 ? 6 << 20 : 0); }
CurveMemory stepped_memory() { return CurveMemory(&stepped_peak, 4 << 20, 64 << 20); }

TEST(ModelModeEdges, ALineThatBreaksIsDetectedAndRefittedLocally) {
  CurveMemory runner = stepped_memory();
  const auto options = FitOptions().budget_bytes(40 << 20).target(0.9);
  const FitResult model = fit(runner, FitOptions(options).mode(FitMode::Model));
  const FitResult binsearch = fit(runner, FitOptions(options).mode(FitMode::Binsearch));
  ASSERT_EQ(model.outcome, FitOutcome::Fits);
  EXPECT_EQ(model.batch, binsearch.batch);
  EXPECT_GT(*model.batch, 1000);  // the answer lies past the jump
  EXPECT_LE(stepped_peak(*model.batch), static_cast<int64_t>(0.9 * (40 << 20)));
  EXPECT_GT(stepped_peak(*model.batch + 1), static_cast<int64_t>(0.9 * (40 << 20)));
  ASSERT_TRUE(model.memory_model.has_value());
  ASSERT_FALSE(model.memory_model->breaks.empty());
  EXPECT_GE(model.memory_model->breaks.front().batch, 1000);  // where the prediction from below the jump missed
  EXPECT_GE(model.memory_model->batch_a, 1000);               // the final line is the local one, past the jump
  EXPECT_NEAR(model.memory_model->per_sample_bytes, 10240, 1);
  expect_never_at_or_above_a_failure(model);
}

// Peak memory with CUDA's noise: a line plus up to 8 % of its activations,
// different for each batch (on an H200, resnet18's reserved peak at batch 2470 was 12.9 GiB and at
// 2471 13.8 GiB: cuDNN picks an algorithm, and a workspace, per shape). Peaks are not monotone in the
// batch, so no search can promise the binsearch's batch; what the fit promises is a batch whose own
// measured peak is within target, never one at or above a failure, and few trials.
int64_t noisy_peak(int64_t b) {
  const uint64_t h = static_cast<uint64_t>(b) * 0x9E3779B97F4A7C15ull;
  const double noise = static_cast<double>((h >> 40) % 1000) / 1000.0 * 0.08;
  return (200 << 20) + static_cast<int64_t>(static_cast<double>(b) * 5.6e6 * (1 + noise));
}

TEST(ModelModeEdges, PeaksThatAreNotMonotoneInTheBatchStillEndInFewTrials) {
  CurveMemory runner(&noisy_peak, 45 << 20, int64_t{140} << 30);
  int said_so = 0;
  for (int64_t gib = 4; gib <= 130; gib += 3) {
    const auto options = FitOptions().budget_bytes(gib << 30).target(0.9).min(32).max(1 << 20);
    const FitResult model = fit(runner, FitOptions(options).mode(FitMode::Model));
    const FitResult binsearch = fit(runner, FitOptions(options).mode(FitMode::Binsearch));
    ASSERT_EQ(model.outcome, FitOutcome::Fits) << model.message;
    const auto allowed = static_cast<int64_t>(0.9 * static_cast<double>(gib << 30));
    EXPECT_LE(noisy_peak(*model.batch), allowed);
    // Within the noise of the binsearch's answer: 8 % of the activations.
    EXPECT_NEAR(static_cast<double>(*model.batch), static_cast<double>(*binsearch.batch), 0.08 * *binsearch.batch);
    EXPECT_LE(model.trials.size(), binsearch.trials.size()) << gib << " GiB: " << model.trials.size() << " trials";
    EXPECT_LE(model.trials.size(), 16u) << gib << " GiB";
    expect_never_at_or_above_a_failure(model);
    if (model.message.find("peaks near the answer are not monotone in the batch") != std::string::npos) ++said_so;
  }
  EXPECT_GT(said_so, 0);  // where it stopped short of the exact boundary, the fit says why
}

// The same noisy peaks, where every batch above `limit` fails with an error (a model or a command that checks its
// batch): memory decides nothing, so the peaks' noise does not stop the search short of the limit (it had answered
// below it, the batches between untried, from a command's 4 KiB of resident-memory noise)
class NoisyThenFailing final : public TrialRunner {
 public:
  explicit NoisyThenFailing(int64_t limit) : limit_(limit) {}
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t = noisy_.run(o);
    if (o.batch() > limit_) t.outcome = Outcome::Error, t.message = "index out of range in self";
    return t;
  }
  int64_t held_bytes() override { return noisy_.held_bytes(); }
  int64_t default_budget_bytes() override { return noisy_.default_budget_bytes(); }
  int64_t device_total_bytes() override { return noisy_.device_total_bytes(); }

 private:
  int64_t limit_;
  CurveMemory noisy_{&noisy_peak, 45 << 20, int64_t{140} << 30};
};

TEST(ModelModeEdges, AnErrorAboveABatchIsFoundExactlyWhateverThePeaksNoise) {
  for (int64_t limit = 41; limit <= 20000; limit = limit * 3 / 2 + 7) {
    NoisyThenFailing runner(limit);
    const FitResult model =
        fit(runner, FitOptions().budget_bytes(int64_t{130} << 30).target(0.9).min(8).max(1 << 20).mode(FitMode::Model));
    ASSERT_EQ(model.outcome, FitOutcome::Fits) << model.message;
    EXPECT_EQ(*model.batch, limit) << model.message;
    EXPECT_EQ(model.message.find("not monotone"), std::string::npos) << model.message;
  }
}

// A runner whose trials skipped fp16 steps (still, after the runner's own second run): the memory
// is stepped_peak's line, and every trial skipped 2 of its 4 steps.
class SkippingSteps final : public TrialRunner {
 public:
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t = stepped_.run(o);
    t.steps_run = 4;
    t.skipped_steps = t.outcome == Outcome::Ok ? 2 : 0;
    return t;
  }
  int64_t held_bytes() override { return 4 << 20; }
  int64_t default_budget_bytes() override { return 64 << 20; }
  int64_t device_total_bytes() override { return 64 << 20; }

 private:
  CurveMemory stepped_ = stepped_memory();
};

// A skipped step creates no optimizer state (Adam's), so the answer's peak may be short of a
// trained step's: the fit says so.
TEST(Fit, AnAnswerWhoseStepsWereSkippedSaysItsPeakMayBeShort) {
  SkippingSteps runner;
  const FitResult r = fit(runner, FitOptions().budget_bytes(16 << 20).target(0.9).mode(FitMode::Binsearch));
  ASSERT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  EXPECT_EQ(r.message, fmt::format("batch {} skipped 2 of its 4 steps (fp16 gradients overflowed), so its peak may "
                                   "miss the optimizer state of a trained step: check it in training",
                                   *r.batch));
}

// A budget above the device's memory would not stop a trial: the device (on a CPU, the kernel's
// out-of-memory killer) would, first. fit and sweep refuse it before a trial, and say the most.
TEST(Fit, ABudgetAboveTheDevicesMemoryIsRefusedBeforeATrial) {
  SkippingSteps runner;  // a device of 64 MiB
  try {
    (void)fit(runner, FitOptions().budget_bytes(int64_t{5000} << 30));
    FAIL() << "a budget of 5000 GiB on a device of 64 MiB was taken";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--memory-budget 4.88 TiB: more than the 64.0 MiB of memory the device has (on a CPU: the RAM "
                 "available now, with what batchwise holds); a trial past it would not stop at the budget but run "
                 "out of the device's memory (on a CPU, the kernel kills the process and the run is lost); give at "
                 "most 64.0MiB, or leave --memory-budget out");
  }
  EXPECT_EQ(checked_budget_bytes(runner, 64 << 20), 64 << 20);  // all of it may be given
  EXPECT_EQ(checked_budget_bytes(runner, 0), 64 << 20);         // the default
}

// A process that capped its own share of the device (torch.cuda.set_per_process_memory_fraction, then
// batchwise in process) runs out of memory at the cap: a budget above it is refused as one above the
// device's memory is, and the message names the cap. Here a device of 64 MiB capped at a quarter.
class CappedDevice final : public TrialRunner {
 public:
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions&) override { return {}; }
  int64_t held_bytes() override { return 0; }
  int64_t default_budget_bytes() override { return 16 << 20; }
  int64_t device_total_bytes() override { return 64 << 20; }
  int64_t device_usable_bytes() override { return 16 << 20; }
};

TEST(Fit, ABudgetAboveTheProcesssOwnShareOfTheDeviceIsRefused) {
  CappedDevice runner;
  try {
    (void)checked_budget_bytes(runner, 32 << 20);
    FAIL() << "a budget of 32 MiB above the process's 16 MiB was taken";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--memory-budget 32.0 MiB: more than the 16.0 MiB of the device's 64.0 MiB this process may use (its "
                 "share is capped at 25 %, as torch.cuda.set_per_process_memory_fraction sets it); a trial past it "
                 "would run out of memory at the cap, not stop at the budget; give at most 16.0MiB, raise the "
                 "process's fraction, or leave --memory-budget out");
  }
  EXPECT_EQ(checked_budget_bytes(runner, 16 << 20), 16 << 20);  // the whole share may be given
  EXPECT_EQ(checked_budget_bytes(runner, 0), 16 << 20);         // the default
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

// ---- planning for another device ----------------------------------------------------------------

// Each preset is the GPU's total as CUDA reports it (cudaMemGetInfo, torch's total_memory), in
// bytes, from the public printouts fit.cpp names; not the marketed GB read as GiB.
TEST(PlanFor, PresetsAreTheBytesCudaReports) {
  const std::pair<const char*, int64_t> expected[] = {
      {"t4", 15843721216},        {"v100", 16945512448},      {"l4", 23612293120},      {"a10", 23696375808},
      {"rtx4090", 25250627584},   {"a100-40gb", 42298834944}, {"l40s", 47576711168},    {"a6000", 51160023040},
      {"a100-80gb", 85100068864}, {"h100", 85017755648},      {"h200", 143156ll << 20},  // torch's 143,156 MiB:
                                                                                         // derived, not observed
  };
  for (const auto& [name, bytes] : expected) {
    const PlanDevice d = parse_plan_device(name);
    EXPECT_EQ(d.name, name);
    EXPECT_EQ(d.bytes, bytes) << name;
  }
  EXPECT_EQ(parse_plan_device("h100").bytes, 81079ll * 1048576 + 262144);  // deviceQuery: 81,079 MiB
  EXPECT_LT(parse_plan_device("h100").bytes, 80ll << 30);                  // below the "80 GB" read as GiB: 79.18 GiB
  EXPECT_EQ(parse_plan_device("24GiB").bytes, 24ll << 30);
  EXPECT_EQ(parse_plan_device("24GiB").name, "24.0 GiB");
  EXPECT_THROW(parse_plan_device("tpu"), ConfigError);
}

FitResult line_fit(double fixed_bytes, double per_sample_bytes) {
  FitResult fit;
  fit.memory_model = MemoryModel{};
  fit.memory_model->batch_a = 64;
  fit.memory_model->batch_b = 128;
  fit.memory_model->fixed_bytes = fixed_bytes;
  fit.memory_model->per_sample_bytes = per_sample_bytes;
  return fit;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return all;
}

TEST(PlanFor, ArithmeticByHandFromACpuFit) {
  const FitResult fit = line_fit(1ll << 30, 1ll << 20);  // 1 GiB, and 1 MiB per sample
  const Plan p = plan_for(fit, PlanSource{"cpu", "fp32"}, parse_plan_device("24GiB"), 0.9, 8);
  // usable = 0.9 x (24 GiB - 512 MiB) = 21.15 GiB; minus 64 MiB of workspace, over 1.1, minus 1 GiB:
  // (22709639577.6 - 67108864) / 1.1 - 1073741824 = 19510377006.5 bytes = 18606.5 MiB -> 18600 (x8)
  ASSERT_TRUE(p.batch.has_value());
  EXPECT_EQ(*p.batch, 18600);
  EXPECT_EQ(p.allowance.context_bytes, 512ll << 20);
  EXPECT_EQ(p.allowance.workspace_bytes, 64ll << 20);
  EXPECT_DOUBLE_EQ(p.allowance.overhead_fraction, 0.10);
  // 1.1 x (1 GiB + 18600 MiB) + 64 MiB = 1.1 x 20577255424 + 67108864
  EXPECT_EQ(p.predicted_peak_bytes, static_cast<int64_t>(1.1 * 20577255424.0) + 67108864);
  EXPECT_LE(p.predicted_peak_bytes, static_cast<int64_t>(0.9 * static_cast<double>((24ll << 30) - (512ll << 20))));
  ASSERT_EQ(p.assumptions.size(), 5u);
  const std::string all = joined(p.assumptions);
  EXPECT_NE(all.find("the allowances added cover what this CPU measurement lacks: 512 MiB for the CUDA context and "
                     "library handles (outside the caching allocator), 64.0 MiB for cuBLAS/cuDNN workspaces and 10 % "
                     "for the allocator's rounding and fragmentation\n"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("the device has 24.0 GiB as CUDA reports its total"), std::string::npos) << all;
}

// Reserved bytes on CUDA already hold the workspaces (cuBLAS and cuDNN allocate them through the
// caching allocator) and the allocator's rounding and fragmentation, but not the CUDA context.
TEST(PlanFor, ACudaFitAddsOnlyTheContext) {
  const FitResult fit = line_fit(1ll << 30, 1ll << 20);
  const Plan p = plan_for(fit, PlanSource{"cuda", "fp32"}, parse_plan_device("24GiB"), 0.9, 8);
  // (0.9 x (24 GiB - 512 MiB) - 1 GiB) / 1 MiB = (22709639577.6 - 1073741824) / 1048576 = 20633.6 -> 20632 (x8)
  ASSERT_TRUE(p.batch.has_value());
  EXPECT_EQ(*p.batch, 20632);
  EXPECT_EQ(p.predicted_peak_bytes, (1ll << 30) + (20632ll << 20));
  EXPECT_EQ(p.allowance.context_bytes, 512ll << 20);
  EXPECT_EQ(p.allowance.workspace_bytes, 0);
  EXPECT_EQ(p.allowance.overhead_fraction, 0.0);
  const std::string all = joined(p.assumptions);
  EXPECT_NE(all.find("the allowance added covers what this CUDA measurement lacks: 512 MiB for the CUDA context and "
                     "library handles (outside the caching allocator); nothing is added for cuBLAS/cuDNN workspaces "
                     "or the allocator's rounding and fragmentation, which the reserved bytes measured here already "
                     "hold"),
            std::string::npos)
      << all;
  // The same fit measured on CPU plans a smaller batch: 18600 (above).
  EXPECT_GT(*p.batch, *plan_for(fit, PlanSource{"cpu", "fp32"}, parse_plan_device("24GiB"), 0.9, 8).batch);
  EXPECT_EQ(plan_allowance(PlanSource{"cpu", "bf16"}).workspace_bytes, 64ll << 20);
  EXPECT_EQ(plan_allowance(PlanSource{"cuda", "bf16"}).workspace_bytes, 0);
}

TEST(PlanFor, TextNamesThePrecisionAndThePresetsSource) {
  const FitResult fit = line_fit(1ll << 30, 1ll << 20);
  const std::string bf16 = joined(plan_for(fit, PlanSource{"cpu", "bf16"}, parse_plan_device("h100"), 0.9).assumptions);
  EXPECT_NE(bf16.find("at the same precision (bf16) and input size"), std::string::npos) << bf16;
  EXPECT_EQ(bf16.find("fp32"), std::string::npos) << bf16;
  EXPECT_NE(bf16.find("the h100 preset's 85,017,755,648 bytes (79.2 GiB) are the device's total as CUDA reports it "
                      "(H100 80GB HBM3 SXM, deviceQuery with CUDA driver 13.0)"),
            std::string::npos)
      << bf16;
  const std::string fp16 = joined(plan_for(fit, PlanSource{"cuda", "fp16"}, parse_plan_device("l4"), 0.9).assumptions);
  EXPECT_NE(fp16.find("at the same precision (fp16)"), std::string::npos) << fp16;
  const std::string h200 = joined(plan_for(fit, PlanSource{}, parse_plan_device("h200"), 0.9).assumptions);
  EXPECT_NE(h200.find("at the same precision (fp32)"), std::string::npos) << h200;
  EXPECT_NE(h200.find("exact bytes not found; derived, not observed"), std::string::npos) << h200;
  const std::string command =
      joined(plan_for(fit, PlanSource{"cuda", "(the command's)"}, parse_plan_device("t4"), 0.9).assumptions);
  EXPECT_NE(command.find("at the same precision (as measured here)"), std::string::npos) << command;
}

TEST(PlanFor, NeedsAMemoryModel) {
  FitResult fit;
  EXPECT_THROW(plan_for(fit, PlanSource{}, parse_plan_device("h100"), 0.9), ConfigError);
}

// A command fitted by its wall time alone, its peak flat from 32 to 4096, shows nothing of training at those batches:
// `fit --cmd -- python -c "import time; time.sleep(1.05)"` had answered "batch 4096 fits", exit 0, without a word.
TEST(Fit, ACommandWhosePeakNeverGrewAndPrintedNoStepIsSaidToShowNothing) {
  FitResult fit;
  fit.outcome = FitOutcome::Fits;
  fit.batch = 4096;
  for (const int64_t b : {32, 2048, 4096}) {
    Trial t;
    t.batch = b, t.outcome = Outcome::Ok, t.wall_timing = true, t.peak_bytes = (int64_t{85} << 20) / 10 + b;
    fit.trials.push_back(t);
  }
  const std::string w = unseen_batch_warning(fit);
  EXPECT_NE(w.find("nothing shows that the command trained at the batches tried: it printed no step line, and its "
                   "peak did not grow from batch 32 to batch 4096"),
            std::string::npos)
      << w;
  fit.trials[1].wall_timing = false;  // one trial's step lines: it trained
  EXPECT_EQ(unseen_batch_warning(fit), "");
  fit.trials[1].wall_timing = true;
  fit.trials[2].peak_bytes *= 2;  // its memory grew with the batch
  EXPECT_EQ(unseen_batch_warning(fit), "");
}

}  // namespace
}  // namespace batchwise

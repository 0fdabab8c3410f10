// Trials, fit and sweep on real (small) workloads: real training steps, real out-of-memory
// outcomes from the CPU budget, and state that comes back bit-identical.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <sstream>

#include "batchwise/error.h"
#include "batchwise/fit.h"
#include "batchwise/memory.h"
#include "batchwise/sweep.h"
#include "batchwise/tune.h"
#include "batchwise/workload.h"

namespace batchwise {
namespace {

std::unique_ptr<Workload> small(const std::string& model = "mlp", const std::string& optimizer = "sgd") {
  CpuMemoryTracker::install();
  return make_workload(WorkloadOptions()
                           .model(model)
                           .dataset("synthetic")
                           .synthetic_size(1024)
                           .seq_len(16)
                           .optimizer(parse_optimizer(optimizer))
                           .device("cpu"));
}

ModuleWorkload& as_module(Workload& w) { return dynamic_cast<ModuleWorkload&>(w); }

// Everything training may change, copied by the test itself (not by the code under test).
struct Copy {
  std::vector<at::Tensor> params, param_storage, grads, buffers, adam;
  std::vector<bool> training;
};

Copy copy_of(ModuleWorkload& w) {
  UntrackedScope untracked;
  Copy c;
  for (const auto& p : w.module().parameters()) {
    c.params.push_back(p.detach().clone());
    c.param_storage.push_back(p);
    c.grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  }
  for (const auto& b : w.module().buffers()) c.buffers.push_back(b.detach().clone());
  for (const auto& m : w.module().modules()) c.training.push_back(m->is_training());
  for (const auto& p : w.module().parameters()) {
    auto it = w.optimizer().state().find(p.unsafeGetTensorImpl());
    if (it == w.optimizer().state().end()) continue;
    const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(it->second.get());
    if (s == nullptr) continue;  // other optimizers: compared through their serialized bytes
    c.adam.push_back(s->exp_avg().clone());
    c.adam.push_back(s->exp_avg_sq().clone());
    c.adam.push_back(at::scalar_tensor(static_cast<double>(s->step()), at::kDouble));
  }
  return c;
}

void expect_identical(const Copy& a, const Copy& b) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_TRUE(at::equal(a.params[i], b.params[i])) << "parameter " << i;
    EXPECT_EQ(a.param_storage[i].data_ptr(), b.param_storage[i].data_ptr()) << "parameter " << i << " moved";
    ASSERT_EQ(a.grads[i].defined(), b.grads[i].defined()) << "gradient " << i;
    if (a.grads[i].defined()) EXPECT_TRUE(at::equal(a.grads[i], b.grads[i])) << "gradient " << i;
  }
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) EXPECT_TRUE(at::equal(a.buffers[i], b.buffers[i])) << "buffer " << i;
  EXPECT_EQ(a.training, b.training);
  ASSERT_EQ(a.adam.size(), b.adam.size());
  for (size_t i = 0; i < a.adam.size(); ++i) EXPECT_TRUE(at::equal(a.adam[i], b.adam[i])) << "adam state " << i;
}

int count(const std::vector<Trial>& trials, Outcome outcome) {
  return static_cast<int>(std::count_if(trials.begin(), trials.end(), [&](const Trial& t) { return t.outcome == outcome; }));
}

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

TEST(Fit, BinsearchFindsTheExactMaximum) {
  auto w = small();
  const int64_t budget = 48ll << 20;
  const FitResult r = fit(*w, FitOptions().mode(FitMode::Binsearch).budget_bytes(budget).target(0.9).multiple_of(8));
  ASSERT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  ASSERT_TRUE(r.batch.has_value());
  EXPECT_EQ(*r.batch % 8, 0);
  EXPECT_FALSE(r.limited_by_max);
  const double allowed = 0.9 * static_cast<double>(budget);
  const auto found = std::find_if(r.trials.begin(), r.trials.end(), [&](const Trial& t) { return t.batch == *r.batch; });
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
  const auto failed = std::find_if(r.trials.begin(), r.trials.end(),
                                   [](const Trial& t) { return t.outcome == Outcome::Error; });
  ASSERT_NE(failed, r.trials.end());
  EXPECT_EQ(failed->batch, 64);
  EXPECT_NE(r.message.find("batch 64 failed with an error (shape mismatch in the user's step); it counts as not fitting"),
            std::string::npos)
      << r.message;
}

TEST(Sweep, InterleavesRepetitionsAndKeepsRawSamples) {
  auto w = small();
  std::vector<int64_t> order;
  const SweepResult r = sweep(*w, SweepOptions()
                                      .batch_sizes({8, 2, 4})
                                      .warmup(1)
                                      .steps(3)
                                      .repetitions(3)
                                      .budget_bytes(256 << 20)
                                      .on_trial([&](const Trial& t, int, int planned) {
                                        EXPECT_EQ(planned, 9);
                                        order.push_back(t.batch);
                                      }));
  EXPECT_EQ(order, (std::vector<int64_t>{2, 4, 8, 8, 4, 2, 2, 4, 8}));
  ASSERT_EQ(r.points.size(), 3u);
  for (const auto& p : r.points) {
    EXPECT_EQ(p.outcome, Outcome::Ok);
    EXPECT_EQ(p.repetitions, 3);
    EXPECT_EQ(p.step_times_s.size(), 9u);
    EXPECT_EQ(p.steps_run, 12);
  }
  ASSERT_TRUE(r.knee_batch.has_value());
}

TEST(Sweep, OutOfMemoryPointsAreListedAndNotRetried) {
  auto w = small();
  int runs = 0;
  const SweepResult r = sweep(*w, SweepOptions()
                                      .batch_sizes({8, 16, 16384, 32768})
                                      .warmup(0)
                                      .steps(1)
                                      .repetitions(2)
                                      .budget_bytes(40 << 20)
                                      .on_trial([&](const Trial&, int, int) { ++runs; }));
  ASSERT_EQ(r.points.size(), 4u);
  EXPECT_EQ(r.points[2].outcome, Outcome::Oom);
  EXPECT_EQ(r.points[3].outcome, Outcome::Oom);
  EXPECT_EQ(r.points[3].message, "not run: batch 16384 already ran out of memory");
  EXPECT_EQ(runs, 5);  // 8, 16, 16384; then 16, 8 (nothing at or above 16384 again)
  EXPECT_LE(*r.knee_batch, 16);
}

TEST(Sweep, KneeIsTheSmallestBatchWithinTolerance) {
  auto point = [](int64_t batch, double sps, Outcome o = Outcome::Ok) {
    Trial t;
    t.batch = batch;
    t.samples_per_s = sps;
    t.outcome = o;
    return t;
  };
  EXPECT_EQ(knee_batch({point(16, 100), point(32, 180), point(64, 196), point(128, 200)}, 0.05), 64);
  EXPECT_EQ(knee_batch({point(16, 100), point(32, 96), point(64, 50)}, 0.05), 16);
  EXPECT_EQ(knee_batch({point(16, 100), point(32, 300, Outcome::Oom)}, 0.05), 16);
  EXPECT_FALSE(knee_batch({point(16, 0, Outcome::Oom)}, 0.05).has_value());
}

TEST(Tune, FitsSweepsAndRecommends) {
  auto w = small();
  // The fit and sweep alone (no doctor, noise scale or race: those have tests of their own).
  const Report r = tune(TuneSubject(*w), TuneOptions()
                                             .fit(FitOptions().budget_bytes(64 << 20).max(64))
                                             // every doubling: stopping where samples/s flattens is a
                                             // decision on this machine's speed, not on the code
                                             .sweep(SweepOptions().warmup(1).steps(2).repetitions(1).stop_after_flat(-1))
                                             .doctor(false)
                                             .noise(false)
                                             .race(false));
  ASSERT_EQ(r.fit->outcome, FitOutcome::Fits);
  ASSERT_TRUE(r.sweep.has_value());
  EXPECT_EQ(r.sweep->points.size(), 7u);  // 1, 2, 4, ..., 64
  ASSERT_TRUE(r.recommendation.has_value());
  EXPECT_EQ(r.recommendation->batch, *r.sweep->knee_batch);
  EXPECT_NE(r.recommendation->reason.find("samples/s"), std::string::npos);
}

TEST(Tune, SweepsOnlyMultiplesOf) {
  auto w = small();
  const Report r = tune(TuneSubject(*w), TuneOptions()
                                             .fit(FitOptions().budget_bytes(64 << 20).max(100).multiple_of(12))
                                             .sweep(SweepOptions().warmup(0).steps(1).repetitions(1))
                                             .doctor(false)
                                             .noise(false)
                                             .race(false));
  ASSERT_EQ(r.fit->outcome, FitOutcome::Fits);
  EXPECT_EQ(*r.fit->batch, 96);
  std::vector<int64_t> swept;
  for (const auto& p : r.sweep->points) swept.push_back(p.batch);
  EXPECT_EQ(swept, (std::vector<int64_t>{12, 24, 48, 96}));
}

}  // namespace
}  // namespace batchwise

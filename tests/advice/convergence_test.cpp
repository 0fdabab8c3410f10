// Convergence-aware advice: the learning-rate rules at documented values, accumulation plans that
// keep the global batch, accumulated gradients equal to the full batch's, and the gradient noise
// scale against its closed form for linear regression with Gaussian inputs.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <sched.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "batchwise/advice.h"
#include "batchwise/convergence.h"
#include "batchwise/error.h"
#include "batchwise/loader.h"
#include "batchwise/memory.h"
#include "batchwise/recommend.h"
#include "batchwise/trial.h"
#include "batchwise/validate.h"
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
      {4096, 256, 1, 1, 256, 16}, {4096, 300, 1, 1, 256, 16}, {4096, 256, 2, 1, 256, 8}, {4096, 8192, 4, 1, 1024, 1},
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
  // Micro-batches must be multiples of 16: 1000 is not, 992 and 1008 are equally near; the smaller.
  p = plan_accumulation(PlanRequest(1000, 256).multiple_of(16));
  EXPECT_FALSE(p.exact);
  EXPECT_EQ(p.global_batch, 992);
  EXPECT_EQ(p.micro_batch % 16, 0);
  EXPECT_NE(p.reason.find("a multiple of 16"), std::string::npos) << p.reason;
  EXPECT_THROW(plan_accumulation(PlanRequest(1000, 8).multiple_of(16)), ConfigError);
  EXPECT_THROW(plan_accumulation(PlanRequest(0, 8)), ConfigError);
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
  auto bn = plan_accumulation(
      PlanRequest(512, 256).dataset_size(512 * 3 + 257).last_batch(LastBatch::Keep).batchnorm(true));
  bool single = false;
  for (const auto& w : bn.warnings) single |= w.find("single-sample micro-batch") != std::string::npos;
  EXPECT_TRUE(single);
  EXPECT_NE(bn.warnings[0].find("BatchNorm normalises each micro-batch of 256"), std::string::npos);
  EXPECT_NE(plan_accumulation(PlanRequest(5000, 256).dataset_size(4000)).warnings.at(0).find("no step ever runs"),
            std::string::npos);
}

// ---- gradient accumulation ----------------------------------------------------------------------

std::unique_ptr<Workload> small(const std::string& model) {
  CpuMemoryTracker::install();
  return make_workload(
      WorkloadOptions().model(model).dataset("synthetic").synthetic_size(512).lr(0.05).device("cpu"));
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.clone());
  return out;
}

TEST(Accumulation, MicroBatchGradientsEqualTheFullBatchGradient) {
  for (const char* model : {"mlp", "lenet"}) {
    auto w = small(model);
    const Batch batch = w->next_batch(48);
    accumulate_gradients(*w, batch, 1);
    const auto full = copies(w->gradients());
    for (int64_t k : {4, 5, 48}) {  // equal slices, unequal slices (10,10,10,9,9), single samples
      accumulate_gradients(*w, batch, k);
      const auto acc = w->gradients();
      ASSERT_EQ(acc.size(), full.size());
      for (size_t i = 0; i < acc.size(); ++i)
        EXPECT_TRUE(at::allclose(acc[i], full[i], 1e-4, 1e-6))
            << model << " k=" << k << " parameter " << i << " max diff " << (acc[i] - full[i]).abs().max().item<float>();
    }
  }
}

TEST(Accumulation, AnAccumulatedStepTrainsLikeTheFullStep) {
  auto a = small("mlp"), b = small("mlp");
  for (int step = 0; step < 3; ++step) {
    a->train_step(a->next_batch(64));
    train_step_accumulated(*b, b->next_batch(64), 8);
  }
  const auto pa = dynamic_cast<ModuleWorkload&>(*a).module().parameters();
  const auto pb = dynamic_cast<ModuleWorkload&>(*b).module().parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(at::allclose(pa[i], pb[i], 1e-4, 1e-6)) << i;
}

// A trial can train its batch the way an accumulation plan does: same samples per step, the
// activations of one micro-batch at a time.
TEST(Accumulation, TrialsTrainTheBatchInMicroBatches) {
  auto w = small("lenet");
  const Trial plain = run_trial(*w, TrialOptions(256).warmup(1).steps(1));
  const Trial accumulated = run_trial(*w, TrialOptions(256).warmup(1).steps(1).accumulation_steps(8));
  ASSERT_EQ(plain.outcome, Outcome::Ok) << plain.message;
  ASSERT_EQ(accumulated.outcome, Outcome::Ok) << accumulated.message;
  EXPECT_EQ(accumulated.accumulation_steps, 8);
  EXPECT_EQ(accumulated.steps_run, 2);
  EXPECT_LT(accumulated.peak_bytes, plain.peak_bytes * 3 / 4) << accumulated.peak_bytes << " vs " << plain.peak_bytes;
}

// The step profile's phases account for the step measured end to end in the same pass.
TEST(StepProfile, PhasesAddUpToTheStep) {
  for (const char* model : {"mlp", "lenet"}) {
    auto w = small(model);
    const auto before = copies(dynamic_cast<ModuleWorkload&>(*w).module().parameters());
    const auto p = profile_steps(*w, 128, 1, 3);
    ASSERT_TRUE(p.has_value());
    EXPECT_GT(p->mean.forward_s, 0);
    EXPECT_GT(p->mean.backward_s, 0);
    EXPECT_GT(p->mean.optimizer_s, 0);
    EXPECT_GE(p->coverage, 0.9) << model;
    EXPECT_LE(p->coverage, 1.0 + 1e-9) << model;
    const auto after = dynamic_cast<ModuleWorkload&>(*w).module().parameters();
    for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(at::equal(before[i], after[i]));  // state restored
  }
}

// bf16 on CPU: the step runs under autocast to bfloat16, the model learns, and its memory falls.
TEST(Precision, Bf16TrainsOnCpu) {
  CpuMemoryTracker::install();
  auto options = WorkloadOptions().model("lenet").dataset("synthetic").synthetic_size(2048).lr(0.05).device("cpu");
  auto fp32 = make_workload(options);
  auto bf16 = make_workload(WorkloadOptions(options).precision(Precision::Bf16));
  EXPECT_EQ(bf16->info().precision, "bf16");
  const Trial a = run_trial(*fp32, TrialOptions(256).warmup(1).steps(2));
  const Trial b = run_trial(*bf16, TrialOptions(256).warmup(1).steps(2));
  ASSERT_EQ(b.outcome, Outcome::Ok) << b.message;
  EXPECT_LT(b.peak_bytes, a.peak_bytes) << "bf16 activations take half the bytes";
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    const double loss = bf16->train_step(bf16->next_batch(64)).item<double>();
    if (i == 0) first = loss;
    last = loss;
  }
  EXPECT_LT(last, first);
  EXPECT_THROW(parse_precision("fp8"), ConfigError);
}

// fp16 on CPU (PyTorch's GradScaler("cpu")): the loss is scaled; a step whose scaled gradients
// overflow is skipped and halves the scale, and the others train.
TEST(Precision, Fp16OnCpuScalesTheLossAndSkipsOverflowingSteps) {
  CpuMemoryTracker::install();
  auto w = make_workload(
      WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(512).lr(0.05).device("cpu").precision(Precision::Fp16));
  auto& m = dynamic_cast<ModuleWorkload&>(*w);
  EXPECT_EQ(w->info().precision, "fp16");
  EXPECT_EQ(m.loss_scale(), 65536);
  m.set_loss_scale(std::ldexp(1.0, 40));  // far past half precision's 65504: the first steps overflow
  int skipped = 0, trained = 0;
  for (int i = 0; i < 40; ++i) {
    const auto before = copies(m.module().parameters());
    const double scale = m.loss_scale();
    w->train_step(w->next_batch(16));
    bool same = true;
    for (size_t k = 0; k < before.size(); ++k) same = same && at::equal(before[k], m.module().parameters()[k]);
    if (same) {
      ++skipped;
      EXPECT_EQ(m.loss_scale(), scale / 2) << "step " << i;
    } else {
      ++trained;
      EXPECT_EQ(m.loss_scale(), scale) << "step " << i;
    }
  }
  EXPECT_GE(skipped, 10);  // 2^40 halves past 2^30 before a step fits
  EXPECT_GE(trained, 5);
  EXPECT_THROW(m.set_loss_scale(0), ConfigError);
}

// The fp16 step profile times the real fp16 step: its loss scaled, its gradients unscaled and
// checked before the optimizer steps (once it skipped both, so its phases were another step's). From
// the same state and data order, profiled steps and training steps leave the same weights and the
// same scale, the steps the scaler skipped included. tests/cuda_test.cpp runs the same on a GPU.
TEST(Precision, Fp16ProfiledStepsTrainAsTheRealStep) {
  CpuMemoryTracker::install();
  auto make = [] {
    auto w = make_workload(
        WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(512).device("cpu").precision(Precision::Fp16));
    auto m = std::unique_ptr<ModuleWorkload>(dynamic_cast<ModuleWorkload*>(w.release()));
    m->set_loss_scale(std::ldexp(1.0, 36));  // the first steps overflow and are skipped
    return m;
  };
  auto trained = make(), profiled = make();
  for (int i = 0; i < 30; ++i) {
    trained->train_step(trained->next_batch(16));
    ASSERT_TRUE(profiled->profiled_step(16).has_value());
  }
  EXPECT_LT(trained->loss_scale(), std::ldexp(1.0, 36));
  EXPECT_EQ(profiled->loss_scale(), trained->loss_scale());
  const auto a = trained->module().parameters(), b = profiled->module().parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::allclose(a[i], b[i], 1e-4, 1e-5)) << "parameter " << i;
}

// The utilisation monitor samples during every in-process trial: CPU per core, resident memory,
// its own cost.
TEST(Utilisation, EveryTrialIsMonitored) {
  auto w = small("lenet");
  const Trial t = run_trial(*w, TrialOptions(512).warmup(1).steps(6));
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  ASSERT_TRUE(t.utilisation.has_value());
  const UtilisationSummary& u = *t.utilisation;
  EXPECT_GE(u.samples, 1);
  EXPECT_EQ(static_cast<size_t>(u.samples), u.timeline.size());
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  EXPECT_EQ(u.core_percent_mean.size(), static_cast<size_t>(CPU_COUNT(&mask)));
  EXPECT_GT(u.cpu_percent.max, 0);  // training kept a CPU busy
  EXPECT_LE(u.cpu_percent.max, 100);
  EXPECT_LE(u.cpu_percent.min, u.cpu_percent.mean);
  EXPECT_GT(u.rss_bytes_max, 0);
  EXPECT_GE(u.overhead_percent, 0);
  // Timestamped, in order, and covering the trial: the last sample comes after every measured step.
  for (size_t i = 1; i < u.timeline.size(); ++i) EXPECT_GT(u.timeline[i].t_s, u.timeline[i - 1].t_s);
  double steps_s = 0;
  for (double s : t.step_times_s) steps_s += s;
  EXPECT_GE(u.timeline.back().t_s, steps_s);
  EXPECT_FALSE(u.gpu_sm_percent.has_value());  // a CPU trial has no GPU fields
  EXPECT_FALSE(run_trial(*w, TrialOptions(64).warmup(0).steps(1).monitor(false)).utilisation.has_value());
}

TEST(Utilisation, OnCpuTheSamplesAreTakenBetweenSteps) {
  // Step boundaries every 5 ms for 1.2 s: the due samples (about 12) are taken there, by the
  // caller, not by a background thread waking inside a step. On a loaded machine a sleep can
  // overshoot past 1.5 intervals, and the background thread then takes that one: at least two
  // thirds must still be taken between steps (the last sample, taken by finish(), is the
  // background thread's and not counted).
  UtilisationMonitor between(0.1, -1);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1200)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    between.step_boundary();
  }
  const UtilisationSummary a = between.finish();
  EXPECT_GE(a.samples_between_steps, 4);
  EXPECT_GE(a.samples_between_steps, 2 * (a.samples - 1 - a.samples_between_steps));
  EXPECT_GT(a.overhead_percent, 0);
  // A step longer than 1.5 intervals: the background thread samples during it.
  UtilisationMonitor long_step(0.05, -1);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const UtilisationSummary b = long_step.finish();
  EXPECT_EQ(b.samples_between_steps, 0);
  EXPECT_GE(b.samples, 4);
  for (size_t i = 1; i < b.timeline.size(); ++i) EXPECT_GT(b.timeline[i].t_s, b.timeline[i - 1].t_s);
}

// ---- input pipeline -----------------------------------------------------------------------------

std::unique_ptr<Workload> piped(int workers, int64_t latency_us = 0, bool augment = false) {
  CpuMemoryTracker::install();
  return make_workload(WorkloadOptions()
                           .model("mlp")
                           .dataset("synthetic")
                           .synthetic_size(1000)
                           .device("cpu")
                           .workers(workers)
                           .io_latency_us(latency_us)
                           .augment(augment));
}

// Prefetching workers hand out exactly the batches the training thread would have drawn, in order,
// and saving or restoring the state never skips or repeats a prefetched batch.
TEST(Loader, WorkersHandOutTheSameBatchesAndStatesStayExact) {
  auto plain = piped(0), workers = piped(3);
  for (int i = 0; i < 6; ++i) {
    const Batch a = plain->next_batch(64), b = workers->next_batch(64);
    EXPECT_TRUE(at::equal(a.target, b.target)) << "batch " << i;
    EXPECT_TRUE(at::allclose(a.input, b.input)) << "batch " << i;
  }
  const auto saved = workers->save_state();  // 3 x 2 batches were prefetched ahead: none may be lost
  const Batch next = workers->next_batch(64);
  EXPECT_TRUE(at::equal(next.target, plain->next_batch(64).target));
  (void)workers->next_batch(64);
  workers->restore_state(*saved);
  EXPECT_TRUE(at::equal(workers->next_batch(64).target, next.target));
}

TEST(Loader, SlowInputIsFlaggedAndMoreWorkersRemoveTheStall) {
  // 30 ms of latency per batch of 64, some 10 to 20 mlp steps: one worker leaves the step waiting
  // most of the time, 32 workers (sleeping, not computing) never, even beside another test.
  auto one = piped(1, 470), many = piped(32, 470);
  const Trial slow = run_trial(*one, TrialOptions(64).warmup(2).steps(8));
  const Trial fed = run_trial(*many, TrialOptions(64).warmup(34).steps(8));  // the first 64 batches fill the queue
  ASSERT_EQ(slow.outcome, Outcome::Ok) << slow.message;
  ASSERT_EQ(fed.outcome, Outcome::Ok) << fed.message;
  EXPECT_TRUE(slow.input_bound) << slow.data_wait_share;
  EXPECT_FALSE(fed.input_bound) << fed.data_wait_share;
  EXPECT_GT(fed.samples_per_s, slow.samples_per_s);
  const LoaderSearch search = search_loader(dynamic_cast<ModuleWorkload&>(*one), 64, 34, 6, {1, 32}, {2});
  EXPECT_TRUE(search.before.input_bound) << search.before.data_wait_share;
  ASSERT_TRUE(search.after.has_value()) << search.advice;
  EXPECT_EQ(search.after->workers, 32);
  EXPECT_NE(search.advice.find("--workers 32"), std::string::npos) << search.advice;
  EXPECT_EQ(std::get<0>(dynamic_cast<ModuleWorkload&>(*one).pipeline()), 1);  // put back
}

// The search's decision on known figures per setting (what run_trial measured is injected): the
// fewest workers, then least prefetch, that are not input-bound and within 5 % of the best.
LoaderTrial loader_trial(int workers, int prefetch, double samples_per_s, double data_wait_share) {
  LoaderTrial t;
  t.workers = workers;
  t.prefetch = prefetch;
  t.outcome = Outcome::Ok;
  t.samples_per_s = samples_per_s;
  t.data_wait_share = data_wait_share;
  t.input_bound = data_wait_share > kInputBoundShare;
  return t;
}

TEST(Loader, DecisionTakesTheFewestWorkersThatFeedTheStepWithinFivePercentOfTheBest) {
  LoaderSearch s;
  s.batch = 64;
  s.before = loader_trial(0, 2, 1000, 0.8);
  s.trials = {loader_trial(0, 2, 1000, 0.8), loader_trial(1, 2, 2500, 0.5), loader_trial(1, 4, 2600, 0.45),
              loader_trial(2, 2, 3720, 0.1),  loader_trial(2, 4, 3800, 0.1), loader_trial(4, 2, 3900, 0.02),
              loader_trial(8, 2, 3850, 0.01)};
  decide_loader(s);
  ASSERT_TRUE(s.after.has_value()) << s.advice;
  EXPECT_EQ(s.after->workers, 2);  // 3720 >= 0.95 x 3900 = 3705; one worker is still input-bound
  EXPECT_EQ(s.after->prefetch, 2);
  EXPECT_EQ(s.advice, "--workers 2 --prefetch 2: 3720 samples/s with 10 % of the step waiting for data, against 1000 "
                      "samples/s and 80 % with 0 workers (prefetch 2): the stall is gone");
  // Two workers 6 % below the best: four it is.
  s.trials[3].samples_per_s = s.trials[4].samples_per_s = 3660;
  decide_loader(s);
  ASSERT_TRUE(s.after.has_value());
  EXPECT_EQ(s.after->workers, 4);
}

TEST(Loader, DecisionKeepsAFedSettingAndSaysWhenNothingHelps) {
  LoaderSearch s;
  s.batch = 32;
  s.before = loader_trial(2, 2, 5000, 0.05);
  s.trials = {loader_trial(0, 2, 2000, 0.6), loader_trial(4, 2, 5200, 0.01)};
  decide_loader(s);
  ASSERT_TRUE(s.after.has_value());
  EXPECT_EQ(s.after->workers, 2);  // not input-bound as given: nothing to remove
  EXPECT_EQ(s.advice, "the current setting (2 workers, prefetch 2) already keeps the step fed at batch 32 (5 % of it "
                      "waiting for data)");
  s.before = loader_trial(0, 2, 1000, 0.9);
  s.trials = {loader_trial(0, 2, 1000, 0.9), loader_trial(8, 2, 1100, 0.7)};
  s.trials.push_back(loader_trial(16, 2, 0, 0));
  s.trials.back().outcome = Outcome::Oom;  // not input-bound, but not a run either
  decide_loader(s);
  EXPECT_FALSE(s.after.has_value()) << s.after->workers;
  EXPECT_NE(s.advice.find("no setting tried removes the stall at batch 32"), std::string::npos) << s.advice;
}

TEST(Loader, AugmentationCropsAndFlipsImages) {
  CpuMemoryTracker::install();
  auto options = WorkloadOptions().model("lenet").dataset("synthetic").synthetic_size(256).device("cpu");
  auto plain = make_workload(options), augmented = make_workload(WorkloadOptions(options).augment(true).workers(2));
  const Batch a = plain->next_batch(32), b = augmented->next_batch(32);
  EXPECT_EQ(a.input.sizes(), b.input.sizes());
  EXPECT_TRUE(at::equal(a.target, b.target));
  EXPECT_FALSE(at::allclose(a.input, b.input));  // shifted and flipped copies of the same images
  try {
    make_workload(WorkloadOptions(options).model("transformer").augment(true));  // tokens: nothing to crop
    ADD_FAILURE() << "augmenting tokens was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--augment: random crops and flips are for image datasets"), std::string::npos)
        << e.what();
  }
}

// ---- gradient noise scale -----------------------------------------------------------------------

// y = x.w* + sigma.eps with x ~ N(0, I_d), trained with the mean squared error at fixed weights
// w = w* + delta. Per sample the gradient is 2x(x.delta - sigma.eps), so
//   G = 2 delta,  E[g g^T] = 4((|delta|^2 + sigma^2) I + 2 delta delta^T),
//   tr(Sigma) = 4(d(|delta|^2 + sigma^2) + |delta|^2),  B_simple = d(1 + sigma^2/|delta|^2) + 1.
struct LinearRegression {
  static constexpr int64_t d = 16;
  static constexpr double sigma = 1.0;
  std::unique_ptr<ModuleWorkload> workload;
  double delta2 = 0;

  explicit LinearRegression(double delta_norm) {
    at::manual_seed(7);
    const int64_t n = 100000;
    const at::Tensor w_star = at::randn({d});
    const at::Tensor x = at::randn({n, d});
    const at::Tensor y = (x.matmul(w_star) + sigma * at::randn({n})).unsqueeze(1);
    at::Tensor delta = at::randn({d});
    delta = delta / delta.norm() * delta_norm;
    delta2 = delta.pow(2).sum().item<double>();
    torch::nn::Linear linear(torch::nn::LinearOptions(d, 1).bias(false));
    {
      at::NoGradGuard no_grad;
      linear->weight.copy_((w_star + delta).unsqueeze(0));
    }
    auto optimizer = std::make_unique<torch::optim::SGD>(linear->parameters(), torch::optim::SGDOptions(0.01));
    Dataset data;
    data.name = "gaussian-regression";
    data.inputs = x;
    data.targets = y;
    WorkloadInfo info;
    info.model = "linear";
    info.dataset = data.name;
    info.loss = "mse";
    info.optimizer = "sgd";
    workload = std::make_unique<ModuleWorkload>(
        info, torch::nn::AnyModule(linear), std::move(optimizer), data,
        [](const at::Tensor& out, const at::Tensor& target) { return (out - target).pow(2).mean(); },
        c10::Device(c10::kCPU), 1);
  }
  double b_simple() const { return d * (1 + sigma * sigma / delta2) + 1; }
};

TEST(NoiseScale, MatchesTheClosedFormForLinearRegression) {
  for (double delta_norm : {1.0, 0.5}) {  // B_simple 33 and 81
    LinearRegression problem(delta_norm);
    const NoiseResult r =
        measure_noise_scale(*problem.workload, NoiseOptions().batch(512).micro_batch(32).steps(200).train(false));
    ASSERT_TRUE(r.b_simple.has_value()) << r.message;
    const double truth = problem.b_simple();
    EXPECT_NEAR(*r.b_simple, truth, 0.15 * truth) << "|delta| " << delta_norm;
    EXPECT_NEAR(r.g2, 4 * problem.delta2, 0.15 * 4 * problem.delta2);
    EXPECT_LE(r.b_simple_low, truth);  // the band holds the truth
    EXPECT_GE(r.b_simple_high, truth);
    EXPECT_EQ(r.timeline.size(), 200u);
    ASSERT_TRUE(r.timeline.back().b_simple_smoothed.has_value());
  }
}

TEST(NoiseScale, TrainingRunRestoresTheWorkloadAndReportsDrift) {
  auto w = small("mlp");
  auto& m = dynamic_cast<ModuleWorkload&>(*w);
  const auto before = copies(m.module().parameters());
  const NoiseResult r = measure_noise_scale(*w, NoiseOptions().batch(64).micro_batch(8).steps(12));
  EXPECT_EQ(r.timeline.size(), 12u);
  EXPECT_TRUE(r.drift.has_value());
  for (const auto& s : r.timeline) EXPECT_GE(s.g2_small, s.g2_big);  // a mean's norm is at most the mean norm
  const auto after = m.module().parameters();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(at::equal(before[i], after[i])) << i;
  EXPECT_THROW(measure_noise_scale(*w, NoiseOptions().batch(64).micro_batch(24)), ConfigError);
}

TEST(Goodput, EfficiencyFollowsPollux) {
  EXPECT_DOUBLE_EQ(statistical_efficiency(100, 32, 32), 1.0);
  EXPECT_DOUBLE_EQ(statistical_efficiency(100, 32, 100), 132.0 / 200.0);
  std::vector<Trial> points(3);
  const double speeds[] = {1000, 1900, 2200};
  for (int i = 0; i < 3; ++i) {
    points[i].batch = 32 << i;
    points[i].outcome = Outcome::Ok;
    points[i].samples_per_s = speeds[i];
  }
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
}

// ---- validation ---------------------------------------------------------------------------------

ValidationRun run_at(int64_t batch, bool reached, double seconds) {
  ValidationRun r;
  r.batch = batch;
  r.reached = reached;
  r.train_s = seconds;
  r.steps = 100;
  r.epochs = 0.5;
  r.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, batch);
  r.message = reached ? "" : "not reached within --max-epochs 1";
  return r;
}

TEST(Validation, ConfirmsCorrectsOrSaysItCouldNot) {
  const Recommendation rec{128, "batch 128 makes the most training progress per second"};
  ValidationResult v;
  v.target = "test accuracy >= 0.85";
  v.runs = {run_at(64, true, 5.0), run_at(128, true, 4.0), run_at(256, false, 9.0)};
  v.fastest_batch = 128;
  Recommendation out = confirm(rec, v);
  EXPECT_EQ(out.batch, 128);
  EXPECT_NE(out.reason.find("validated: it reached test accuracy >= 0.85 soonest, in 4.0 s of training"),
            std::string::npos) << out.reason;
  v.runs[0].train_s = 3.0;
  v.fastest_batch = 64;
  out = confirm(rec, v);
  EXPECT_EQ(out.batch, 64);
  EXPECT_NE(out.reason.find("batch 64 reached test accuracy >= 0.85 soonest, in 3.0 s"), std::string::npos) << out.reason;
  EXPECT_NE(out.reason.find("the predicted batch 128 took 4.0 s"), std::string::npos) << out.reason;
  v.fastest_batch.reset();
  for (auto& r : v.runs) r.reached = false;
  out = confirm(rec, v);
  EXPECT_EQ(out.batch, 128);
  EXPECT_NE(out.reason.find("not validated: no candidate reached"), std::string::npos) << out.reason;
}

}  // namespace
}  // namespace batchwise

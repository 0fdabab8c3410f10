// Tests that need a CUDA device (label "cuda"); each skips where none is visible.
#include <ATen/ATen.h>
#if BATCHWISE_WITH_CUDA  // c10_cuda: in a build against a Torch with CUDA only
#include <c10/cuda/CUDACachingAllocator.h>
#endif
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "batchwise/device.h"
#include "batchwise/error.h"
#include "batchwise/fit.h"
#include "batchwise/memory.h"
#include "batchwise/trace.h"
#include "batchwise/trial.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"

namespace batchwise {
namespace {

#define REQUIRE_CUDA() \
  if (!built_with_cuda() || !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

// After a fit that ran out of memory, the device holds what it held before. The baseline is taken
// after a real training step (on another copy of the workload) and release_cached: a first step
// leaves cuBLAS/cuBLASLt workspaces behind (one per handle and stream), so a baseline taken before
// any step would miss what the fit's first step creates, whoever frees it. Binsearch doubles until
// a batch runs out (model mode may predict its way to the edge without one: on an H200 it did).
TEST(Cuda, OutOfMemoryIsCaughtByTypeAndMemoryComesBack) {
  REQUIRE_CUDA();
  CpuMemoryTracker::install();
  const auto options = WorkloadOptions().model("resnet18").dataset("synthetic").synthetic_size(2048).device("cuda");
  auto w = make_workload(options);
  auto memory = device_memory("cuda", 0);
  {
    auto warm = make_workload(options);
    (void)warm->train_step(warm->next_batch(8)).item<double>();
  }
  memory->synchronize();
  memory->release_cached();  // as every trial ends
  const int64_t allocated = memory->allocated_bytes();
  const int64_t budget = 2ll << 30;
  const FitResult r = fit(*w, FitOptions().mode(FitMode::Binsearch).budget_bytes(budget).target(1.0).max(16384));
  ASSERT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  int ooms = 0;
  for (const auto& t : r.trials) ooms += t.outcome == Outcome::Oom;
  EXPECT_GE(ooms, 1);
  memory->synchronize();
  EXPECT_EQ(memory->allocated_bytes(), allocated);
}

#if BATCHWISE_WITH_CUDA
namespace alloc = c10::cuda::CUDACachingAllocator;
// The process's memory fraction put back to the whole device when a test ends, whatever failed in it:
// the next tests run without the cap.
struct Uncapped {
  ~Uncapped() { alloc::setMemoryFraction(1.0, 0); }
};
#endif

// A process that capped its own share of the device (torch.cuda.set_per_process_memory_fraction,
// before calling batchwise in process) keeps it: a trial's limit is the smaller of the two, and
// lifting it puts the cap back. It had lifted the cap to the whole device after the first trial.
TEST(Cuda, ATrialKeepsTheProcesssOwnMemoryFraction) {
#if !BATCHWISE_WITH_CUDA
  GTEST_SKIP() << "no CUDA device";
#else
  REQUIRE_CUDA();
  CpuMemoryTracker::install();
  Uncapped uncapped;
  auto w = make_workload(WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(512).device("cuda"));
  auto limit = device_memory("cuda", 0), other = device_memory("cuda", 0);
  const int64_t total = limit->total_bytes();
  alloc::setMemoryFraction(0.5, 0);
  limit->set_limit(total / 10 * 9);  // above the cap: the cap holds
  EXPECT_NEAR(alloc::getMemoryFraction(0), 0.5, 1e-3);
  other->set_limit(0);  // lifted through another DeviceMemory, as a data-parallel rank lifts: the cap is back
  EXPECT_NEAR(alloc::getMemoryFraction(0), 0.5, 1e-3);
  limit->set_limit(total / 10);  // below the cap: the limit
  EXPECT_NEAR(alloc::getMemoryFraction(0), 0.1, 1e-3);
  other->set_limit(0);
  EXPECT_NEAR(alloc::getMemoryFraction(0), 0.5, 1e-3);
  // A fit's budget above the cap is refused (Cuda.TheDefaultBudgetIsTheProcesssOwnShare); its trials'
  // limits below it are lifted back to the cap, not to the whole device.
  const FitResult r = fit(*w, FitOptions().budget_bytes(total / 10 * 4).max(64));
  EXPECT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  EXPECT_NEAR(alloc::getMemoryFraction(0), 0.5, 1e-3);  // put back after every trial, not lifted to 1.0
#endif
}

// The same cap is the default budget, and the most a budget may be: the device's whole memory was,
// and a fit then planned for batches that run out at the cap.
TEST(Cuda, TheDefaultBudgetIsTheProcesssOwnShare) {
#if !BATCHWISE_WITH_CUDA
  GTEST_SKIP() << "no CUDA device";
#else
  REQUIRE_CUDA();
  CpuMemoryTracker::install();
  Uncapped uncapped;
  auto w = make_workload(WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(512).device("cuda"));
  WorkloadRunner runner(*w);
  const int64_t total = runner.device_total_bytes();
  EXPECT_EQ(runner.default_budget_bytes(), total);
  alloc::setMemoryFraction(0.5, 0);
  EXPECT_NEAR(static_cast<double>(runner.default_budget_bytes()), 0.5 * static_cast<double>(total), 1 << 20);
  EXPECT_EQ(runner.device_total_bytes(), total);  // the report's device memory is still the device's
  EXPECT_THROW((void)checked_budget_bytes(runner, total / 4 * 3), ConfigError);
  EXPECT_EQ(checked_budget_bytes(runner, total / 4), total / 4);
  auto memory = device_memory("cuda", 0);
  memory->set_limit(total / 10);  // a trial's limit in place: the process's own cap is still the one read
  EXPECT_NEAR(static_cast<double>(runner.default_budget_bytes()), 0.5 * static_cast<double>(total), 1 << 20);
  memory->set_limit(0);
  const FitResult r = fit(*w, FitOptions().max(64));  // under the default budget, the cap
  EXPECT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  EXPECT_NEAR(static_cast<double>(r.budget_bytes), 0.5 * static_cast<double>(total), 1 << 20);
#endif
}

// The README's "no memory stays held" on CUDA: the workspaces cuBLAS and cuBLASLt keep per handle
// and stream after a matmul (fp32, fp16, and addmm with a bias, which ATen may send to cuBLASLt)
// are allocated bytes, not cache, and release_cached frees them with the cache.
TEST(Cuda, ReleasingTheCacheFreesTheCublasWorkspaces) {
  REQUIRE_CUDA();
  auto memory = device_memory("cuda", 0);
  memory->synchronize();
  memory->release_cached();  // workspaces an earlier test in this process left
  const int64_t before = memory->allocated_bytes();
  {
    const auto on_device = at::TensorOptions().device(at::kCUDA, 0);
    const at::Tensor a = at::randn({256, 256}, on_device), bias = at::randn({256}, on_device);
    const at::Tensor half = a.to(at::kHalf);
    const at::Tensor outputs[] = {at::mm(a, a), at::addmm(bias, a, a), at::mm(half, half),
                                  at::addmm(bias.to(at::kHalf), half, half)};
    for (const auto& out : outputs) EXPECT_TRUE(at::isfinite(out).all().item<bool>());
  }
  memory->synchronize();
  memory->release_cached();
  EXPECT_EQ(memory->allocated_bytes(), before);
}

// A model's own size, measured before a fit, is what the process holds with its cache handed back:
// after another workload's trials (tune --compare-precision's second precision) the cache held their
// blocks, and on an H200 resnet18 "held 40.9 GiB before training a single sample" under a 40 GiB budget.
TEST(Cuda, HeldBytesBeforeAFitLeaveOutAnotherWorkloadsCache) {
  REQUIRE_CUDA();
  const auto options = WorkloadOptions().model("resnet18").dataset("synthetic").synthetic_size(512).device("cuda");
  int64_t params = 0;
  {
    auto first = make_workload(options);
    params = first->info().parameter_bytes;
    const Trial t = run_trial(*first, TrialOptions(256).warmup(0).steps(2));
    ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
    at::Tensor kept = at::empty({64 << 20}, at::TensorOptions().device(at::kCUDA));  // 256 MiB, freed to the cache
  }
  auto second = make_workload(options);
  WorkloadRunner runner(*second);
  EXPECT_LT(runner.held_bytes(), 8 * params + (64 << 20));  // the model, its buffers, the workspaces; no cache
}

TEST(Cuda, TrialMeasuresReservedAndAllocatedPeaks) {
  REQUIRE_CUDA();
  CpuMemoryTracker::install();
  auto w = make_workload(WorkloadOptions().model("lenet").dataset("synthetic").device("cuda"));
  const Trial t = run_trial(*w, TrialOptions(256).warmup(1).steps(3));
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  EXPECT_GE(t.peak_bytes, t.peak_allocated_bytes);
  EXPECT_GT(t.peak_allocated_bytes, w->info().parameter_bytes);
}

// The fp16 step profile times the real fp16 step: its loss scaled, its gradients unscaled and
// checked before the optimizer steps (once it skipped both, so its phases were another step's). From
// the same state and data order, profiled steps and training steps leave the same weights and the
// same scale. It starts at GradScaler's 2^16, where lenet's steps train (the weights move), and
// the growth interval is shortened from 2000 so that the scale's growth happens within the test.
constexpr int kGrowthInterval = 8;

TEST(Cuda, Fp16ProfiledStepsTrainAsTheRealStep) {
  REQUIRE_CUDA();
  // cuDNN's fastest backward kernels may sum in any order; deterministic ones keep the two copies'
  // weights comparable, and their overflow checks alike.
  struct DeterministicCudnn {
    const bool was = at::globalContext().deterministicCuDNN();
    DeterministicCudnn() { at::globalContext().setDeterministicCuDNN(true); }
    ~DeterministicCudnn() { at::globalContext().setDeterministicCuDNN(was); }
  } deterministic;
  auto make = [] {
    auto w = make_workload(WorkloadOptions()
                               .model("lenet")
                               .dataset("synthetic")
                               .synthetic_size(4096)
                               .device("cuda")
                               .precision(Precision::Fp16));
    auto m = std::unique_ptr<ModuleWorkload>(dynamic_cast<ModuleWorkload*>(w.release()));
    m->set_loss_scale_growth_interval(kGrowthInterval);
    return m;
  };
  auto trained = make(), profiled = make();
  const double initial_scale = std::ldexp(1.0, 16);
  ASSERT_EQ(trained->loss_scale(), initial_scale);
  std::vector<at::Tensor> initial;
  for (const auto& p : trained->module().parameters()) initial.push_back(p.detach().clone());
  constexpr int kSteps = 5 * kGrowthInterval;
  double largest_scale = 0;
  for (int i = 0; i < kSteps; ++i) {
    (void)trained->train_step(trained->next_batch(64)).item<double>();
    ASSERT_TRUE(profiled->profiled_step(64).has_value());
    largest_scale = std::max(largest_scale, trained->loss_scale());
  }
  torch::cuda::synchronize();
  EXPECT_GT(largest_scale, initial_scale) << "the scale never grew: no " << kGrowthInterval << " good steps in a row";
  EXPECT_LT(trained->skipped_steps(), kSteps / 2);
  EXPECT_EQ(profiled->skipped_steps(), trained->skipped_steps());
  EXPECT_EQ(profiled->loss_scale(), trained->loss_scale());
  const auto a = trained->module().parameters(), b = profiled->module().parameters();
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), initial.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_FALSE(at::equal(a[i], initial[i])) << "parameter " << i << " did not train";
    EXPECT_TRUE(at::allclose(a[i], b[i], 1e-4, 1e-5)) << "parameter " << i;
  }
}

// --trace on CUDA: Kineto records the step's kernels with their device time, not only the host's
// dispatch of each operator (what the legacy profiler gave).
TEST(Cuda, TraceHoldsTheStepsKernels) {
  REQUIRE_CUDA();
  auto w = make_workload(WorkloadOptions().model("lenet").dataset("synthetic").device("cuda"));
  const std::string path = ::testing::TempDir() + "cuda_step.trace.json";
  const StepTrace t = write_step_trace(*w, 64, path);
  const auto doc = nlohmann::json::parse(std::ifstream(path));
  int64_t kernels = 0, operators = 0;
  for (const auto& e : doc.at("traceEvents")) {
    const std::string cat = e.value("cat", "");
    if (cat == "kernel") {
      ++kernels;
      EXPECT_GE(e.value("dur", -1.0), 0) << e.dump();
    }
    operators += cat == "cpu_op";
  }
  EXPECT_GT(kernels, 0) << t.note;
  EXPECT_EQ(t.kernel_events, kernels);
  EXPECT_EQ(t.events, static_cast<int64_t>(doc.at("traceEvents").size()));
  EXPECT_GT(operators, 0);
  EXPECT_TRUE(t.note.empty()) << t.note;
  std::remove(path.c_str());
}

// The summary's GPU utilisation is the trial's own: busy for a trial that keeps the GPU busy for
// 3 s; for a trial shorter than the driver's shortest sample period (1/6 s) no figure, and a note.
TEST(Cuda, UtilisationFiguresAreTheTrialsOwnOrLeftOut) {
  REQUIRE_CUDA();
  using clock = std::chrono::steady_clock;
  const at::Tensor a = at::randn({4096, 4096}, at::kCUDA), b = at::randn({4096, 4096}, at::kCUDA);
  auto busy_for = [&](double seconds) {
    const auto start = clock::now();
    while (std::chrono::duration<double>(clock::now() - start).count() < seconds) (void)at::mm(a, b);
    torch::cuda::synchronize();
  };
  busy_for(0.5);  // idle before the first monitor would not matter, but warm the kernels
  {
    UtilisationMonitor monitor(0.25, 0);
    busy_for(3.0);
    const UtilisationSummary u = monitor.finish();
    ASSERT_TRUE(u.gpu_sm_percent.has_value()) << u.gpu_percent_note;
    EXPECT_GT(u.gpu_sm_percent->mean, 50) << u.gpu_percent_note;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the driver's periods go idle
  const auto start = clock::now();
  UtilisationMonitor monitor(0.25, 0);
  busy_for(0.02);
  const UtilisationSummary u = monitor.finish();
  const double window_s = std::chrono::duration<double>(clock::now() - start).count();
  if (!u.gpu_sm_percent) EXPECT_FALSE(u.gpu_percent_note.empty());
  if (window_s < 1.0 / 6) {
    EXPECT_FALSE(u.gpu_sm_percent.has_value()) << "a " << window_s << " s window, mean " << u.gpu_sm_percent->mean;
    EXPECT_FALSE(u.gpu_percent_note.empty());
  }
}

}  // namespace
}  // namespace batchwise

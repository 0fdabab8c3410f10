// Tests that need a CUDA device (label "cuda"); each skips where none is visible.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "batchwise/device.h"
#include "batchwise/fit.h"
#include "batchwise/memory.h"
#include "batchwise/trace.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"

namespace batchwise {
namespace {

#define REQUIRE_CUDA()                                                                         \
  if (!built_with_cuda() || !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

TEST(Cuda, OutOfMemoryIsCaughtByTypeAndMemoryComesBack) {
  REQUIRE_CUDA();
  CpuMemoryTracker::install();
  auto w = make_workload(WorkloadOptions().model("resnet18").dataset("synthetic").synthetic_size(2048).device("cuda"));
  auto memory = device_memory("cuda", 0);
  memory->synchronize();
  const int64_t allocated = memory->allocated_bytes();
  const int64_t budget = 2ll << 30;
  const FitResult r = fit(*w, FitOptions().budget_bytes(budget).target(1.0).max(16384));
  ASSERT_EQ(r.outcome, FitOutcome::Fits) << r.message;
  int ooms = 0;
  for (const auto& t : r.trials) ooms += t.outcome == Outcome::Oom;
  EXPECT_GE(ooms, 1);
  memory->synchronize();
  EXPECT_EQ(memory->allocated_bytes(), allocated);
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
// the same state and data order, profiled steps and training steps leave the same weights, the
// steps the scaler skipped included.
TEST(Cuda, Fp16ProfiledStepsTrainAsTheRealStep) {
  REQUIRE_CUDA();
  auto make = [] {
    auto w = make_workload(WorkloadOptions().model("lenet").dataset("synthetic").synthetic_size(1024).device("cuda").precision(Precision::Fp16));
    auto m = std::unique_ptr<ModuleWorkload>(dynamic_cast<ModuleWorkload*>(w.release()));
    m->set_loss_scale(std::ldexp(1.0, 36));  // the first steps overflow and are skipped
    return m;
  };
  auto trained = make(), profiled = make();
  for (int i = 0; i < 6; ++i) {
    trained->train_step(trained->next_batch(64));
    ASSERT_TRUE(profiled->profiled_step(64).has_value());
  }
  torch::cuda::synchronize();
  EXPECT_LT(trained->loss_scale(), std::ldexp(1.0, 36));
  EXPECT_EQ(profiled->loss_scale(), trained->loss_scale());
  const auto a = trained->module().parameters(), b = profiled->module().parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::allclose(a[i], b[i], 1e-4, 1e-5)) << "parameter " << i;
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

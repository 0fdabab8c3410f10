// Tests that need a CUDA device (label "cuda"); each skips where none is visible.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "batchwise/device.h"
#include "batchwise/fit.h"
#include "batchwise/memory.h"
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

}  // namespace
}  // namespace batchwise

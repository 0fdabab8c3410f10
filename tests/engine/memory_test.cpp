#include "batchwise/memory.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

namespace batchwise {
namespace {

TEST(CpuMemoryTracker, CountsKnownTensorsExactly) {
  auto& tracker = CpuMemoryTracker::install();
  const int64_t before = tracker.current_bytes();
  tracker.reset_peak();
  {
    at::Tensor a = at::empty({1000, 1000}, at::kFloat);  // 1000 x 1000 x 4 bytes
    EXPECT_EQ(tracker.current_bytes() - before, 4000000);
    at::Tensor b = at::empty({250, 4}, at::kDouble);     // 1000 x 8 bytes
    EXPECT_EQ(tracker.current_bytes() - before, 4008000);
    at::Tensor c = at::empty({3, 5}, at::kByte);         // 15 bytes
    EXPECT_EQ(tracker.current_bytes() - before, 4008015);
  }
  EXPECT_EQ(tracker.current_bytes(), before);
  EXPECT_EQ(tracker.peak_bytes() - before, 4008015);
}

TEST(CpuMemoryTracker, PeakFollowsTheHighestPoint) {
  auto& tracker = CpuMemoryTracker::install();
  const int64_t before = tracker.current_bytes();
  tracker.reset_peak();
  { at::Tensor big = at::zeros({2000, 1000}, at::kFloat); }  // 8,000,000 then freed
  { at::Tensor small = at::zeros({100}, at::kFloat); }
  EXPECT_EQ(tracker.peak_bytes() - before, 8000000);
  EXPECT_EQ(tracker.current_bytes(), before);
}

TEST(CpuMemoryTracker, UntrackedScopeIsNotCounted) {
  auto& tracker = CpuMemoryTracker::install();
  const int64_t before = tracker.current_bytes();
  at::Tensor host;
  {
    UntrackedScope untracked;
    host = at::empty({1000, 1000}, at::kFloat);
  }
  EXPECT_EQ(tracker.current_bytes(), before);
  host.reset();  // its free is not counted either
  EXPECT_EQ(tracker.current_bytes(), before);
}

TEST(CpuMemoryTracker, OverTheLimitIsOutOfMemoryByType) {
  auto& tracker = CpuMemoryTracker::install();
  const int64_t before = tracker.current_bytes();
  tracker.set_limit(before + 1000000);
  EXPECT_NO_THROW(at::empty({250000}, at::kFloat));  // exactly 1,000,000 bytes: at the limit is fine
  EXPECT_THROW(at::empty({250001}, at::kFloat), c10::OutOfMemoryError);
  tracker.set_limit(0);
  EXPECT_EQ(tracker.current_bytes(), before);  // the refused allocation left nothing behind
  EXPECT_NO_THROW(at::empty({250001}, at::kFloat));
}

TEST(DeviceMemory, CpuMeasuresThroughTheTracker) {
  CpuMemoryTracker::install();
  auto memory = device_memory("cpu");
  memory->reset_peak();
  const int64_t before = memory->current_bytes();
  { at::Tensor t = at::ones({1000, 1000}, at::kFloat); }
  EXPECT_EQ(memory->peak_bytes() - before, 4000000);
  EXPECT_GT(memory->total_bytes(), 0);
}

}  // namespace
}  // namespace batchwise

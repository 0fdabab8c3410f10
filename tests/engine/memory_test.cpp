#include "batchwise/memory.h"
#include "batchwise/workload.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/memory_headroom.h"

namespace batchwise {
namespace {

TEST(CpuMemoryTracker, CountsKnownTensorsExactly) {
  auto& tracker = CpuMemoryTracker::install();
  const int64_t before = tracker.current_bytes();
  tracker.reset_peak();
  {
    at::Tensor a = at::empty({1000, 1000}, at::kFloat);  // 1000 x 1000 x 4 bytes
    EXPECT_EQ(tracker.current_bytes() - before, 4000000);
    at::Tensor b = at::empty({250, 4}, at::kDouble);  // 1000 x 8 bytes
    EXPECT_EQ(tracker.current_bytes() - before, 4008000);
    at::Tensor c = at::empty({3, 5}, at::kByte);  // 15 bytes
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

// A process forked while a limit holds (a DataLoader worker, another thread's multiprocessing child) runs no
// trial and has none: it had kept the trial's limit for good.
TEST(CpuMemoryTracker, AForkedChildHasNoLimit) {
  auto& tracker = CpuMemoryTracker::install();
  tracker.set_limit(tracker.current_bytes() + 1000);
  const pid_t child = ::fork();
  if (child == 0) {
    bool ok = tracker.limit_bytes() == 0;
    try {
      (void)at::empty({250001}, at::kFloat);
    } catch (...) {
      ok = false;
    }
    ::_exit(ok ? 0 : 1);
  }
  tracker.set_limit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
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

// keep_freed_host_memory (issue #32): with glibc's default thresholds every step of lenet at batch 16
// page-faulted its activations in afresh (about 310 faults a step, measured with perf stat), which
// made batchwise's step slower than a Python loop's. Kept, a step faults almost never: counted here
// as the difference in minor faults between two runs of different lengths.
TEST(HostMemory, TrainingStepsDoNotPageFaultTheirMemoryInAgain) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "AddressSanitizer's allocator, not glibc's, holds the memory: mallopt does not keep it";
#endif
#endif
  keep_freed_host_memory();
  CpuMemoryTracker::install();
  auto w = make_workload(WorkloadOptions().model("lenet").dataset("synthetic").synthetic_size(512).device("cpu"));
  const auto faults_of = [&](int steps) {
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    for (int i = 0; i < steps; ++i) (void)w->train_step(w->next_batch(16)).item<double>();
    getrusage(RUSAGE_SELF, &after);
    return after.ru_minflt - before.ru_minflt;
  };
  (void)faults_of(5);  // the first steps make what is kept (optimizer state, oneDNN's primitives)
  const double per_step = static_cast<double>(faults_of(105) - faults_of(5)) / 100.0;
  EXPECT_LT(per_step, 5.0) << per_step << " minor page faults a step";
}

// A container's memory limit bounds the default CPU budget (it was the host's MemAvailable: past the
// limit the kernel kills the run, not the budget a trial): cgroup v2 and v1 trees, the tightest of a
// group and its ancestors, page cache it can reclaim not counted, and no limit where none is set.
TEST(MemoryHeadroom, ACgroupsLimitLessItsUsageIsTheRoomLeft) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("batchwise-cgroup-" + std::to_string(::getpid()));
  fs::remove_all(root);
  const auto write = [](const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  };
  // v2: the pod 8 GiB, 5 GiB used of which 1 GiB file cache (reclaimed before a kill); its parent 6 GiB, 1 GiB used
  write(root / "proc-v2", "0::/kubepods/pod1\n");
  write(root / "kubepods/pod1/memory.max", "8589934592\n");
  write(root / "kubepods/pod1/memory.current", "5368709120\n");
  write(root / "kubepods/pod1/memory.stat", "anon 4294967296\ninactive_file 536870912\nactive_file 536870912\n");
  write(root / "kubepods/memory.max", "6442450944\n");
  write(root / "kubepods/memory.current", "1073741824\n");
  EXPECT_EQ(detail::cgroup_headroom_bytes((root / "proc-v2").string(), root.string()), int64_t{4} << 30);
  write(root / "kubepods/memory.max", "max\n");  // the parent sets none: the pod's own
  EXPECT_EQ(detail::cgroup_headroom_bytes((root / "proc-v2").string(), root.string()), int64_t{4} << 30);
  write(root / "kubepods/pod1/memory.max", "max\n");
  EXPECT_FALSE(detail::cgroup_headroom_bytes((root / "proc-v2").string(), root.string()).has_value());
  // v1's memory controller, among others; 2^63 rounded to a page is no limit
  write(root / "proc-v1", "9:name=systemd:/\n4:cpu,memory:/docker/abc\n0::/\n");
  write(root / "memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
  write(root / "memory/docker/abc/memory.usage_in_bytes", "1610612736\n");
  write(root / "memory/docker/abc/memory.stat", "cache 0\ninactive_file 9\ntotal_inactive_file 536870912\n");
  write(root / "memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(detail::cgroup_headroom_bytes((root / "proc-v1").string(), root.string()), int64_t{1} << 30);
  EXPECT_FALSE(detail::cgroup_headroom_bytes((root / "missing").string(), root.string()).has_value());
  fs::remove_all(root);
}

}  // namespace
}  // namespace batchwise

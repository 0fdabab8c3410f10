// src/engine/device.cpp: devices by name.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "batchwise/device.h"
#include "batchwise/error.h"
#include "cpu_quota.h"

namespace batchwise {
namespace {

// The CPU suite hides CUDA (tests/CMakeLists.txt), so "auto", the default device of every
// subcommand, means the CPU here on a GPU machine too, and the suite asserts the same thing
// everywhere. ctest -L cuda runs the tests that need a GPU.
TEST(Device, TheCpuSuiteRunsWithCudaHidden) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  ASSERT_TRUE(visible != nullptr && std::string(visible).empty())
      << "run the CPU suite through ctest (ctest -L cpu), which sets CUDA_VISIBLE_DEVICES= for it";
  EXPECT_EQ(visible_cuda_devices(), 0);
  EXPECT_EQ(resolve_device("auto").str(), "cpu");
}

TEST(Device, NamesResolveOrAreRefusedWithTheFix) {
  EXPECT_EQ(resolve_device("cpu").str(), "cpu");
  try {
    (void)resolve_device("gpu");
    ADD_FAILURE() << "gpu was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--device gpu: unknown device; use cpu, cuda, cuda:N or auto");
  }
  EXPECT_THROW((void)resolve_device("cuda:x"), ConfigError);
  EXPECT_THROW((void)resolve_device("cuda"), DeviceError);  // CUDA hidden: no device is visible
}

// A container's CPU limit (docker --cpus, a pod's limits.cpu) shows in no affinity mask: 32 threads on a
// 32-core host under a 2-core quota are paused most of each period, and every timing with them. cgroup v2 and
// v1 trees, the tightest of a group and its ancestors, and none where no group sets one.
TEST(CpuQuota, ACgroupsQuotaOverItsPeriodIsTheCoresItBuys) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("batchwise-cpu-quota-" + std::to_string(::getpid()));
  fs::remove_all(root);
  const auto write = [](const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  };
  const auto quota = [&](const char* proc) { return detail::cgroup_cpu_quota((root / proc).string(), root.string()); };
  // v2: the pod 2.5 cores, its parent 4
  write(root / "proc-v2", "0::/kubepods/pod1\n");
  write(root / "kubepods/pod1/cpu.max", "250000 100000\n");
  write(root / "kubepods/cpu.max", "400000 100000\n");
  EXPECT_EQ(quota("proc-v2"), 2.5);
  write(root / "kubepods/cpu.max", "150000 100000\n");  // the parent's is tighter
  EXPECT_EQ(quota("proc-v2"), 1.5);
  write(root / "kubepods/cpu.max", "max 100000\n");
  write(root / "kubepods/pod1/cpu.max", "max 100000\n");
  EXPECT_FALSE(quota("proc-v2").has_value());
  write(root / "kubepods/pod1/cpu.max", "garbage\n");
  EXPECT_FALSE(quota("proc-v2").has_value());
  // v1's cpu controller, among others; -1 is none
  write(root / "proc-v1", "9:name=systemd:/\n3:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n");
  write(root / "cpu/docker/abc/cpu.cfs_quota_us", "50000\n");
  write(root / "cpu/docker/abc/cpu.cfs_period_us", "100000\n");
  write(root / "cpu/cpu.cfs_quota_us", "-1\n");
  write(root / "cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(quota("proc-v1"), 0.5);
  write(root / "cpu/docker/abc/cpu.cfs_quota_us", "-1\n");
  EXPECT_FALSE(quota("proc-v1").has_value());
  EXPECT_FALSE(quota("missing").has_value());
  // v1's controller mounted as "cpu,cpuacct" alone (no "cpu" link)
  fs::remove_all(root / "cpu");
  write(root / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
  write(root / "cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(quota("proc-v1"), 3.0);
  // a path without a '/' (a malformed line) is read once, not walked up for ever
  write(root / "proc-odd", "0::kubepods\n");
  write(root / "kubepods/cpu.max", "50000 100000\n");
  EXPECT_EQ(quota("proc-odd"), std::nullopt);
  fs::remove_all(root);

  EXPECT_EQ(detail::threads_for_quota(2.5), 2);
  EXPECT_EQ(detail::threads_for_quota(0.5), 1);
  EXPECT_EQ(detail::threads_for_quota(4), 4);
}

TEST(CpuQuota, ThreadsPastTheQuotaWarnWithTheCountThatFits) {
  EXPECT_FALSE(detail::threads_warning(2, 2, 0).has_value());
  EXPECT_FALSE(detail::threads_warning(2, 32, 2.5).has_value());
  EXPECT_EQ(detail::threads_warning(4, 2, 0).value_or(""),
            "4 intra-op threads on 2 cores: oversubscription distorts timings");
  EXPECT_EQ(detail::threads_warning(16, 32, 2.5).value_or(""),
            "16 intra-op threads under a CPU quota of 2.5 cores (its cgroup's CPU limit): once they have "
            "used it the kernel pauses them for the rest of each period, which stalls steps at random and distorts "
            "timings; set the threads to 2 (--threads 2, or OMP_NUM_THREADS=2)");
}

}  // namespace
}  // namespace batchwise

// src/engine/device.cpp: devices by name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "batchwise/device.h"
#include "batchwise/error.h"

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

}  // namespace
}  // namespace batchwise

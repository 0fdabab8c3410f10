// The NVML session (src/nvml.h): unavailable without a crash where there is no driver, and CUDA's
// device indices mapped to NVML's by PCI location, CUDA_VISIBLE_DEVICES indices or UUIDs.
#include "nvml.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <vector>

namespace batchwise {
namespace {

TEST(Nvml, ReportsUnavailableWithoutCrashing) {
  const detail::Nvml& nvml = detail::shared_nvml();
  if (nvml.available()) {
    EXPECT_TRUE(nvml.reason().empty());
    EXPECT_GE(nvml.device_count(), 0);
    const std::optional<int64_t> mine = nvml.process_memory_bytes({getpid()});
    if (mine) {
      EXPECT_GE(*mine, 0);
    }
  } else {
    EXPECT_FALSE(nvml.reason().empty());
    EXPECT_EQ(nvml.device_count(), 0);
    EXPECT_FALSE(nvml.process_memory_bytes({getpid()}).has_value());
    EXPECT_FALSE(nvml.memory_info(0).has_value());
  }
  detail::Nvml second;  // a second session alongside the shared one
  EXPECT_EQ(second.available(), nvml.available());
  EXPECT_EQ(nvml.ids().size(), static_cast<size_t>(nvml.device_count()));
  if (!nvml.available()) {
    EXPECT_FALSE(nvml.index_of_cuda_device(0).has_value());
    EXPECT_FALSE(nvml.name(0).has_value());
  }
}

// NVML counts every GPU in PCI order; CUDA counts what CUDA_VISIBLE_DEVICES leaves. Four GPUs whose
// PCI order is not their UUID order, as on a machine where the two differ.
TEST(Nvml, CudaIndicesMapToNvmlByPciLocationOrVisibleDevices) {
  using detail::nvml_index_for_cuda;
  using detail::PciLocation;
  const std::vector<detail::NvmlDeviceId> gpus = {{"GPU-aa11", PciLocation{0, 0x1b, 0}},
                                                  {"GPU-bb22", PciLocation{0, 0x3b, 0}},
                                                  {"GPU-cc33", PciLocation{0, 0x86, 0}},
                                                  {"GPU-cc34", PciLocation{1, 0x0a, 0}}};
  // Unset: CUDA's index is NVML's.
  EXPECT_EQ(nvml_index_for_cuda(2, nullptr, gpus, std::nullopt), 2);
  EXPECT_FALSE(nvml_index_for_cuda(4, nullptr, gpus, std::nullopt).has_value());
  // Indices: the command's cuda:0 is NVML's 2, cuda:1 NVML's 0.
  EXPECT_EQ(nvml_index_for_cuda(0, "2,0", gpus, std::nullopt), 2);
  EXPECT_EQ(nvml_index_for_cuda(1, "2,0", gpus, std::nullopt), 0);
  EXPECT_FALSE(nvml_index_for_cuda(2, "2,0", gpus, std::nullopt).has_value());
  // CUDA stops at the first invalid entry: "1,,3" is one device.
  EXPECT_EQ(nvml_index_for_cuda(0, "1,,3", gpus, std::nullopt), 1);
  EXPECT_FALSE(nvml_index_for_cuda(1, "1,,3", gpus, std::nullopt).has_value());
  EXPECT_FALSE(nvml_index_for_cuda(0, "7", gpus, std::nullopt).has_value());
  // UUIDs, whole or a unique prefix, with or without "GPU-"; an ambiguous prefix matches none.
  EXPECT_EQ(nvml_index_for_cuda(0, "GPU-bb22", gpus, std::nullopt), 1);
  EXPECT_EQ(nvml_index_for_cuda(1, "GPU-bb22, GPU-cc34", gpus, std::nullopt), 3);
  EXPECT_EQ(nvml_index_for_cuda(0, "aa", gpus, std::nullopt), 0);
  EXPECT_FALSE(nvml_index_for_cuda(0, "GPU-cc", gpus, std::nullopt).has_value());
  EXPECT_FALSE(nvml_index_for_cuda(0, "MIG-5f3c", gpus, std::nullopt).has_value());
  // Where CUDA gives the device's PCI location, that decides, whatever the list says.
  EXPECT_EQ(nvml_index_for_cuda(0, "0", gpus, PciLocation{1, 0x0a, 0}), 3);
  EXPECT_FALSE(nvml_index_for_cuda(0, nullptr, gpus, PciLocation{0, 0x99, 0}).has_value());
}

}  // namespace
}  // namespace batchwise

// The NVML session (src/nvml.h): unavailable without a crash where there is no driver, and CUDA's
// device indices mapped to NVML's by PCI location, CUDA_VISIBLE_DEVICES indices or UUIDs.
#include "nvml.h"

#include <dlfcn.h>
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

// The stand-in NVML (tests/fake_nvml.cpp), loaded by path, and its hook that sets the utilisation
// samples nvmlDeviceGetSamples serves.
constexpr const char* kFakeNvml = BATCHWISE_TEST_FAKE_NVML_DIR "/libnvidia-ml.so.1";
using SetSamples = void (*)(unsigned, int, const unsigned long long*, const unsigned*, int);
constexpr int kSm = 1, kMemory = 2;              // nvmlSamplingType_t
constexpr uint64_t kT0 = 1'700'000'000'000'000;  // microseconds since the epoch

SetSamples fake_samples_hook() {
  void* library = dlopen(kFakeNvml, RTLD_NOW | RTLD_NOLOAD);  // the handle the Nvml under test holds
  return library ? reinterpret_cast<SetSamples>(dlsym(library, "fake_nvml_set_samples")) : nullptr;
}

// A sample covers the time since the one before it: the mean weighs each by its period, and a
// sample counts only when its whole period lies in the window. Arithmetic by hand.
TEST(Nvml, WindowStatCountsOnlySamplePeriodsInsideTheWindow) {
  using R = detail::Nvml::Reading;
  // 50 % over 100 ms, then 100 % over 300 ms: (50 * 0.1 + 100 * 0.3) / 0.4 = 87.5.
  const std::vector<R> uneven = {{kT0, 0}, {kT0 + 100'000, 50}, {kT0 + 400'000, 100}};
  const auto all = detail::window_stat(uneven, kT0, kT0 + 400'000);
  ASSERT_TRUE(all.has_value());
  EXPECT_DOUBLE_EQ(all->mean, 87.5);
  EXPECT_EQ(all->min, 50);
  EXPECT_EQ(all->max, 100);
  // The first sample's period starts before the window: only the second counts.
  const auto late = detail::window_stat(uneven, kT0 + 50'000, kT0 + 400'000);
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->mean, 100);
  // A window inside one sample period, or past the last sample: no figure.
  EXPECT_FALSE(detail::window_stat(uneven, kT0 + 120'000, kT0 + 390'000).has_value());
  EXPECT_FALSE(detail::window_stat(uneven, kT0 + 100'000, kT0 + 399'999).has_value());
  EXPECT_FALSE(detail::window_stat({}, kT0, kT0 + 400'000).has_value());
  EXPECT_FALSE(detail::window_stat({{kT0 + 100'000, 50}}, kT0, kT0 + 400'000).has_value());  // no period known
}

// Through the driver's interface: nvmlDeviceGetSamples' samples newer than the last seen, and a
// window over a trial that averages only the samples whose periods lie inside it.
TEST(Nvml, UtilisationWindowAveragesTheDriversSamplesInsideTheTrial) {
  const detail::Nvml nvml(kFakeNvml);
  ASSERT_TRUE(nvml.available()) << nvml.reason();
  ASSERT_EQ(nvml.device_count(), 2);
  const SetSamples set = fake_samples_hook();
  ASSERT_NE(set, nullptr);
  using Kind = detail::Nvml::Utilisation;
  EXPECT_FALSE(nvml.utilisation_samples(1, Kind::Sm, 0).has_value());  // not supported until injected
  // The driver samples every 200 ms: idle before the trial, busy during it, idle after.
  const unsigned long long stamps[] = {kT0,           kT0 + 200'000, kT0 + 400'000,
                                       kT0 + 600'000, kT0 + 800'000, kT0 + 1'000'000};
  const unsigned percents[] = {5, 10, 90, 80, 70, 3};
  set(1, kSm, stamps, percents, 6);
  set(1, kMemory, stamps, percents, 0);  // supported, none taken yet
  const auto newer = nvml.utilisation_samples(1, Kind::Sm, kT0 + 400'000);
  ASSERT_TRUE(newer.has_value());
  ASSERT_EQ(newer->size(), 3u);
  EXPECT_EQ((*newer)[0].timestamp_us, kT0 + 600'000);
  EXPECT_EQ((*newer)[0].percent, 80);
  EXPECT_EQ((*newer)[2].percent, 3);
  EXPECT_TRUE(nvml.utilisation_samples(1, Kind::Sm, kT0 + 1'000'000)->empty());
  EXPECT_TRUE(nvml.utilisation_samples(1, Kind::Memory, 0)->empty());
  EXPECT_FALSE(nvml.utilisation_samples(0, Kind::Sm, 0).has_value());  // the other GPU's

  // The trial from 300 ms to 850 ms: the samples at 600 ms and 800 ms, (80 + 70) / 2; the one at
  // 400 ms covers 200-400 ms, partly before the trial, and the one at 1000 ms ends after it.
  detail::UtilisationWindow window(nvml, 1, kT0 + 300'000);
  window.poll();  // nothing new: no sample counts twice
  const detail::UtilisationWindow::Result r = window.finish(kT0 + 850'000);
  EXPECT_TRUE(r.sm_supported);
  ASSERT_TRUE(r.sm_percent.has_value());
  EXPECT_DOUBLE_EQ(r.sm_percent->mean, 75);
  EXPECT_EQ(r.sm_percent->min, 70);
  EXPECT_EQ(r.sm_percent->max, 80);
  EXPECT_TRUE(r.memory_supported);
  EXPECT_FALSE(r.memory_percent.has_value());

  // A trial of 150 ms between two samples has no sample of its own: no figure.
  detail::UtilisationWindow short_trial(nvml, 1, kT0 + 620'000);
  const detail::UtilisationWindow::Result s = short_trial.finish(kT0 + 770'000);
  EXPECT_TRUE(s.sm_supported);
  EXPECT_FALSE(s.sm_percent.has_value());

  // Samples the driver takes during the trial are read as they come (poll), after the first read.
  const unsigned long long later[] = {kT0 + 1'200'000, kT0 + 1'400'000};
  const unsigned busy[] = {60, 40};
  detail::UtilisationWindow growing(nvml, 1, kT0 + 1'000'000);
  set(1, kSm, later, busy, 2);
  growing.poll();
  const detail::UtilisationWindow::Result g = growing.finish(kT0 + 1'500'000);
  ASSERT_TRUE(g.sm_percent.has_value());
  EXPECT_DOUBLE_EQ(g.sm_percent->mean, 50);
  // A driver that cannot give samples: unsupported, no figure.
  set(1, kSm, nullptr, nullptr, -1);
  set(1, kMemory, nullptr, nullptr, -1);
  detail::UtilisationWindow none(nvml, 1, kT0);
  const detail::UtilisationWindow::Result n = none.finish(kT0 + 2'000'000);
  EXPECT_FALSE(n.sm_supported || n.memory_supported);
  EXPECT_FALSE(n.sm_percent.has_value());
}

}  // namespace
}  // namespace batchwise

#pragma once
// NVML, loaded at run time with dlopen("libnvidia-ml.so.1"): no build dependency and no NVML
// headers. The few types used are declared in nvml.cpp to match NVML's ABI. On a machine without
// the driver every query answers "unavailable" (with the reason) instead of failing.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device_detail.h"

namespace batchwise::detail {

/// What identifies an NVML device: its UUID ("GPU-5f3c...") and PCI location.
struct NvmlDeviceId {
  std::string uuid;
  std::optional<PciLocation> pci;
};

/// NVML's index of the device this process's CUDA numbers `cuda_index`. NVML counts every GPU in
/// PCI order; CUDA counts those CUDA_VISIBLE_DEVICES leaves, in its own order. Matched by the
/// device's PCI location where CUDA can give it (`cuda_pci`, a LibTorch with CUDA); otherwise by
/// the CUDA_VISIBLE_DEVICES entry (`visible`, null when unset): an NVML index or a UUID (or a
/// unique prefix of one), read up to the first invalid entry as CUDA does; unset, the index itself.
/// nullopt when no device matches (a MIG instance, an index past the list).
std::optional<int> nvml_index_for_cuda(int cuda_index, const char* visible, const std::vector<NvmlDeviceId>& devices,
                                       const std::optional<PciLocation>& cuda_pci);

/// One NVML session: nvmlInit_v2 in the constructor, nvmlShutdown in the destructor.
/// NOTE: NVML calls are thread-safe; share one instance (shared_nvml()) rather than initialising
/// per query, which takes tens of milliseconds on a GPU machine.
class Nvml {
 public:
  /// Loads and initialises NVML; never throws. available() says whether it worked.
  Nvml();
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool available() const { return available_; }
  /// Why NVML is unavailable ("libnvidia-ml.so.1: cannot open shared object file ..."); empty when
  /// available.
  const std::string& reason() const { return reason_; }
  int device_count() const { return device_count_; }

  /// Device memory used by the processes `pids`, summed over every device (NVML's per-process
  /// usedGpuMemory, CUDA context included). nullopt when NVML is unavailable or no device could
  /// be queried; 0 when none of the pids holds device memory.
  /// NOTE: NVML reports host pids; inside a pid namespace they do not match ours.
  std::optional<int64_t> process_memory_bytes(const std::vector<int>& pids) const;

  /// Total and used bytes of device `index`, or nullopt.
  struct MemoryInfo {
    int64_t total_bytes = 0;
    int64_t used_bytes = 0;
  };
  std::optional<MemoryInfo> memory_info(int index) const;

  /// The `nvidia-smi dmon -s u` view of device `index` now; a field NVML cannot give is nullopt.
  struct Sample {
    std::optional<double> sm_percent, memory_percent;  ///< utilisation over NVML's last sample period
    std::optional<int64_t> memory_used_bytes;
    std::optional<double> power_w;
    std::optional<int> sm_clock_mhz;
    std::optional<int> temperature_c;
  };
  std::optional<Sample> sample(int index) const;

  /// "NVIDIA H100 80GB HBM3", or nullopt.
  std::optional<std::string> name(int index) const;
  /// UUID and PCI location of every device, in NVML's order (fields NVML cannot give stay empty).
  std::vector<NvmlDeviceId> ids() const;
  /// nvml_index_for_cuda for this process: its CUDA_VISIBLE_DEVICES and, where LibTorch has CUDA, the
  /// device's PCI location.
  std::optional<int> index_of_cuda_device(int cuda_index) const;

 private:
  struct Api;
  Api* api_ = nullptr;
  void* library_ = nullptr;
  bool available_ = false;
  std::string reason_;
  int device_count_ = 0;
};

/// The process-wide NVML session, created on first use.
const Nvml& shared_nvml();

}  // namespace batchwise::detail

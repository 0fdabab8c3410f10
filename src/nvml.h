#pragma once
// NVML, loaded at run time with dlopen("libnvidia-ml.so.1"): no build dependency and no NVML
// headers. The few types used are declared in nvml.cpp to match NVML's ABI. On a machine without
// the driver every query answers "unavailable" (with the reason) instead of failing.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace batchwise::detail {

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

#pragma once
// NVML, loaded at run time with dlopen("libnvidia-ml.so.1"): no build dependency and no NVML
// headers. The few types used are declared in nvml.cpp to match NVML's ABI. On a machine without
// the driver every query answers "unavailable" (with the reason) instead of failing.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/utilisation.h"
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
  /// Loads `library` (the driver's by default; the tests load a stand-in by its path) and initialises
  /// NVML; never throws. available() says whether it worked.
  explicit Nvml(const char* library = "libnvidia-ml.so.1");
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

  /// One of the driver's own utilisation samples (nvmlDeviceGetSamples): the percent of the time
  /// since its previous sample that the device was busy. The driver samples every 1/6 s to 1 s,
  /// depending on the GPU, and keeps the latest in a ring buffer.
  struct Reading {
    uint64_t timestamp_us = 0;  ///< when the sample period ended: wall clock, microseconds since the epoch
    double percent = 0;
  };
  /// Which utilisation: SM (a kernel was running) or memory (device memory was read or written).
  enum class Utilisation { Sm = 1, Memory = 2 };  // NVML_GPU_UTILIZATION_SAMPLES, NVML_MEMORY_UTILIZATION_SAMPLES
  /// The driver's buffered samples of `kind` on device `index` taken after `after_us` (0: all it
  /// holds), oldest first; empty when it has none that new. nullopt when it cannot give them (a
  /// driver without nvmlDeviceGetSamples, or a device that does not support the query).
  std::optional<std::vector<Reading>> utilisation_samples(int index, Utilisation kind, uint64_t after_us) const;

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

/// The statistics of the driver's utilisation samples whose sample period lies inside the window
/// [start_us, end_us]: a sample covers the time since the one before it, so the first sample of
/// `readings` (sorted by time) only bounds the next one's period, and a sample counts when the one
/// before it was taken at or after start_us and it was taken by end_us. The mean weighs each sample
/// by its period. nullopt when no sample lies inside (a window shorter than the driver's period).
std::optional<UtilisationStat> window_stat(const std::vector<Nvml::Reading>& readings, uint64_t start_us,
                                           uint64_t end_us);

/// The driver's SM and memory utilisation samples over a window of wall-clock time (a trial's
/// steps) on one device: a figure for exactly the window, where a reading of the current utilisation
/// (nvmlDeviceGetUtilizationRates) covers the driver's last period, up to 1 s that may lie before the
/// window. Not thread-safe: one thread calls poll() and finish().
class UtilisationWindow {
 public:
  /// Opens the window at `start_us` (wall clock, microseconds since the epoch: NVML's timestamps)
  /// and reads the samples the driver holds, so the first sample inside the window has the one
  /// before it.
  UtilisationWindow(const Nvml& nvml, int index, uint64_t start_us);
  /// Reads the samples taken since the last read. Call at least every few seconds: the driver's
  /// buffer holds its latest samples only.
  void poll();
  struct Result {
    /// window_stat of each kind; nullopt when no sample lies in the window or none can be read.
    std::optional<UtilisationStat> sm_percent, memory_percent;
    /// Whether the driver gave samples of each kind (false: nvmlDeviceGetSamples is missing or unsupported).
    bool sm_supported = false, memory_supported = false;
  };
  /// Closes the window at `end_us` after a last read.
  Result finish(uint64_t end_us);

 private:
  struct Series {
    explicit Series(Nvml::Utilisation k) : kind(k) {}
    Nvml::Utilisation kind;
    bool supported = false;
    std::vector<Nvml::Reading> readings;
    void read(const Nvml& nvml, int index, uint64_t start_us);
  };
  const Nvml& nvml_;
  int index_;
  uint64_t start_us_;
  Series sm_{Nvml::Utilisation::Sm}, memory_{Nvml::Utilisation::Memory};
};

}  // namespace batchwise::detail

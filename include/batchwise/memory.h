#pragma once
/// Device memory, measured the same way on CPU and CUDA.
///
/// On CPU there is no device limit to run into, so batchwise makes one: CpuMemoryTracker replaces
/// c10's CPU allocator, counts every tensor byte (current and peak, exactly) and refuses an
/// allocation that would take the count over the limit with c10::OutOfMemoryError, the same
/// exception CUDA's caching allocator throws. Install it before building the model, so the model's
/// own tensors are counted.
#include <cstdint>
#include <memory>
#include <string>

namespace batchwise {

/// Accounts every CPU tensor allocation made through c10's CPU allocator.
class CpuMemoryTracker {
 public:
  /// Installs the tracker as c10's CPU allocator (once; later calls return the same tracker).
  /// NOTE: tensors allocated before installation are not counted.
  static CpuMemoryTracker& install();
  /// The installed tracker, or nullptr.
  static CpuMemoryTracker* get();

  int64_t current_bytes() const;  ///< bytes held by live, counted tensors
  int64_t peak_bytes() const;     ///< highest current_bytes since the last reset_peak()
  void reset_peak();              ///< peak := current
  /// Allocations that would take current_bytes above `bytes` fail as out of memory; 0: no limit.
  void set_limit(int64_t bytes);
  int64_t limit_bytes() const;
  int64_t allocations() const;  ///< counted allocations so far (for tests and overhead figures)

 private:
  CpuMemoryTracker() = default;
};

/// Keeps freed host memory in this process (glibc's malloc). By default glibc hands every freed
/// block above 128 KiB back to the kernel (mmap'd chunks unmapped, the heap's top trimmed) until a
/// large free happens to raise those thresholds, so each training step's activations were
/// page-faulted in afresh, which slows small steps against a Python loop's (a Python process has
/// usually raised them already; docs/benchmarks.md has the figures). Fixes the thresholds at
/// glibc's own dynamic maxima (32 MiB, and 64 MiB of free heap kept). Process-wide; does nothing where
/// the environment set them (GLIBC_TUNABLES glibc.malloc.*, MALLOC_MMAP_THRESHOLD_,
/// MALLOC_TRIM_THRESHOLD_) or malloc is not glibc's. The tool calls it at start; a program using
/// the library decides for itself. Counted bytes (CpuMemoryTracker) are unaffected.
void keep_freed_host_memory();

/// While alive, allocations on this thread are not counted (nor limited), and neither are their
/// frees. For host-side copies that are not the device's: a dataset held in RAM, a state snapshot.
class UntrackedScope {
 public:
  UntrackedScope();
  ~UntrackedScope();
  UntrackedScope(const UntrackedScope&) = delete;
  UntrackedScope& operator=(const UntrackedScope&) = delete;

 private:
  bool previous_;
};

/// The memory of the device a workload trains on: CPU (through the tracker) or one CUDA device
/// (through the caching allocator's statistics).
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// Bytes the training holds now (CPU: counted tensor bytes; CUDA: reserved by the allocator).
  virtual int64_t current_bytes() = 0;
  virtual int64_t allocated_bytes() = 0;  ///< CUDA: allocated, not reserved; CPU: current
  virtual void reset_peak() = 0;
  virtual int64_t peak_bytes() = 0;  ///< since reset_peak (CPU: counted; CUDA: reserved)
  virtual int64_t peak_allocated_bytes() = 0;
  /// Caps the memory the device may use; 0 lifts the cap.
  virtual void set_limit(int64_t bytes) = 0;
  /// After an out-of-memory outcome: hand cached blocks back (CUDA's empty_cache).
  virtual void release_cached() = 0;
  /// Waits for queued device work; a clock is read only after this.
  virtual void synchronize() = 0;
  /// Physical memory of the device (CPU: MemAvailable + what this process's tensors hold).
  virtual int64_t total_bytes() = 0;
  /// The most of it this process may use: total_bytes, or less where the process capped its own
  /// share (CUDA: torch.cuda.set_per_process_memory_fraction before batchwise was called; a limit of
  /// batchwise's own, set_limit, does not count).
  virtual int64_t usable_bytes() { return total_bytes(); }
};

/// DeviceMemory for `device_type` "cpu" or "cuda" at `index`.
/// REQUIRES: for CPU, the tracker is installed (CpuMemoryTracker::install()).
std::unique_ptr<DeviceMemory> device_memory(const std::string& device_type, int index = 0);

/// Bytes of RAM the kernel reports available (/proc/meminfo MemAvailable), at most what this process's
/// cgroup still lets its group take (a container's memory limit, less its usage).
int64_t available_ram_bytes();

}  // namespace batchwise

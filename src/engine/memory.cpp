// CpuMemoryTracker: a c10 CPU allocator that counts every byte. Each block carries a 64-byte
// header (so data stays 64-byte aligned, as c10 expects) recording its size and whether it was
// counted, which makes frees exact without a lookup table.
#include "batchwise/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <pthread.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>

#include "batchwise/units.h"
#include "check.h"
#include "compat.h"
#include "cpu_baseline.h"
#include "device_detail.h"
#include "engine/cgroup.h"
#include "engine/memory_headroom.h"

namespace batchwise {
namespace {

constexpr size_t kHeaderBytes = 64;  // c10::gAlignment: data stays as aligned as c10 promises
static_assert(kHeaderBytes >= c10::gAlignment, "the header must keep c10's alignment");
constexpr uint64_t kCountedTag = 0x62617463685f3101ull;  // "batch_1" + counted
constexpr uint64_t kUncountedTag = 0x62617463685f3100ull;

struct Header {
  uint64_t bytes;
  uint64_t tag;
};

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_limit{0};
std::atomic<int64_t> g_allocations{0};
std::atomic<int64_t> g_baseline{0};  // detail::set_cpu_baseline_bytes
thread_local bool t_untracked = false;

void raise_peak(int64_t now) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
}

void tracked_delete(void* data) {
  if (data == nullptr) return;
  auto* base = static_cast<char*>(data) - kHeaderBytes;
  Header header;
  std::memcpy(&header, base, sizeof header);
  if (header.tag == kCountedTag || header.tag == kUncountedTag) c10::profiledCPUMemoryReporter().Delete(data);
  if (header.tag == kCountedTag) {
    g_current.fetch_sub(static_cast<int64_t>(header.bytes), std::memory_order_relaxed);
  } else if (header.tag != kUncountedTag) {
    // Not ours: a raw buffer (oneDNN's) allocated by c10's default allocator before install() and
    // freed through raw_deleter() after it.
    c10::free_cpu(data);
    return;
  }
  c10::free_cpu(base);
}

// Adds `bytes` to the count unless that would pass the limit; check and commit are one atomic step,
// so concurrent allocations near the limit are judged exactly.
bool try_count(int64_t bytes, int64_t& now) {
  int64_t current = g_current.load(std::memory_order_relaxed);
  do {
    now = current + bytes;
    const int64_t limit = g_limit.load(std::memory_order_relaxed);
    if (limit > 0 && now - g_baseline.load(std::memory_order_relaxed) > limit) return false;
  } while (!g_current.compare_exchange_weak(current, now, std::memory_order_relaxed));
  return true;
}

struct TrackingAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) BATCHWISE_ALLOCATE_CONST override {
    const bool counted = !t_untracked;
    const int64_t bytes = static_cast<int64_t>(n);
    if (counted) {
      int64_t now = 0;
      if (!try_count(bytes, now)) {
        TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU memory budget exceeded: tried to allocate ", format_bytes(bytes),
                         " with ", format_bytes(now - bytes - g_baseline.load()), " in use of a ",
                         format_bytes(g_limit.load()), " budget");
      }
      raise_peak(now);
      g_allocations.fetch_add(1, std::memory_order_relaxed);
    }
    char* base = nullptr;
    try {
      base = static_cast<char*>(c10::alloc_cpu(n + kHeaderBytes));
    } catch (const c10::Error&) {
      // The machine itself ran out: undo the count and report it as the out-of-memory it is (torch's own text,
      // "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: ...", says no more).
      if (counted) g_current.fetch_sub(bytes, std::memory_order_relaxed);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "host out of memory allocating ", format_bytes(bytes),
                       ": the system refused it (the machine's memory, or a limit on this "
                       "process's, ulimit -v or a container's, ran out)");
    }
    const Header header{static_cast<uint64_t>(n), counted ? kCountedTag : kUncountedTag};
    std::memcpy(base, &header, sizeof header);
    void* data = base + kHeaderBytes;
    // To torch's profiler as c10's own allocator reports (nothing where no profile asks for memory): a profile
    // had seen no CPU memory once this allocator was installed (the Python API installs it on its first call)
    c10::profiledCPUMemoryReporter().New(data, n);
    return {data, data, &tracked_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tracked_delete; }
  // No `override` keyword: LibTorch 1.13 has no copy_data to override; from 2.3 on this overrides it.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Winconsistent-missing-override"
#endif
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
};

// Never destroyed: tensors may be freed (and a late allocation made) during static destruction.
TrackingAllocator* const g_allocator = new TrackingAllocator();
std::once_flag g_install_once;
CpuMemoryTracker* g_tracker = nullptr;

}  // namespace

CpuMemoryTracker& CpuMemoryTracker::install() {
  std::call_once(g_install_once, [] {
    static CpuMemoryTracker tracker;
    // Highest priority, so a later registration (MKLDNN, a profiler) cannot displace us.
    c10::SetCPUAllocator(g_allocator, /*priority=*/255);
    // A process forked during a trial (a DataLoader's worker, a multiprocessing child of another thread) runs no
    // trial: it had kept the trial's limit for good, and every tensor it made past it was out of memory
    ::pthread_atfork(nullptr, nullptr, [] {
      g_limit.store(0);
      g_baseline.store(0);
    });
    g_tracker = &tracker;
  });
  return *g_tracker;
}

CpuMemoryTracker* CpuMemoryTracker::get() { return g_tracker; }
int64_t CpuMemoryTracker::current_bytes() const { return g_current.load() - g_baseline.load(); }
int64_t CpuMemoryTracker::peak_bytes() const { return g_peak.load() - g_baseline.load(); }
void CpuMemoryTracker::reset_peak() { g_peak.store(g_current.load()); }
void CpuMemoryTracker::set_limit(int64_t bytes) { g_limit.store(bytes < 0 ? 0 : bytes); }
int64_t CpuMemoryTracker::limit_bytes() const { return g_limit.load(); }
int64_t CpuMemoryTracker::allocations() const { return g_allocations.load(); }

void detail::set_cpu_baseline_bytes(int64_t bytes) { g_baseline.store(bytes); }

UntrackedScope::UntrackedScope() : previous_(t_untracked) { t_untracked = true; }
UntrackedScope::~UntrackedScope() { t_untracked = previous_; }

namespace detail {

namespace {

// The first whole number in `path` ("max", an absent file: none), or the value of `key` in a file of
// "key value" lines (memory.stat).
std::optional<int64_t> read_bytes(const std::string& path, const std::string& key = "") {
  std::ifstream in(path);
  std::string name;
  int64_t value = 0;
  if (key.empty()) return in >> value ? std::optional<int64_t>(value) : std::nullopt;
  while (in >> name >> value)
    if (name == key) return value;
  return std::nullopt;
}

// One group's headroom: limit - (usage - file cache); none where it sets no limit (v1 writes a
// page-rounded 2^63 for none). The kernel reclaims a group's file cache, active or not, before it kills
// in it: a warm cache (a dataset just read) is room, not usage.
std::optional<int64_t> group_headroom(const std::string& dir, bool v2) {
  const auto limit = read_bytes(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
  if (!limit || *limit <= 0 || *limit >= (int64_t{1} << 62)) return std::nullopt;
  const int64_t usage = read_bytes(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes")).value_or(0);
  const std::string stat = dir + "/memory.stat";
  const int64_t cache = read_bytes(stat, v2 ? "inactive_file" : "total_inactive_file").value_or(0) +
                        read_bytes(stat, v2 ? "active_file" : "total_active_file").value_or(0);
  return std::max<int64_t>(0, *limit - std::max<int64_t>(0, usage - cache));
}

}  // namespace

std::optional<int64_t> cgroup_headroom_bytes(const std::string& proc_cgroup, const std::string& root) {
  std::optional<int64_t> least;
  for_each_cgroup(proc_cgroup, root, "memory", [&](const std::string& dir, bool v2) {
    if (const auto room = group_headroom(dir, v2)) least = least ? std::min(*least, *room) : *room;
  });
  return least;
}

}  // namespace detail

int64_t available_ram_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0, available = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
  }
  // A container's (cgroup's) limit bounds it too: past it the kernel kills the run
  if (const auto room = detail::cgroup_headroom_bytes()) available = available > 0 ? std::min(available, *room) : *room;
  return available;
}

namespace {

class CpuMemory final : public DeviceMemory {
 public:
  explicit CpuMemory(CpuMemoryTracker& tracker) : tracker_(tracker) {}
  int64_t current_bytes() override { return tracker_.current_bytes(); }
  int64_t allocated_bytes() override { return tracker_.current_bytes(); }
  void reset_peak() override { tracker_.reset_peak(); }
  int64_t peak_bytes() override { return tracker_.peak_bytes(); }
  int64_t peak_allocated_bytes() override { return tracker_.peak_bytes(); }
  void set_limit(int64_t bytes) override { tracker_.set_limit(bytes); }
  void release_cached() override {}
  void synchronize() override {}
  int64_t total_bytes() override { return available_ram_bytes() + tracker_.current_bytes(); }

 private:
  CpuMemoryTracker& tracker_;
};

}  // namespace

std::unique_ptr<DeviceMemory> device_memory(const std::string& device_type, int index) {
  if (device_type == "cuda") return detail::cuda_memory(index);
  BATCHWISE_CHECK(device_type == "cpu", DeviceError, "unknown device type '{}'; use cpu or cuda", device_type);
  auto* tracker = CpuMemoryTracker::get();
  BATCHWISE_CHECK(tracker != nullptr, ConfigError,
                  "CPU memory is measured by batchwise's tracking allocator; call "
                  "batchwise::CpuMemoryTracker::install() before building the model");
  return std::make_unique<CpuMemory>(*tracker);
}

void keep_freed_host_memory() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables && std::strstr(tunables, "glibc.malloc.")) || std::getenv("MALLOC_MMAP_THRESHOLD_") ||
      std::getenv("MALLOC_TRIM_THRESHOLD_"))
    return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

}  // namespace batchwise

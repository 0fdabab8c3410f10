// CUDA device memory through the caching allocator's own statistics. Compiled only when the
// Torch found was built with CUDA; see device.cpp for the stand-ins of a CPU-only build.
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "check.h"
#include "device_detail.h"

namespace batchwise::detail {
namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;
constexpr size_t kAggregate = 0;  // StatType::AGGREGATE, whose namespace moved between releases

// The process's own memory fraction per device, while a limit of batchwise's is in place.
struct Fraction {
  double own = 1.0;
  bool limited = false;
};
std::mutex g_fraction_mutex;
std::map<c10::DeviceIndex, Fraction> g_fractions;

// The fraction the allocator enforces now; 1.0 where it cannot say (an allocator backend without it).
double own_fraction(c10::DeviceIndex index) noexcept {
  try {
    const double f = alloc::getMemoryFraction(index);
    return f > 0 && f <= 1 ? f : 1.0;
  } catch (...) {
    return 1.0;
  }
}

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(int index) : index_(static_cast<c10::DeviceIndex>(index)) {}
  int64_t current_bytes() override { return alloc::getDeviceStats(index_).reserved_bytes[kAggregate].current; }
  int64_t allocated_bytes() override { return alloc::getDeviceStats(index_).allocated_bytes[kAggregate].current; }
  void reset_peak() override { alloc::resetPeakStats(index_); }
  int64_t peak_bytes() override { return alloc::getDeviceStats(index_).reserved_bytes[kAggregate].peak; }
  int64_t peak_allocated_bytes() override { return alloc::getDeviceStats(index_).allocated_bytes[kAggregate].peak; }
  // A limit never lifts the process's own fraction (a user's torch.cuda.set_per_process_memory_fraction
  // in the process that calls batchwise): it is read when no limit of batchwise's is in place, a
  // limit is the smaller of the two, and lifting puts it back; it had lifted to 1.0. Process-wide, as
  // the fraction is: a data-parallel rank lifts and holds again through another DeviceMemory than
  // its trial's. Lifting asks the device nothing: it runs in destructors, after a CUDA error too.
  void set_limit(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(g_fraction_mutex);
    Fraction& f = g_fractions[index_];
    if (!f.limited) f.own = own_fraction(index_);
    const double fraction =
        bytes <= 0 ? f.own : std::min(f.own, static_cast<double>(bytes) / static_cast<double>(total_bytes()));
    alloc::setMemoryFraction(fraction, index_);
    f.limited = bytes > 0;
  }
  // The first matmul on a stream gives cuBLAS (and cuBLASLt) a workspace per handle and stream,
  // allocated from the caching allocator and held by ATen until cleared: allocated bytes that would
  // otherwise stay held after a command. Freed with the cache (ATen's clearCublasWorkspaces, declared
  // since LibTorch 1.13); the next matmul allocates them again, so a trial's peak still counts them.
  // Cuda.ReleasingTheCacheFreesTheCublasWorkspaces checks it on the LibTorch at hand.
  void release_cached() override {
    at::cuda::clearCublasWorkspaces();
    alloc::emptyCache();
  }
  void synchronize() override {
    c10::cuda::CUDAGuard guard(index_);
    c10::cuda::device_synchronize();
  }
  int64_t total_bytes() override {
    c10::cuda::CUDAGuard guard(index_);
    size_t free = 0, total = 0;
    BATCHWISE_CHECK(cudaMemGetInfo(&free, &total) == cudaSuccess, DeviceError,
                    "cuda:{}: cudaMemGetInfo failed; is the device usable (nvidia-smi)?", index_);
    return static_cast<int64_t>(total);
  }
  // The process's own fraction of the total, as read before a limit of batchwise's is in place.
  int64_t usable_bytes() override {
    double own = 1.0;
    {
      std::lock_guard<std::mutex> lock(g_fraction_mutex);
      const auto f = g_fractions.find(index_);
      own = f != g_fractions.end() && f->second.limited ? f->second.own : own_fraction(index_);
    }
    const int64_t total = total_bytes();
    return own >= 1.0 ? total : static_cast<int64_t>(own * static_cast<double>(total));
  }

 private:
  c10::DeviceIndex index_;
};

}  // namespace

std::unique_ptr<DeviceMemory> cuda_memory(int index) {
  BATCHWISE_CHECK(index >= 0 && index < c10::cuda::device_count(), DeviceError,
                  "--device cuda:{}: this machine has {} CUDA device(s); use --device cpu or auto", index,
                  static_cast<int>(c10::cuda::device_count()));
  // The caching allocator is made when CUDA first initialises (a tensor on the device, usually);
  // its statistics before that throw "Invalid device argument". Seen on an H200: a process whose
  // first CUDA call was release_cached.
  at::globalContext().lazyInitDevice(at::kCUDA);
  return std::make_unique<CudaMemory>(index);
}

std::string cuda_device_name(int index) {
  cudaDeviceProp props{};
  BATCHWISE_CHECK(cudaGetDeviceProperties(&props, index) == cudaSuccess, DeviceError,
                  "cuda:{}: cannot read the device's properties", index);
  return props.name;
}

std::optional<PciLocation> cuda_pci_location(int index) {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, index) != cudaSuccess) return std::nullopt;
  return PciLocation{static_cast<unsigned>(props.pciDomainID), static_cast<unsigned>(props.pciBusID),
                     static_cast<unsigned>(props.pciDeviceID)};
}

bool built_with_cuda() { return true; }

}  // namespace batchwise::detail

#pragma once
// The CUDA side of batchwise, behind a narrow, torch-free interface (tiny-cuda-nn style): only
// cuda_memory.cpp sees CUDA headers, and it is compiled only against a Torch built with CUDA.
#include <memory>
#include <optional>
#include <string>

#include "batchwise/memory.h"

namespace batchwise::detail {

/// DeviceMemory of CUDA device `index`. Throws DeviceError in a build without CUDA.
std::unique_ptr<DeviceMemory> cuda_memory(int index);

/// "NVIDIA H100 80GB HBM3", or throws DeviceError in a build without CUDA.
std::string cuda_device_name(int index);

/// Where CUDA device `index` (in this process's numbering) sits on the PCI bus: domain, bus, device.
/// nullopt in a build without CUDA or when CUDA cannot say.
struct PciLocation {
  unsigned domain = 0, bus = 0, device = 0;
  bool operator==(const PciLocation& o) const { return domain == o.domain && bus == o.bus && device == o.device; }
};
std::optional<PciLocation> cuda_pci_location(int index);

/// BLAS_INFO from torch's build configuration: "mkl", "openblas", ...; "unknown" without one.
std::string blas_name();

/// True when this build compiled its CUDA paths.
bool built_with_cuda();

}  // namespace batchwise::detail

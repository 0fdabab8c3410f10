#pragma once
/// Devices by name ("cpu", "cuda", "cuda:1", "auto") and the context block every report opens with.
#include <string>

#include "batchwise/context.h"

namespace batchwise {

/// A resolved device: "cpu", or "cuda" with an index.
struct DeviceSpec {
  std::string type = "cpu";
  int index = 0;
  /// "cpu" or "cuda:0".
  std::string str() const;
};

/// Resolves "cpu", "cuda", "cuda:N" or "auto" (cuda:0 when a CUDA device is visible, else cpu).
/// Throws DeviceError for cuda on a machine or build without it, ConfigError for other names.
DeviceSpec resolve_device(const std::string& text);

/// True when this build of batchwise compiled its CUDA code paths.
bool built_with_cuda();

/// CUDA devices this process can use: 0 without a CUDA build, driver or device, or when
/// CUDA_VISIBLE_DEVICES hides them all.
int visible_cuda_devices();

/// The whole cores this process's threads can keep busy: the CPUs its affinity mask lets it run on
/// (taskset, a container's cpuset), no more than the whole cores of its cgroup's CPU quota (a container's
/// --cpus, a pod's CPU limit), at least 1. What ranks on one machine share, and a thread count is bounded by.
int usable_cpu_cores();

/// The context block: versions, build commit, device name, threads, BLAS, date, warnings.
Context make_context(const DeviceSpec& device);

}  // namespace batchwise

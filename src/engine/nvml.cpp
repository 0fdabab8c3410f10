#include "nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_set>

namespace batchwise::detail {

namespace {

// The slice of nvml.h that batchwise uses, declared to match NVML's ABI.
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

struct nvmlProcessInfo_t {  // nvmlProcessInfo_v2_t / _v3 layout
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlPciInfo_t {  // nvmlPciInfo_v3 layout
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

constexpr nvmlReturn_t kNvmlErrorNotFound = 6;  // nvmlDeviceGetSamples: no sample newer than asked for

union nvmlValue_t {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
};

struct nvmlSample_t {
  unsigned long long timeStamp;  // microseconds since the epoch
  nvmlValue_t sampleValue;
};

// nvmlValueType_t: how nvmlDeviceGetSamples filled sampleValue (utilisation: unsigned int).
double value_of(int type, const nvmlValue_t& v) {
  switch (type) {
    case 0:
      return v.dVal;
    case 1:
      return v.uiVal;
    case 2:
      return static_cast<double>(v.ulVal);
    case 3:
      return static_cast<double>(v.ullVal);
    case 4:
      return static_cast<double>(v.sllVal);
    default:
      return static_cast<double>(v.uiVal);  // later types (signed int, unsigned short) are narrower
  }
}

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*compute_processes)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  // Optional: the utilisation monitor's fields (absent from old drivers: that field stays empty).
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;  // milliwatts
  nvmlReturn_t (*clock)(nvmlDevice_t, int /*nvmlClockType_t*/, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int /*nvmlTemperatureSensors_t*/, unsigned int*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*samples)(nvmlDevice_t, int /*nvmlSamplingType_t*/, unsigned long long, int* /*nvmlValueType_t*/,
                          unsigned int*, nvmlSample_t*) = nullptr;
  bool initialized = false;  // nvmlShutdown only after a successful nvmlInit_v2

  std::string describe(nvmlReturn_t code) const {
    const char* text = error_string ? error_string(code) : nullptr;
    return text ? std::string(text) : "NVML error " + std::to_string(code);
  }
};

namespace {

template <typename F>
bool load(void* library, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(library, name));
  return fn != nullptr;
}

}  // namespace

Nvml::Nvml(const char* library) {
  library_ = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!library_) {
    const char* error = dlerror();
    reason_ = error ? error : std::string(library) + " could not be loaded";
    reason_ += " (NVML ships with the NVIDIA driver)";
    return;
  }
  api_ = new Api;
  load(library_, "nvmlErrorString", api_->error_string);
  // _v3 since driver 510; older drivers have _v2 with the same struct layout.
  const bool have_processes = load(library_, "nvmlDeviceGetComputeRunningProcesses_v3", api_->compute_processes) ||
                              load(library_, "nvmlDeviceGetComputeRunningProcesses_v2", api_->compute_processes);
  const char* missing = nullptr;
  if (!load(library_, "nvmlInit_v2", api_->init))
    missing = "nvmlInit_v2";
  else if (!load(library_, "nvmlShutdown", api_->shutdown))
    missing = "nvmlShutdown";
  else if (!load(library_, "nvmlDeviceGetCount_v2", api_->device_count))
    missing = "nvmlDeviceGetCount_v2";
  else if (!load(library_, "nvmlDeviceGetHandleByIndex_v2", api_->handle_by_index))
    missing = "nvmlDeviceGetHandleByIndex_v2";
  else if (!have_processes)
    missing = "nvmlDeviceGetComputeRunningProcesses_v3";
  else if (!load(library_, "nvmlDeviceGetMemoryInfo", api_->memory_info))
    missing = "nvmlDeviceGetMemoryInfo";
  load(library_, "nvmlDeviceGetUtilizationRates", api_->utilization);
  load(library_, "nvmlDeviceGetPowerUsage", api_->power);
  load(library_, "nvmlDeviceGetClockInfo", api_->clock);
  load(library_, "nvmlDeviceGetTemperature", api_->temperature);
  load(library_, "nvmlDeviceGetName", api_->name);
  load(library_, "nvmlDeviceGetUUID", api_->uuid);
  load(library_, "nvmlDeviceGetPciInfo_v3", api_->pci_info);
  load(library_, "nvmlDeviceGetSamples", api_->samples);
  if (missing) {
    reason_ = std::string("libnvidia-ml.so.1 has no ") + missing + " (driver too old?)";
    return;
  }
  const nvmlReturn_t init = api_->init();
  if (init != kNvmlSuccess) {
    reason_ = "nvmlInit_v2 failed: " + api_->describe(init);
    return;
  }
  api_->initialized = true;
  unsigned int count = 0;
  const nvmlReturn_t got = api_->device_count(&count);
  if (got != kNvmlSuccess) {
    reason_ = "nvmlDeviceGetCount_v2 failed: " + api_->describe(got);
    return;
  }
  device_count_ = static_cast<int>(count);
  available_ = true;
}

Nvml::~Nvml() {
  if (api_ && api_->initialized) api_->shutdown();
  delete api_;
  if (library_) dlclose(library_);
}

std::optional<int64_t> Nvml::process_memory_bytes(const std::vector<int>& pids) const {
  if (!available_) return std::nullopt;
  const std::unordered_set<unsigned int> wanted(pids.begin(), pids.end());
  bool any_device = false;
  int64_t total = 0;
  std::vector<nvmlProcessInfo_t> infos(64);
  for (int index = 0; index < device_count_; ++index) {
    nvmlDevice_t device = nullptr;
    if (api_->handle_by_index(static_cast<unsigned int>(index), &device) != kNvmlSuccess) continue;
    unsigned int count = static_cast<unsigned int>(infos.size());
    nvmlReturn_t got = api_->compute_processes(device, &count, infos.data());
    for (int attempt = 0; got == kNvmlErrorInsufficientSize && attempt < 3; ++attempt) {
      infos.resize(count + 16);  // processes may start between the calls
      count = static_cast<unsigned int>(infos.size());
      got = api_->compute_processes(device, &count, infos.data());
    }
    if (got != kNvmlSuccess) continue;
    any_device = true;
    for (unsigned int i = 0; i < count && i < infos.size(); ++i) {
      if (!wanted.count(infos[i].pid) || infos[i].usedGpuMemory == kNvmlValueNotAvailable) continue;
      total += static_cast<int64_t>(infos[i].usedGpuMemory);
    }
  }
  if (!any_device) return std::nullopt;
  return total;
}

std::optional<Nvml::MemoryInfo> Nvml::memory_info(int index) const {
  if (!available_ || index < 0 || index >= device_count_) return std::nullopt;
  nvmlDevice_t device = nullptr;
  if (api_->handle_by_index(static_cast<unsigned int>(index), &device) != kNvmlSuccess) return std::nullopt;
  nvmlMemory_t memory{};
  if (api_->memory_info(device, &memory) != kNvmlSuccess) return std::nullopt;
  return MemoryInfo{static_cast<int64_t>(memory.total), static_cast<int64_t>(memory.used)};
}

std::optional<Nvml::Sample> Nvml::sample(int index) const {
  if (!available_ || index < 0 || index >= device_count_) return std::nullopt;
  nvmlDevice_t device = nullptr;
  if (api_->handle_by_index(static_cast<unsigned int>(index), &device) != kNvmlSuccess) return std::nullopt;
  Sample s;
  nvmlUtilization_t u{};
  if (api_->utilization && api_->utilization(device, &u) == kNvmlSuccess)
    s.sm_percent = u.gpu, s.memory_percent = u.memory;
  nvmlMemory_t memory{};
  if (api_->memory_info(device, &memory) == kNvmlSuccess) s.memory_used_bytes = static_cast<int64_t>(memory.used);
  unsigned int value = 0;
  if (api_->power && api_->power(device, &value) == kNvmlSuccess) s.power_w = value / 1000.0;
  constexpr int kClockSm = 1, kTemperatureGpu = 0;
  if (api_->clock && api_->clock(device, kClockSm, &value) == kNvmlSuccess) s.sm_clock_mhz = static_cast<int>(value);
  if (api_->temperature && api_->temperature(device, kTemperatureGpu, &value) == kNvmlSuccess)
    s.temperature_c = static_cast<int>(value);
  return s;
}

std::optional<std::vector<Nvml::Reading>> Nvml::utilisation_samples(int index, Utilisation kind,
                                                                    uint64_t after_us) const {
  if (!available_ || !api_->samples || index < 0 || index >= device_count_) return std::nullopt;
  nvmlDevice_t device = nullptr;
  if (api_->handle_by_index(static_cast<unsigned int>(index), &device) != kNvmlSuccess) return std::nullopt;
  const int type = static_cast<int>(kind);
  int value_type = 1;
  unsigned int count = 0;  // first the size of the driver's buffer, then the samples themselves
  nvmlReturn_t got = api_->samples(device, type, after_us, &value_type, &count, nullptr);
  if (got == kNvmlErrorNotFound) return std::vector<Reading>{};
  if (got != kNvmlSuccess) return std::nullopt;
  std::vector<nvmlSample_t> raw(count);
  if (count > 0) got = api_->samples(device, type, after_us, &value_type, &count, raw.data());
  if (got == kNvmlErrorNotFound) return std::vector<Reading>{};
  if (got != kNvmlSuccess) return std::nullopt;
  std::vector<Reading> out;
  for (unsigned int i = 0; i < count && i < raw.size(); ++i)
    if (raw[i].timeStamp > after_us) out.push_back({raw[i].timeStamp, value_of(value_type, raw[i].sampleValue)});
  std::sort(out.begin(), out.end(), [](const Reading& a, const Reading& b) { return a.timestamp_us < b.timestamp_us; });
  return out;
}

std::optional<std::string> Nvml::name(int index) const {
  if (!available_ || !api_->name || index < 0 || index >= device_count_) return std::nullopt;
  nvmlDevice_t device = nullptr;
  char text[96] = {0};
  if (api_->handle_by_index(static_cast<unsigned int>(index), &device) != kNvmlSuccess ||
      api_->name(device, text, sizeof text) != kNvmlSuccess)
    return std::nullopt;
  return std::string(text);
}

std::vector<NvmlDeviceId> Nvml::ids() const {
  std::vector<NvmlDeviceId> ids(available_ ? static_cast<size_t>(device_count_) : 0);
  for (int index = 0; index < static_cast<int>(ids.size()); ++index) {
    nvmlDevice_t device = nullptr;
    if (api_->handle_by_index(static_cast<unsigned int>(index), &device) != kNvmlSuccess) continue;
    char uuid[96] = {0};
    if (api_->uuid && api_->uuid(device, uuid, sizeof uuid) == kNvmlSuccess) ids[index].uuid = uuid;
    nvmlPciInfo_t pci{};
    if (api_->pci_info && api_->pci_info(device, &pci) == kNvmlSuccess)
      ids[index].pci = PciLocation{pci.domain, pci.bus, pci.device};
  }
  return ids;
}

std::optional<int> Nvml::index_of_cuda_device(int cuda_index) const {
  if (!available_) return std::nullopt;
  std::optional<PciLocation> pci;
  try {
    if (built_with_cuda()) pci = cuda_pci_location(cuda_index);
  } catch (const std::exception&) {}
  return nvml_index_for_cuda(cuda_index, std::getenv("CUDA_VISIBLE_DEVICES"), ids(), pci);
}

std::optional<int> nvml_index_for_cuda(int cuda_index, const char* visible, const std::vector<NvmlDeviceId>& devices,
                                       const std::optional<PciLocation>& cuda_pci) {
  const int count = static_cast<int>(devices.size());
  if (cuda_index < 0) return std::nullopt;
  if (cuda_pci) {
    for (int i = 0; i < count; ++i)
      if (devices[i].pci && *devices[i].pci == *cuda_pci) return i;
    return std::nullopt;
  }
  if (!visible) return cuda_index < count ? std::optional<int>(cuda_index) : std::nullopt;
  // CUDA reads the list up to its first invalid entry; the CUDA index picks one of those read.
  std::vector<std::string> entries;
  std::string list(visible);
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    std::string entry = list.substr(start, comma - start);
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    if (entry.empty()) break;
    entries.push_back(entry);
    start = comma + 1;
  }
  if (cuda_index >= static_cast<int>(entries.size())) return std::nullopt;
  const std::string& entry = entries[static_cast<size_t>(cuda_index)];
  if (entry.find_first_not_of("0123456789") == std::string::npos) {
    const long index = entry.size() < 6 ? std::stol(entry) : -1;
    return index >= 0 && index < count ? std::optional<int>(static_cast<int>(index)) : std::nullopt;
  }
  std::optional<int> found;
  for (int i = 0; i < count; ++i) {
    const std::string& uuid = devices[i].uuid;
    if (uuid.empty()) continue;
    // "GPU-5f3c..." or its prefix; NVML's UUIDs carry the "GPU-", CUDA_VISIBLE_DEVICES may leave it out.
    const bool match = uuid.rfind(entry, 0) == 0 || uuid.rfind("GPU-" + entry, 0) == 0;
    if (!match) continue;
    if (found) return std::nullopt;  // an ambiguous prefix: CUDA refuses it too
    found = i;
  }
  return found;
}

const Nvml& shared_nvml() {
  static const Nvml nvml;
  return nvml;
}

std::optional<UtilisationStat> window_stat(const std::vector<Nvml::Reading>& readings, uint64_t start_us,
                                           uint64_t end_us) {
  UtilisationStat s;
  double weighted = 0, covered_us = 0;
  for (size_t i = 1; i < readings.size(); ++i) {
    const uint64_t from = readings[i - 1].timestamp_us, to = readings[i].timestamp_us;
    if (from < start_us || to > end_us || to <= from) continue;
    const double v = readings[i].percent;
    s.min = covered_us == 0 ? v : std::min(s.min, v);
    s.max = covered_us == 0 ? v : std::max(s.max, v);
    weighted += v * static_cast<double>(to - from);
    covered_us += static_cast<double>(to - from);
  }
  if (covered_us == 0) return std::nullopt;
  s.mean = weighted / covered_us;
  return s;
}

void UtilisationWindow::Series::read(const Nvml& nvml, int index, uint64_t start_us) {
  const uint64_t after = readings.empty() ? 0 : readings.back().timestamp_us;
  const auto got = nvml.utilisation_samples(index, kind, after);
  if (!got) return;
  supported = true;
  readings.insert(readings.end(), got->begin(), got->end());
  // Of the samples before the window only the last is needed: it opens the first period inside.
  const auto first_inside = std::find_if(readings.begin(), readings.end(),
                                         [&](const Nvml::Reading& r) { return r.timestamp_us >= start_us; });
  if (first_inside - readings.begin() > 1) readings.erase(readings.begin(), first_inside - 1);
}

UtilisationWindow::UtilisationWindow(const Nvml& nvml, int index, uint64_t start_us)
    : nvml_(nvml), index_(index), start_us_(start_us) {
  poll();
}

void UtilisationWindow::poll() {
  sm_.read(nvml_, index_, start_us_);
  memory_.read(nvml_, index_, start_us_);
}

UtilisationWindow::Result UtilisationWindow::finish(uint64_t end_us) {
  poll();
  Result r;
  r.sm_supported = sm_.supported;
  r.memory_supported = memory_.supported;
  r.sm_percent = window_stat(sm_.readings, start_us_, end_us);
  r.memory_percent = window_stat(memory_.readings, start_us_, end_us);
  return r;
}

}  // namespace batchwise::detail

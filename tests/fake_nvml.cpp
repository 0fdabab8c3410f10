// A stand-in libnvidia-ml.so.1 for the tests (loaded through LD_LIBRARY_PATH by the batchwise
// they start): two GPUs whose NVML order (PCI order) is not the order a command's CUDA sees under
// CUDA_VISIBLE_DEVICES, so a test can tell which one batchwise measured. No processes hold memory.
// Utilisation samples (nvmlDeviceGetSamples) are what a test injects with fake_nvml_set_samples;
// until then the query is not supported.
#include <cstdint>
#include <cstring>
#include <vector>

namespace {
struct PciInfo {  // nvmlPciInfo_v3
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct Memory {
  unsigned long long total, free, used;
};
struct ProcessInfo {
  unsigned pid;
  unsigned long long used;
  unsigned gpu_instance, compute_instance;
};
const char* const kNames[] = {"Fake GPU A 8GB", "Fake GPU B 24GB"};
const char* const kUuids[] = {"GPU-aaaa1111", "GPU-bbbb2222"};
const unsigned long long kTotals[] = {8ULL << 30, 24ULL << 30};
const unsigned kBuses[] = {0x1b, 0x3b};
struct Sample {  // nvmlSample_t
  unsigned long long timestamp;
  union {
    double d;
    unsigned u;
    unsigned long long ull;
  } value;
};
struct Series {
  bool supported = false;
  std::vector<Sample> samples;  // oldest first
};
Series series[2][3];  // [device][nvmlSamplingType_t: 1 SM, 2 memory]
int index_of(void* device) { return static_cast<int>(reinterpret_cast<std::uintptr_t>(device)) - 1; }
void copy(char* out, const char* text, unsigned size) {
  std::strncpy(out, text, size);
  if (size > 0) out[size - 1] = '\0';
}
}  // namespace

extern "C" {
int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int) { return "fake NVML error"; }
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index > 1) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = reinterpret_cast<void*>(static_cast<std::uintptr_t>(index + 1));
  return 0;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void*, unsigned* count, ProcessInfo*) {
  *count = 0;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  memory->total = kTotals[index_of(device)];
  memory->used = 1ULL << 30;
  memory->free = memory->total - memory->used;
  return 0;
}
int nvmlDeviceGetName(void* device, char* name, unsigned size) {
  copy(name, kNames[index_of(device)], size);
  return 0;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned size) {
  copy(uuid, kUuids[index_of(device)], size);
  return 0;
}
int nvmlDeviceGetPciInfo_v3(void* device, PciInfo* pci) {
  std::memset(pci, 0, sizeof *pci);
  pci->bus = kBuses[index_of(device)];
  return 0;
}
// NVML_GPU_UTILIZATION_SAMPLES (1) and NVML_MEMORY_UTILIZATION_SAMPLES (2), as unsigned ints: the
// samples newer than last_seen, oldest first, as many as fit; NVML_ERROR_NOT_FOUND (6) when none is.
int nvmlDeviceGetSamples(void* device, int type, unsigned long long last_seen, int* value_type, unsigned* count,
                         Sample* samples) {
  if (type < 1 || type > 2 || !count) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  const Series& s = series[index_of(device)][type];
  if (!s.supported) return 3;  // NVML_ERROR_NOT_SUPPORTED
  if (value_type) *value_type = 1;
  if (!samples) {  // the size of the buffer to pass
    *count = static_cast<unsigned>(s.samples.size());
    return s.samples.empty() ? 6 : 0;
  }
  unsigned n = 0;
  for (const Sample& x : s.samples)
    if (x.timestamp > last_seen && n < *count) samples[n++] = x;
  *count = n;
  return n == 0 ? 6 : 0;
}

// Test hook: device `device`'s samples of `type` become `count` samples (timestamps in microseconds
// since the epoch, percents); count < 0: the query is not supported.
void fake_nvml_set_samples(unsigned device, int type, const unsigned long long* timestamps, const unsigned* percents,
                           int count) {
  Series& s = series[device][type];
  s.supported = count >= 0;
  s.samples.clear();
  for (int i = 0; i < count; ++i) {
    Sample x{};
    x.timestamp = timestamps[i];
    x.value.u = percents[i];
    s.samples.push_back(x);
  }
}
}

// A stand-in libnvidia-ml.so.1 for the tests (loaded through LD_LIBRARY_PATH by the batchwise
// they start): two GPUs whose NVML order (PCI order) is not the order a command's CUDA sees under
// CUDA_VISIBLE_DEVICES, so a test can tell which one batchwise measured. No processes hold memory.
#include <cstdint>
#include <cstring>

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
}

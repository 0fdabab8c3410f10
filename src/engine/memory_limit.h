#pragma once
// A workload's device memory limit (the session's budget) held while it trains and lifted however the
// scope ends: validate's runs, the noise scale's steps. A trial's own limit is run_trial's.
#include <cstdint>
#include <memory>

#include "batchwise/memory.h"
#include "batchwise/workload.h"

namespace batchwise::detail {

class MemoryLimit {
 public:
  // `bytes` 0: no limit, nothing held.
  MemoryLimit(const Workload& w, int64_t bytes) : memory_(bytes > 0 ? device_memory(w) : nullptr), bytes_(bytes) {
    hold();
  }
  ~MemoryLimit() { lift(); }
  MemoryLimit(const MemoryLimit&) = delete;
  MemoryLimit& operator=(const MemoryLimit&) = delete;

  // CUDA's cached blocks are handed out without the fraction's check: they go first (an evaluation,
  // lifted, cached its own), as before a trial.
  void hold() {
    if (!memory_) return;
    memory_->synchronize();
    memory_->release_cached();
    memory_->set_limit(bytes_);
  }
  void lift() noexcept {
    try {
      if (memory_) memory_->set_limit(0);
    } catch (...) {  // a sticky CUDA error while unwinding: the training's own error says it
    }
  }

 private:
  std::unique_ptr<DeviceMemory> memory_;
  int64_t bytes_;
};

}  // namespace batchwise::detail

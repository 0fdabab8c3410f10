#pragma once
// The CPU tracker's baseline (engine/memory.cpp), for the Python extension (python/src/engine.cpp).
#include <cstdint>

namespace batchwise::detail {

/// Bytes of counted tensors that are not the training's: in a Python process, the user's other
/// tensors made after the tracker was installed (another model, a dataset). CpuMemoryTracker's
/// current and peak figures, and the limit an allocation is judged against, leave them out, so a
/// budget is this model's training's alone. 0 (the default): every counted byte is the training's.
void set_cpu_baseline_bytes(int64_t bytes);

}  // namespace batchwise::detail

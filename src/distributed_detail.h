#pragma once
// Data-parallel internals that tests reach (src/distributed/distributed.cpp).

namespace batchwise::detail {

/// For tests: the next `count` allocations of a data-parallel step's all-reduce buffer in this
/// process fail as out of memory, as a CUDA rank's do when the caching allocator's cap is reached
/// (the retry with the limit lifted counts as one).
void fail_flat_buffers(int count);

}  // namespace batchwise::detail

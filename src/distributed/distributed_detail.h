#pragma once
// Data-parallel internals shared by src/distributed/'s units, and what tests reach.
#include <algorithm>
#include <utility>
#include <vector>

#include "batchwise/outcome.h"

namespace batchwise::detail {

/// For tests: the next `count` allocations of a data-parallel step's all-reduce buffer in this
/// process fail as out of memory, as a CUDA rank's do when the caching allocator's cap is reached
/// (the retry with the limit lifted counts as one).
void fail_flat_buffers(int count);

namespace status {

// The status codes a step's all-reduce carries, one slot per rank; when several ranks fail, the
// trial's outcome is the first in this order (out of memory says most about the batch).
enum Status { kOk = 0, kOom = 1, kError = 2, kTimeout = 3 };

inline double status_of(Outcome o) {
  return o == Outcome::Oom ? kOom : o == Outcome::Timeout ? kTimeout : o == Outcome::Ok ? kOk : kError;
}

inline Outcome outcome_of_status(int s) {
  return s == kOom ? Outcome::Oom : s == kTimeout ? Outcome::Timeout : s == kOk ? Outcome::Ok : Outcome::Error;
}

// The agreed outcome of per-rank statuses, and the ranks that had it.
inline std::pair<int, std::vector<int>> worst(const std::vector<int>& statuses) {
  int status = kOk;
  for (const int s : {kOom, kError, kTimeout})
    if (std::find(statuses.begin(), statuses.end(), s) != statuses.end()) {
      status = s;
      break;
    }
  std::vector<int> ranks;
  for (size_t r = 0; r < statuses.size(); ++r)
    if (status != kOk && statuses[r] == status) ranks.push_back(static_cast<int>(r));
  return {status, ranks};
}

}  // namespace status

}  // namespace batchwise::detail

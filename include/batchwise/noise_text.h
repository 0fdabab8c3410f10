#pragma once
// The noise measurement's words that both its callers say (the CLI's `noise` and the Python engine's):
// one text, in the CLI's flags, which the Python API names as its own options.
#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "batchwise/units.h"

namespace batchwise::detail {

/// `noise --batch B` past the memory budget: the batch, the budget, the allocator's line, the fix.
inline std::string noise_does_not_fit(int64_t batch, int64_t budget_bytes, const std::string& cause) {
  return fmt::format(
      "batch {} does not fit the memory budget ({}): {}; give a smaller --batch (batchwise fit finds the largest "
      "that fits) or a larger --memory-budget",
      batch, format_bytes(budget_bytes), cause);
}

}  // namespace batchwise::detail

// One other precision at the recommended batch, for tune's precision comparison (tune.cpp,
// compare_precisions): its own fit and its throughput at the run's batch, and a verdict.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batchwise/record.h"
#include "batchwise/tune.h"

namespace batchwise::detail {

/// `precision`'s own fit, its samples/s at `own.batch` and its verdict against `own` (the run's own
/// precision); what its one-batch sweep warns of (a noisy reading, or one that shared the CPU), named
/// by the precision, into `warnings`.
PrecisionPoint measure_precision(Precision precision, const WorkloadOptions& options, const TuneOptions& o,
                                 const PrecisionPoint& own, int64_t budget, std::vector<std::string>& warnings);

}  // namespace batchwise::detail

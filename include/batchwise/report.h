#pragma once
/// Reports read the measurement records and never change them (google/benchmark's reporters):
/// one JSON document for programs, one console table for people, from the same Report.
/// The JSON schema is documented in docs/report-schema.md.
#include <string>

#include "batchwise/record.h"

namespace batchwise {

/// The JSON report (schema_version "1"), pretty-printed.
std::string to_json(const Report& report);

/// The console view: a header line, a table per fit and sweep, and the recommendation.
std::string to_table(const Report& report);

}  // namespace batchwise

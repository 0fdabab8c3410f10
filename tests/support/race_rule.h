#pragma once
// The race's candidates from a tune report's sweep, by the library's own rule, for the CLI tests,
// which include no LibTorch header (support/race_rule.cpp reads the report).
#include <string>

namespace support {

// Whether the sweep in `report_json` (tune's JSON report) leaves the race 2 candidates or more
// (race_candidates): the sweep's rates choose them, and on a loaded machine a batch may read more
// than 5 % slower than a smaller one and drop out, so that no race runs.
bool sweep_leaves_a_race(const std::string& report_json);

}  // namespace support

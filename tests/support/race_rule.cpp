#include "support/race_rule.h"

#include "batchwise/race.h"
#include "batchwise/record.h"
#include "batchwise/report.h"

namespace support {

bool sweep_leaves_a_race(const std::string& report_json) {
  const batchwise::Report r = batchwise::report_from_json(report_json, "the test's report");
  return r.sweep && batchwise::race_candidates(r.sweep->points).size() >= 2;
}

}  // namespace support

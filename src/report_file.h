#pragma once
// Reading a JSON report back (compare, the HTML report): DataError names the input and the fix.
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <string>

#include "check.h"

namespace batchwise::detail {

inline nlohmann::json parse_report(const std::string& text, const std::string& name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    BATCHWISE_CHECK(false, DataError, "{}: not JSON ({}); give a report written with --json", name, e.what());
  }
  BATCHWISE_CHECK(j.is_object() && j.contains("schema_version") && j.contains("context"), DataError,
                  "{}: not a batchwise report (no schema_version and context); give a report written with --json",
                  name);
  BATCHWISE_CHECK(j["schema_version"] == "1", DataError,
                  "{}: report schema {} is not one this batchwise reads (1); use the batchwise that wrote it",
                  name, j["schema_version"].dump());
  return j;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BATCHWISE_CHECK(in.good(), DataError, "{}: cannot be read; give the path of a report written with --json", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline nlohmann::json read_report(const std::string& path) { return parse_report(read_text(path), path); }

}  // namespace batchwise::detail

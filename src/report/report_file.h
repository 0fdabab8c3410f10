#pragma once
// Reading a JSON report's text back (compare, the HTML report); report_from_json (report.h) parses it.
// DataError names the input and the fix.
#include <fstream>
#include <iterator>
#include <string>

#include "check.h"

namespace batchwise::detail {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BATCHWISE_CHECK(in.good(), DataError, "{}: cannot be read; give the path of a report written with --json", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace batchwise::detail

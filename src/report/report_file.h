#pragma once
// Reading a JSON report's text back (compare, the HTML report); report_from_json (report.h) parses it.
// DataError names the input and the fix.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "check.h"

namespace batchwise::detail {

inline std::string read_text(const std::string& path) {
  std::error_code error;
  BATCHWISE_CHECK(!std::filesystem::is_directory(path, error), DataError,
                  "{}: is a folder; give the path of a report written with --json", path);
  std::ifstream in(path, std::ios::binary);
  BATCHWISE_CHECK(in.good(), DataError, "{}: cannot be read; give the path of a report written with --json", path);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  BATCHWISE_CHECK(!in.bad(), DataError, "{}: cannot be read; give the path of a report written with --json", path);
  return text;
}

}  // namespace batchwise::detail

#pragma once
// Reading a JSON report's text back (compare, the HTML report); report_from_json (report.h) parses it.
// DataError names the input and the fix.
#include <cerrno>
#include <cstring>
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
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  // Why, as the system says it: a file another user's permissions keep from this one had read as a wrong path
  const int why = errno;
  BATCHWISE_CHECK(in.good(), DataError, "{}: cannot be read ({}); {}", path,
                  why != 0 ? std::strerror(why) : "it could not be opened",
                  why == EACCES ? "make it readable to this user (chmod, or a copy), or give another report's path"
                                : "give the path of a report written with --json");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  BATCHWISE_CHECK(!in.bad(), DataError, "{}: cannot be read ({}); give the path of a report written with --json", path,
                  errno != 0 ? std::strerror(errno) : "a read failed");
  return text;
}

}  // namespace batchwise::detail

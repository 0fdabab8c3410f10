#pragma once
// BATCHWISE_CHECK validates user input and stays on in Release builds; BATCHWISE_ASSERT guards
// internal invariants.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>

#include "batchwise/error.h"

namespace batchwise::detail {

// The line of a torch error message that says what went wrong: the first line, except for errors
// raised inside the TorchScript interpreter, whose first line is a preamble ("The following
// operation failed...") and whose cause is the last "SomethingError: ..." line.
inline std::string error_line(const std::string& what) {
  auto line_at = [&](size_t begin) {
    const size_t end = what.find('\n', begin);
    std::string line = what.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    const size_t first = line.find_first_not_of(" \t");
    return first == std::string::npos ? std::string() : line.substr(first);
  };
  if (what.find("TorchScript interpreter") != std::string::npos) {
    std::string cause;
    for (size_t at = 0; at < what.size();) {
      const std::string line = line_at(at);
      const size_t colon = line.find(": ");
      if (colon != std::string::npos && colon > 0 && line.find(' ') >= colon &&
          (line.compare(0, colon, "RuntimeError") == 0 || line.rfind("Error", colon) == colon - 5 ||
           line.rfind("Exception", colon) == colon - 9))
        cause = line;
      const size_t next = what.find('\n', at);
      if (next == std::string::npos) break;
      at = next + 1;
    }
    if (!cause.empty()) return cause;
  }
  return line_at(0);
}

}  // namespace batchwise::detail

#define BATCHWISE_CHECK(cond, ErrorType, ...)                            \
  do {                                                                   \
    if (!(cond)) throw ::batchwise::ErrorType(fmt::format(__VA_ARGS__)); \
  } while (0)

#define BATCHWISE_ASSERT(cond)                                                                             \
  do {                                                                                                     \
    if (!(cond))                                                                                           \
      throw ::batchwise::Error(                                                                            \
          fmt::format("internal error: {} failed at {}:{}; please report it", #cond, __FILE__, __LINE__)); \
  } while (0)

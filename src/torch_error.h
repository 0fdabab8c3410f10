#pragma once
// Messages of exceptions thrown from inside torch, without the C++ stack trace c10::Error appends.
#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace batchwise::detail {

inline std::string plain_what(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

}  // namespace batchwise::detail

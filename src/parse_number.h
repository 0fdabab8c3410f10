#pragma once
// Numbers from text in one fixed format, whatever the process's locale says: "1.5" is one and a half
// even where setlocale(LC_NUMERIC, ...) made strtod expect "1,5". std::from_chars never reads the
// locale.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <system_error>

namespace batchwise::detail {

/// The whole of `text` as a finite double: "1.5", "-4e-1", "+2", ".5", "3."; false for anything else
/// (empty, surrounding spaces, trailing characters, a decimal comma, hex, inf, nan, out of range).
inline bool parse_double(std::string_view text, double& out) {
  if (!text.empty() && text.front() == '+') {  // from_chars takes a '-' but no '+'
    text.remove_prefix(1);
    if (!text.empty() && text.front() == '-') return false;
  }
  if (text.empty()) return false;
  double v = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::general);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) return false;
  out = v;
  return true;
}

/// The whole of `text` as a decimal integer ("42", "-7"); false for anything else.
inline bool parse_int64(std::string_view text, int64_t& out) {
  if (text.empty()) return false;
  int64_t v = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), v, 10);
  if (error != std::errc() || end != text.data() + text.size()) return false;
  out = v;
  return true;
}

}  // namespace batchwise::detail

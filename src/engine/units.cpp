#include "batchwise/units.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <utility>

#include "batchwise/choices.h"
#include "check.h"
#include "parse_number.h"

namespace batchwise {

int64_t parse_bytes(const std::string& given, const std::string& what) {
  // Spaces around the size (" 4GiB" from a config file or a Python string) are no part of it.
  const size_t first = given.find_first_not_of(" \t\n"), last = given.find_last_not_of(" \t\n");
  const std::string text = first == std::string::npos ? given : given.substr(first, last - first + 1);
  const std::string hint = "use a number with an optional unit, like 2GiB, 512MiB or 1.5GB";
  // The number is the longest prefix of digits, sign, point and exponent that parses (locale-free).
  size_t pos = text.find_first_not_of("0123456789.+-eE");
  if (pos == std::string::npos) pos = text.size();
  const size_t number_end = pos;
  double value = 0;
  while (pos > 0 && !detail::parse_double(std::string_view(text).substr(0, pos), value)) --pos;
  BATCHWISE_CHECK(pos > 0, ConfigError, "{}: '{}' is not a size; {}", what, text, hint);
  std::string unit = text.substr(pos);
  unit.erase(std::remove_if(unit.begin(), unit.end(), [](unsigned char c) { return std::isspace(c); }), unit.end());
  std::string lower;
  for (char c : unit) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  static const struct {
    const char* name;
    double scale;
  } kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1024.0},
      {"kib", 1024.0},
      {"kb", 1e3},
      {"m", 1048576.0},
      {"mib", 1048576.0},
      {"mb", 1e6},
      {"g", 1073741824.0},
      {"gib", 1073741824.0},
      {"gb", 1e9},
      {"t", 1099511627776.0},
      {"tib", 1099511627776.0},
      {"tb", 1e12},
      {"p", 1125899906842624.0},
      {"pib", 1125899906842624.0},
      {"pb", 1e15},
      {"e", 1152921504606846976.0},  // 7EiB is the most, "7E" no number: the unit's E read first
      {"eib", 1152921504606846976.0},
      {"eb", 1e18},
  };
  for (const auto& u : kUnits)
    if (lower == u.name) scale = u.scale;
  // Part of the number left over for the unit: past a double's range (1e400GiB) or malformed (1.2.3GiB),
  // not an unknown unit '0GiB'.
  BATCHWISE_CHECK(scale > 0 || pos == number_end, ConfigError,
                  "{}: '{}' is not a size: its number '{}' is malformed or out of range; {} (at most 7EiB)", what, text,
                  text.substr(0, number_end), hint);
  BATCHWISE_CHECK(scale > 0, ConfigError, "{}: unknown unit '{}' in '{}'; {}", what, unit, text, hint);
  BATCHWISE_CHECK(std::isfinite(value) && value > 0, ConfigError, "{}: '{}' must be a positive size; {}", what, text,
                  hint);
  const double bytes = value * scale;
  BATCHWISE_CHECK(bytes < 9.0e18, ConfigError,
                  "{}: '{}' is too large; give at most 7EiB (a device's memory, e.g. 80GiB)", what, text);
  const int64_t rounded = static_cast<int64_t>(std::llround(bytes));
  // Under half a byte rounds to 0, which a budget flag reads as "none given" (the device's default).
  BATCHWISE_CHECK(rounded >= 1, ConfigError, "{}: '{}' is less than a byte; give a size of at least 1B, like 2GiB",
                  what, text);
  // A fraction of a byte given as bytes ("0.6", "1.5B") is no size; later messages would name the rounded one.
  BATCHWISE_CHECK(scale > 1 || value == std::floor(value), ConfigError,
                  "{}: '{}' is not a whole number of bytes; give whole bytes or a unit, like 1.5GiB", what, text);
  return rounded;
}

std::string format_grouped(double value) {
  // Past a quadrillion no figure of a training run is real (a program's own report, say
  // samples_per_s=1e300): three significant digits, not a column of 300.
  if (!std::isfinite(value) || std::abs(value) >= 1e15) return fmt::format("{:.3g}", value);
  const std::string digits = fmt::format("{:.0f}", std::abs(value));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (value < 0 && digits != "0" ? "-" : "") + out;
}

std::string format_percent(double percent) {
  if (percent > 0 && percent < 0.05) return "< 0.1 %";
  return fmt::format("{:.1f} %", percent);
}

std::string format_seconds_figure(double seconds) {
  return seconds < 9.5 ? fmt::format("{:.2g}", seconds) : fmt::format("{:.0f}", seconds);
}

std::string format_seconds(double seconds) { return format_seconds_figure(seconds) + " s"; }

std::string format_loss(double loss) {
  if (!std::isfinite(loss)) return "not finite";
  return std::abs(loss) < 1e5 ? fmt::format("{:.4f}", loss) : fmt::format("{:.4g}", loss);
}

std::string format_epochs(double epochs, int significant) {
  const std::string figure = fmt::format("{:.{}g}", epochs, significant);
  return figure + (figure == "1" ? " epoch" : " epochs");
}

namespace {

constexpr const char* kByteUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};

// `bytes` in the largest unit (an index into kByteUnits) under which it is 1,024 or more.
std::pair<double, int> in_units(int64_t bytes) {
  double v = static_cast<double>(bytes);
  int i = 0;
  while (std::fabs(v) >= 1024.0 && i < 4) {
    v /= 1024.0;
    ++i;
  }
  return {v, i};
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  auto [v, i] = in_units(bytes);
  if (i == 0) return fmt::format("{} B", bytes);
  // Three figures, of the value as rounded: 1,048,575 B is "1.00 MiB" (it was "1024 KiB"), 10,485,750 B
  // "10.0 MiB" (it was "10.00 MiB").
  const auto to = [](double x, int decimals) {
    const double scale = std::pow(10.0, decimals);
    return std::round(x * scale) / scale;
  };
  int decimals = std::fabs(v) >= 100 ? 0 : std::fabs(v) >= 10 ? 1 : 2;
  while (decimals > 0 && std::fabs(to(v, decimals)) >= std::pow(10.0, 3 - decimals)) --decimals;
  if (std::fabs(to(v, decimals)) >= 1024 && i < 4) v /= 1024, ++i, decimals = 2;
  return fmt::format("{:.{}f} {}", to(v, decimals), decimals, kByteUnits[i]);
}

std::string format_bytes_at_most(int64_t bytes) {
  const auto [v, i] = in_units(bytes);
  if (i == 0) return fmt::format("{}B", bytes);
  return fmt::format("{:.1f}{}", std::floor(v * 10) / 10, kByteUnits[i]);
}

namespace {

// --seq-len takes the same lists and ranges as the batch sizes; its messages speak of lengths.
bool lengths(const std::string& what) { return what == "--seq-len"; }
std::string list_hint(const std::string& what) {
  return lengths(what) ? "use a length like 64 or a range like 32-128"
                       : "use a list like 16,32,64 or a range like 8-4096*2";
}

int64_t parse_count(const std::string& s, const std::string& what, const std::string& whole) {
  const char* noun = lengths(what) ? "a sequence length" : "a batch size";
  BATCHWISE_CHECK(!s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }),
                  ConfigError, "{}: '{}' is not {} in '{}'; {}", what, s, noun, whole, list_hint(what));
  // Leading zeros are no size (the --max flags read 010 as 10): counted without them, 0000000000001 is 1
  const std::string digits = s.substr(std::min(s.find_first_not_of('0'), s.size() - 1));
  BATCHWISE_CHECK(digits.size() <= 12, ConfigError, "{}: '{}' is too large; the most batchwise takes is {:.0f}", what,
                  s, find_option_bound("--batch")->high);
  const int64_t v = std::stoll(digits);
  BATCHWISE_CHECK(v >= 1, ConfigError, "{}: {} start at 1, got '{}'", what,
                  lengths(what) ? "sequence lengths" : "batch sizes", s);
  // As --batch's bound: a typo's 10^11 would otherwise build its index for minutes, holding gigabytes.
  const double most = find_option_bound("--batch")->high;
  BATCHWISE_CHECK(static_cast<double>(v) <= most, ConfigError,
                  "{}: {} in '{}' is more than the most batchwise takes, {:.0f}", what, s, whole, most);
  return v;
}

}  // namespace

std::vector<int64_t> parse_batch_sizes(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  BATCHWISE_CHECK(!text.empty(), ConfigError, "{}: empty list; {}", what, list_hint(what));
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    const size_t dash = item.find('-');
    BATCHWISE_CHECK(dash != 0, ConfigError, "{}: '{}' is negative: {} start at 1; {}", what, item,
                    lengths(what) ? "sequence lengths" : "batch sizes", list_hint(what));
    if (dash == std::string::npos) {
      out.push_back(parse_count(item, what, text));
    } else {
      const int64_t first = parse_count(item.substr(0, dash), what, text);
      std::string rest = item.substr(dash + 1);
      char op = '*';
      int64_t step = 2;
      const size_t op_pos = rest.find_first_of("*+");
      if (op_pos != std::string::npos) {
        op = rest[op_pos];
        const std::string by = rest.substr(op_pos + 1);
        // The step or factor is no batch size: said as what it is (4-64+0 had read "batch sizes start at 1")
        BATCHWISE_CHECK(by.find_first_not_of('0') != std::string::npos || by.empty(), ConfigError,
                        "{}: range '{}' needs a {} of at least {}", what, item, op == '+' ? "step" : "factor",
                        op == '+' ? 1 : 2);
        step = parse_count(by, what, text);
        rest = rest.substr(0, op_pos);
      }
      const int64_t last = parse_count(rest, what, text);
      BATCHWISE_CHECK(first <= last, ConfigError, "{}: range '{}' runs backwards; write it as {}-{}", what, item, last,
                      first);
      BATCHWISE_CHECK(op == '+' || step >= 2, ConfigError, "{}: range '{}' needs a factor of at least 2", what, item);
      // Count before expanding: a range of 10^12 sizes is a typo, not a list to build.
      if (op == '+') {
        const int64_t count = (last - first) / step + 1;
        BATCHWISE_CHECK(count <= kMaxBatchSizes - static_cast<int64_t>(out.size()), ConfigError,
                        "{}: range '{}' is {} batch sizes, each a trial; at most {} in all (use a factor: {}-{}*2)",
                        what, item, count, kMaxBatchSizes, first, last);
      }
      for (int64_t b = first; b <= last; b = (op == '*') ? b * step : b + step) {
        out.push_back(b);
        if (op == '*' ? b > last / step : b > last - step) break;  // the next is past `last` (or would overflow)
      }
    }
    BATCHWISE_CHECK(static_cast<int64_t>(out.size()) <= kMaxBatchSizes, ConfigError,
                    "{}: '{}' lists more than {} batch sizes, each a trial; give fewer", what, text, kMaxBatchSizes);
    start = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int64_t> doublings(int64_t first, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t b = first; b < last; b *= 2) out.push_back(b);
  if (last >= first) out.push_back(last);
  return out;
}

std::vector<int64_t> parse_shape(const std::string& text, const std::string& what) {
  std::vector<int64_t> shape;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find_first_of("x,", at), text.size());
    const std::string part = text.substr(at, end - at);
    char* stop = nullptr;
    const long long d = part.empty() ? 0 : std::strtoll(part.c_str(), &stop, 10);
    BATCHWISE_CHECK(!part.empty() && *stop == '\0' && d >= 1, ConfigError,
                    "{} {}: expected dimensions like 3x32x32, each a whole number of at least 1", what, text);
    shape.push_back(d);
    at = end + 1;
  }
  return shape;
}

double median(std::vector<double> v) {
  BATCHWISE_ASSERT(!v.empty());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double quantile(std::vector<double> v, double q) {
  BATCHWISE_ASSERT(!v.empty() && q >= 0 && q <= 1);
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t below = static_cast<size_t>(at);
  if (below + 1 >= v.size()) return v.back();
  return v[below] + (at - static_cast<double>(below)) * (v[below + 1] - v[below]);
}

}  // namespace batchwise

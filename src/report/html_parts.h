#pragma once
// What the HTML page (html.cpp: the page, its answer box and its tables) and its charts
// (html_charts.cpp: the sections drawn with Chart.js) share: text helpers and the chart sections.
// Each section reads only its part of the record and returns "" when that part is absent.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/record.h"
#include "batchwise/units.h"

namespace batchwise::detail::html {

/// Text for an HTML element or attribute: nothing from a report is ever markup.
std::string esc(const std::string& s);
/// Each item escaped, as "<li>item</li>" lines; `open` replaces "<li>" (a class, a prefix).
std::string list_items(const std::vector<std::string>& items, const char* open = "<li>");

inline std::string grouped(double value) { return format_grouped(value); }
inline std::string bytes_text(double bytes) { return format_bytes(static_cast<int64_t>(std::llround(bytes))); }
inline std::string bytes_text(const std::optional<int64_t>& bytes) { return bytes ? format_bytes(*bytes) : "-"; }
inline std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }
inline std::string text(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : ""; }
inline std::string or_dash(const std::optional<int64_t>& v) { return or_dash(text(v)); }
/// `part` as a share of `whole`, as format_percent writes it; "-" without a share.
inline std::string percent_of(double part, double whole) {
  return whole > 0 && part > 0 ? format_percent(100 * part / whole) : "-";
}
inline bool ok(const Trial& t) { return t.outcome == Outcome::Ok; }

/// The recommended batch, when there is one.
inline std::optional<int64_t> recommended_batch(const Report& r) {
  return r.recommendation ? std::optional<int64_t>(r.recommendation->batch) : std::nullopt;
}

// The chart sections (html_charts.cpp), in the order the page shows them.
std::string throughput_section(const Report& r);
std::string precision_section(const Report& r);
std::string profile_section(const Report& r);
std::string utilisation_section(const Report& r);
std::string goodput_section(const Report& r);
std::string noise_section(const Report& r);
std::string race_section(const Report& r);
std::string validation_section(const Report& r);
std::string memory_section(const Report& r);
std::string breakdown_section(const Report& r);

}  // namespace batchwise::detail::html

#include "batchwise/compare.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "batchwise/units.h"
#include "check.h"
#include "report_file.h"

namespace batchwise {

std::optional<double> ComparedPoint::speed_ratio() const {
  if (!samples_per_s_a || !samples_per_s_b || *samples_per_s_a <= 0) return std::nullopt;
  return *samples_per_s_b / *samples_per_s_a;
}

namespace {

using nlohmann::json;

// A field as text, "" when absent; `pointer` is a JSON pointer like /context/device/name.
std::string field(const json& j, const std::string& pointer) {
  const json::json_pointer p(pointer);
  if (!j.contains(p) || j.at(p).is_null()) return "";
  const json& v = j.at(p);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const auto& x : v) {
      if (!out.empty()) out += 'x';
      out += x.dump();
    }
    return out;
  }
  return v.dump();
}

std::optional<int64_t> batch_at(const json& j, const char* section) {
  if (!j.contains(section) || !j[section].is_object() || !j[section].contains("batch") || j[section]["batch"].is_null())
    return std::nullopt;
  return j[section]["batch"].get<int64_t>();
}

}  // namespace

Comparison compare_reports(const std::string& path_a, const std::string& path_b) {
  const json a = detail::read_report(path_a), b = detail::read_report(path_b);
  Comparison c;
  c.name_a = path_a;
  c.name_b = path_b;
  static const std::pair<const char*, const char*> kFields[] = {
      {"build commit", "/context/build_commit"}, {"torch", "/context/torch_version"},
      {"device", "/context/device/name"},        {"device type", "/context/device/type"},
      {"host", "/context/host"},                 {"threads", "/context/threads"},
      {"blas", "/context/blas"},                 {"model", "/workload/model"},
      {"dataset", "/workload/dataset"},          {"optimizer", "/workload/optimizer"},
      {"precision", "/workload/precision"},      {"input shape", "/workload/input_shape"},
      {"budget bytes", "/budget_bytes"},         {"target", "/target"},
  };
  for (const auto& [name, pointer] : kFields) {
    const std::string fa = field(a, pointer), fb = field(b, pointer);
    if (fa != fb) c.differences.push_back({name, fa, fb});
  }
  c.fit_batch_a = batch_at(a, "fit");
  c.fit_batch_b = batch_at(b, "fit");
  c.recommended_a = batch_at(a, "recommendation");
  c.recommended_b = batch_at(b, "recommendation");

  std::map<int64_t, ComparedPoint> points;
  auto add = [&](const json& report, bool is_a) {
    if (!report.contains("sweep") || !report["sweep"].is_object()) return;
    for (const auto& p : report["sweep"].value("points", json::array())) {
      ComparedPoint& cp = points[p.at("batch").get<int64_t>()];
      cp.batch = p.at("batch").get<int64_t>();
      const std::string outcome = p.value("outcome", "");
      const bool ok = outcome == "ok" && p.contains("samples_per_s") && p["samples_per_s"].is_number();
      (is_a ? cp.outcome_a : cp.outcome_b) = outcome;
      if (ok) (is_a ? cp.samples_per_s_a : cp.samples_per_s_b) = p["samples_per_s"].get<double>();
      if (p.contains("peak_bytes") && p["peak_bytes"].is_number())
        (is_a ? cp.peak_bytes_a : cp.peak_bytes_b) = p["peak_bytes"].get<int64_t>();
    }
  };
  try {
    add(a, true);
    add(b, false);
  } catch (const json::exception& e) {
    BATCHWISE_CHECK(false, DataError, "{} / {}: a sweep point is malformed ({})", path_a, path_b, e.what());
  }
  double log_sum = 0;
  int n = 0;
  for (auto& [batch, p] : points) {
    c.points.push_back(p);
    if (const auto r = p.speed_ratio()) {
      log_sum += std::log(*r);
      ++n;
    }
  }
  if (n > 0) c.geomean_speed_ratio = std::exp(log_sum / n);
  return c;
}

std::string to_table(const Comparison& c) {
  std::ostringstream out;
  auto line = [&](const std::string& s) { out << s << '\n'; };
  auto opt = [](const auto& v) { return v ? fmt::format("{}", *v) : std::string("-"); };
  line(fmt::format("A: {}", c.name_a));
  line(fmt::format("B: {}", c.name_b));
  if (c.differences.empty()) line("same context and workload");
  for (const auto& d : c.differences) line(fmt::format("{:<14} A {}  |  B {}", d.name, d.a, d.b));
  line(fmt::format("{:<14} A {}  |  B {}", "fit", opt(c.fit_batch_a), opt(c.fit_batch_b)));
  line(fmt::format("{:<14} A {}  |  B {}", "recommended", opt(c.recommended_a), opt(c.recommended_b)));
  if (c.points.empty()) return out.str();
  line("");
  line(fmt::format("{:>8}  {:>13}  {:>13}  {:>7}  {:>11}  {:>11}  {:>7}", "batch", "A samples/s", "B samples/s", "B/A",
                   "A peak", "B peak", "B/A"));
  for (const auto& p : c.points) {
    auto speed = [](const std::optional<double>& v, const std::string& outcome) {
      return v ? fmt::format("{:.0f}", *v) : (outcome.empty() ? std::string("-") : outcome);
    };
    auto peak = [](const std::optional<int64_t>& v) { return v ? format_bytes(*v) : std::string("-"); };
    const auto r = p.speed_ratio();
    const std::string peak_ratio = p.peak_bytes_a && p.peak_bytes_b && *p.peak_bytes_a > 0
                                       ? fmt::format("{:.2f}x", static_cast<double>(*p.peak_bytes_b) /
                                                                    static_cast<double>(*p.peak_bytes_a))
                                       : "-";
    line(fmt::format("{:>8}  {:>13}  {:>13}  {:>7}  {:>11}  {:>11}  {:>7}", p.batch,
                     speed(p.samples_per_s_a, p.outcome_a), speed(p.samples_per_s_b, p.outcome_b),
                     r ? fmt::format("{:.2f}x", *r) : "-", peak(p.peak_bytes_a), peak(p.peak_bytes_b), peak_ratio));
  }
  if (c.geomean_speed_ratio)
    line(fmt::format("samples/s B/A, geometric mean over the batches both ran: {:.2f}x", *c.geomean_speed_ratio));
  return out.str();
}

std::string to_json(const Comparison& c) {
  json j;
  j["a"] = c.name_a;
  j["b"] = c.name_b;
  j["differences"] = json::array();
  for (const auto& d : c.differences) j["differences"].push_back({{"field", d.name}, {"a", d.a}, {"b", d.b}});
  auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  j["fit_batch"] = {{"a", opt(c.fit_batch_a)}, {"b", opt(c.fit_batch_b)}};
  j["recommended_batch"] = {{"a", opt(c.recommended_a)}, {"b", opt(c.recommended_b)}};
  j["points"] = json::array();
  for (const auto& p : c.points)
    j["points"].push_back({{"batch", p.batch},
                           {"outcome", {{"a", p.outcome_a}, {"b", p.outcome_b}}},
                           {"samples_per_s", {{"a", opt(p.samples_per_s_a)}, {"b", opt(p.samples_per_s_b)}}},
                           {"peak_bytes", {{"a", opt(p.peak_bytes_a)}, {"b", opt(p.peak_bytes_b)}}},
                           {"speed_ratio", opt(p.speed_ratio())}});
  j["geomean_speed_ratio"] = opt(c.geomean_speed_ratio);
  return j.dump(2) + "\n";
}

}  // namespace batchwise

#include "batchwise/html.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "batchwise/units.h"
#include "check.h"
#include "report_file.h"

namespace batchwise {
namespace detail {
extern const char kChartJs[];
extern const char kChartJsVersion[];
}  // namespace detail

std::string chartjs_version() { return detail::kChartJsVersion; }

namespace {

using nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;

// Text for an HTML element or attribute: nothing from a report is ever markup.
std::string esc(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// JSON inside <script type="application/json">: '<', '>' and '&' only occur inside JSON strings,
// where their \u escapes mean the same, so no "</script>" or "<!--" can end the block early.
std::string script_json(const json& j) {
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else out += c;
  }
  return out;
}

// Fields are read leniently: a report from a newer or older batchwise may lack one, and the page
// shows "-" there rather than refusing to render.
const json* at(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}
std::string str(const json& j, const char* key) {
  const json* v = at(j, key);
  if (!v) return "";
  return v->is_string() ? v->get<std::string>() : v->dump();
}
std::optional<double> num(const json& j, const char* key) {
  const json* v = at(j, key);
  return v && v->is_number() ? std::optional<double>(v->get<double>()) : std::nullopt;
}
std::optional<int64_t> integer(const json& j, const char* key) {
  const json* v = at(j, key);
  return v && v->is_number() ? std::optional<int64_t>(v->get<int64_t>()) : std::nullopt;
}
const json& array(const json& j, const char* key) {
  static const json empty = json::array();
  const json* v = at(j, key);
  return v && v->is_array() ? *v : empty;
}

std::string grouped(double value) { return format_grouped(value); }
std::string bytes_text(std::optional<double> bytes) {
  return bytes ? format_bytes(static_cast<int64_t>(std::llround(*bytes))) : "-";
}
std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }
double mib(double bytes) { return std::round(bytes / kMiB * 1000.0) / 1000.0; }

struct Palette {
  static constexpr const char* blue = "#1f77b4";
  static constexpr const char* orange = "#ff7f0e";
  static constexpr const char* green = "#2ca02c";
  static constexpr const char* red = "#d62728";
  static constexpr const char* purple = "#9467bd";
  static constexpr const char* grey = "#7f7f7f";
};

json dataset(const std::string& label, json points, const char* color) {
  return {{"label", label}, {"data", std::move(points)}, {"borderColor", color}, {"backgroundColor", color},
          {"pointRadius", 4}, {"showLine", false}};
}
json line(json d, bool dashed = false) {
  d["showLine"] = true;
  d["pointRadius"] = 0;
  d["borderWidth"] = 1.5;
  if (dashed) d["borderDash"] = {6, 4};
  return d;
}
json batch_axes(const std::string& y_title) {
  return {{"x", {{"type", "logarithmic"}, {"title", {{"display", true}, {"text", "batch size (log scale)"}}}}},
          {"y", {{"beginAtZero", true}, {"title", {{"display", true}, {"text", y_title}}}}}};
}

// One chart: a canvas and its Chart.js configuration as a JSON block, drawn by the page's script.
std::string chart_block(const std::string& id, const json& config, const std::string& label) {
  return fmt::format(
      "<div class=\"chart\"><canvas id=\"chart-{0}\" role=\"img\" aria-label=\"{2}\"></canvas></div>\n"
      "<script type=\"application/json\" class=\"chart-config\" data-chart=\"{0}\">{1}</script>\n",
      id, script_json(config), esc(label));
}

std::string trial_note(const json& t) {
  std::string note = fmt::format("batch {}: {}", str(t, "batch"), str(t, "outcome"));
  if (auto s = num(t, "samples_per_s")) note += fmt::format(", {} samples/s", grouped(*s));
  if (auto lo = num(t, "samples_per_s_min"), hi = num(t, "samples_per_s_max"); lo && hi && num(t, "samples_per_s"))
    note += fmt::format(" (repetitions {}–{})", grouped(*lo), grouped(*hi));
  if (auto p = num(t, "peak_bytes"); p && *p > 0) note += ", peak " + bytes_text(p);
  if (const std::string message = str(t, "message"); !message.empty()) note += ": " + message;
  return note;
}

bool ok(const json& t) { return str(t, "outcome") == "ok"; }

// ---- sections -------------------------------------------------------------------------------

std::string recommendation_section(const json& r) {
  std::string out = "<section id=\"recommendation\" class=\"answer\">\n<h2>Recommendation</h2>\n";
  if (const json* rec = at(r, "recommendation")) {
    out += fmt::format("<p class=\"big\">Train with batch <b id=\"recommended-batch\">{}</b></p>\n<p class=\"reason\">{}</p>\n",
                       esc(str(*rec, "batch")), esc(str(*rec, "reason")));
  } else if (const json* fit = at(r, "fit")) {
    const std::string outcome = str(*fit, "outcome");
    if (outcome == "fits")
      out += fmt::format("<p class=\"big\">Largest batch that fits: <b id=\"fit-batch\">{}</b></p>\n", esc(str(*fit, "batch")));
    else if (outcome == "does_not_fit")
      out += "<p class=\"big bad\">No batch fits within the target</p>\n";
    else
      out += "<p class=\"big bad\">The fit failed</p>\n";
    if (const std::string message = str(*fit, "message"); !message.empty())
      out += fmt::format("<p class=\"reason\">{}</p>\n", esc(message));
  } else {
    out += "<p class=\"big bad\">No batch was recommended: no batch size ran successfully</p>\n";
  }
  out += "</section>\n";
  return out;
}

std::string warnings_section(const json& r) {
  const json context = r.value("context", json::object());  // a copy: array() returns a reference into it
  const json& warnings = array(context, "warnings");
  if (warnings.empty()) return "";
  std::string out = "<section id=\"warnings\" class=\"warn\">\n<h2>Warnings</h2>\n<ul>\n";
  for (const auto& w : warnings) out += fmt::format("<li>{}</li>\n", esc(w.is_string() ? w.get<std::string>() : w.dump()));
  return out + "</ul>\n</section>\n";
}

std::string throughput_section(const json& r) {
  const json* sweep = at(r, "sweep");
  if (!sweep) return "";
  json measured = json::array(), oom = json::array(), failed = json::array(), knee = json::array();
  const std::optional<int64_t> knee_batch = integer(*sweep, "knee_batch");
  for (const auto& p : array(*sweep, "points")) {
    const json point = {{"x", p.value("batch", 0)}, {"y", ok(p) ? num(p, "samples_per_s").value_or(0) : 0.0},
                        {"note", trial_note(p)}};
    if (ok(p)) measured.push_back(point);
    else if (str(p, "outcome") == "oom") oom.push_back(point);
    else failed.push_back(point);
    if (ok(p) && knee_batch && integer(p, "batch") == knee_batch) knee.push_back(point);
  }
  if (measured.empty()) return "";
  const double tolerance = num(*sweep, "knee_tolerance").value_or(0.05);
  json datasets = json::array();
  json median = dataset("samples/s (median step)", measured, Palette::blue);
  median["showLine"] = true;
  datasets.push_back(median);
  if (!knee.empty()) {
    json k = dataset(fmt::format("knee: smallest batch within {:g} % of the best", tolerance * 100), knee, Palette::red);
    k["pointRadius"] = 9;
    k["pointStyle"] = "triangle";
    datasets.push_back(k);
  }
  if (!oom.empty()) {
    json o = dataset("out of memory (not measured)", oom, Palette::grey);
    o["pointStyle"] = "crossRot";
    o["pointRadius"] = 8;
    datasets.push_back(o);
  }
  if (!failed.empty()) {
    json f = dataset("failed (error or timeout)", failed, Palette::purple);
    f["pointStyle"] = "crossRot";
    f["pointRadius"] = 8;
    datasets.push_back(f);
  }
  const json config = {{"type", "line"}, {"data", {{"datasets", datasets}}},
                       {"options", {{"scales", batch_axes("samples/s")}}}};
  std::string caption = fmt::format(
      "Samples per second at each batch size: the median step over {} repetition(s), interleaved. Past the knee a "
      "bigger batch buys less than {:g} % more throughput.",
      str(*sweep, "repetitions").empty() ? "1" : str(*sweep, "repetitions"), tolerance * 100);
  return "<section id=\"throughput\">\n<h2>Throughput</h2>\n<p class=\"caption\">" + esc(caption) + "</p>\n" +
         chart_block("throughput", config, "samples per second against batch size") + "</section>\n";
}

std::string memory_section(const json& r) {
  const json* fit = at(r, "fit");
  const json* sweep = at(r, "sweep");
  json fit_points = json::array(), sweep_points = json::array(), oom = json::array();
  std::set<int64_t> oom_batches;
  std::vector<int64_t> batches;
  const double budget = num(r, "budget_bytes").value_or(0), target = num(r, "target").value_or(0.9);
  auto add = [&](const json& t, json& into) {
    const int64_t batch = t.value("batch", int64_t{0});
    const double peak = num(t, "peak_bytes").value_or(0);
    if (batch <= 0) return;
    if (ok(t) && peak > 0) {
      into.push_back({{"x", batch}, {"y", mib(peak)}, {"note", trial_note(t)}});
      batches.push_back(batch);
    } else if (str(t, "outcome") == "oom" && oom_batches.insert(batch).second) {
      // The peak an out-of-memory trial reached is where it was stopped; without one, the budget.
      oom.push_back({{"x", batch}, {"y", mib(peak > 0 ? peak : budget)}, {"note", trial_note(t)}});
      batches.push_back(batch);
    }
  };
  if (fit)
    for (const auto& t : array(*fit, "trials")) add(t, fit_points);
  if (sweep)
    for (const auto& t : array(*sweep, "points")) add(t, sweep_points);
  if (fit_points.empty() && sweep_points.empty()) return "";
  const int64_t lo = *std::min_element(batches.begin(), batches.end());
  const int64_t hi = std::max(*std::max_element(batches.begin(), batches.end()), lo + 1);

  json datasets = json::array();
  if (!fit_points.empty()) datasets.push_back(dataset("fit trials (peak)", fit_points, Palette::blue));
  if (!sweep_points.empty()) {
    json s = dataset("sweep (peak)", sweep_points, Palette::green);
    s["pointStyle"] = "rect";
    datasets.push_back(s);
  }
  if (!oom.empty()) {
    json o = dataset("out of memory", oom, Palette::red);
    o["pointStyle"] = "crossRot";
    o["pointRadius"] = 8;
    datasets.push_back(o);
  }
  if (budget > 0) {
    datasets.push_back(line(dataset(fmt::format("budget {}", bytes_text(budget)),
                                    json::array({{{"x", lo}, {"y", mib(budget)}}, {{"x", hi}, {"y", mib(budget)}}}),
                                    Palette::red)));
    datasets.push_back(line(dataset(fmt::format("target {:g} % ({})", target * 100, bytes_text(target * budget)),
                                    json::array({{{"x", lo}, {"y", mib(target * budget)}},
                                                 {{"x", hi}, {"y", mib(target * budget)}}}),
                                    Palette::orange),
                            true));
  }
  std::string model_text;
  if (const json* model = fit ? at(*fit, "memory_model") : nullptr) {
    const double fixed = num(*model, "fixed_bytes").value_or(0), per = num(*model, "per_sample_bytes").value_or(0);
    // Straight in batch, so curved on the log axis: sampled at geometric steps.
    constexpr int kSamples = 24;
    json points = json::array();
    for (int i = 0; i < kSamples; ++i) {
      const double b = lo * std::pow(static_cast<double>(hi) / lo, i / (kSamples - 1.0));
      points.push_back({{"x", std::round(b * 100) / 100}, {"y", mib(fixed + per * b)}});
    }
    datasets.push_back(line(dataset("memory model", points, Palette::purple), true));
    model_text = fmt::format(" The memory model: peak = {} + {} × batch (largest error {}).", bytes_text(fixed),
                             bytes_text(per), bytes_text(num(*model, "residual_bytes")));
  }
  const json config = {{"type", "line"}, {"data", {{"datasets", datasets}}},
                       {"options", {{"scales", batch_axes("peak memory (MiB)")}}}};
  const std::string caption =
      "Peak memory of each trial against the budget and the target a fitting batch must stay under." + model_text;
  return "<section id=\"memory\">\n<h2>Memory</h2>\n<p class=\"caption\">" + esc(caption) + "</p>\n" +
         chart_block("memory", config, "peak memory against batch size") + "</section>\n";
}

std::string profile_section(const json& r) {
  const json& profiles = array(r, "step_profile");
  if (profiles.empty()) return "";
  static const std::pair<const char*, const char*> kPhases[] = {{"data", "data_s"},
                                                               {"to device", "h2d_s"},
                                                               {"forward", "forward_s"},
                                                               {"backward", "backward_s"},
                                                               {"optimizer", "optimizer_s"}};
  static const char* const kColors[] = {Palette::grey, Palette::orange, Palette::blue, Palette::purple, Palette::green};
  json labels = json::array(), datasets = json::array();
  for (const auto& p : profiles) labels.push_back("batch " + str(p, "batch"));
  size_t i = 0;
  for (const auto& [label, key] : kPhases) {
    json values = json::array();
    for (const auto& p : profiles) {
      const double total = num(p, "total_s").value_or(0);
      values.push_back(total > 0 ? std::round(1000 * 100 * num(p, key).value_or(0) / total) / 1000 : 0.0);
    }
    datasets.push_back({{"label", label}, {"data", values}, {"backgroundColor", kColors[i++]}});
  }
  const json config = {
      {"type", "bar"},
      {"data", {{"labels", labels}, {"datasets", datasets}}},
      {"options", {{"scales", {{"x", {{"stacked", true}}},
                               {"y", {{"stacked", true}, {"max", 100}, {"title", {{"display", true}, {"text", "% of the step"}}}}}}}}}};
  return "<section id=\"profile\">\n<h2>Where the step's time goes</h2>\n<p class=\"caption\">A separate pass, the "
         "device synchronised after each phase (so its steps run a little slower than the sweep's): each phase's "
         "share of the step. A large data share means the step waits for its input.</p>\n" +
         chart_block("profile", config, "step time by phase") + "</section>\n";
}

std::string precision_section(const json& r) {
  const json& points = array(r, "precision_comparison");
  if (points.empty()) return "";
  json labels = json::array(), speed = json::array(), colors = json::array();
  std::string rows;
  for (const auto& p : points) {
    labels.push_back(str(p, "precision"));
    speed.push_back(num(p, "samples_per_s").value_or(0));
    rows += fmt::format("<tr><td>{}</td><td class=\"n\">{}{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                        "<td class=\"n\">{:.2f}x</td><td class=\"n\">{:.2f}x</td><td>{}</td></tr>\n",
                        esc(str(p, "precision")), esc(or_dash(str(p, "fit_batch"))),
                        at(p, "fit_limited_by_max") && p["fit_limited_by_max"] == true ? "+" : "",
                        grouped(num(p, "samples_per_s").value_or(0)), esc(bytes_text(num(p, "peak_bytes"))),
                        num(p, "speed_ratio").value_or(0), num(p, "memory_ratio").value_or(0), esc(str(p, "verdict")));
  }
  const json config = {
      {"type", "bar"},
      {"data", {{"labels", labels},
                {"datasets", json::array({{{"label", fmt::format("samples/s at batch {}", str(points[0], "batch"))},
                                           {"data", speed},
                                           {"backgroundColor", Palette::blue}}})}}},
      {"options", {{"scales", {{"y", {{"beginAtZero", true}, {"title", {{"display", true}, {"text", "samples/s"}}}}}}}}}};
  return fmt::format(
      "<section id=\"precision\">\n<h2>Precision</h2>\n<p class=\"caption\">Each precision's own fit, and its "
      "throughput and peak memory at the same batch (+: the fit stopped at --max).</p>\n{}<table>\n<tr><th>precision"
      "</th><th>fit batch</th><th>samples/s</th><th>peak memory</th><th>speed</th><th>memory</th><th>verdict</th></tr>"
      "\n{}</table>\n</section>\n",
      chart_block("precision", config, "samples per second by precision"), rows);
}

// The utilisation timeline of the trial at the recommended batch (the sweep's point, else the fit's).
std::string utilisation_section(const json& r) {
  const json* rec = at(r, "recommendation");
  const std::optional<int64_t> batch = rec ? integer(*rec, "batch") : std::nullopt;
  const json* trial = nullptr;
  for (const char* section : {"fit", "sweep"}) {
    const json* s = at(r, section);
    if (!s) continue;
    for (const auto& t : array(*s, std::string(section) == "fit" ? "trials" : "points"))
      if (at(t, "utilisation") && ok(t) && (!batch || integer(t, "batch") == batch)) trial = &t;
  }
  if (!trial) return "";
  const json& u = (*trial)["utilisation"];
  json cpu = json::array(), gpu = json::array();
  for (const auto& x : array(u, "timeline")) {
    cpu.push_back({{"x", num(x, "t_s").value_or(0)}, {"y", num(x, "cpu_percent").value_or(0)}});
    if (auto sm = num(x, "gpu_sm_percent")) gpu.push_back({{"x", num(x, "t_s").value_or(0)}, {"y", *sm}});
  }
  if (cpu.empty()) return "";
  json datasets = json::array();
  json c = dataset("CPU busy % (mean over cores)", cpu, Palette::blue);
  c["showLine"] = true;
  c["pointRadius"] = 2;
  datasets.push_back(c);
  if (!gpu.empty()) {
    json g = dataset("GPU SM %", gpu, Palette::green);
    g["showLine"] = true;
    g["pointRadius"] = 2;
    datasets.push_back(g);
  }
  const json config = {
      {"type", "line"},
      {"data", {{"datasets", datasets}}},
      {"options", {{"scales", {{"x", {{"type", "linear"}, {"title", {{"display", true}, {"text", "seconds into the trial"}}}}},
                               {"y", {{"min", 0}, {"max", 100}, {"title", {{"display", true}, {"text", "%"}}}}}}}}}};
  const json cpu_stat = u.value("cpu_percent", json::object());
  const std::string caption = fmt::format(
      "Sampled every {:g} s during the trial at batch {}: CPU busy {:.0f} % on average (min {:.0f}, max {:.0f}), "
      "resident memory up to {}; the monitor itself used {:.2f} % of one core.",
      num(u, "interval_s").value_or(0), str(*trial, "batch"), num(cpu_stat, "mean").value_or(0),
      num(cpu_stat, "min").value_or(0), num(cpu_stat, "max").value_or(0), bytes_text(num(u, "rss_bytes_max")),
      num(u, "overhead_percent").value_or(0));
  return "<section id=\"utilisation\">\n<h2>Utilisation</h2>\n<p class=\"caption\">" + esc(caption) + "</p>\n" +
         chart_block("utilisation", config, "utilisation over the trial") + "</section>\n";
}

std::string goodput_section(const json& r) {
  const json* g = at(r, "goodput");
  if (!g || array(*g, "points").empty()) return "";
  json good = json::array(), speed = json::array(), best = json::array();
  const std::optional<int64_t> best_batch = integer(*g, "best_batch");
  for (const auto& p : array(*g, "points")) {
    const double goodput = num(p, "goodput").value_or(0), efficiency = num(p, "efficiency").value_or(0);
    const json point = {{"x", p.value("batch", int64_t{0})}, {"y", goodput},
                        {"note", fmt::format("batch {}: {} samples/s x {:.1f} % efficiency = {} useful samples/s",
                                             str(p, "batch"), grouped(num(p, "samples_per_s").value_or(0)),
                                             efficiency * 100, grouped(goodput))}};
    good.push_back(point);
    speed.push_back({{"x", p.value("batch", int64_t{0})}, {"y", num(p, "samples_per_s").value_or(0)}});
    if (best_batch && integer(p, "batch") == best_batch) best.push_back(point);
  }
  json datasets = json::array();
  json g_set = dataset("goodput (useful samples/s)", good, Palette::green);
  g_set["showLine"] = true;
  datasets.push_back(g_set);
  if (!best.empty()) {
    json b = dataset("best goodput", best, Palette::red);
    b["pointRadius"] = 9;
    b["pointStyle"] = "triangle";
    datasets.push_back(b);
  }
  json s_set = dataset("samples/s (throughput)", speed, Palette::blue);
  s_set["showLine"] = true;
  s_set["borderDash"] = {6, 4};
  s_set["pointRadius"] = 2;
  datasets.push_back(s_set);
  const json config = {{"type", "line"}, {"data", {{"datasets", datasets}}},
                       {"options", {{"scales", batch_axes("samples/s")}}}};
  const std::string caption = fmt::format(
      "Goodput = samples/s x statistical efficiency (Pollux), with efficiency = (B_simple + {0}) / (B_simple + batch) "
      "at the measured noise scale B_simple {1:.0f}: past it, a bigger batch adds samples whose gradients mostly "
      "repeat each other.",
      str(*g, "base_batch"), num(*g, "b_simple").value_or(0));
  return "<section id=\"goodput\">\n<h2>Goodput</h2>\n<p class=\"caption\">" + esc(caption) + "</p>\n" +
         chart_block("goodput", config, "goodput against batch size") + "</section>\n";
}

std::string noise_section(const json& r) {
  const json* n = at(r, "noise_scale");
  if (!n) return "";
  json smoothed = json::array();
  for (const auto& s : array(*n, "timeline"))
    if (auto b = num(s, "b_simple_smoothed")) smoothed.push_back({{"x", s.value("step", 0)}, {"y", *b}});
  std::string summary;
  if (auto b = num(*n, "b_simple")) {
    const json& band = array(*n, "b_simple_band");
    summary = fmt::format("B_simple = tr(Sigma) / |G|^2 = {:.1f}", *b);
    if (band.size() == 2 && band[0].is_number() && band[1].is_number())
      summary += fmt::format(" (band {:.1f} to {:.1f}, 2 standard errors)", band[0].get<double>(), band[1].get<double>());
    if (auto d = num(*n, "drift")) summary += fmt::format("; it drifted {:.2f}x from the first to the last quarter", *d);
    summary += ".";
  } else {
    summary = "B_simple could not be measured: " + str(*n, "message");
  }
  std::string out = fmt::format(
      "<section id=\"noise\">\n<h2>Gradient noise scale</h2>\n<p class=\"caption\">{} training steps at batch {} in "
      "micro-batches of {}. {} Near B_simple is the critical batch: below it a bigger batch cuts the steps to a target "
      "almost proportionally, above it each doubling buys less (McCandlish et al. 2018).</p>\n",
      esc(str(*n, "steps")), esc(str(*n, "batch")), esc(str(*n, "micro_batch")), esc(summary));
  if (!smoothed.empty()) {
    json line_set = dataset("B_simple (smoothed)", smoothed, Palette::purple);
    line_set["showLine"] = true;
    line_set["pointRadius"] = 2;
    const json config = {
        {"type", "line"},
        {"data", {{"datasets", json::array({line_set})}}},
        {"options", {{"scales", {{"x", {{"type", "linear"}, {"title", {{"display", true}, {"text", "training step"}}}}},
                                 {"y", {{"beginAtZero", true}, {"title", {{"display", true}, {"text", "B_simple"}}}}}}}}}};
    out += chart_block("noise", config, "gradient noise scale over the run");
  }
  return out + "</section>\n";
}

std::string validation_section(const json& r) {
  const json* v = at(r, "validation");
  if (!v) return "";
  static const char* const kColors[] = {Palette::blue, Palette::orange, Palette::green, Palette::red, Palette::purple,
                                        Palette::grey};
  json datasets = json::array();
  std::string rows;
  const std::optional<int64_t> fastest = integer(*v, "fastest_batch");
  size_t i = 0;
  bool accuracy = false;
  for (const auto& run : array(*v, "runs")) {
    json points = json::array();
    for (const auto& p : array(run, "curve")) {
      const auto acc = num(p, "accuracy");
      accuracy |= acc.has_value();
      points.push_back({{"x", num(p, "train_s").value_or(0)}, {"y", acc ? *acc : num(p, "loss").value_or(0)}});
    }
    json d = dataset(fmt::format("batch {} (lr {:.4g})", str(run, "batch"), num(run, "lr").value_or(0)), points,
                     kColors[i++ % 6]);
    d["showLine"] = true;
    d["pointRadius"] = 2;
    datasets.push_back(d);
    const bool soonest = fastest && integer(run, "batch") == fastest;
    rows += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{:.4g}</td><td>{}</td><td class=\"n\">{:.1f}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{:.2f}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
        run.value("reached", false) ? "ok" : "bad", esc(str(run, "batch")), num(run, "lr").value_or(0),
        run.value("reached", false) ? "yes" : "no", num(run, "train_s").value_or(0), esc(str(run, "steps")),
        num(run, "epochs").value_or(0),
        num(run, "accuracy") ? fmt::format("{:.4f}", *num(run, "accuracy")) : fmt::format("loss {:.4f}", num(run, "loss").value_or(0)),
        soonest ? "soonest" : esc(str(run, "message")));
  }
  const json config = {
      {"type", "line"},
      {"data", {{"datasets", datasets}}},
      {"options",
       {{"scales", {{"x", {{"type", "linear"}, {"title", {{"display", true}, {"text", "training time (s)"}}}}},
                    {"y", {{"title", {{"display", true}, {"text", accuracy ? "test accuracy" : "test loss"}}}}}}}}}};
  return fmt::format(
      "<section id=\"validation\">\n<h2>Time to {}</h2>\n<p class=\"caption\">Each candidate trained from the same "
      "weights with its scaled learning rate, evaluated on the {} (evaluation time excluded).</p>\n{}"
      "<table>\n<tr><th>batch</th><th>lr</th><th>reached</th><th>train s</th><th>steps</th><th>epochs</th>"
      "<th>last</th><th>note</th></tr>\n{}</table>\n</section>\n",
      esc(str(*v, "target")), esc(str(*v, "held_out")), chart_block("validation", config, "held-out metric over training time"),
      rows);
}

std::string race_section(const json& r) {
  const json* race = at(r, "race");
  if (!race) return "";
  static const char* const kColors[] = {Palette::blue, Palette::orange, Palette::green, Palette::red, Palette::purple,
                                        Palette::grey};
  json datasets = json::array();
  std::string rows;
  const std::optional<int64_t> best = integer(*race, "best_batch");
  size_t i = 0;
  for (const auto& e : array(*race, "entries")) {
    json points = json::array();
    if (array(e, "curve").empty()) {  // left out before its first rung: a table row, no line
      rows += fmt::format("<tr class=\"bad\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td colspan=\"7\">{}</td></tr>\n",
                          esc(str(e, "batch")), esc(grouped(num(e, "samples_per_s").value_or(0))), esc(str(e, "message")));
      continue;
    }
    for (const auto& p : array(e, "curve"))
      points.push_back({{"x", num(p, "train_s").value_or(0)}, {"y", num(p, "loss").value_or(0)}});
    const json lr = e.value("lr", json::object());
    json d = dataset(fmt::format("batch {} (lr {:.4g})", str(e, "batch"), num(lr, "lr").value_or(0)), points,
                     kColors[i++ % 6]);
    d["showLine"] = true;
    d["pointRadius"] = 2;
    datasets.push_back(d);
    const bool winner = best && integer(e, "batch") == best;
    const auto ratio = num(e, "time_ratio");
    rows += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.4g}</td><td>{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{:.1f}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
        str(e, "message").empty() ? "ok" : "bad", esc(str(e, "batch")), esc(grouped(num(e, "samples_per_s").value_or(0))),
        num(lr, "lr").value_or(0), lr.value("capped", false) ? fmt::format("capped ({:.4g})", num(lr, "rule_lr").value_or(0)) : "rule",
        esc(str(e, "rungs")), num(e, "train_s").value_or(0),
        num(e, "loss_at_horizon") ? fmt::format("{:.4f}", *num(e, "loss_at_horizon")) : "-",
        ratio ? fmt::format("{:.2f}x", *ratio) : "-", winner ? "best" : esc(str(e, "message")));
  }
  std::string notes;
  for (const auto& n : array(*race, "notes")) notes += fmt::format("<li>{}</li>\n", esc(n.is_string() ? n.get<std::string>() : n.dump()));
  if (!str(*race, "pick_reason").empty()) notes += fmt::format("<li>{}</li>\n", esc(str(*race, "pick_reason")));
  const json config = {
      {"type", "line"},
      {"data", {{"datasets", datasets}}},
      {"options",
       {{"scales", {{"x", {{"type", "linear"}, {"title", {{"display", true}, {"text", "training time (s, at the sweep's samples/s)"}}}}},
                    {"y", {{"title", {{"display", true}, {"text", "held-out loss"}}}}}}}}}};
  return fmt::format(
      "<section id=\"race\">\n<h2>Batch race</h2>\n<p class=\"caption\">Every candidate trained from your initial "
      "weights at its own advised learning rate, judged on held-out loss ({}) at equal training time; the better half "
      "went on at each rung (successive halving). Time to best: how much longer than the winner each needed to reach "
      "the winner's loss, from the slope of its last evaluations.</p>\n{}"
      "<table>\n<tr><th>batch</th><th>samples/s</th><th>lr</th><th>rate</th><th>rungs</th><th>train s</th>"
      "<th>loss</th><th>time to best</th><th>note</th></tr>\n{}</table>\n{}</section>\n",
      esc(str(*race, "held_out")), chart_block("race", config, "held-out loss over training time"), rows,
      notes.empty() ? "" : "<ul>\n" + notes + "</ul>\n");
}

std::string run_plan_section(const json& r) {
  const json* p = at(r, "run_plan");
  if (!p) return "";
  std::string rows;
  for (const auto& row : array(*p, "rows")) {
    const json lr = row.value("lr", json::object());
    const auto warmup = integer(lr, "warmup_steps").value_or(0);
    rows += fmt::format(
        "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{:.4g}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
        esc(str(row, "batch")), esc(str(row, "label")), num(lr, "lr").value_or(0),
        warmup > 0                              ? fmt::format("{} steps from {:.4g}", warmup, num(lr, "warmup_from_lr").value_or(0))
        : num(lr, "warmup_epochs").value_or(0) > 0 ? fmt::format("{:g} epochs from {:.4g}", *num(lr, "warmup_epochs"),
                                                                num(lr, "warmup_from_lr").value_or(0))
                                                  : "none",
        esc(str(row, "steps_per_epoch")), esc(str(row, "optimizer_settings")));
  }
  std::string notes;
  for (const auto& n : array(*p, "notes")) notes += fmt::format("<li>{}</li>\n", esc(n.is_string() ? n.get<std::string>() : n.dump()));
  return fmt::format(
      "<section id=\"run-plan\">\n<h2>The same run at another batch</h2>\n<table>\n<tr><th>batch</th><th>for</th>"
      "<th>lr</th><th>warm-up</th><th>steps/epoch</th><th>optimizer</th></tr>\n{}</table>\n{}</section>\n",
      rows, notes.empty() ? "" : "<ul>\n" + notes + "</ul>\n");
}

std::string advice_section(const json& r) {
  const json* lr = at(r, "lr");
  const json* a = at(r, "accumulation_plan");
  if (!lr && !a) return "";
  std::string out = "<section id=\"advice\">\n<h2>Learning rate and accumulation</h2>\n<ul>\n";
  if (lr)
    out += fmt::format("<li>Learning rate at batch {}: <b>{:.4g}</b>. {}</li>\n", esc(str(*lr, "batch")),
                       num(*lr, "lr").value_or(0), esc(str(*lr, "advice")));
  if (a) {
    out += fmt::format("<li>Global batch {} = micro-batch {} x {} accumulation steps x {} devices{}. {}</li>\n",
                       esc(str(*a, "global_batch")), esc(str(*a, "micro_batch")), esc(str(*a, "accumulation_steps")),
                       esc(str(*a, "world_size")),
                       at(*a, "exact") && (*a)["exact"] == true ? " (exact)" : " (not the one asked)",
                       esc(str(*a, "reason")));
    if (const json* e = at(*a, "epoch")) out += fmt::format("<li>Epoch: {}</li>\n", esc(str(*e, "note")));
    for (const auto& w : array(*a, "warnings"))
      out += fmt::format("<li class=\"bad\">Warning: {}</li>\n", esc(w.is_string() ? w.get<std::string>() : w.dump()));
  }
  return out + "</ul>\n</section>\n";
}

std::string breakdown_section(const json& r) {
  const json* fit = at(r, "fit");
  const json* d = fit ? at(*fit, "breakdown") : nullptr;
  if (!d) return "";
  static const std::pair<const char*, const char*> kParts[] = {
      {"parameters", "parameter_bytes"},       {"gradients", "gradient_bytes"},
      {"optimizer state", "optimizer_state_bytes"}, {"activations", "activation_bytes"},
      {"rest (workspace, allocator)", "rest_bytes"}};
  json labels = json::array(), values = json::array();
  std::string rows;
  for (const auto& [label, key] : kParts) {
    const double bytes = num(*d, key).value_or(0);
    labels.push_back(label);
    values.push_back(mib(std::max(bytes, 0.0)));
    rows += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td></tr>\n", label, esc(bytes_text(num(*d, key))));
  }
  rows += fmt::format("<tr class=\"total\"><td>peak</td><td class=\"n\">{}</td></tr>\n", esc(bytes_text(num(*d, "peak_bytes"))));
  const json config = {
      {"type", "doughnut"},
      {"data", {{"labels", labels},
                {"datasets", json::array({{{"label", "MiB"}, {"data", values},
                                           {"backgroundColor", {Palette::blue, Palette::orange, Palette::green,
                                                                Palette::purple, Palette::grey}}}})}}},
      {"options", {{"plugins", {{"legend", {{"position", "right"}}}}}}}};
  return fmt::format(
      "<section id=\"breakdown\">\n<h2>Where the memory goes at batch {}</h2>\n<p class=\"caption\">Parameters, "
      "gradients and optimizer state are counted from the tensors; activations are the per-sample slope ({} per "
      "sample) times the batch; the rest is workspace and allocator overhead{}.</p>\n<div class=\"split\">\n"
      "<table class=\"breakdown\">\n{}</table>\n{}</div>\n</section>\n",
      esc(str(*d, "batch")), esc(bytes_text(num(*d, "activation_bytes_per_sample"))),
      num(*d, "rest_bytes").value_or(0) < 0
          ? " (negative here: not all of the gradients and optimizer state are alive at the peak, which comes while "
            "the backward pass is still making gradients and freeing activations)"
          : "",
      rows,
      chart_block("breakdown", config, "memory breakdown"));
}

std::string plan_section(const json& r) {
  const json* p = at(r, "plan");
  if (!p) return "";
  const json device = p->value("device", json::object());
  std::string out = fmt::format(
      "<section id=\"plan\">\n<h2>Planned for {}</h2>\n<table>\n<tr><td>device memory</td><td>{}</td></tr>\n"
      "<tr><td>largest batch</td><td>{}</td></tr>\n<tr><td>predicted peak</td><td>{}</td></tr>\n</table>\n",
      esc(str(device, "name")), esc(bytes_text(num(device, "bytes"))), esc(or_dash(str(*p, "batch"))),
      esc(bytes_text(num(*p, "predicted_peak_bytes"))));
  const json& assumptions = array(*p, "assumptions");
  if (!assumptions.empty()) {
    out += "<p>It rests on these assumptions:</p>\n<ul>\n";
    for (const auto& a : assumptions) out += fmt::format("<li>{}</li>\n", esc(a.is_string() ? a.get<std::string>() : a.dump()));
    out += "</ul>\n";
  }
  return out + "</section>\n";
}

std::string percent_of(std::optional<double> part, double whole) {
  return part && whole > 0 && *part > 0 ? fmt::format("{:.1f} %", 100 * *part / whole) : "-";
}

std::string fit_section(const json& r) {
  const json* fit = at(r, "fit");
  if (!fit) return "";
  const double budget = num(r, "budget_bytes").value_or(0);
  const json& trials = array(*fit, "trials");
  std::string outcome = str(*fit, "outcome");
  std::string summary = outcome == "fits" ? fmt::format("batch {} fits", str(*fit, "batch"))
                        : outcome == "does_not_fit" ? "no batch fits" : "the fit failed";
  std::string out = fmt::format(
      "<section id=\"fit-trials\">\n<h2>Fit</h2>\n<p class=\"caption\">{} ({} mode, {} trials, in the order they "
      "ran).</p>\n<table>\n<tr><th>#</th><th>batch</th><th>outcome</th><th>peak memory</th><th>predicted</th>"
      "<th>of budget</th><th>target</th><th>note</th></tr>\n",
      esc(summary), esc(str(*fit, "mode")), trials.size());
  int i = 0;
  for (const auto& t : trials) {
    const json* within = at(t, "within_target");
    out += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>\n",
        ok(t) ? "ok" : "bad", ++i, esc(str(t, "batch")), esc(str(t, "outcome")), esc(bytes_text(num(t, "peak_bytes"))),
        esc(bytes_text(num(t, "predicted_peak_bytes"))), percent_of(num(t, "peak_bytes"), budget),
        within && within->is_boolean() ? (within->get<bool>() ? "within" : "over") : "-", esc(str(t, "message")));
  }
  return out + "</table>\n</section>\n";
}

std::string sweep_section(const json& r) {
  const json* sweep = at(r, "sweep");
  if (!sweep) return "";
  const std::optional<int64_t> knee = integer(*sweep, "knee_batch");
  const json* rec = at(r, "recommendation");
  const std::optional<int64_t> recommended = rec ? integer(*rec, "batch") : std::nullopt;
  std::string out =
      "<section id=\"sweep-points\">\n<h2>Sweep</h2>\n<table>\n<tr><th>batch</th><th>outcome</th><th>samples/s</th>"
      "<th>slowest</th><th>fastest</th><th>step ms</th><th>peak memory</th><th>note</th></tr>\n";
  for (const auto& p : array(*sweep, "points")) {
    std::string note = str(p, "message");
    const auto batch = integer(p, "batch");
    if (batch && batch == recommended) note = "recommended" + (note.empty() ? "" : "; " + note);
    if (batch && batch == knee) note = "knee" + (note.empty() ? "" : "; " + note);
    auto speed = [&](const char* key) { auto v = num(p, key); return v && ok(p) ? grouped(*v) : std::string("-"); };
    const auto step = num(p, "step_time_s_median");
    out += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
        ok(p) ? "ok" : "bad", esc(str(p, "batch")), esc(str(p, "outcome")), speed("samples_per_s"),
        speed("samples_per_s_min"), speed("samples_per_s_max"),
        step && ok(p) ? fmt::format("{:.2f}", *step * 1e3) : "-", esc(bytes_text(num(p, "peak_bytes"))), esc(note));
  }
  return out + "</table>\n</section>\n";
}

// Data-parallel runs: who took part, and per batch what the ranks measured.
std::string distributed_section(const json& r) {
  const json* d = at(r, "distributed");
  if (!d) return "";
  std::vector<std::string> budgets;
  for (const auto& b : array(*d, "rank_budget_bytes")) budgets.push_back(bytes_text(b.is_number() ? std::optional<double>(b.get<double>()) : std::nullopt));
  std::string out = fmt::format(
      "<section id=\"distributed\">\n<h2>Data-parallel</h2>\n<p>{} ranks ({}). Batches are per device; the global "
      "batch is batch &times; {}, and samples/s counts every rank's samples over the slowest rank's step. Rank "
      "budgets: {}.</p>\n",
      esc(str(*d, "world_size")), esc(str(*d, "backend")), esc(str(*d, "world_size")), esc(fmt::format("{}", fmt::join(budgets, ", "))));
  const json* sweep = at(r, "sweep");
  if (!sweep) return out + "</section>\n";
  out += "<table>\n<tr><th>batch</th><th>global batch</th><th>samples/s</th><th>1 process</th><th>scaling</th>"
         "<th>all-reduce</th><th>rank step ms</th><th>rank outcomes</th></tr>\n";
  for (const auto& p : array(*sweep, "points")) {
    const json* pd = at(p, "distributed");
    if (!pd) continue;
    std::vector<std::string> steps, outcomes;
    for (const auto& t : array(*pd, "rank_step_time_s")) steps.push_back(t.is_number() ? fmt::format("{:.2f}", t.get<double>() * 1e3) : "-");
    for (const auto& o : array(*pd, "rank_outcomes")) outcomes.push_back(o.is_string() ? o.get<std::string>() : "-");
    const auto sps = num(p, "samples_per_s"), solo = num(*pd, "single_process_samples_per_s"),
               eff = num(*pd, "scaling_efficiency"), share = num(*pd, "allreduce_share");
    out += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
        ok(p) ? "ok" : "bad", esc(str(p, "batch")), esc(str(*pd, "global_batch")), sps && ok(p) ? grouped(*sps) : "-",
        solo ? grouped(*solo) : "-", eff ? fmt::format("{:.2f}", *eff) : "-",
        share && ok(p) ? fmt::format("{:.0f} %", *share * 100) : "-", esc(fmt::format("{}", fmt::join(steps, " / "))),
        esc(fmt::format("{}", fmt::join(outcomes, " / "))));
  }
  return out + "</table>\n</section>\n";
}

std::string context_section(const json& r) {
  const json c = r.value("context", json::object()), w = r.value("workload", json::object());
  const json device = c.value("device", json::object());
  std::vector<std::pair<std::string, std::string>> rows = {
      {"model", str(w, "model")},
      {"dataset", str(w, "dataset") + (num(w, "dataset_size") ? " (" + grouped(*num(w, "dataset_size")) + " samples)" : "")},
      {"input shape", str(w, "input_shape")},
      {"loss", str(w, "loss")},
      {"optimizer", str(w, "optimizer") + (num(w, "lr") ? fmt::format(", lr {:g}", *num(w, "lr")) : "")},
      {"precision", str(w, "precision")},
      {"parameters", num(w, "parameter_count") ? grouped(*num(w, "parameter_count")) : ""},
      {"budget", fmt::format("{}, target {:g} %", bytes_text(num(r, "budget_bytes")), num(r, "target").value_or(0) * 100)},
      {"device", str(device, "type") + ": " + str(device, "name")},
      {"device memory", bytes_text(num(device, "total_bytes"))},
      {"threads / cores", str(c, "threads") + " / " + str(c, "cores")},
      {"BLAS", str(c, "blas")},
      {"torch", str(c, "torch_version")},
      {"batchwise", str(c, "batchwise_version") + " (" + str(c, "build_commit") + ", " + str(c, "build_type") + ")"},
      {"host", str(c, "host")},
      {"date", str(c, "date")},
  };
  std::string out = "<section id=\"context\">\n<h2>What was measured, and where</h2>\n<table>\n";
  for (const auto& [k, v] : rows) out += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", esc(k), esc(or_dash(v)));
  return out + "</table>\n</section>\n";
}

constexpr const char* kStyle = R"css(
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1040px;padding:24px;color:#222}
h1{font-size:24px;margin:0}h2{font-size:18px;margin:28px 0 8px}
.sub{color:#555;margin:4px 0 0}.caption{color:#444;margin:4px 0 10px}
.answer{background:#eef6ee;border:1px solid #9c9;border-radius:6px;padding:4px 18px 10px}
.answer .big{font-size:22px;margin:6px 0}.bad{color:#a00}
.warn{background:#fff6e0;border:1px solid #e0b040;border-radius:6px;padding:4px 18px}
.chart{position:relative;height:340px}
.split{display:flex;gap:24px;align-items:center}.split .chart{flex:1;height:260px}
table{border-collapse:collapse;font-size:14px}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}tr.bad td{color:#a00}tr.total td{font-weight:600}
footer{color:#666;font-size:13px;margin-top:32px;border-top:1px solid #ddd;padding-top:8px}
)css";

// Draws every chart-config block on its canvas; animation off, so what a screenshot or a printer
// sees is the final chart. A point's "note" is its tooltip.
constexpr const char* kDraw = R"js(
(function () {
  'use strict';
  if (typeof Chart === 'undefined') return;
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  document.querySelectorAll('script.chart-config').forEach(function (block) {
    var config = JSON.parse(block.textContent);
    config.options = config.options || {};
    config.options.plugins = config.options.plugins || {};
    config.options.plugins.tooltip = {callbacks: {label: function (item) {
      var raw = item.raw;
      return raw && raw.note ? raw.note : item.dataset.label + ': ' + item.formattedValue;
    }}};
    new Chart(document.getElementById('chart-' + block.dataset.chart), config);
  });
})();
)js";

std::string render(const json& r) {
  const json c = r.value("context", json::object()), w = r.value("workload", json::object());
  const json device = c.value("device", json::object());
  const std::string title = fmt::format("{} on {}", or_dash(str(w, "model")), or_dash(str(w, "dataset")));
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<meta name=\"generator\" content=\"batchwise {}\">\n<title>batchwise: {}</title>\n<style>{}</style>\n</head>\n"
      "<body>\n<header>\n<h1>Which batch size: {}</h1>\n<p class=\"sub\">{} · {} · {}</p>\n</header>\n",
      esc(str(c, "batchwise_version")), esc(title), kStyle, esc(title), esc(str(device, "type") + ": " + str(device, "name")),
      esc("torch " + str(c, "torch_version")), esc(str(c, "date")));
  html += recommendation_section(r);
  html += warnings_section(r);
  html += advice_section(r);
  html += run_plan_section(r);
  html += distributed_section(r);
  html += throughput_section(r);
  html += precision_section(r);
  html += profile_section(r);
  html += utilisation_section(r);
  html += goodput_section(r);
  html += noise_section(r);
  html += race_section(r);
  html += validation_section(r);
  html += memory_section(r);
  html += breakdown_section(r);
  html += plan_section(r);
  html += fit_section(r);
  html += sweep_section(r);
  html += context_section(r);
  html += fmt::format(
      "<footer>Written by batchwise {} ({}) from its JSON report (docs/report-schema.md). Charts drawn with Chart.js {} "
      "(MIT licence, © Chart.js Contributors), inlined: this file needs no network.</footer>\n",
      esc(str(c, "batchwise_version")), esc(str(c, "build_commit")), detail::kChartJsVersion);
  html += "<script>\n";
  html += detail::kChartJs;
  html += "\n</script>\n<script>";
  html += kDraw;
  html += "</script>\n</body>\n</html>\n";
  return html;
}

}  // namespace

std::string to_html(const std::string& report_json, const std::string& source) {
  BATCHWISE_CHECK(detail::kChartJsVersion[0] != '\0', ConfigError,
                  "this batchwise was built without Chart.js, which HTML reports inline; install it (Debian: apt-get "
                  "install libjs-chart.js) and rebuild, or use the JSON report");
  const json report = detail::parse_report(report_json, source);
  try {
    return render(report);
  } catch (const json::exception& e) {
    BATCHWISE_CHECK(false, DataError, "{}: a field has an unexpected type ({}); give a report written with --json",
                    source, e.what());
  }
  return {};
}

std::string html_from_file(const std::string& path) { return to_html(detail::read_text(path), path); }

}  // namespace batchwise

// The HTML page, drawn from the report record (report_from_json reads a JSON report back into it).
// Each section reads only its part of the record and is absent when that part is; to add a
// section: write a `..._section(const Report&)` and call it from render() where it belongs.
#include "batchwise/html.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "batchwise/report.h"
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

// The charts' configurations are JSON (Chart.js reads them); the report itself is a typed record.
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

std::string grouped(double value) { return format_grouped(value); }
std::string bytes_text(double bytes) { return format_bytes(static_cast<int64_t>(std::llround(bytes))); }
std::string bytes_text(const std::optional<int64_t>& bytes) { return bytes ? format_bytes(*bytes) : "-"; }
std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }
std::string text(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : ""; }
std::string or_dash(const std::optional<int64_t>& v) { return or_dash(text(v)); }
double mib(double bytes) { return std::round(bytes / kMiB * 1000.0) / 1000.0; }
bool ok(const Trial& t) { return t.outcome == Outcome::Ok; }

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

std::string trial_note(const Trial& t) {
  std::string note = fmt::format("batch {}: {}", t.batch, to_string(t.outcome));
  // The JSON has samples/s only for ok trials (null otherwise).
  if (ok(t)) note += fmt::format(", {} samples/s", grouped(t.samples_per_s));
  if (ok(t)) note += fmt::format(" (repetitions {}–{})", grouped(t.samples_per_s_min), grouped(t.samples_per_s_max));
  if (t.peak_bytes > 0) note += ", peak " + format_bytes(t.peak_bytes);
  if (!t.message.empty()) note += ": " + t.message;
  return note;
}

std::string list_items(const std::vector<std::string>& items, const char* open = "<li>") {
  std::string out;
  for (const auto& item : items) out += fmt::format("{}{}</li>\n", open, esc(item));
  return out;
}

// ---- sections -------------------------------------------------------------------------------

std::string recommendation_section(const Report& r) {
  // The box's colour is the answer's confidence: green only where it was measured and resolved.
  const std::optional<Confidence> confidence = r.recommendation ? r.recommendation->confidence : std::nullopt;
  std::string out = fmt::format("<section id=\"recommendation\" class=\"answer{}\">\n<h2>Recommendation</h2>\n",
                                confidence ? fmt::format(" {}", to_string(*confidence)) : "");
  if (r.recommendation) {
    out += fmt::format("<p class=\"big\">Train with batch <b id=\"recommended-batch\">{}</b></p>\n", r.recommendation->batch);
    if (confidence)
      out += fmt::format("<p class=\"confidence\" id=\"confidence\"><b>Confidence: {}</b>: {}</p>\n", to_string(*confidence),
                         esc(r.recommendation->confidence_reason));
    out += fmt::format("<p class=\"reason\">{}</p>\n", esc(r.recommendation->reason));
  } else if (r.fit) {
    const FitResult& fit = *r.fit;
    if (fit.outcome == FitOutcome::Fits)
      out += fmt::format("<p class=\"big\">Largest batch that fits: <b id=\"fit-batch\">{}</b></p>\n",
                         text(fit.batch));
    else if (fit.outcome == FitOutcome::DoesNotFit)
      out += "<p class=\"big bad\">No batch fits within the target</p>\n";
    else
      out += "<p class=\"big bad\">The fit failed</p>\n";
    if (!fit.message.empty()) out += fmt::format("<p class=\"reason\">{}</p>\n", esc(fit.message));
  } else {
    out += "<p class=\"big bad\">No batch was recommended: no batch size ran successfully</p>\n";
  }
  out += "</section>\n";
  return out;
}

std::string warnings_section(const Report& r) {
  if (r.context.warnings.empty()) return "";
  return "<section id=\"warnings\" class=\"warn\">\n<h2>Warnings</h2>\n<ul>\n" + list_items(r.context.warnings) +
         "</ul>\n</section>\n";
}

std::string throughput_section(const Report& r) {
  if (!r.sweep) return "";
  const SweepResult& sweep = *r.sweep;
  json measured = json::array(), oom = json::array(), failed = json::array(), knee = json::array();
  for (const Trial& p : sweep.points) {
    const json point = {{"x", p.batch}, {"y", ok(p) ? p.samples_per_s : 0.0}, {"note", trial_note(p)}};
    if (ok(p)) measured.push_back(point);
    else if (p.outcome == Outcome::Oom) oom.push_back(point);
    else failed.push_back(point);
    if (ok(p) && sweep.knee_batch == p.batch) knee.push_back(point);
  }
  if (measured.empty()) return "";
  const double tolerance = sweep.knee_tolerance;
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
      sweep.repetitions, tolerance * 100);
  return "<section id=\"throughput\">\n<h2>Throughput</h2>\n<p class=\"caption\">" + esc(caption) + "</p>\n" +
         chart_block("throughput", config, "samples per second against batch size") + "</section>\n";
}

// The memory model's line, straight in batch and so curved on the log axis: sampled at geometric steps.
json memory_model_points(const MemoryModel& model, int64_t lo, int64_t hi) {
  constexpr int kSamples = 24;
  json points = json::array();
  for (int i = 0; i < kSamples; ++i) {
    const double b = lo * std::pow(static_cast<double>(hi) / lo, i / (kSamples - 1.0));
    points.push_back({{"x", std::round(b * 100) / 100}, {"y", mib(model.fixed_bytes + model.per_sample_bytes * b)}});
  }
  return points;
}

std::string memory_section(const Report& r) {
  json fit_points = json::array(), sweep_points = json::array(), oom = json::array();
  std::set<int64_t> oom_batches;
  std::vector<int64_t> batches;
  const double budget = static_cast<double>(r.budget_bytes), target = r.target;
  auto add = [&](const Trial& t, json& into) {
    const double peak = static_cast<double>(t.peak_bytes);
    if (t.batch <= 0) return;
    if (ok(t) && peak > 0) {
      into.push_back({{"x", t.batch}, {"y", mib(peak)}, {"note", trial_note(t)}});
      batches.push_back(t.batch);
    } else if (t.outcome == Outcome::Oom && oom_batches.insert(t.batch).second) {
      // The peak an out-of-memory trial reached is where it was stopped; without one, the budget.
      oom.push_back({{"x", t.batch}, {"y", mib(peak > 0 ? peak : budget)}, {"note", trial_note(t)}});
      batches.push_back(t.batch);
    }
  };
  if (r.fit)
    for (const Trial& t : r.fit->trials) add(t, fit_points);
  if (r.sweep)
    for (const Trial& t : r.sweep->points) add(t, sweep_points);
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
  if (r.fit && r.fit->memory_model) {
    const MemoryModel& model = *r.fit->memory_model;
    datasets.push_back(line(dataset("memory model", memory_model_points(model, lo, hi), Palette::purple), true));
    model_text = fmt::format(" The memory model: peak = {} + {} × batch (largest error {}).", bytes_text(model.fixed_bytes),
                             bytes_text(model.per_sample_bytes), format_bytes(model.residual_bytes));
  }
  const json config = {{"type", "line"}, {"data", {{"datasets", datasets}}},
                       {"options", {{"scales", batch_axes("peak memory (MiB)")}}}};
  const std::string caption =
      "Peak memory of each trial against the budget and the target a fitting batch must stay under." + model_text;
  return "<section id=\"memory\">\n<h2>Memory</h2>\n<p class=\"caption\">" + esc(caption) + "</p>\n" +
         chart_block("memory", config, "peak memory against batch size") + "</section>\n";
}

std::string profile_section(const Report& r) {
  if (r.step_profile.empty()) return "";
  static const std::pair<const char*, double StepPhases::*> kPhases[] = {{"data", &StepPhases::data_s},
                                                                        {"to device", &StepPhases::h2d_s},
                                                                        {"forward", &StepPhases::forward_s},
                                                                        {"backward", &StepPhases::backward_s},
                                                                        {"optimizer", &StepPhases::optimizer_s}};
  static const char* const kColors[] = {Palette::grey, Palette::orange, Palette::blue, Palette::purple, Palette::green};
  json labels = json::array(), datasets = json::array();
  for (const StepProfile& p : r.step_profile) labels.push_back(fmt::format("batch {}", p.batch));
  size_t i = 0;
  for (const auto& [label, phase] : kPhases) {
    json values = json::array();
    for (const StepProfile& p : r.step_profile) {
      const double total = p.mean.total_s;
      values.push_back(total > 0 ? std::round(1000 * 100 * (p.mean.*phase) / total) / 1000 : 0.0);
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

std::string precision_section(const Report& r) {
  if (r.precisions.empty()) return "";
  json labels = json::array(), speed = json::array();
  std::string rows;
  for (const PrecisionPoint& p : r.precisions) {
    labels.push_back(to_string(p.precision));
    speed.push_back(p.samples_per_s);
    rows += fmt::format("<tr><td>{}</td><td class=\"n\">{}{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                        "<td class=\"n\">{:.2f}x</td><td class=\"n\">{:.2f}x</td><td>{}</td></tr>\n",
                        esc(to_string(p.precision)), esc(or_dash(p.fit_batch)), p.fit_limited_by_max ? "+" : "",
                        grouped(p.samples_per_s), esc(format_bytes(p.peak_bytes)), p.speed_ratio, p.memory_ratio,
                        esc(p.verdict));
  }
  const json config = {
      {"type", "bar"},
      {"data", {{"labels", labels},
                {"datasets", json::array({{{"label", fmt::format("samples/s at batch {}", r.precisions[0].batch)},
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

// The trial at the recommended batch with a utilisation record (the sweep's point, else the fit's); any
// batch when none was recommended.
const Trial* utilisation_trial(const Report& r) {
  const std::optional<int64_t> batch = r.recommendation ? std::optional<int64_t>(r.recommendation->batch) : std::nullopt;
  const Trial* trial = nullptr;
  auto consider = [&](const std::vector<Trial>& trials) {
    for (const Trial& t : trials)
      if (t.utilisation && ok(t) && (!batch || t.batch == *batch)) trial = &t;
  };
  if (r.fit) consider(r.fit->trials);
  if (r.sweep) consider(r.sweep->points);
  return trial;
}

// The utilisation timeline of the trial at the recommended batch.
std::string utilisation_section(const Report& r) {
  const Trial* trial = utilisation_trial(r);
  if (!trial) return "";
  const UtilisationSummary& u = *trial->utilisation;
  json cpu = json::array(), gpu = json::array();
  for (const UtilisationSample& x : u.timeline) {
    cpu.push_back({{"x", x.t_s}, {"y", x.cpu_percent}});
    if (x.gpu_sm_percent) gpu.push_back({{"x", x.t_s}, {"y", *x.gpu_sm_percent}});
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
  std::string caption = fmt::format(
      "Sampled every {:g} s during the trial at batch {}: CPU busy {:.0f} % on average (min {:.0f}, max {:.0f}), "
      "resident memory up to {}; the monitor itself used {:.2f} % of one core.",
      u.interval_s, trial->batch, u.cpu_percent.mean, u.cpu_percent.min, u.cpu_percent.max,
      format_bytes(u.rss_bytes_max), u.overhead_percent);
  // The GPU line plots NVML's readings, each of the driver's last period; the figure is the trial's own.
  if (u.gpu_sm_percent)
    caption += fmt::format(" GPU SM busy {:.0f} % over the trial (min {:.0f}, max {:.0f}).", u.gpu_sm_percent->mean,
                           u.gpu_sm_percent->min, u.gpu_sm_percent->max);
  if (!u.gpu_percent_note.empty()) caption += " GPU: " + u.gpu_percent_note + ".";
  return "<section id=\"utilisation\">\n<h2>Utilisation</h2>\n<p class=\"caption\">" + esc(caption) + "</p>\n" +
         chart_block("utilisation", config, "utilisation over the trial") + "</section>\n";
}

std::string goodput_section(const Report& r) {
  if (!r.goodput || r.goodput->points.empty()) return "";
  const Goodput& g = *r.goodput;
  json good = json::array(), speed = json::array(), best = json::array();
  for (const GoodputPoint& p : g.points) {
    const json point = {{"x", p.batch}, {"y", p.goodput},
                        {"note", fmt::format("batch {}: {} samples/s x {:.1f} % efficiency = {} useful samples/s",
                                             p.batch, grouped(p.samples_per_s), p.efficiency * 100, grouped(p.goodput))}};
    good.push_back(point);
    speed.push_back({{"x", p.batch}, {"y", p.samples_per_s}});
    if (g.best_batch == p.batch) best.push_back(point);
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
      g.base_batch, g.b_simple);
  return "<section id=\"goodput\">\n<h2>Goodput</h2>\n<p class=\"caption\">" + esc(caption) + "</p>\n" +
         chart_block("goodput", config, "goodput against batch size") + "</section>\n";
}

std::string noise_section(const Report& r) {
  if (!r.noise) return "";
  const NoiseResult& n = *r.noise;
  json smoothed = json::array();
  for (const NoiseStep& s : n.timeline)
    if (s.b_simple_smoothed) smoothed.push_back({{"x", s.step}, {"y", *s.b_simple_smoothed}});
  std::string summary;
  if (n.b_simple) {
    // The JSON has the band exactly when it has b_simple.
    summary = fmt::format("B_simple = tr(Sigma) / |G|^2 = {:.1f}", *n.b_simple);
    summary += fmt::format(" (band {:.1f} to {:.1f}, 2 standard errors)", n.b_simple_low, n.b_simple_high);
    if (n.drift) summary += fmt::format("; it drifted {:.2f}x from the first to the last quarter", *n.drift);
    summary += ".";
  } else {
    summary = "B_simple could not be measured: " + n.message;
  }
  std::string out = fmt::format(
      "<section id=\"noise\">\n<h2>Gradient noise scale</h2>\n<p class=\"caption\">{} training steps at batch {} in "
      "micro-batches of {}. {} Near B_simple is the critical batch: below it a bigger batch cuts the steps to a target "
      "almost proportionally, above it each doubling buys less (McCandlish et al. 2018).</p>\n",
      n.steps, n.batch, n.micro_batch, esc(summary));
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

constexpr const char* kLineColors[] = {Palette::blue, Palette::orange, Palette::green, Palette::red, Palette::purple,
                                       Palette::grey};

std::string validation_section(const Report& r) {
  if (!r.validation) return "";
  const ValidationResult& v = *r.validation;
  json datasets = json::array();
  std::string rows;
  size_t i = 0;
  bool accuracy = false;
  for (const ValidationRun& run : v.runs) {
    json points = json::array();
    for (const ValidationPoint& p : run.curve) {
      accuracy |= p.accuracy.has_value();
      points.push_back({{"x", p.train_s}, {"y", p.accuracy ? *p.accuracy : p.loss}});
    }
    json d = dataset(run.schedule.empty() ? fmt::format("batch {} (lr {:.4g})", run.batch, run.lr.lr)
                                          : fmt::format("schedule {}", run.schedule),
                     points, kLineColors[i++ % 6]);
    d["showLine"] = true;
    d["pointRadius"] = 2;
    datasets.push_back(d);
    const bool soonest = v.fastest_batch == run.batch && run.schedule.empty();
    if (v.epochs > 0) {  // full runs: final quality and time
      const std::string last = run.final_accuracy ? fmt::format("{:.4f}", *run.final_accuracy)
                               : run.final_loss   ? fmt::format("loss {:.4f}", *run.final_loss)
                                                  : "-";
      rows += fmt::format(
          "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{:.4g}</td><td>{}</td><td class=\"n\">{:.1f}</td>"
          "<td class=\"n\">{}</td><td class=\"n\">{:.2f}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
          run.good ? "ok" : "bad", run.batch, run.lr.lr, run.good ? "within noise of the best" : "no", run.train_s,
          run.steps, run.epochs, last,
          !run.schedule.empty()
              ? esc(fmt::format("schedule {}{}", run.schedule,
                                v.schedule_saving ? fmt::format(": {:.0f} % {} time than the fastest good batch",
                                                                100 * std::abs(*v.schedule_saving),
                                                                *v.schedule_saving >= 0 ? "less" : "more")
                                                  : run.message.empty() ? "" : ": " + run.message))
          : soonest                    ? "fastest within noise"
          : v.best_batch == run.batch ? "best"
                                      : esc(run.message));
      continue;
    }
    rows += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{:.4g}</td><td>{}</td><td class=\"n\">{:.1f}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{:.2f}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
        run.reached ? "ok" : "bad", run.batch, run.lr.lr, run.reached ? "yes" : "no", run.train_s, run.steps,
        run.epochs,
        run.last.accuracy ? fmt::format("{:.4f}", *run.last.accuracy) : fmt::format("loss {:.4f}", run.last.loss),
        soonest ? "soonest" : esc(run.message));
  }
  const json config = {
      {"type", "line"},
      {"data", {{"datasets", datasets}}},
      {"options",
       {{"scales", {{"x", {{"type", "linear"}, {"title", {{"display", true}, {"text", "training time (s)"}}}}},
                    {"y", {{"title", {{"display", true}, {"text", accuracy ? "test accuracy" : "test loss"}}}}}}}}}};
  if (v.epochs > 0)
    return fmt::format(
        "<section id=\"validation\">\n<h2>Validation: {}</h2>\n<p class=\"caption\">Each candidate trained the same "
        "epochs from the same weights with its scaled learning rate and the schedule, evaluated on the {} (the last "
        "column after the run, on the whole set; evaluation time excluded).</p>\n{}"
        "<table>\n<tr><th>batch</th><th>lr</th><th>good</th><th>train s</th><th>steps</th><th>epochs</th>"
        "<th>final quality</th><th>note</th></tr>\n{}</table>\n</section>\n",
        esc(v.target), esc(v.held_out), chart_block("validation", config, "held-out metric over training time"), rows);
  return fmt::format(
      "<section id=\"validation\">\n<h2>Time to {}</h2>\n<p class=\"caption\">Each candidate trained from the same "
      "weights with its scaled learning rate, evaluated on the {} (evaluation time excluded).</p>\n{}"
      "<table>\n<tr><th>batch</th><th>lr</th><th>reached</th><th>train s</th><th>steps</th><th>epochs</th>"
      "<th>last</th><th>note</th></tr>\n{}</table>\n</section>\n",
      esc(v.target), esc(v.held_out), chart_block("validation", config, "held-out metric over training time"), rows);
}

std::string race_row(const RaceEntry& e, bool winner) {
  if (e.curve.empty())  // left out before its first rung: a table row, no line
    return fmt::format("<tr class=\"bad\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td colspan=\"7\">{}</td></tr>\n",
                       e.batch, esc(grouped(e.samples_per_s)), esc(e.message));
  return fmt::format(
      "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.4g}</td><td>{}</td>"
      "<td class=\"n\">{}</td><td class=\"n\">{:.1f}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
      e.message.empty() ? "ok" : "bad", e.batch, esc(grouped(e.samples_per_s)), e.lr.lr,
      e.lr.capped ? fmt::format("capped ({:.4g})", e.lr.scaled.lr) : "rule", e.rungs, e.train_s,
      e.loss_at_horizon ? fmt::format("{:.4f}", *e.loss_at_horizon) : "-",
      e.time_ratio ? fmt::format("{:.2f}x", *e.time_ratio) : "-", winner ? "best" : esc(e.message));
}

// The run race (tune --epochs): per batch, the share of its samples that count and how far behind.
std::string run_race_section(const Report& r) {
  if (!r.run_race) return "";
  const RunRace& race = *r.run_race;
  const bool accuracy = race.measure == "accuracy";
  const auto amount = [&](const std::optional<double>& g) {
    return g ? (accuracy ? fmt::format("{:.2f} pt", 100 * *g) : fmt::format("{:.1f} %", 100 * *g)) : "-";
  };
  std::string rows;
  for (const RunRaceEntry& e : race.entries)
    rows += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{:.0f}</td><td class=\"n\">{:.4g}</td>"
        "<td class=\"n\">{:.0f}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
        e.good ? "ok" : "bad", e.batch, e.samples_per_s, e.lr.lr, e.full_run_s,
        e.message.empty() ? fmt::format("{:.0f} %", 100 * e.share) : "-",
        amount(e.predicted_gap),
        !e.message.empty() ? esc(e.message) : race.best_batch == e.batch ? "soonest without a worse model" : "");
  std::string notes = list_items(race.notes);
  if (!race.pick_reason.empty()) notes += list_items({race.pick_reason});
  if (!race.schedule_reason.empty()) notes += list_items({race.schedule_reason});
  return fmt::format(
      "<section id=\"run-race\">\n<h2>Run race: your {:g}-epoch {} run</h2>\n<p class=\"caption\">Batch {} trained "
      "your schedule compressed to {} epochs; the noise scale along it says which share of each batch's samples "
      "count, and the gain a doubling bought what the rest costs ({} on the {}; within {} is noise).</p>\n<table>\n"
      "<tr><th>batch</th><th>samples/s</th><th>lr</th><th>full run s</th><th>samples that count</th><th>behind</th>"
      "<th>note</th></tr>\n{}</table>\n<ul>{}</ul>\n</section>\n",
      race.epochs, esc(race.lr_schedule), race.reference_batch, fmt::format("{:.3g}", fmt::join(race.lengths_epochs, " and ")),
      esc(race.measure), esc(race.held_out), amount(race.tolerance), rows, notes);
}

std::string race_section(const Report& r) {
  if (!r.race) return "";
  const BatchRace& race = *r.race;
  json datasets = json::array();
  std::string rows;
  size_t i = 0;
  for (const RaceEntry& e : race.entries) {
    rows += race_row(e, race.best_batch == e.batch);
    if (e.curve.empty()) continue;
    json points = json::array();
    for (const RaceEntry::Point& p : e.curve) points.push_back({{"x", p.train_s}, {"y", p.loss}});
    json d = dataset(fmt::format("batch {} (lr {:.4g})", e.batch, e.lr.lr), points, kLineColors[i++ % 6]);
    d["showLine"] = true;
    d["pointRadius"] = 2;
    datasets.push_back(d);
  }
  std::string notes = list_items(race.notes);
  if (!race.pick_reason.empty()) notes += list_items({race.pick_reason});
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
      esc(race.held_out), chart_block("race", config, "held-out loss over training time"), rows,
      notes.empty() ? "" : "<ul>\n" + notes + "</ul>\n");
}

std::string run_plan_section(const Report& r) {
  if (!r.run_plan) return "";
  std::string rows;
  for (const RunPlanRow& row : r.run_plan->rows)
    rows += fmt::format(
        "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{:.4g}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
        row.batch, esc(row.label), row.lr.lr, warmup_text(row.lr, row.steps_per_epoch), row.steps_per_epoch, esc(row.optimizer_settings));
  const std::string notes = list_items(r.run_plan->notes);
  return fmt::format(
      "<section id=\"run-plan\">\n<h2>The same run at another batch</h2>\n<table>\n<tr><th>batch</th><th>for</th>"
      "<th>lr</th><th>warm-up</th><th>steps/epoch</th><th>optimizer</th></tr>\n{}</table>\n{}</section>\n",
      rows, notes.empty() ? "" : "<ul>\n" + notes + "</ul>\n");
}

std::string advice_section(const Report& r) {
  if (!r.lr && !r.accumulation) return "";
  std::string out = "<section id=\"advice\">\n<h2>Learning rate and accumulation</h2>\n<ul>\n";
  if (r.lr)
    out += fmt::format("<li>Learning rate at batch {}: <b>{:.4g}</b>. {}</li>\n", r.lr->scaled.batch, r.lr->lr,
                       esc(r.lr->advice));
  if (r.accumulation) {
    const AccumulationPlan& a = *r.accumulation;
    out += fmt::format("<li>Global batch {} = micro-batch {} x {} accumulation steps x {} devices{}. {}</li>\n",
                       a.global_batch, a.micro_batch, a.accumulation_steps, a.world_size,
                       a.exact ? " (exact)" : " (not the one asked)", esc(a.reason));
    // The JSON has the epoch exactly when the dataset size is known.
    if (a.dataset_size > 0) out += fmt::format("<li>Epoch: {}</li>\n", esc(a.last_batch_note));
    out += list_items(a.warnings, "<li class=\"bad\">Warning: ");
  }
  return out + "</ul>\n</section>\n";
}

std::string breakdown_section(const Report& r) {
  if (!r.fit || !r.fit->breakdown) return "";
  const MemoryBreakdown& d = *r.fit->breakdown;
  const std::pair<const char*, int64_t> parts[] = {{"parameters", d.parameter_bytes},
                                                   {"gradients", d.gradient_bytes},
                                                   {"optimizer state", d.optimizer_state_bytes},
                                                   {"activations", d.activation_bytes()},
                                                   {"rest (workspace, allocator)", d.rest_bytes}};
  json labels = json::array(), values = json::array();
  std::string rows;
  for (const auto& [label, bytes] : parts) {
    labels.push_back(label);
    values.push_back(mib(std::max(static_cast<double>(bytes), 0.0)));
    rows += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td></tr>\n", label, esc(format_bytes(bytes)));
  }
  rows += fmt::format("<tr class=\"total\"><td>peak</td><td class=\"n\">{}</td></tr>\n", esc(format_bytes(d.peak_bytes)));
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
      d.batch, esc(bytes_text(d.activation_bytes_per_sample)),
      d.rest_bytes < 0
          ? " (negative here: not all of the gradients and optimizer state are alive at the peak, which comes while "
            "the backward pass is still making gradients and freeing activations)"
          : "",
      rows,
      chart_block("breakdown", config, "memory breakdown"));
}

std::string plan_section(const Report& r) {
  if (!r.plan) return "";
  const Plan& p = *r.plan;
  std::string out = fmt::format(
      "<section id=\"plan\">\n<h2>Planned for {}</h2>\n<table>\n<tr><td>device memory</td><td>{}</td></tr>\n"
      "<tr><td>largest batch</td><td>{}</td></tr>\n<tr><td>predicted peak</td><td>{}</td></tr>\n</table>\n",
      esc(p.device.name), esc(format_bytes(p.device.bytes)), esc(or_dash(p.batch)),
      esc(format_bytes(p.predicted_peak_bytes)));
  if (!p.assumptions.empty()) out += "<p>It rests on these assumptions:</p>\n<ul>\n" + list_items(p.assumptions) + "</ul>\n";
  return out + "</section>\n";
}

std::string percent_of(int64_t part, double whole) {
  return whole > 0 && part > 0 ? fmt::format("{:.1f} %", 100 * static_cast<double>(part) / whole) : "-";
}

std::string fit_section(const Report& r) {
  if (!r.fit) return "";
  const FitResult& fit = *r.fit;
  const double budget = static_cast<double>(r.budget_bytes);
  const std::string summary = fit.outcome == FitOutcome::Fits ? fmt::format("batch {} fits", text(fit.batch))
                              : fit.outcome == FitOutcome::DoesNotFit ? "no batch fits"
                                                                      : "the fit failed";
  std::string out = fmt::format(
      "<section id=\"fit-trials\">\n<h2>Fit</h2>\n<p class=\"caption\">{} ({} mode, {} trials, in the order they "
      "ran).</p>\n<table>\n<tr><th>#</th><th>batch</th><th>outcome</th><th>peak memory</th><th>predicted</th>"
      "<th>of budget</th><th>target</th><th>note</th></tr>\n",
      esc(summary), esc(to_string(fit.mode)), fit.trials.size());
  int i = 0;
  for (const Trial& t : fit.trials) {
    out += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>\n",
        ok(t) ? "ok" : "bad", ++i, t.batch, esc(to_string(t.outcome)), esc(format_bytes(t.peak_bytes)),
        esc(bytes_text(t.predicted_peak_bytes)), percent_of(t.peak_bytes, budget),
        t.within_target ? (*t.within_target ? "within" : "over") : "-", esc(t.message));
  }
  return out + "</table>\n</section>\n";
}

std::string sweep_section(const Report& r) {
  if (!r.sweep) return "";
  const std::optional<int64_t> knee = r.sweep->knee_batch;
  const std::optional<int64_t> recommended =
      r.recommendation ? std::optional<int64_t>(r.recommendation->batch) : std::nullopt;
  std::string out =
      "<section id=\"sweep-points\">\n<h2>Sweep</h2>\n<table>\n<tr><th>batch</th><th>outcome</th><th>samples/s</th>"
      "<th>slowest</th><th>fastest</th><th>step ms</th><th>peak memory</th><th>note</th></tr>\n";
  for (const Trial& p : r.sweep->points) {
    std::string note = p.message;
    if (recommended == p.batch) note = "recommended" + (note.empty() ? "" : "; " + note);
    if (knee == p.batch) note = "knee" + (note.empty() ? "" : "; " + note);
    auto speed = [&](double v) { return ok(p) ? grouped(v) : std::string("-"); };
    // The JSON has a median step time only where steps were measured.
    const bool step = ok(p) && !p.step_times_s.empty();
    out += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
        ok(p) ? "ok" : "bad", p.batch, esc(to_string(p.outcome)), speed(p.samples_per_s), speed(p.samples_per_s_min),
        speed(p.samples_per_s_max), step ? fmt::format("{:.2f}", p.step_time_s_median * 1e3) : "-",
        esc(format_bytes(p.peak_bytes)), esc(note));
  }
  return out + "</table>\n</section>\n";
}

std::string distributed_row(const Trial& p, const DistributedTrial& d) {
  std::vector<std::string> steps, outcomes;
  for (double t : d.rank_step_time_s) steps.push_back(fmt::format("{:.2f}", t * 1e3));
  for (Outcome o : d.rank_outcomes) outcomes.push_back(to_string(o));
  return fmt::format(
      "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
      "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
      ok(p) ? "ok" : "bad", p.batch, d.global_batch, ok(p) ? grouped(p.samples_per_s) : "-",
      d.single_process_samples_per_s ? grouped(*d.single_process_samples_per_s) : "-",
      d.scaling_efficiency ? fmt::format("{:.2f}", *d.scaling_efficiency) : "-",
      ok(p) ? fmt::format("{:.0f} %", d.allreduce_share * 100) : "-", esc(fmt::format("{}", fmt::join(steps, " / "))),
      esc(fmt::format("{}", fmt::join(outcomes, " / "))));
}

// Data-parallel runs: who took part, and per batch what the ranks measured.
std::string distributed_section(const Report& r) {
  if (!r.distributed) return "";
  const DistributedRun& d = *r.distributed;
  std::vector<std::string> budgets;
  for (int64_t b : d.rank_budget_bytes) budgets.push_back(format_bytes(b));
  std::string out = fmt::format(
      "<section id=\"distributed\">\n<h2>Data-parallel</h2>\n<p>{} ranks ({}). Batches are per device; the global "
      "batch is batch &times; {}, and samples/s counts every rank's samples over the slowest rank's step. Rank "
      "budgets: {}.</p>\n",
      d.world_size, esc(to_string(d.backend)), d.world_size, esc(fmt::format("{}", fmt::join(budgets, ", "))));
  if (!r.sweep) return out + "</section>\n";
  out += "<table>\n<tr><th>batch</th><th>global batch</th><th>samples/s</th><th>1 process</th><th>scaling</th>"
         "<th>all-reduce</th><th>rank step ms</th><th>rank outcomes</th></tr>\n";
  for (const Trial& p : r.sweep->points)
    if (p.distributed) out += distributed_row(p, *p.distributed);
  return out + "</table>\n</section>\n";
}

std::string context_section(const Report& r) {
  const Context& c = r.context;
  const WorkloadInfo& w = r.workload;
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"model", w.model},
      {"dataset", w.dataset + " (" + grouped(static_cast<double>(w.dataset_size)) + " samples)"},
      {"input shape", fmt::format("[{}]", fmt::join(w.input_shape, ","))},  // as the JSON writes it
      {"loss", w.loss},
      {"optimizer", w.optimizer + fmt::format(", lr {:g}", w.lr)},
      {"precision", w.precision},
      {"parameters", grouped(static_cast<double>(w.parameter_count))},
      {"budget", fmt::format("{}, target {:g} %", format_bytes(r.budget_bytes), r.target * 100)},
      {"device", c.device_type + ": " + c.device_name},
      {"device memory", format_bytes(c.device_total_bytes)},
      {"threads / cores", fmt::format("{} / {}", c.threads, c.cores)},
      {"BLAS", c.blas},
      {"torch", c.torch_version},
      {"batchwise", c.batchwise_version + " (" + c.build_commit + ", " + c.build_type + ")"},
      {"host", c.host},
      {"date", c.date},
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
.answer.medium{background:#f4f6ea;border-color:#bcc48a}.answer.low{background:#fdf1e4;border-color:#e0a860}
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

std::string render(const Report& r) {
  const Context& c = r.context;
  const std::string title = fmt::format("{} on {}", or_dash(r.workload.model), or_dash(r.workload.dataset));
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<meta name=\"generator\" content=\"batchwise {}\">\n<title>batchwise: {}</title>\n<style>{}</style>\n</head>\n"
      "<body>\n<header>\n<h1>Which batch size: {}</h1>\n<p class=\"sub\">{} · {} · {}</p>\n</header>\n",
      esc(c.batchwise_version), esc(title), kStyle, esc(title), esc(c.device_type + ": " + c.device_name),
      esc("torch " + c.torch_version), esc(c.date));
  for (auto section : {recommendation_section, warnings_section, advice_section, run_plan_section, distributed_section,
                       throughput_section, precision_section, profile_section, utilisation_section, goodput_section,
                       noise_section, race_section, run_race_section, validation_section, memory_section, breakdown_section, plan_section,
                       fit_section, sweep_section, context_section})
    html += section(r);
  html += fmt::format(
      "<footer>Written by batchwise {} ({}) from its JSON report (docs/report-schema.md). Charts drawn with Chart.js {} "
      "(MIT licence, © Chart.js Contributors), inlined: this file needs no network.</footer>\n",
      esc(c.batchwise_version), esc(c.build_commit), detail::kChartJsVersion);
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
  return render(report_from_json(report_json, source));
}

std::string html_from_file(const std::string& path) { return to_html(detail::read_text(path), path); }

}  // namespace batchwise

// The HTML page's charts: each section a caption and a Chart.js configuration (JSON, drawn by the
// page's script in html.cpp), from its part of the report record. To add a chart: write a
// `..._section(const Report&)` here, declare it in html_parts.h and call it from html.cpp's render().
// A batch-size axis is logarithmic with a tick at each batch measured (batch_axis).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "batchwise/report.h"
#include "batchwise/units.h"
#include "report/html_parts.h"

namespace batchwise::detail::html {
namespace {

// The charts' configurations are JSON (Chart.js reads them); the report itself is a typed record.
using nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;
/// Fewer utilisation samples than this over the monitored trials: a sentence instead of a chart.
constexpr size_t kMinChartedSamples = 5;

// Four significant digits: a peak of 60 bytes had been drawn at 0 MiB, on a log axis whose minimum it then was
double mib(double bytes) {
  const double v = bytes / kMiB;
  if (v == 0 || !std::isfinite(v)) return v;
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(std::abs(v))));
  return std::round(v * scale) / scale;
}

// JSON inside <script type="application/json">: '<', '>' and '&' only occur inside JSON strings,
// where their \u escapes mean the same, so no "</script>" or "<!--" can end the block early.
std::string script_json(const json& j) {
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<')
      out += "\\u003c";
    else if (c == '>')
      out += "\\u003e";
    else if (c == '&')
      out += "\\u0026";
    else
      out += c;
  }
  return out;
}

struct Palette {
  static constexpr const char* blue = "#1f77b4";
  static constexpr const char* blue_band = "rgba(31,119,180,0.18)";
  static constexpr const char* blue_dots = "rgba(31,119,180,0.45)";
  static constexpr const char* green_dots = "rgba(44,160,44,0.45)";
  static constexpr const char* orange = "#ff7f0e";
  static constexpr const char* green = "#2ca02c";
  static constexpr const char* red = "#d62728";
  static constexpr const char* purple = "#9467bd";
  static constexpr const char* grey = "#7f7f7f";
};
constexpr const char* kLineColors[] = {Palette::blue, Palette::orange, Palette::green,
                                       Palette::red,  Palette::purple, Palette::grey};

json dataset(const std::string& label, json points, const char* color) {
  return {{"label", label},           {"data", std::move(points)}, {"borderColor", color},
          {"backgroundColor", color}, {"pointRadius", 4},          {"showLine", false}};
}
json line(json d, bool dashed = false) {
  d["showLine"] = true;
  d["pointRadius"] = 0;
  d["borderWidth"] = 1.5;
  if (dashed) d["borderDash"] = {6, 4};
  return d;
}
// A marker drawn over a line's point: `style` at `radius`, as in Chart.js's pointStyle.
json marker(json d, const char* style, int radius) {
  d["pointStyle"] = style;
  d["pointRadius"] = radius;
  return d;
}
// A batch-size axis: logarithmic, a little wider than the batches, a tick (and its label) at each
// batch measured (the page's script reads batchTicks).
json batch_axis(const std::set<int64_t>& batches) {
  json x = {{"type", "logarithmic"}, {"title", {{"display", true}, {"text", "batch size (log scale)"}}}};
  if (batches.empty()) return x;
  x["min"] = static_cast<double>(*batches.begin()) / 1.3;
  x["max"] = static_cast<double>(*batches.rbegin()) * 1.3;
  x["batchTicks"] = batches;
  return x;
}
json y_axis(const std::string& title) {
  return {{"beginAtZero", true}, {"title", {{"display", true}, {"text", title}}}};
}
json line_chart(json datasets, json scales) {
  return {
      {"type", "line"}, {"data", {{"datasets", std::move(datasets)}}}, {"options", {{"scales", std::move(scales)}}}};
}

// One chart: a canvas and its Chart.js configuration as a JSON block, drawn by the page's script.
std::string chart_block(const std::string& id, const json& config, const std::string& label) {
  return fmt::format(
      "<div class=\"chart\"><canvas id=\"chart-{0}\" role=\"img\" aria-label=\"{2}\"></canvas></div>\n"
      "<script type=\"application/json\" class=\"chart-config\" data-chart=\"{0}\">{1}</script>\n",
      id, script_json(config), esc(label));
}
// A chart's section: its heading, a caption and the chart (or, with an empty id, no chart).
std::string chart_section(const std::string& section, const std::string& heading, const std::string& caption,
                          const std::string& id = "", const json& config = {}, const std::string& label = "") {
  return fmt::format("<section id=\"{}\">\n<h2>{}</h2>\n<p class=\"caption\">{}</p>\n{}</section>\n", section,
                     esc(heading), esc(caption), id.empty() ? "" : chart_block(id, config, label));
}

// Samples/s at the steps' quartiles: the band a point's middle half of steps spans (none without steps).
std::optional<std::pair<double, double>> quartile_band(const Trial& t) {
  if (!ok(t) || t.step_times_s.empty() || t.step_time_s_median <= 0) return std::nullopt;
  const double q1 = quantile(t.step_times_s, 0.25), q3 = quantile(t.step_times_s, 0.75);
  if (q1 <= 0) return std::nullopt;
  return std::pair{t.samples_per_s * t.step_time_s_median / q3, t.samples_per_s * t.step_time_s_median / q1};
}

std::string trial_note(const Trial& t) {
  std::string note = fmt::format("batch {}: {}", t.batch, to_string(t.outcome));
  // The JSON has samples/s only for ok trials (null otherwise).
  if (ok(t)) note += fmt::format(", {} samples/s", grouped(t.samples_per_s));
  if (const auto band = quartile_band(t))
    note += fmt::format(" (middle half of the steps {}–{})", grouped(band->first), grouped(band->second));
  if (t.peak_bytes > 0) note += ", peak " + format_bytes(t.peak_bytes);
  if (!t.message.empty()) note += ": " + t.message;
  return note;
}

// The throughput chart's band: samples/s at the slower and the faster quartile step of each point;
// the faster edge fills down to the slower (Chart.js's fill '-1').
void add_spread_band(json& datasets, const std::vector<Trial>& points) {
  json slow = json::array(), fast = json::array();
  for (const Trial& p : points)
    if (const auto band = quartile_band(p)) {
      const std::string note = fmt::format("batch {}: the middle half of the steps ran at {}–{} samples/s", p.batch,
                                           grouped(band->first), grouped(band->second));
      slow.push_back({{"x", p.batch}, {"y", band->first}, {"note", note}});
      fast.push_back({{"x", p.batch}, {"y", band->second}, {"note", note}});
    }
  if (slow.empty()) return;
  json s = line(dataset("spread: slower quartile step", slow, Palette::blue_band));
  s["borderWidth"] = 0;
  s["hideInLegend"] = true;
  json f = line(dataset("spread: middle half of the steps", fast, Palette::blue_band));
  f["borderWidth"] = 0;
  f["fill"] = "-1";
  datasets.push_back(s);
  datasets.push_back(f);
}

// The memory model's line, straight in batch and so curved on the log axes: sampled at geometric steps.
json memory_model_points(const MemoryModel& model, int64_t lo, int64_t hi) {
  constexpr int kSamples = 24;
  json points = json::array();
  for (int i = 0; i < kSamples; ++i) {
    const double b = lo * std::pow(static_cast<double>(hi) / lo, i / (kSamples - 1.0));
    const double peak = model.fixed_bytes + model.per_sample_bytes * b;
    if (peak > 0) points.push_back({{"x", std::round(b * 100) / 100}, {"y", mib(peak)}});
  }
  return points;
}

// The trial at the recommended batch with a utilisation record (the sweep's point, else the fit's); any
// batch when none was recommended.
const Trial* utilisation_trial(const Report& r) {
  const std::optional<int64_t> batch = recommended_batch(r);
  const Trial* trial = nullptr;
  auto consider = [&](const std::vector<Trial>& trials) {
    for (const Trial& t : trials)
      if (t.utilisation && ok(t) && (!batch || t.batch == *batch)) trial = &t;
  };
  if (r.fit) consider(r.fit->trials);
  if (r.sweep) consider(r.sweep->points);
  return trial;
}

// The trials the utilisation chart draws, and what they are: the sweep's (each batch's first
// repetition), else the fit's.
struct Monitored {
  std::vector<const Trial*> trials;
  const char* which = "";
};
Monitored monitored_trials(const Report& r) {
  Monitored out;
  auto take = [&](const std::vector<Trial>& trials, const char* which) {
    for (const Trial& t : trials)
      if (ok(t) && t.utilisation && !t.utilisation->timeline.empty()) out.trials.push_back(&t);
    if (!out.trials.empty()) out.which = which;
  };
  if (r.sweep) take(r.sweep->points, "the first repetition of each sweep batch");
  if (out.trials.empty() && r.fit) take(r.fit->trials, "the fit's trials");
  return out;
}

// One sentence on the trial at the recommended batch: its CPU and memory, and its GPU figure or why none.
std::string utilisation_summary(const Trial& trial) {
  const UtilisationSummary& u = *trial.utilisation;
  if (u.timeline.empty())  // a trial shorter than the CPU's clock tick: no figure, rather than 0 %
    return fmt::format("At batch {}: no CPU sample (the trial was shorter than the monitor could resolve).",
                       trial.batch);
  std::string out = fmt::format(
      "At batch {}: CPU busy {:.0f} % on average (min {:.0f}, max {:.0f}), resident memory up to {}; the monitor "
      "itself used {:.2f} % of one core.",
      trial.batch, u.cpu_percent.mean, u.cpu_percent.min, u.cpu_percent.max, format_bytes(u.rss_bytes_max),
      u.overhead_percent);
  if (u.gpu_sm_percent)
    out += fmt::format(" GPU SM busy {:.0f} % over the trial (min {:.0f}, max {:.0f}).", u.gpu_sm_percent->mean,
                       u.gpu_sm_percent->min, u.gpu_sm_percent->max);
  if (!u.gpu_percent_note.empty()) out += " GPU: " + u.gpu_percent_note + ".";
  return out;
}

// The utilisation chart's datasets: every sample as a dot at its trial's batch, each trial's mean as a
// line; the GPU's readings and the driver's own figure for the trial likewise, where NVML gave them.
json utilisation_datasets(const std::vector<const Trial*>& trials) {
  json cpu = json::array(), cpu_mean = json::array(), gpu = json::array(), gpu_mean = json::array();
  for (const Trial* t : trials) {
    const UtilisationSummary& u = *t->utilisation;
    for (const UtilisationSample& x : u.timeline) {
      cpu.push_back({{"x", t->batch},
                     {"y", x.cpu_percent},
                     {"note", fmt::format("batch {}, {:.2f} s into the trial: CPU {:.0f} %, resident {}", t->batch,
                                          x.t_s, x.cpu_percent, format_bytes(x.rss_bytes))}});
      if (x.gpu_sm_percent) gpu.push_back({{"x", t->batch}, {"y", *x.gpu_sm_percent}});
    }
    cpu_mean.push_back({{"x", t->batch}, {"y", u.cpu_percent.mean}});
    if (u.gpu_sm_percent) gpu_mean.push_back({{"x", t->batch}, {"y", u.gpu_sm_percent->mean}});
  }
  json datasets = json::array({dataset("CPU busy % (each sample)", cpu, Palette::blue_dots),
                               line(dataset("CPU busy % (trial mean)", cpu_mean, Palette::blue))});
  if (!gpu.empty()) datasets.push_back(dataset("GPU SM % (each reading)", gpu, Palette::green_dots));
  if (!gpu_mean.empty())
    datasets.push_back(line(dataset("GPU SM % (trial, the driver's samples)", gpu_mean, Palette::green)));
  for (json& d : datasets) d["clip"] = false;  // a sample at 100 % shows whole above the axis' top
  return datasets;
}

std::string race_row(const RaceEntry& e, bool winner) {
  if (e.curve.empty())  // left out before its first rung: a table row, no line
    return fmt::format(
        "<tr class=\"bad\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td colspan=\"7\">{}</td></tr>\n", e.batch,
        esc(grouped(e.samples_per_s)), esc(e.message));
  return fmt::format(
      "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.4g}</td><td>{}</td>"
      "<td class=\"n\">{}</td><td class=\"n\">{:.1f}</td><td class=\"n\">{}</td><td "
      "class=\"n\">{}</td><td>{}</td></tr>\n",
      e.message.empty() ? "ok" : "bad", e.batch, esc(grouped(e.samples_per_s)), e.lr.lr,
      e.lr.capped ? fmt::format("capped ({:.4g})", e.lr.scaled.lr) : "rule", e.rungs, e.train_s,
      e.loss_at_horizon ? fmt::format("{:.4f}", *e.loss_at_horizon) : "-",
      e.time_ratio ? fmt::format("{:.2f}x", *e.time_ratio) : "-", winner ? "best" : esc(e.message));
}

}  // namespace

// ---- sections -------------------------------------------------------------------------------

std::string throughput_section(const Report& r) {
  if (!r.sweep) return "";
  const SweepResult& sweep = *r.sweep;
  const std::optional<int64_t> pick = recommended_batch(r);
  json measured = json::array(), oom = json::array(), failed = json::array(), knee = json::array(),
       picked = json::array();
  std::set<int64_t> batches;
  for (const Trial& p : sweep.points) {
    const json point = {{"x", p.batch}, {"y", ok(p) ? p.samples_per_s : 0.0}, {"note", trial_note(p)}};
    batches.insert(p.batch);
    if (ok(p))
      measured.push_back(point);
    else if (p.outcome == Outcome::Oom)
      oom.push_back(point);
    else
      failed.push_back(point);
    if (ok(p) && sweep.knee_batch == p.batch) knee.push_back(point);
    if (ok(p) && pick == p.batch) picked.push_back(point);
  }
  if (measured.empty()) return "";
  const double tolerance = sweep.knee_tolerance;
  json datasets = json::array({line(dataset("samples/s (median step)", measured, Palette::blue))});
  datasets[0]["pointRadius"] = 3;
  datasets[0]["borderWidth"] = 2;
  add_spread_band(datasets, sweep.points);
  if (!picked.empty()) {
    // A ring around the point, so that a knee's triangle at the same batch still shows inside it.
    json p = marker(dataset(fmt::format("recommended: batch {}", *pick), picked, Palette::green), "circle", 11);
    p["backgroundColor"] = "rgba(0,0,0,0)";
    p["borderWidth"] = 3;
    datasets.push_back(p);
  }
  if (!knee.empty())
    datasets.push_back(marker(
        dataset(fmt::format("knee: smallest batch within {:g} % of the best", tolerance * 100), knee, Palette::red),
        "triangle", 8));
  if (!oom.empty())
    datasets.push_back(marker(dataset("out of memory (not measured)", oom, Palette::grey), "crossRot", 8));
  if (!failed.empty())
    datasets.push_back(marker(dataset("failed (error or timeout)", failed, Palette::purple), "crossRot", 8));
  const json config = line_chart(datasets, {{"x", batch_axis(batches)}, {"y", y_axis("samples/s")}});
  const std::string caption = fmt::format(
      "Samples per second at each batch size: the median step over {} repetition(s), interleaved; the band spans "
      "the middle half of the steps. Past the knee a bigger batch buys less than {:g} % more throughput.",
      sweep.repetitions, tolerance * 100);
  return chart_section("throughput", "Throughput", caption, "throughput", config,
                       "samples per second against batch size");
}

std::string memory_section(const Report& r) {
  json fit_points = json::array(), sweep_points = json::array(), oom = json::array();
  std::set<int64_t> oom_batches, batches;
  const double budget = static_cast<double>(r.budget_bytes), target = r.target;
  double largest = 0, smallest = 0;  // of the peaks drawn
  auto add = [&](const Trial& t, json& into) {
    const double peak = static_cast<double>(t.peak_bytes);
    if (t.batch <= 0) return;
    if (ok(t) && peak > 0) {
      into.push_back({{"x", t.batch}, {"y", mib(peak)}, {"note", trial_note(t)}});
      batches.insert(t.batch);
      largest = std::max(largest, peak);
      smallest = smallest > 0 ? std::min(smallest, peak) : peak;
    } else if (t.outcome == Outcome::Oom && !not_run(t) && oom_batches.insert(t.batch).second) {
      // The peak an out-of-memory trial reached is where it was stopped; without one, the budget. (A batch the sweep
      // did not run, past one out of memory, is no point: its table row says so.)
      const double drawn = peak > 0 ? peak : budget;
      oom.push_back({{"x", t.batch}, {"y", mib(drawn)}, {"note", trial_note(t)}});
      batches.insert(t.batch);
      if (drawn > 0) smallest = smallest > 0 ? std::min(smallest, drawn) : drawn;
    }
  };
  if (r.fit)
    for (const Trial& t : r.fit->trials) add(t, fit_points);
  if (r.sweep)
    for (const Trial& t : r.sweep->points) add(t, sweep_points);
  if (fit_points.empty() && sweep_points.empty() && oom.empty()) return "";  // a fit that fit nothing draws its OOMs
  const int64_t lo = *batches.begin(), hi = std::max(*batches.rbegin(), lo + 1);

  json datasets = json::array();
  if (!fit_points.empty()) datasets.push_back(dataset("fit trials (peak)", fit_points, Palette::blue));
  if (!sweep_points.empty())
    datasets.push_back(marker(dataset("sweep (peak)", sweep_points, Palette::green), "rect", 4));
  if (!oom.empty()) datasets.push_back(marker(dataset("out of memory", oom, Palette::red), "crossRot", 8));
  if (budget > 0) {
    auto level = [&](double bytes) {
      return json::array({{{"x", lo}, {"y", mib(bytes)}}, {{"x", hi}, {"y", mib(bytes)}}});
    };
    datasets.push_back(line(dataset(fmt::format("budget {}", bytes_text(budget)), level(budget), Palette::red)));
    datasets.push_back(line(dataset(fmt::format("target {:g} % ({})", target * 100, bytes_text(target * budget)),
                                    level(target * budget), Palette::orange),
                            true));
  }
  std::string caption =
      "Peak memory of each trial (log scale, so that small peaks show beside the budget) against the budget and the "
      "target a fitting batch must stay under.";
  if (budget > 0 && largest > 0)
    caption += fmt::format(" The largest peak measured, {}, is {} of the budget.", bytes_text(largest),
                           percent_of(largest, budget));
  if (r.fit && r.fit->memory_model && r.fit->memory_model->grows()) {
    const MemoryModel& model = *r.fit->memory_model;
    datasets.push_back(line(dataset("memory model", memory_model_points(model, lo, hi), Palette::purple), true));
    caption += fmt::format(" The memory model: peak = {} + {} × batch{}.", bytes_text(model.fixed_bytes),
                           bytes_text(model.per_sample_bytes),
                           model.residual_bytes > 0 ? fmt::format(" (the peaks predicted before their trials ran "
                                                                  "missed by up to {})",
                                                                  format_bytes(model.residual_bytes))
                                                    : "");
  }
  if (r.fit && r.fit->memory_model && !r.fit->memory_model->grows())
    caption += fmt::format(
        " No memory model: the peak did not grow from batch {} to batch {}, so no line predicts "
        "a larger batch's peak.",
        r.fit->memory_model->batch_a, r.fit->memory_model->batch_b);
  // Log scale, a little wider than the peaks and the budget, so that neither sits on the chart's edge.
  json y = {
      {"type", "logarithmic"}, {"mibTicks", true}, {"title", {{"display", true}, {"text", "peak memory (log scale)"}}}};
  if (smallest > 0) y["min"] = mib(smallest) / 1.6;
  y["max"] = mib(std::max(largest, budget)) * 1.6;
  const json config = line_chart(datasets, {{"x", batch_axis(batches)}, {"y", y}});
  return chart_section("memory", "Memory", caption, "memory", config, "peak memory against batch size");
}

// Utilisation over the monitored trials at each batch, with a sentence on the recommended batch's trial;
// the chart is left out, saying why, where the trials were too short to sample a handful of times.
std::string utilisation_section(const Report& r) {
  const auto [trials, which] = monitored_trials(r);
  if (trials.empty()) return "";
  size_t samples = 0;
  std::set<int64_t> batches;
  for (const Trial* t : trials) {
    samples += t->utilisation->timeline.size();
    batches.insert(t->batch);
  }
  const double interval_s = trials.front()->utilisation->interval_s;
  const Trial* pick = utilisation_trial(r);
  std::string summary;
  if (pick) summary = fmt::format(" {}", utilisation_summary(*pick));
  if (samples < kMinChartedSamples)
    return chart_section("utilisation", "Utilisation",
                         fmt::format("Only {} sample(s) were taken during {}, too few to chart: the monitor samples "
                                     "every {:g} s and these trials were shorter.{}",
                                     samples, which, interval_s, summary));
  const std::string caption = fmt::format(
      "Sampled every {:g} s during {} ({} samples at {} batch sizes{}): each dot is one sample, the line each "
      "trial's mean.{}",
      interval_s, which, samples, batches.size(),
      r.race || r.run_race || r.validation ? "; the races' and validations' training is not sampled" : "", summary);
  const json config =
      line_chart(utilisation_datasets(trials),
                 {{"x", batch_axis(batches)},
                  {"y", {{"min", 0}, {"max", 100}, {"title", {{"display", true}, {"text", "% busy"}}}}}});
  return chart_section("utilisation", "Utilisation", caption, "utilisation", config, "utilisation at each batch size");
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
      {"options",
       {{"scales",
         {{"x", {{"stacked", true}}},
          {"y", {{"stacked", true}, {"max", 100}, {"title", {{"display", true}, {"text", "% of the step"}}}}}}}}}};
  return "<section id=\"profile\">\n<h2>Where the step's time goes</h2>\n<p class=\"caption\">A separate pass, "
         "each phase timed apart (on a CPU on the host, on a GPU by CUDA events or synchronised after each, so its "
         "steps may run a little slower than the sweep's): each phase's "
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
    rows += fmt::format(
        "<tr><td>{}</td><td class=\"n\">{}{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{:.2f}x</td><td class=\"n\">{:.2f}x</td><td>{}</td></tr>\n",
        esc(to_string(p.precision)), esc(or_dash(p.fit_batch)), p.fit_limited_by_max ? "+" : "",
        grouped(p.samples_per_s), esc(format_bytes(p.peak_bytes)), p.speed_ratio, p.memory_ratio, esc(p.verdict));
  }
  const json config = {
      {"type", "bar"},
      {"data",
       {{"labels", labels},
        {"datasets", json::array({{{"label", fmt::format("samples/s at batch {}", r.precisions[0].batch)},
                                   {"data", speed},
                                   {"backgroundColor", Palette::blue}}})}}},
      {"options",
       {{"scales", {{"y", {{"beginAtZero", true}, {"title", {{"display", true}, {"text", "samples/s"}}}}}}}}}};
  return fmt::format(
      "<section id=\"precision\">\n<h2>Precision</h2>\n<p class=\"caption\">Each precision's own fit, and its "
      "throughput and peak memory at the same batch (+: the fit stopped at --max).</p>\n{}<table>\n<tr><th>precision"
      "</th><th>fit batch</th><th>samples/s</th><th>peak memory</th><th>speed</th><th>memory</th><th>verdict</th></tr>"
      "\n{}</table>\n</section>\n",
      chart_block("precision", config, "samples per second by precision"), rows);
}

std::string goodput_section(const Report& r) {
  if (!r.goodput || r.goodput->points.empty()) return "";
  const Goodput& g = *r.goodput;
  json good = json::array(), speed = json::array(), best = json::array();
  std::set<int64_t> batches;
  for (const GoodputPoint& p : g.points) {
    const json point = {
        {"x", p.batch},
        {"y", p.goodput},
        {"note", fmt::format("batch {}: {} samples/s x {:.1f} % efficiency = {} useful samples/s", p.batch,
                             grouped(p.samples_per_s), p.efficiency * 100, grouped(p.goodput))}};
    good.push_back(point);
    speed.push_back({{"x", p.batch}, {"y", p.samples_per_s}});
    batches.insert(p.batch);
    if (g.best_batch == p.batch) best.push_back(point);
  }
  json datasets = json::array({line(dataset("goodput (useful samples/s)", good, Palette::green))});
  datasets[0]["pointRadius"] = 3;
  if (!best.empty()) datasets.push_back(marker(dataset("best goodput", best, Palette::red), "triangle", 8));
  json s_set = line(dataset("samples/s (throughput)", speed, Palette::blue), true);
  s_set["pointRadius"] = 2;
  datasets.push_back(s_set);
  const json config = line_chart(datasets, {{"x", batch_axis(batches)}, {"y", y_axis("samples/s")}});
  const std::string caption = fmt::format(
      "Goodput = samples/s x statistical efficiency (Pollux), with efficiency = (B_simple + {0}) / (B_simple + batch) "
      "at the measured noise scale B_simple {1:.0f}: past it, a bigger batch adds samples whose gradients mostly "
      "repeat each other.",
      g.base_batch, g.b_simple);
  return chart_section("goodput", "Goodput", caption, "goodput", config, "goodput against batch size");
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
    if (!summary.empty() && summary.back() != '.') summary += ".";
  }
  // The steps it trained: fewer than asked where it stopped (a diverged run's 2 of 10)
  const int ran = n.timeline.empty() ? n.steps : std::min<int>(n.steps, static_cast<int>(n.timeline.size()));
  const std::string steps = ran < n.steps ? fmt::format("{} of {}", ran, n.steps) : std::to_string(n.steps);
  // The critical batch's sentence where there is one: a band with no upper end has none (its own line says so)
  const std::string unbounded = n.b_simple ? unbounded_noise_text(n) : "";
  const std::string meaning =
      !n.b_simple ? ""
      : !unbounded.empty()
          ? " " + std::string(1, static_cast<char>(std::toupper(static_cast<unsigned char>(unbounded[0])))) +
                unbounded.substr(1) + "."
          : " Near B_simple is the critical batch: below it a bigger batch cuts the steps to a target almost "
            "proportionally, above it each doubling buys less (McCandlish et al. 2018).";
  std::string out = fmt::format(
      "<section id=\"noise\">\n<h2>Gradient noise scale</h2>\n<p class=\"caption\">{} training steps at batch {} in "
      "micro-batches of {}. {}{}</p>\n",
      steps, n.batch, n.micro_batch, esc(summary), esc(meaning));
  if (!smoothed.empty()) {
    json line_set = dataset("B_simple (smoothed)", smoothed, Palette::purple);
    line_set["showLine"] = true;
    line_set["pointRadius"] = 2;
    const json config = {{"type", "line"},
                         {"data", {{"datasets", json::array({line_set})}}},
                         {"options",
                          {{"scales",
                            {{"x", {{"type", "linear"}, {"title", {{"display", true}, {"text", "training step"}}}}},
                             {"y", {{"beginAtZero", true}, {"title", {{"display", true}, {"text", "B_simple"}}}}}}}}}};
    out += chart_block("noise", config, "gradient noise scale over the run");
  }
  return out + "</section>\n";
}

constexpr const char* kValidationChart = "held-out metric over training time";

// No chart where no run was evaluated (a validation stopped before its first evaluation): an empty one had been drawn
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
      const double y = p.accuracy ? *p.accuracy : p.loss;
      if (std::isfinite(y)) points.push_back({{"x", p.train_s}, {"y", y}});  // a diverged evaluation is no point
    }
    json d = dataset(run.schedule.empty() ? fmt::format("batch {} (lr {:.4g})", run.batch, run.lr.lr)
                                          : fmt::format("schedule {}", run.schedule),
                     points, kLineColors[i++ % 6]);
    d["showLine"] = true;
    d["pointRadius"] = 2;
    if (!points.empty()) datasets.push_back(d);  // a run with none (diverged at once): its row says so, no legend
    const bool soonest = v.fastest_batch == run.batch && run.schedule.empty();
    if (v.epochs > 0) {  // full runs: final quality and time
      const std::string last = run.final_accuracy ? fmt::format("{:.4f}", *run.final_accuracy)
                               : run.final_loss   ? fmt::format("loss {:.4f}", *run.final_loss)
                                                  : "-";
      rows += fmt::format(
          "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{:.4g}</td><td class=\"n\">{}</td><td>{}</td>"
          "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2f}</td><td class=\"n\">{}</td>"
          "<td>{}</td></tr>\n",
          run.good ? "ok" : "bad", run.batch, run.lr.lr, run.warmup_steps, run.good ? "within noise of the best" : "no",
          format_seconds_figure(run.train_s), run.steps, run.epochs, last,
          !run.schedule.empty()
              ? esc(fmt::format("schedule {}{}", run.schedule,
                                v.schedule_saving     ? fmt::format(": {:.0f} % {} time than the fastest good batch",
                                                                    100 * std::abs(*v.schedule_saving),
                                                                *v.schedule_saving >= 0 ? "less" : "more")
                                : run.message.empty() ? ""
                                                      : ": " + run.message))
          : soonest && v.interrupted  ? "fastest of the runs that ended"
          : soonest                   ? "fastest within noise"
          : v.best_batch == run.batch ? "best"
                                      : esc(run.message));
      continue;
    }
    rows += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{:.4g}</td><td class=\"n\">{}</td><td>{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2f}</td><td class=\"n\">{}</td>"
        "<td>{}</td></tr>\n",
        run.reached ? "ok" : "bad", run.batch, run.lr.lr, run.warmup_steps, run.reached ? "yes" : "no",
        format_seconds_figure(run.train_s), run.steps, run.epochs,
        run.last.accuracy ? fmt::format("{:.4f}", *run.last.accuracy)
        : run.evaluated() ? "loss " + format_loss(run.last.loss)
                          : "-",
        soonest ? (v.interrupted ? "soonest of the runs that ended" : "soonest") : esc(run.message));
  }
  if (v.interrupted)  // what a stop left untrained: the table may have no row at all
    rows += fmt::format("<tr class=\"bad\"><td colspan=\"9\">{}</td></tr>\n", esc(stopped_line(v)));
  const bool drawn =
      std::any_of(v.runs.begin(), v.runs.end(), [](const ValidationRun& run) { return !run.curve.empty(); });
  const json config = {
      {"type", "line"},
      {"data", {{"datasets", datasets}}},
      {"options",
       {{"scales",
         {{"x", {{"type", "linear"}, {"title", {{"display", true}, {"text", "training time (s)"}}}}},
          {"y", {{"title", {{"display", true}, {"text", accuracy ? "test accuracy" : "test loss"}}}}}}}}}};
  if (v.epochs > 0)
    return fmt::format(
        "<section id=\"validation\">\n<h2>Validation: {}</h2>\n<p class=\"caption\">Each candidate trained the same "
        "epochs from the same weights with its scaled learning rate and the schedule, evaluated on the {} (the last "
        "column after the run, on the whole set; evaluation time excluded).</p>\n{}"
        "<table>\n<tr><th>batch</th><th>lr</th><th>warm-up steps</th><th>good</th><th>train "
        "s</th><th>steps</th><th>epochs</th>"
        "<th>final quality</th><th>note</th></tr>\n{}</table>\n</section>\n",
        esc(v.target), esc(v.held_out), drawn ? chart_block("validation", config, kValidationChart) : "", rows);
  return fmt::format(
      "<section id=\"validation\">\n<h2>Time to {}</h2>\n<p class=\"caption\">Each candidate trained from the same "
      "weights with its scaled learning rate, evaluated on the {} (evaluation time excluded).</p>\n{}"
      "<table>\n<tr><th>batch</th><th>lr</th><th>warm-up steps</th><th>reached</th><th>train "
      "s</th><th>steps</th><th>epochs</th>"
      "<th>last</th><th>note</th></tr>\n{}</table>\n</section>\n",
      esc(v.target), esc(v.held_out), drawn ? chart_block("validation", config, kValidationChart) : "", rows);
}

std::string race_section(const Report& r) {
  if (!r.race) return "";
  const BatchRace& race = *r.race;
  const std::string loss_name = race.on_training_data ? "loss on training samples" : "held-out loss";
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
  const json config = {{"type", "line"},
                       {"data", {{"datasets", datasets}}},
                       {"options",
                        {{"scales",
                          {{"x",
                            {{"type", "linear"},
                             {"title", {{"display", true}, {"text", "training time (s, at the sweep's samples/s)"}}}}},
                           {"y", {{"title", {{"display", true}, {"text", loss_name}}}}}}}}}};
  return fmt::format(
      "<section id=\"race\">\n<h2>Batch race</h2>\n<p class=\"caption\">Every candidate trained from your initial "
      "weights at its own advised learning rate, judged on {} ({}) at equal training time; the better half "
      "went on at each rung (successive halving). Time to best: how much longer than the winner each needed to reach "
      "the winner's loss, from the slope of its last evaluations.</p>\n{}"
      "<table>\n<tr><th>batch</th><th>samples/s</th><th>lr</th><th>rate</th><th>rungs</th><th>train s</th>"
      "<th>loss</th><th>time to best</th><th>note</th></tr>\n{}</table>\n{}</section>\n",
      loss_name, esc(race.held_out), chart_block("race", config, loss_name + " over training time"), rows,
      notes.empty() ? "" : "<ul>\n" + notes + "</ul>\n");
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
  rows +=
      fmt::format("<tr class=\"total\"><td>peak</td><td class=\"n\">{}</td></tr>\n", esc(format_bytes(d.peak_bytes)));
  const json config = {
      {"type", "doughnut"},
      {"data",
       {{"labels", labels},
        {"datasets",
         json::array({{{"label", "MiB"},
                       {"data", values},
                       {"backgroundColor",
                        {Palette::blue, Palette::orange, Palette::green, Palette::purple, Palette::grey}}}})}}},
      {"options", {{"plugins", {{"legend", {{"position", "right"}}}}}}}};
  return fmt::format(
      "<section id=\"breakdown\">\n<h2>Where the memory goes at batch {}</h2>\n<p class=\"caption\">Parameters, "
      "gradients and optimizer state are counted from the tensors; activations are the per-sample slope ({} per "
      "sample) times the batch; the rest is workspace and allocator overhead{}.</p>\n<div class=\"split\">\n"
      "<table class=\"breakdown\">\n{}</table>\n{}</div>\n</section>\n",
      d.batch, esc(bytes_text(d.activation_bytes_per_sample)),
      d.rest_bytes < 0
          ? " (negative here: not all of the gradients and optimizer state are alive at the peak, which comes while "
            "the backward pass is still making gradients and freeing activations; the chart draws it as 0, so its "
            "slices add up to more than the peak)"
          : "",
      rows, chart_block("breakdown", config, "memory breakdown"));
}

}  // namespace batchwise::detail::html

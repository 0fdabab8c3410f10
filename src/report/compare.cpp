#include "batchwise/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <sstream>

#include "batchwise/report.h"
#include "batchwise/units.h"
#include "check.h"
#include "report_file.h"

namespace batchwise {

std::optional<double> ComparedPoint::speed_ratio() const {
  // Neither side at 0 (a hand-edited report): one had made the geometric mean 0x, and the other order 1x
  if (!samples_per_s_a || !samples_per_s_b || *samples_per_s_a <= 0 || *samples_per_s_b <= 0) return std::nullopt;
  return *samples_per_s_b / *samples_per_s_a;
}

bool ComparedPoint::within_noise() const {
  const auto r = speed_ratio();
  if (!r || !spread_a || !spread_b) return false;
  // On the ratio's log, so that the verdict is the same whichever report is A: |r - 1| had called every slowdown
  // noise once a spread reached 1 (0.03x~), and the same pair the other way round, 30.9x, a difference
  return std::abs(std::log(*r)) <= std::log1p(std::max(*spread_a, *spread_b));
}

std::optional<double> ComparedRun::speed_ratio() const {
  if (!train_s_a || !train_s_b || *train_s_a <= 0 || *train_s_b <= 0) return std::nullopt;
  return *train_s_a / *train_s_b;
}

namespace {

using nlohmann::json;

// A figure as the JSON report writes it (0.9, 1.0, 2147483648), as a comparison of reports shows it.
template <class T>
std::string json_text(T value) {
  return json(value).dump(-1, ' ', false, json::error_handler_t::replace);
}

// The context and workload fields a comparison lists when they differ.
struct ComparedText {
  const char* name;
  std::string (*text)(const Report&);
};
// A `--cmd` run's workload fields batchwise cannot know (its rate, input shape, training samples), as the HTML page
// says them (compare had shown "lr 0.0" beside a built-in model's rate).
std::string unless_commands(const Report& r, const std::string& text) {
  return r.workload.is_command() ? std::string("(the command's)") : text;
}

const ComparedText kCompared[] = {
    {"batchwise", [](const Report& r) { return r.context.batchwise_version; }},
    {"build commit", [](const Report& r) { return r.context.build_commit; }},
    {"build type", [](const Report& r) { return r.context.build_type; }},  // a Debug build's steps are slower
    {"torch", [](const Report& r) { return r.context.torch_version; }},
    {"device", [](const Report& r) { return r.context.device_name; }},
    {"device type", [](const Report& r) { return r.context.device_type; }},
    {"device memory",  // a GPU's: a CPU's is the memory available when the run began, which moves from run to run
     [](const Report& r) {
       return r.context.device_type == "cuda" ? format_bytes(r.context.device_total_bytes) : std::string("-");
     }},
    {"host", [](const Report& r) { return r.context.host; }},
    {"os", [](const Report& r) { return r.context.os; }},
    {"threads", [](const Report& r) { return json_text(r.context.threads); }},
    {"cores", [](const Report& r) { return json_text(r.context.cores); }},
    {"cpu quota",  // a container's --cpus: 2 against 8 on the same host is another machine
     [](const Report& r) { return r.context.cpu_quota > 0 ? fmt::format("{:.3g}", r.context.cpu_quota) : "-"; }},
    {"blas", [](const Report& r) { return r.context.blas; }},
    {"model", [](const Report& r) { return r.workload.model; }},
    {"dataset", [](const Report& r) { return r.workload.dataset; }},
    {"parameters", [](const Report& r) { return unless_commands(r, json_text(r.workload.parameter_count)); }},
    {"trainable parameters",
     [](const Report& r) {
       return unless_commands(r, r.workload.trainable_parameter_count ? json_text(*r.workload.trainable_parameter_count)
                                                                      : std::string("-"));
     }},
    {"data", [](const Report& r) { return r.workload.data_path.empty() ? std::string("-") : r.workload.data_path; }},
    {"optimizer", [](const Report& r) { return r.workload.optimizer; }},
    {"precision", [](const Report& r) { return r.workload.precision; }},
    {"parameter dtype",
     [](const Report& r) {
       return r.workload.parameter_dtype.empty() ? std::string("-") : r.workload.parameter_dtype;
     }},
    {"loss", [](const Report& r) { return r.workload.loss; }},
    {"input shape",
     [](const Report& r) { return unless_commands(r, fmt::format("{}", fmt::join(r.workload.input_shape, "x"))); }},
    {"budget", [](const Report& r) { return format_bytes(r.budget_bytes); }},
    {"target", [](const Report& r) { return json_text(r.target); }},
    {"run", [](const Report& r) { return answered_run(r); }},
    {"validation", [](const Report& r) { return r.validation ? r.validation->target : std::string("-"); }},
    {"lr", [](const Report& r) { return unless_commands(r, json_text(r.workload.lr)); }},
    {"samples", [](const Report& r) { return unless_commands(r, json_text(r.workload.dataset_size)); }},
    {"held out", [](const Report& r) { return r.validation ? r.validation->held_out : std::string("-"); }},
};

void add_points(const Report& report, bool is_a, std::map<int64_t, ComparedPoint>& points) {
  if (!report.sweep) return;
  for (const Trial& p : report.sweep->points) {
    ComparedPoint& cp = points[p.batch];
    cp.batch = p.batch;
    // a batch the sweep did not run (past one out of memory): no outcome or peak of its own ("oom" and 0 B had read
    // as measured)
    (is_a ? cp.outcome_a : cp.outcome_b) = not_run(p) ? "not run" : to_string(p.outcome);
    if (p.outcome == Outcome::Ok) (is_a ? cp.samples_per_s_a : cp.samples_per_s_b) = p.samples_per_s;
    if (!not_run(p)) (is_a ? cp.peak_bytes_a : cp.peak_bytes_b) = p.peak_bytes;
    if (p.outcome == Outcome::Ok && !p.step_times_s.empty()) {  // from the raw steps: older reports lack the IQR
      Trial steps = p;
      summarize_steps(steps);
      (is_a ? cp.spread_a : cp.spread_b) = step_spread(steps);
    }
  }
}

// How a validation judged one of its runs (ComparedRun::verdict_a).
std::string verdict(const ValidationResult& v, const ValidationRun& r) {
  if (r.message.rfind("failed", 0) == 0) return "failed";
  if (r.outcome == Outcome::Error) return "diverged";  // its training or held-out loss stopped being finite
  if (v.epochs <= 0) return r.reached ? "reached" : "not reached";
  if (!r.final_loss) return "not finished";
  // neither best nor good, and not judged worse against a run that left it: two validations in which no run left
  // the start had read "worse" for every run
  if (r.message.rfind("did not leave the start", 0) == 0) return "at the start";
  if (r.schedule.empty() && v.best_batch == r.batch) return "best";
  return r.good ? "good" : "worse";
}

void add_runs(const Report& report, bool is_a, std::vector<ComparedRun>& runs) {
  if (!report.validation) return;
  const ValidationResult& v = *report.validation;
  const auto at = [&](int64_t batch, const std::string& schedule) -> ComparedRun& {
    for (ComparedRun& c : runs)
      if (c.batch == batch && c.schedule == schedule) return c;
    runs.push_back({});
    runs.back().batch = batch;
    runs.back().schedule = schedule;
    return runs.back();
  };
  for (const ValidationRun& r : v.runs) {
    ComparedRun& c = at(r.batch, r.schedule);
    const bool timed = v.epochs > 0 ? r.final_loss.has_value() : r.reached;
    if (timed) (is_a ? c.train_s_a : c.train_s_b) = r.train_s;
    // A target's run: the quality it stopped at, its last evaluation's.
    const bool full = v.epochs > 0;
    const bool evaluated = r.evaluated();
    (is_a ? c.final_accuracy_a : c.final_accuracy_b) = full        ? r.final_accuracy
                                                       : evaluated ? r.last.accuracy
                                                                   : std::nullopt;
    (is_a ? c.final_loss_a : c.final_loss_b) = full ? r.final_loss
                                               : evaluated && std::isfinite(r.last.loss)
                                                   ? std::optional<double>(r.last.loss)
                                                   : std::nullopt;
    (is_a ? c.verdict_a : c.verdict_b) = verdict(v, r);
  }
  for (const int64_t b : v.not_trained) (is_a ? at(b, "").verdict_a : at(b, "").verdict_b) = "not trained";
}

// A schedule a stop left untrained: the other report's row of the same schedule, else a row of its own
// (named "schedule" where a report from before `untrained_schedule` does not say which; such a one
// joined the other report's schedule row, whatever its phases). After both reports' runs, so that the
// order of A and B does not matter.
void add_untrained_schedule(const Report& report, bool is_a, std::vector<ComparedRun>& runs) {
  if (!report.validation || !report.validation->schedule_not_trained) return;
  const std::string& schedule = report.validation->untrained_schedule;
  for (ComparedRun& c : runs)
    if (!schedule.empty() && c.schedule == schedule && (is_a ? c.verdict_a : c.verdict_b).empty()) {
      (is_a ? c.verdict_a : c.verdict_b) = "not trained";
      return;
    }
  runs.push_back({});
  runs.back().schedule = schedule.empty() ? "schedule" : schedule;
  (is_a ? runs.back().verdict_a : runs.back().verdict_b) = "not trained";
}

// The fields that make two reports different workloads: ratios between them are not speed-ups.
constexpr const char* kWorkloadFields[] = {"model",      "dataset",   "parameters",      "trainable parameters",
                                           "optimizer",  "precision", "parameter dtype", "loss",
                                           "input shape"};

// The fields that make two validations' runs other runs: their times and qualities are not one run's.
constexpr const char* kRunFields[] = {"model",      "dataset",   "parameters", "trainable parameters",
                                      "optimizer",  "precision", "loss",       "input shape",
                                      "validation", "lr",        "samples",    "held out"};

std::vector<std::string> comparison_warnings(const Comparison& c) {
  std::vector<std::string> warnings;
  std::vector<std::string> differ;
  for (const auto& d : c.differences)
    // (a field one report does not hold, "-", as a report from before it was written: unknown, not another)
    if (std::find(std::begin(kWorkloadFields), std::end(kWorkloadFields), d.name) != std::end(kWorkloadFields) &&
        d.a != "-" && d.b != "-")
      differ.push_back(fmt::format("{} {} | {}", d.name, d.a, d.b));
  if (!differ.empty())
    warnings.push_back(
        fmt::format("A and B train different workloads ({}): their samples/s are two workloads', so "
                    "the ratios are not one workload's speed-up",
                    fmt::join(differ, "; ")));
  int both = 0, noise = 0;
  for (const auto& p : c.points)
    if (p.speed_ratio()) ++both, noise += p.within_noise();
  if (both > 0 && noise == both)
    warnings.push_back("every ratio is within the two runs' spreads (marked ~): these runs cannot tell A and B apart");
  else if (noise > 0)
    warnings.push_back(fmt::format(
        "{} of {} ratios are within the two runs' spreads (marked ~): noise, not a difference", noise, both));
  std::vector<std::string> runs_differ;  // what makes the validations' runs other runs
  for (const auto& d : c.differences)    // (a field one report lacks, "-", is no other run either)
    if (std::find(std::begin(kRunFields), std::end(kRunFields), d.name) != std::end(kRunFields) && d.a != "-" &&
        d.b != "-")
      runs_differ.push_back(fmt::format("{} {} | {}", d.name, d.a, d.b));
  const auto side_has = [&](bool a) {
    return std::any_of(c.points.begin(), c.points.end(),
                       [&](const ComparedPoint& p) { return !(a ? p.outcome_a : p.outcome_b).empty(); });
  };
  if (c.points.empty() && c.runs.empty())
    warnings.push_back(
        "neither report has a sweep's points or a validation's runs (a fit, noise, loader or plan report's): only "
        "their workloads and answers are compared");
  else if (!c.points.empty() && (!side_has(true) || !side_has(false)))
    warnings.push_back(
        fmt::format("{} has no sweep: its column is empty, and no batch has a ratio", side_has(true) ? "B" : "A"));
  else if (!c.points.empty() && both == 0)  // the geometric mean's line had gone without a word
    warnings.push_back(
        "no batch size ran ok in both sweeps (each row's outcome says which ran): no batch has a ratio, and there "
        "is no geometric mean");
  const bool timed = std::any_of(c.runs.begin(), c.runs.end(), [](const ComparedRun& r) { return r.speed_ratio(); });
  if (timed && !runs_differ.empty())
    warnings.push_back(fmt::format(
        "A and B validated different runs ({}): their times and final qualities are not one run's, measured twice",
        fmt::join(runs_differ, "; ")));
  else if (timed)
    warnings.push_back(
        "each validation time is one run's, and one run's time moves from one run to the next (on a CPU by up to a "
        "third: docs/benchmarks.md): a time ratio near 1 is not a difference until the runs are repeated");
  return warnings;
}

}  // namespace

Comparison compare_reports(const std::string& path_a, const std::string& path_b) {
  const Report a = report_from_json(detail::read_text(path_a), path_a);
  const Report b = report_from_json(detail::read_text(path_b), path_b);
  Comparison c;
  c.name_a = path_a;
  c.name_b = path_b;
  for (const auto& [name, text] : kCompared) {
    const std::string fa = text(a), fb = text(b);
    if (fa != fb) c.differences.push_back({name, fa, fb});
  }
  c.fit_batch_a = a.fit ? a.fit->batch : std::nullopt;
  c.fit_batch_b = b.fit ? b.fit->batch : std::nullopt;
  c.fit_limited_a = a.fit && a.fit->batch && a.fit->limited_by_max;
  c.fit_limited_b = b.fit && b.fit->batch && b.fit->limited_by_max;
  if (a.fit) c.fit_outcome_a = to_string(a.fit->outcome);
  if (b.fit) c.fit_outcome_b = to_string(b.fit->outcome);
  // noise's and loader's answers: what a report of either kind answers, where no batch is recommended
  const auto noise = [](const Report& r) -> std::string {
    if (!r.noise) return "-";
    if (!r.noise->b_simple) return fmt::format("not measured at batch {}", r.noise->batch);
    // no upper end: no critical batch, as the noise report's own answer line says
    if (!unbounded_noise_text(*r.noise).empty())
      return fmt::format("none at batch {} (B_simple {:.0f}, its band with no upper end: no critical batch)",
                         r.noise->batch, *r.noise->b_simple);
    const std::string high =
        std::isfinite(r.noise->b_simple_high) ? fmt::format("{:.0f}", r.noise->b_simple_high) : std::string("inf");
    return fmt::format("B_simple {:.0f} (band {:.0f} to {}) at batch {}", *r.noise->b_simple, r.noise->b_simple_low,
                       high, r.noise->batch);
  };
  const auto loader = [](const Report& r) -> std::string {
    if (!r.loader) return "-";
    if (!r.loader->after)  // none chosen: every setting input-bound, none that trained, ...: its advice says which
      return fmt::format("none chosen at batch {}: {}", r.loader->batch, r.loader->advice);
    const LoaderTrial& t = *r.loader->after;
    return fmt::format("{} worker{}, prefetch {} at batch {}", t.workers, t.workers == 1 ? "" : "s", t.prefetch,
                       r.loader->batch);
  };
  if (a.noise || b.noise) c.noise_a = noise(a), c.noise_b = noise(b);
  if (a.loader || b.loader) c.loader_a = loader(a), c.loader_b = loader(b);
  c.recommended_a = a.recommendation ? std::optional<int64_t>(a.recommendation->batch) : std::nullopt;
  c.recommended_b = b.recommendation ? std::optional<int64_t>(b.recommendation->batch) : std::nullopt;

  std::map<int64_t, ComparedPoint> points;
  add_points(a, true, points);
  add_points(b, false, points);
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
  add_runs(a, true, c.runs);
  add_runs(b, false, c.runs);
  add_untrained_schedule(a, true, c.runs);
  add_untrained_schedule(b, false, c.runs);
  std::stable_sort(c.runs.begin(), c.runs.end(), [](const ComparedRun& x, const ComparedRun& y) {
    return x.schedule.empty() != y.schedule.empty() ? x.schedule.empty() : x.schedule.empty() && x.batch < y.batch;
  });
  // A stopped validation's fastest is of the runs that ended: it validated no batch.
  c.validated_a = a.validation && !a.validation->interrupted ? a.validation->fastest_batch : std::nullopt;
  c.validated_b = b.validation && !b.validation->interrupted ? b.validation->fastest_batch : std::nullopt;
  c.warnings = comparison_warnings(c);
  // A side's own noise: a sweep that shared the CPU, or whose figures did not settle, is slowed or moved by what else
  // ran, and its ratios with it (a geomean of 0.11x had stood without a word beside B's 52 % wait for a core)
  for (const auto& [side, r] : {std::pair<const char*, const Report*>{"A", &a}, {"B", &b}}) {
    if (!r->sweep) continue;
    if (!r->sweep->shared_cpu_warning.empty())
      c.warnings.push_back(
          fmt::format("{}: {}; its ratios are the load's as much as the change's", side, r->sweep->shared_cpu_warning));
    if (!r->sweep->unsettled.empty())  // (noise its repetitions settled is in its figures' spread, the ~ marks)
      c.warnings.push_back(fmt::format("{}: {}", side, r->sweep->noise_warning));
  }
  return c;
}

namespace {

// The width of the labels' column: 14, or the longest field that differs ("trainable parameters" had pushed its
// row's A and B out of line with the others')
size_t label_width(const Comparison& c) {
  size_t width = 14;
  for (const auto& d : c.differences) width = std::max(width, d.name.size());
  return width;
}

// The validations' runs: each one's training time in A and in B, their ratio (above 1: B faster), its
// final quality in each (accuracy where the runs have one, else the loss) and each side's verdict.
template <class Line>
void runs_table(const Comparison& c, Line& line) {
  const bool accuracy = std::any_of(c.runs.begin(), c.runs.end(),
                                    [](const ComparedRun& r) { return r.final_accuracy_a || r.final_accuracy_b; });
  const auto quality = [&](const std::optional<double>& acc, const std::optional<double>& loss) {
    const std::optional<double>& v = accuracy ? acc : loss;
    return v ? fmt::format("{:.4f}", *v) : std::string("-");
  };
  const auto seconds = [](const std::optional<double>& s) { return s ? format_seconds(*s) : std::string("-"); };
  const auto opt = [](const std::optional<int64_t>& v) { return v ? std::to_string(*v) : std::string("-"); };
  line("");
  line(fmt::format("{:<{}} A {}  |  B {}", "validated", label_width(c), opt(c.validated_a), opt(c.validated_b)));
  const std::string q = accuracy ? "accuracy" : "final loss";
  line(fmt::format("{:>17}  {:>9}  {:>9}  {:>7}  {:>10}  {:>10}  {:<12}  {}", "validation run", "A train", "B train",
                   "A/B", "A " + q, "B " + q, "A", "B"));
  for (const ComparedRun& r : c.runs) {
    const auto ratio = r.speed_ratio();
    line(fmt::format("{:>17}  {:>9}  {:>9}  {:>7}  {:>10}  {:>10}  {:<12}  {}",
                     r.schedule.empty() ? std::to_string(r.batch) : r.schedule, seconds(r.train_s_a),
                     seconds(r.train_s_b), ratio ? fmt::format("{:.2f}x", *ratio) : "-",
                     quality(r.final_accuracy_a, r.final_loss_a), quality(r.final_accuracy_b, r.final_loss_b),
                     r.verdict_a.empty() ? "-" : r.verdict_a, r.verdict_b.empty() ? "-" : r.verdict_b));
  }
}

}  // namespace

std::string to_table(const Comparison& c) {
  std::ostringstream out;
  auto line = [&](const std::string& s) { out << s << '\n'; };
  auto opt = [](const auto& v) { return v ? fmt::format("{}", *v) : std::string("-"); };
  line(fmt::format("A: {}", c.name_a));
  line(fmt::format("B: {}", c.name_b));
  if (c.differences.empty()) line("same context and workload");
  const size_t width = label_width(c);
  for (const auto& d : c.differences) line(fmt::format("{:<{}} A {}  |  B {}", d.name, width, d.a, d.b));
  auto fitted = [&](const std::optional<int64_t>& batch, const std::optional<std::string>& outcome, bool limited) {
    if (batch) return fmt::format("{}{}", *batch, limited ? " (the --max: no larger batch was tried)" : "");
    if (!outcome) return std::string("-");  // no fit in that report
    return std::string(*outcome == to_string(FitOutcome::DoesNotFit) ? "none fits" : "no batch trained");
  };
  line(fmt::format("{:<{}} A {}  |  B {}", "fit", width, fitted(c.fit_batch_a, c.fit_outcome_a, c.fit_limited_a),
                   fitted(c.fit_batch_b, c.fit_outcome_b, c.fit_limited_b)));
  line(fmt::format("{:<{}} A {}  |  B {}", "recommended", width, opt(c.recommended_a), opt(c.recommended_b)));
  if (!c.noise_a.empty()) line(fmt::format("{:<{}} A {}  |  B {}", "noise scale", width, c.noise_a, c.noise_b));
  if (!c.loader_a.empty()) line(fmt::format("{:<{}} A {}  |  B {}", "loader", width, c.loader_a, c.loader_b));
  if (!c.points.empty()) {  // the sweeps' table; without one on either side, the warnings alone
    line("");
    line(fmt::format("{:>8}  {:>13}  {:>13}  {:>7}  {:>11}  {:>11}  {:>7}", "batch", "A samples/s", "B samples/s",
                     "B/A", "A peak", "B peak", "B/A"));
  }
  for (const auto& p : c.points) {
    auto speed = [](const std::optional<double>& v, const std::string& outcome) {
      return v ? fmt::format("{:.0f}", *v) : (outcome.empty() ? std::string("-") : outcome);
    };
    auto peak = [](const std::optional<int64_t>& v) { return v ? format_bytes(*v) : std::string("-"); };
    const auto r = p.speed_ratio();
    // Between two trials that ran to the end: an out-of-memory trial's peak is where it failed
    const std::string peak_ratio =
        p.peak_bytes_a && p.peak_bytes_b && *p.peak_bytes_a > 0 && p.outcome_a == "ok" && p.outcome_b == "ok"
            ? fmt::format("{:.2f}x", static_cast<double>(*p.peak_bytes_b) / static_cast<double>(*p.peak_bytes_a))
            : "-";
    line(fmt::format("{:>8}  {:>13}  {:>13}  {:>7}  {:>11}  {:>11}  {:>7}", p.batch,
                     speed(p.samples_per_s_a, p.outcome_a), speed(p.samples_per_s_b, p.outcome_b),
                     r ? fmt::format("{:.2f}x{}", *r, p.within_noise() ? "~" : "") : "-", peak(p.peak_bytes_a),
                     peak(p.peak_bytes_b), peak_ratio));
  }
  if (c.geomean_speed_ratio)
    line(fmt::format("samples/s B/A, geometric mean over the batches both ran: {:.2f}x", *c.geomean_speed_ratio));
  if (!c.runs.empty()) runs_table(c, line);
  for (const auto& w : c.warnings) line("warning: " + w);
  return out.str();
}

std::string to_json(const Comparison& c) {
  json j;
  j["a"] = c.name_a;
  j["b"] = c.name_b;
  j["differences"] = json::array();
  for (const auto& d : c.differences) j["differences"].push_back({{"field", d.name}, {"a", d.a}, {"b", d.b}});
  auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  auto text_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };  // not in that report
  j["fit_batch"] = {{"a", opt(c.fit_batch_a)}, {"b", opt(c.fit_batch_b)}};
  j["fit_limited_by_max"] = {{"a", c.fit_limited_a}, {"b", c.fit_limited_b}};
  j["recommended_batch"] = {{"a", opt(c.recommended_a)}, {"b", opt(c.recommended_b)}};
  if (!c.noise_a.empty()) j["noise_scale"] = {{"a", c.noise_a}, {"b", c.noise_b}};
  if (!c.loader_a.empty()) j["loader"] = {{"a", c.loader_a}, {"b", c.loader_b}};
  j["points"] = json::array();
  for (const auto& p : c.points)
    j["points"].push_back({{"batch", p.batch},
                           {"outcome", {{"a", text_or_null(p.outcome_a)}, {"b", text_or_null(p.outcome_b)}}},
                           {"samples_per_s", {{"a", opt(p.samples_per_s_a)}, {"b", opt(p.samples_per_s_b)}}},
                           {"peak_bytes", {{"a", opt(p.peak_bytes_a)}, {"b", opt(p.peak_bytes_b)}}},
                           {"speed_ratio", opt(p.speed_ratio())},
                           {"spread", {{"a", opt(p.spread_a)}, {"b", opt(p.spread_b)}}},
                           {"within_noise", p.within_noise()}});
  j["geomean_speed_ratio"] = opt(c.geomean_speed_ratio);
  if (!c.runs.empty()) {
    j["validated_batch"] = {{"a", opt(c.validated_a)}, {"b", opt(c.validated_b)}};
    j["validation_runs"] = json::array();
    for (const auto& r : c.runs)
      j["validation_runs"].push_back(
          {{"batch", r.batch},
           {"schedule", r.schedule},
           {"train_s", {{"a", opt(r.train_s_a)}, {"b", opt(r.train_s_b)}}},
           {"speed_ratio", opt(r.speed_ratio())},
           {"final_accuracy", {{"a", opt(r.final_accuracy_a)}, {"b", opt(r.final_accuracy_b)}}},
           {"final_loss", {{"a", opt(r.final_loss_a)}, {"b", opt(r.final_loss_b)}}},
           {"verdict", {{"a", r.verdict_a}, {"b", r.verdict_b}}}});
  }
  j["warnings"] = c.warnings;
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace batchwise

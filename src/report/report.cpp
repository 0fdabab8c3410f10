// The JSON and console reporters. Both only read the records; the JSON keeps every raw sample.
// To add a field: add it to the record, write it in trial_json/to_json, document it in
// docs/report-schema.md, and update the golden files under tests/golden/.
#include "batchwise/report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "batchwise/units.h"
#include "check.h"

namespace batchwise {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

ordered_json number_or_null(double v, bool present) { return present && std::isfinite(v) ? ordered_json(v) : ordered_json(); }

template <typename T>
ordered_json optional_json(const std::optional<T>& v) {
  if constexpr (std::is_floating_point_v<T>) return number_or_null(v.value_or(0), v.has_value());
  return v ? ordered_json(*v) : ordered_json();
}

ordered_json lr_json(const LrAdvice& l) {
  ordered_json j = {{"batch", l.scaled.batch},
                    {"lr", l.lr},
                    {"rule", l.scaled.rule},
                    {"base_batch", l.scaled.base_batch},
                    {"base_lr", l.scaled.base_lr},
                    {"factor", l.scaled.factor},
                    {"rule_lr", l.scaled.lr},
                    {"capped", l.capped},
                    {"cap_lr", optional_json(l.cap_lr)},
                    {"stable_lr", l.range ? optional_json(l.range->stable_lr) : ordered_json()},
                    {"warmup_steps", l.warmup_steps},
                    {"warmup_from_lr", l.warmup_from_lr},
                    {"warmup_epochs", l.warmup_epochs},
                    {"advice", l.advice}};
  if (l.range) {
    ordered_json points = ordered_json::array();
    for (const auto& p : l.range->points)
      points.push_back({{"lr", p.lr}, {"loss", number_or_null(p.loss, true)}, {"smoothed", p.smoothed}});
    j["range_test"] = {{"batch", l.range->batch},
                       {"lr_low", l.range->lr_low},
                       {"lr_high", l.range->lr_high},
                       {"min_loss_lr", optional_json(l.range->min_loss_lr)},
                       {"diverged_lr", optional_json(l.range->diverged_lr)},
                       {"points", points}};
  }
  return j;
}

std::vector<std::string> outcome_names(const std::vector<Outcome>& outcomes) {
  std::vector<std::string> names;
  for (Outcome o : outcomes) names.push_back(to_string(o));
  return names;
}

ordered_json trial_json(const Trial& t) {
  const bool ok = t.outcome == Outcome::Ok;
  ordered_json j;
  j["batch"] = t.batch;
  j["outcome"] = to_string(t.outcome);
  j["peak_bytes"] = t.peak_bytes;
  j["peak_allocated_bytes"] = t.peak_allocated_bytes;
  j["samples_per_s"] = number_or_null(t.samples_per_s, ok);
  j["samples_per_s_min"] = number_or_null(t.samples_per_s_min, ok);
  j["samples_per_s_max"] = number_or_null(t.samples_per_s_max, ok);
  j["step_time_s_median"] = number_or_null(t.step_time_s_median, !t.step_times_s.empty());
  j["step_time_s_stddev"] = number_or_null(t.step_time_s_stddev, !t.step_times_s.empty());
  j["step_times_s"] = t.step_times_s;
  j["warmup_steps"] = t.warmup_steps;
  j["steps"] = t.steps;
  j["repetitions"] = t.repetitions;
  j["steps_run"] = t.steps_run;
  if (t.accumulation_steps > 1) j["accumulation_steps"] = t.accumulation_steps;
  j["data_wait_share"] = t.data_wait_share;
  j["input_bound"] = t.input_bound;
  if (t.utilisation) {
    const UtilisationSummary& u = *t.utilisation;
    auto stat = [](const UtilisationStat& s) { return ordered_json{{"mean", s.mean}, {"min", s.min}, {"max", s.max}}; };
    auto opt_stat = [&](const std::optional<UtilisationStat>& s) { return s ? stat(*s) : ordered_json(); };
    ordered_json timeline = ordered_json::array();
    for (const auto& s : u.timeline) {
      ordered_json x = {{"t_s", s.t_s}, {"cpu_percent", s.cpu_percent}, {"core_percent", s.core_percent},
                        {"rss_bytes", s.rss_bytes}};
      if (s.gpu_sm_percent) x["gpu_sm_percent"] = *s.gpu_sm_percent;
      if (s.gpu_memory_percent) x["gpu_memory_percent"] = *s.gpu_memory_percent;
      if (s.gpu_memory_used_bytes) x["gpu_memory_used_bytes"] = *s.gpu_memory_used_bytes;
      if (s.gpu_power_w) x["gpu_power_w"] = *s.gpu_power_w;
      if (s.gpu_sm_clock_mhz) x["gpu_sm_clock_mhz"] = *s.gpu_sm_clock_mhz;
      if (s.gpu_temperature_c) x["gpu_temperature_c"] = *s.gpu_temperature_c;
      timeline.push_back(x);
    }
    j["utilisation"] = {{"interval_s", u.interval_s},
                        {"samples", u.samples},
                        {"samples_between_steps", u.samples_between_steps},
                        {"cpu_percent", stat(u.cpu_percent)},
                        {"core_percent_mean", u.core_percent_mean},
                        {"rss_bytes_max", u.rss_bytes_max},
                        {"gpu_sm_percent", opt_stat(u.gpu_sm_percent)},
                        {"gpu_memory_percent", opt_stat(u.gpu_memory_percent)},
                        {"gpu_power_w", opt_stat(u.gpu_power_w)},
                        {"gpu_memory_used_bytes_max",
                         u.gpu_memory_used_bytes_max ? ordered_json(*u.gpu_memory_used_bytes_max) : ordered_json()},
                        {"overhead_percent", u.overhead_percent},
                        {"timeline", timeline}};
  }
  if (t.distributed) {
    const DistributedTrial& d = *t.distributed;
    j["distributed"] = {{"world_size", d.world_size},
                        {"backend", to_string(d.backend)},
                        {"global_batch", d.global_batch},
                        {"rank_step_time_s", d.rank_step_time_s},
                        {"rank_peak_bytes", d.rank_peak_bytes},
                        {"rank_outcomes", outcome_names(d.rank_outcomes)},
                        {"allreduce_share", d.allreduce_share},
                        {"single_process_samples_per_s", d.single_process_samples_per_s
                                                             ? ordered_json(*d.single_process_samples_per_s)
                                                             : ordered_json()},
                        {"scaling_efficiency",
                         d.scaling_efficiency ? ordered_json(*d.scaling_efficiency) : ordered_json()},
                        {"single_process_note", d.single_process_note}};
  }
  j["loss_first"] = number_or_null(t.loss_first, t.steps_run > 0);
  j["loss_last"] = number_or_null(t.loss_last, t.steps_run > 0);
  j["wall_s"] = t.wall_s;
  j["fragmentation_bytes"] = t.peak_bytes - t.peak_allocated_bytes;  // CUDA: reserved but not allocated
  if (t.within_target) j["within_target"] = *t.within_target;
  if (t.predicted_peak_bytes) j["predicted_peak_bytes"] = *t.predicted_peak_bytes;
  if (t.steps_run > 0 && ok)
    j["state"] = {{"parameter_bytes", t.state.parameter_bytes},
                  {"gradient_bytes", t.state.gradient_bytes},
                  {"optimizer_state_bytes", t.state.optimizer_state_bytes}};
  if (!ok || !t.message.empty()) j["message"] = t.message;
  return j;
}

ordered_json trials_json(const std::vector<Trial>& trials) {
  ordered_json a = ordered_json::array();
  for (const auto& t : trials) a.push_back(trial_json(t));
  return a;
}

std::string grouped(double v) { return format_grouped(v); }

std::string percent_of(int64_t part, int64_t whole) {
  return whole > 0 ? fmt::format("{:.1f} %", 100.0 * static_cast<double>(part) / static_cast<double>(whole)) : "-";
}

}  // namespace

std::string to_json(const Report& r) {
  ordered_json j;
  j["schema_version"] = "1";
  const Context& c = r.context;
  j["context"] = {{"batchwise_version", c.batchwise_version},
                  {"build_commit", c.build_commit},
                  {"build_type", c.build_type},
                  {"torch_version", c.torch_version},
                  {"device", {{"type", c.device_type}, {"name", c.device_name}, {"total_bytes", c.device_total_bytes}}},
                  {"host", c.host},
                  {"date", c.date},
                  {"threads", c.threads},
                  {"cores", c.cores},
                  {"blas", c.blas},
                  {"warnings", c.warnings}};
  const WorkloadInfo& w = r.workload;
  j["workload"] = {{"model", w.model},
                   {"dataset", w.dataset},
                   {"loss", w.loss},
                   {"optimizer", w.optimizer},
                   {"lr", w.lr},
                   {"precision", w.precision},
                   {"input_shape", w.input_shape},
                   {"seq_len_range", w.seq_len_range.empty() ? ordered_json() : ordered_json(w.seq_len_range)},
                   {"num_classes", w.num_classes},
                   {"dataset_size", w.dataset_size},
                   {"parameter_count", w.parameter_count},
                   {"parameter_bytes", w.parameter_bytes}};
  j["budget_bytes"] = r.budget_bytes;
  j["target"] = r.target;
  if (r.distributed)
    j["distributed"] = {{"world_size", r.distributed->world_size},
                        {"backend", to_string(r.distributed->backend)},
                        {"rank_budget_bytes", r.distributed->rank_budget_bytes},
                        {"timeout_s", r.distributed->timeout_s}};
  if (r.fit) {
    const FitResult& f = *r.fit;
    ordered_json fj;
    fj["mode"] = to_string(f.mode);
    fj["outcome"] = to_string(f.outcome);
    fj["batch"] = f.batch ? ordered_json(*f.batch) : ordered_json();
    fj["multiple_of"] = f.multiple_of;
    fj["limited_by_max"] = f.limited_by_max;
    if (!f.message.empty()) fj["message"] = f.message;
    if (f.memory_model) {
      const MemoryModel& m = *f.memory_model;
      fj["memory_model"] = {{"fixed_bytes", m.fixed_bytes},
                            {"per_sample_bytes", m.per_sample_bytes},
                            {"from_batches", {m.batch_a, m.batch_b}},
                            {"residual_bytes", m.residual_bytes}};
      auto breaks = nlohmann::json::array();
      for (const auto& b : m.breaks)
        breaks.push_back({{"batch", b.batch}, {"predicted_bytes", b.predicted_bytes}, {"measured_bytes", b.measured_bytes}});
      fj["memory_model"]["breaks"] = breaks;
    }
    if (f.breakdown) {
      const MemoryBreakdown& d = *f.breakdown;
      fj["breakdown"] = {{"batch", d.batch},
                         {"peak_bytes", d.peak_bytes},
                         {"parameter_bytes", d.parameter_bytes},
                         {"gradient_bytes", d.gradient_bytes},
                         {"optimizer_state_bytes", d.optimizer_state_bytes},
                         {"activation_bytes_per_sample", d.activation_bytes_per_sample},
                         {"activation_bytes", std::llround(d.activation_bytes_per_sample * static_cast<double>(d.batch))},
                         {"rest_bytes", d.rest_bytes}};
    }
    fj["trials"] = trials_json(f.trials);
    j["fit"] = fj;
  }
  if (r.sweep) {
    const SweepResult& s = *r.sweep;
    ordered_json sj;
    sj["points"] = trials_json(s.points);
    sj["knee_batch"] = s.knee_batch ? ordered_json(*s.knee_batch) : ordered_json();
    sj["knee_tolerance"] = s.knee_tolerance;
    sj["repetitions"] = s.repetitions;
    if (!s.not_run.empty()) {
      sj["not_run"] = s.not_run;
      sj["not_run_reason"] = s.not_run_reason;
    }
    j["sweep"] = sj;
  }
  if (r.recommendation) j["recommendation"] = {{"batch", r.recommendation->batch}, {"reason", r.recommendation->reason}};
  if (r.plan) {
    const Plan& p = *r.plan;
    j["plan"] = {{"device", {{"name", p.device.name}, {"bytes", p.device.bytes}}},
                 {"target", p.target},
                 {"batch", p.batch ? ordered_json(*p.batch) : ordered_json()},
                 {"predicted_peak_bytes", p.predicted_peak_bytes},
                 {"allowance",
                  {{"context_bytes", p.allowance.context_bytes},
                   {"workspace_bytes", p.allowance.workspace_bytes},
                   {"overhead_fraction", p.allowance.overhead_fraction}}},
                 {"assumptions", p.assumptions}};
  }
  if (r.lr) j["lr"] = lr_json(*r.lr);
  if (r.race) {
    const BatchRace& race = *r.race;
    ordered_json entries = ordered_json::array();
    for (const auto& e : race.entries) {
      ordered_json curve = ordered_json::array();
      for (const auto& p : e.curve)
        curve.push_back({{"train_s", p.train_s}, {"loss", p.loss}, {"accuracy", optional_json(p.accuracy)}});
      entries.push_back({{"batch", e.batch},
                         {"samples_per_s", e.samples_per_s},
                         {"lr", lr_json(e.lr)},
                         {"rungs", e.rungs},
                         {"steps", e.steps},
                         {"samples", e.samples},
                         {"train_s", e.train_s},
                         {"loss_at_horizon", optional_json(e.loss_at_horizon)},
                         {"time_ratio", optional_json(e.time_ratio)},
                         {"time_ratio_sd", optional_json(e.time_ratio_sd)},
                         {"message", e.message},
                         {"curve", curve}});
    }
    j["race"] = {{"loss_before", race.loss_before},
                 {"accuracy_before", optional_json(race.accuracy_before)},
                 {"horizons_s", race.horizons_s},
                 {"held_out", race.held_out},
                 {"best_batch", optional_json(race.best_batch)},
                 {"lead_batch", optional_json(race.lead_batch)},
                 {"pick_reason", race.pick_reason},
                 {"within_5_percent", race.within_5_percent},
                 {"left_out", race.left_out},
                 {"notes", race.notes},
                 {"entries", entries},
                 {"wall_s", race.wall_s}};
  }
  if (r.run_plan) {
    const RunPlan& p = *r.run_plan;
    ordered_json rows = ordered_json::array();
    for (const auto& row : p.rows)
      rows.push_back({{"label", row.label},
                      {"batch", row.batch},
                      {"lr", lr_json(row.lr)},
                      {"steps_per_epoch", row.steps_per_epoch},
                      {"optimizer_settings", row.optimizer_settings}});
    j["run_plan"] = {{"optimizer",
                      {{"name", to_string(p.optimizer.optimizer)},
                       {"momentum", p.optimizer.momentum},
                       {"beta1", p.optimizer.beta1},
                       {"beta2", p.optimizer.beta2},
                       {"eps", p.optimizer.eps},
                       {"weight_decay", p.optimizer.weight_decay}}},
                     {"dataset_size", p.dataset_size},
                     {"rows", rows},
                     {"notes", p.notes}};
  }
  if (r.accumulation) {
    const AccumulationPlan& a = *r.accumulation;
    ordered_json aj = {{"global_batch_asked", a.global_batch_asked},
                       {"global_batch", a.global_batch},
                       {"exact", a.exact},
                       {"world_size", a.world_size},
                       {"per_device_batch", a.per_device_batch},
                       {"micro_batch", a.micro_batch},
                       {"accumulation_steps", a.accumulation_steps},
                       {"reason", a.reason}};
    if (a.dataset_size > 0) {
      aj["epoch"] = {{"dataset_size", a.dataset_size},
                     {"last_batch", to_string(a.last_batch)},
                     {"steps", a.steps_per_epoch},
                     {"dropped_samples", a.dropped_samples},
                     {"padded_samples", a.padded_samples},
                     {"last_step_samples", a.last_step_samples},
                     {"note", a.last_batch_note}};
    }
    aj["warnings"] = a.warnings;
    j["accumulation_plan"] = aj;
  }
  if (r.noise) {
    const NoiseResult& n = *r.noise;
    auto optional = [](const std::optional<double>& v) { return v ? ordered_json(*v) : ordered_json(); };
    ordered_json timeline = ordered_json::array();
    for (const auto& s : n.timeline)
      timeline.push_back({{"step", s.step},
                          {"loss", s.loss},
                          {"g2_small", s.g2_small},
                          {"g2_big", s.g2_big},
                          {"g2", s.g2},
                          {"trace", s.trace},
                          {"b_simple_smoothed", optional(s.b_simple_smoothed)}});
    j["noise_scale"] = {{"batch", n.batch},
                        {"micro_batch", n.micro_batch},
                        {"steps", n.steps},
                        {"g2", n.g2},
                        {"trace", n.trace},
                        {"b_simple", optional(n.b_simple)},
                        {"b_simple_stderr", n.b_simple ? ordered_json(n.b_simple_stderr) : ordered_json()},
                        {"b_simple_band", n.b_simple ? ordered_json({n.b_simple_low, n.b_simple_high}) : ordered_json()},
                        {"drift", optional(n.drift)},
                        {"message", n.message},
                        {"wall_s", n.wall_s},
                        {"timeline", timeline}};
  }
  if (r.loader) {
    auto trial = [](const LoaderTrial& t) {
      return ordered_json{{"workers", t.workers},         {"prefetch", t.prefetch},
                          {"outcome", to_string(t.outcome)}, {"samples_per_s", t.samples_per_s},
                          {"data_wait_share", t.data_wait_share}, {"input_bound", t.input_bound},
                          {"message", t.message}};
    };
    ordered_json trials = ordered_json::array();
    for (const auto& t : r.loader->trials) trials.push_back(trial(t));
    j["loader"] = {{"batch", r.loader->batch},
                   {"before", trial(r.loader->before)},
                   {"after", r.loader->after ? trial(*r.loader->after) : ordered_json()},
                   {"advice", r.loader->advice},
                   {"pipeline_samples_per_s", r.loader->pipeline_samples_per_s},
                   {"step_consumes_samples_per_s", r.loader->step_consumes_samples_per_s},
                   {"trials", trials}};
  }
  if (!r.precisions.empty()) {
    ordered_json points = ordered_json::array();
    for (const auto& p : r.precisions)
      points.push_back({{"precision", to_string(p.precision)},
                        {"fit_batch", p.fit_batch ? ordered_json(*p.fit_batch) : ordered_json()},
                        {"fit_limited_by_max", p.fit_limited_by_max},
                        {"batch", p.batch},
                        {"samples_per_s", p.samples_per_s},
                        {"peak_bytes", p.peak_bytes},
                        {"speed_ratio", p.speed_ratio},
                        {"memory_ratio", p.memory_ratio},
                        {"verdict", p.verdict}});
    j["precision_comparison"] = points;
  }
  if (!r.step_profile.empty()) {
    ordered_json profiles = ordered_json::array();
    for (const auto& p : r.step_profile)
      profiles.push_back({{"batch", p.batch},
                          {"steps", p.steps},
                          {"data_s", p.mean.data_s},
                          {"h2d_s", p.mean.h2d_s},
                          {"forward_s", p.mean.forward_s},
                          {"backward_s", p.mean.backward_s},
                          {"optimizer_s", p.mean.optimizer_s},
                          {"total_s", p.mean.total_s},
                          {"coverage", p.coverage}});
    j["step_profile"] = profiles;
  }
  if (r.validation) {
    const ValidationResult& v = *r.validation;
    ordered_json runs = ordered_json::array();
    for (const auto& run : v.runs) {
      ordered_json curve = ordered_json::array();
      for (const auto& p : run.curve)
        curve.push_back({{"samples", p.samples},
                         {"steps", p.steps},
                         {"train_s", p.train_s},
                         {"loss", p.loss},
                         {"accuracy", p.accuracy ? ordered_json(*p.accuracy) : ordered_json()}});
      runs.push_back({{"batch", run.batch},
                      {"lr", run.lr.lr},
                      {"lr_rule", run.lr.scaled.rule},
                      {"lr_capped", run.lr.capped},
                      {"warmup_steps", run.warmup_steps},
                      {"warmup_epochs", run.warmup_epochs},
                      {"reached", run.reached},
                      {"train_s", run.train_s},
                      {"steps", run.steps},
                      {"epochs", run.epochs},
                      {"eval_s", run.eval_s},
                      {"loss", run.last.loss},
                      {"accuracy", run.last.accuracy ? ordered_json(*run.last.accuracy) : ordered_json()},
                      {"message", run.message},
                      {"curve", curve}});
    }
    j["validation"] = {{"target", v.target},
                       {"held_out", v.held_out},
                       {"fastest_batch", v.fastest_batch ? ordered_json(*v.fastest_batch) : ordered_json()},
                       {"runs", runs}};
  }
  if (r.goodput) {
    const Goodput& g = *r.goodput;
    ordered_json points = ordered_json::array();
    for (const auto& p : g.points)
      points.push_back({{"batch", p.batch},
                        {"samples_per_s", p.samples_per_s},
                        {"efficiency", p.efficiency},
                        {"goodput", p.goodput}});
    j["goodput"] = {{"b_simple", g.b_simple},
                    {"base_batch", g.base_batch},
                    {"best_batch", g.best_batch ? ordered_json(*g.best_batch) : ordered_json()},
                    {"within_5_percent", g.within_5_percent},
                    {"points", points}};
  }
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string to_table(const Report& r) {
  const Context& c = r.context;
  const WorkloadInfo& w = r.workload;
  std::string out;
  auto line = [&out](std::string s) {
    s.erase(s.find_last_not_of(' ') + 1);
    out += s + "\n";
  };
  line(fmt::format("batchwise {} ({}) | torch {} | {}: {} | {} threads | BLAS {}", c.batchwise_version,
                   c.build_commit, c.torch_version, c.device_type, c.device_name, c.threads, c.blas));
  line(fmt::format("workload: {} on {} ({} samples of {}), {} lr {:g}, {}, {} parameters ({})", w.model, w.dataset,
                   grouped(static_cast<double>(w.dataset_size)), fmt::join(w.input_shape, "x"), w.optimizer, w.lr,
                   w.precision, grouped(static_cast<double>(w.parameter_count)), format_bytes(w.parameter_bytes)));
  if (!w.seq_len_range.empty())
    line(fmt::format("sequences of {} to {} tokens: every trial runs at {}, the worst case for memory", w.seq_len_range[0],
                     w.seq_len_range[1], w.seq_len_range[1]));
  line(fmt::format("budget: {}, target {:.0f} % ({})", format_bytes(r.budget_bytes), r.target * 100,
                   format_bytes(static_cast<int64_t>(r.target * static_cast<double>(r.budget_bytes)))));
  if (r.distributed) {
    std::vector<std::string> budgets;
    for (const int64_t b : r.distributed->rank_budget_bytes) budgets.push_back(format_bytes(b));
    line(fmt::format("data-parallel: {} ranks ({}); batches are per device (global batch = batch x {}), samples/s "
                     "counts every rank; rank budgets {}",
                     r.distributed->world_size, to_string(r.distributed->backend), r.distributed->world_size,
                     fmt::join(budgets, ", ")));
  }
  for (const auto& warning : c.warnings) line("warning: " + warning);

  if (r.fit) {
    const FitResult& f = *r.fit;
    line("");
    std::string verdict = f.outcome == FitOutcome::Fits
                              ? fmt::format("batch {} fits{}{}", *f.batch, f.limited_by_max ? " (the --max searched)" : "",
                                            f.message.empty() ? "" : "; " + f.message)
                              : (f.outcome == FitOutcome::DoesNotFit ? "no batch fits: " + f.message : "error: " + f.message);
    line(fmt::format("fit ({}, {} trials): {}", to_string(f.mode), f.trials.size(), verdict));
    line(fmt::format("{:>8}  {:<8}  {:>11}  {:>11}  {:>9}  {:>6}  {}", "batch", "outcome", "peak memory",
                     "predicted", "of budget", "target", "note"));
    for (const auto& t : f.trials) {
      line(fmt::format("{:>8}  {:<8}  {:>11}  {:>11}  {:>9}  {:>6}  {}", t.batch, to_string(t.outcome),
                       format_bytes(t.peak_bytes), t.predicted_peak_bytes ? format_bytes(*t.predicted_peak_bytes) : "-",
                       percent_of(t.peak_bytes, f.budget_bytes),
                       t.within_target && *t.within_target ? "within" : "over", t.message));
    }
    if (f.memory_model) {
      const MemoryModel& m = *f.memory_model;
      line(fmt::format("memory model: peak = {} + {} x batch (through batches {} and {}; largest prediction error {})",
                       format_bytes(static_cast<int64_t>(m.fixed_bytes)),
                       format_bytes(static_cast<int64_t>(m.per_sample_bytes)), m.batch_a, m.batch_b,
                       format_bytes(m.residual_bytes)));
      for (const auto& b : m.breaks)
        line(fmt::format("the line breaks before batch {}: predicted {}, measured {} ({:+.1f} %); refitted through the "
                         "batches nearest the answer",
                         b.batch, format_bytes(b.predicted_bytes), format_bytes(b.measured_bytes),
                         100.0 * static_cast<double>(b.measured_bytes - b.predicted_bytes) /
                             static_cast<double>(b.predicted_bytes)));
    }
    if (f.breakdown) {
      const MemoryBreakdown& d = *f.breakdown;
      line(fmt::format("at batch {}: parameters {}, gradients {}, optimizer state {}, activations {} ({} per "
                       "sample), rest {}",
                       d.batch, format_bytes(d.parameter_bytes), format_bytes(d.gradient_bytes),
                       format_bytes(d.optimizer_state_bytes),
                       format_bytes(std::llround(d.activation_bytes_per_sample * static_cast<double>(d.batch))),
                       format_bytes(static_cast<int64_t>(d.activation_bytes_per_sample)), format_bytes(d.rest_bytes)) +
           (d.rest_bytes < 0 ? " (negative: not all of the gradients and optimizer state are alive at the peak, "
                               "which comes while the backward pass is still making gradients and freeing activations)"
                             : ""));
    }
  }
  if (r.sweep) {
    const SweepResult& s = *r.sweep;
    line("");
    const int warmup = s.points.empty() ? 0 : s.points.front().warmup_steps;
    const int steps = s.points.empty() ? 0 : s.points.front().steps;
    line(fmt::format("sweep ({} repetition{} of {} warm-up + {} measured steps, interleaved)", s.repetitions,
                     s.repetitions == 1 ? "" : "s", warmup, steps));
    line(fmt::format("{:>8}  {:<8}  {:>10}  {:>7}  {:>10}  {:>11}  {}", "batch", "outcome", "samples/s", "spread",
                     "step ms", "peak memory", "note"));
    for (const auto& t : s.points) {
      const bool ok = t.outcome == Outcome::Ok;
      const std::string spread =
          ok && t.step_time_s_median > 0 ? fmt::format("{:.1f} %", 100 * t.step_time_s_stddev / t.step_time_s_median) : "-";
      std::string note = t.message;
      if (s.knee_batch && *s.knee_batch == t.batch) note = "<- knee" + (note.empty() ? "" : "; " + note);
      if (ok && t.distributed) {
        const DistributedTrial& d = *t.distributed;
        std::string dp = fmt::format("all-reduce {:.0f} % of the step", 100 * d.allreduce_share);
        if (d.scaling_efficiency)
          dp += fmt::format(", scaling {:.2f} (1 process: {} samples/s)", *d.scaling_efficiency,
                            grouped(*d.single_process_samples_per_s));
        note = dp + (note.empty() ? "" : "; " + note);
      }
      line(fmt::format("{:>8}  {:<8}  {:>10}  {:>7}  {:>10}  {:>11}  {}", t.batch, to_string(t.outcome),
                       ok ? grouped(t.samples_per_s) : "-", spread,
                       ok ? fmt::format("{:.2f}", t.step_time_s_median * 1e3) : "-", format_bytes(t.peak_bytes), note));
    }
    if (!s.not_run.empty()) line(fmt::format("batches {}: {}", fmt::join(s.not_run, ", "), s.not_run_reason));
  }
  if (r.loader) {
    const LoaderSearch& l = *r.loader;
    line("");
    line(fmt::format("input pipeline at batch {} (a trial per setting; input-bound: over {:.0f} % of the step waiting "
                     "for data):",
                     l.batch, 100 * kInputBoundShare));
    line(fmt::format("{:>8}  {:>8}  {:>10}  {:>9}  {}", "workers", "prefetch", "samples/s", "data wait", "note"));
    auto row = [&](const LoaderTrial& t, const std::string& note) {
      line(fmt::format("{:>8}  {:>8}  {:>10}  {:>8.1f}%  {}", t.workers, t.prefetch,
                       t.outcome == Outcome::Ok ? grouped(t.samples_per_s) : to_string(t.outcome),
                       100 * t.data_wait_share, note));
    };
    row(l.before, l.before.input_bound ? "given; input-bound" : "given");
    for (const auto& t : l.trials) {
      const bool chosen = l.after && t.workers == l.after->workers && t.prefetch == l.after->prefetch;
      row(t, std::string(t.input_bound ? "input-bound" : "") + (chosen ? (t.input_bound ? "; " : "") + std::string("<- use") : ""));
    }
    line(fmt::format("  the pipeline alone (given setting) delivers {} samples/s; the step consumes {} samples/s{}",
                     grouped(l.pipeline_samples_per_s), grouped(l.step_consumes_samples_per_s),
                     l.pipeline_samples_per_s >= l.step_consumes_samples_per_s ? "" : ": the pipeline is the bottleneck"));
    line("  " + l.advice);
  }
  if (!r.precisions.empty()) {
    line("");
    line(fmt::format("precision comparison (throughput at batch {}):", r.precisions.front().batch));
    line(fmt::format("{:<9}  {:>9}  {:>10}  {:>11}  {:>7}  {:>7}  {}", "precision", "fit batch", "samples/s",
                     "peak memory", "speed", "memory", "verdict"));
    for (const auto& p : r.precisions)
      line(fmt::format("{:<9}  {:>9}  {:>10}  {:>11}  {:>6.2f}x  {:>6.2f}x  {}", to_string(p.precision),
                       p.fit_batch ? std::to_string(*p.fit_batch) + (p.fit_limited_by_max ? "+" : "") : "-",
                       grouped(p.samples_per_s), format_bytes(p.peak_bytes), p.speed_ratio, p.memory_ratio, p.verdict));
  }
  if (!r.step_profile.empty()) {
    line("");
    line("step profile (a separate pass, the device synchronised after each phase; mean ms per step, share of the step):");
    line(fmt::format("{:>8}  {:>13}  {:>13}  {:>13}  {:>13}  {:>13}  {:>9}", "batch", "data", "to device", "forward",
                     "backward", "optimizer", "step"));
    for (const auto& p : r.step_profile) {
      const StepPhases& m = p.mean;
      auto cell = [&](double s) {
        return fmt::format("{:.2f} {:>3.0f}%", s * 1e3, m.total_s > 0 ? 100 * s / m.total_s : 0.0);
      };
      line(fmt::format("{:>8}  {:>13}  {:>13}  {:>13}  {:>13}  {:>13}  {:>9.2f}", p.batch, cell(m.data_s), cell(m.h2d_s),
                       cell(m.forward_s), cell(m.backward_s), cell(m.optimizer_s), m.total_s * 1e3));
    }
  }
  if (r.noise) {
    const NoiseResult& n = *r.noise;
    line("");
    line(fmt::format("gradient noise scale ({} steps at batch {} in micro-batches of {}, {:.1f} s):", n.steps, n.batch,
                     n.micro_batch, n.wall_s));
    line(fmt::format("{:>6}  {:>9}  {:>12}  {:>12}  {:>12}", "step", "loss", "|G|^2", "tr(Sigma)", "B_simple"));
    const size_t every = std::max<size_t>(1, n.timeline.size() / 10);
    for (size_t i = 0; i < n.timeline.size(); ++i) {
      if (i % every != every - 1 && i + 1 != n.timeline.size()) continue;
      const NoiseStep& s = n.timeline[i];
      line(fmt::format("{:>6}  {:>9.4f}  {:>12.4g}  {:>12.4g}  {:>12}", s.step, s.loss, s.g2, s.trace,
                       s.b_simple_smoothed ? fmt::format("{:.1f}", *s.b_simple_smoothed) : "-"));
    }
    if (n.b_simple) {
      line(fmt::format("B_simple = tr(Sigma) / |G|^2 = {:.1f} (band {:.1f} to {:.1f}, 2 standard errors){}",
                       *n.b_simple, n.b_simple_low, n.b_simple_high,
                       n.drift ? fmt::format("; it drifted {:.2f}x from the first to the last quarter", *n.drift) : ""));
      line(fmt::format("critical batch ~ {:.0f}: below it a bigger batch cuts the steps to a target almost "
                       "proportionally; above it, each doubling buys less (McCandlish et al. 2018)",
                       *n.b_simple));
    } else {
      line("B_simple: not measured: " + n.message);
    }
  }
  if (r.goodput && !r.goodput->points.empty()) {
    const Goodput& g = *r.goodput;
    line("");
    line(fmt::format("goodput at B_simple {:.0f} (Pollux: efficiency = (B_simple + {}) / (B_simple + batch)):", g.b_simple,
                     g.base_batch));
    line(fmt::format("{:>8}  {:>10}  {:>10}  {:>10}  {}", "batch", "samples/s", "efficiency", "goodput", "note"));
    for (const auto& p : g.points)
      line(fmt::format("{:>8}  {:>10}  {:>9.1f}%  {:>10}  {}", p.batch, grouped(p.samples_per_s), p.efficiency * 100,
                       grouped(p.goodput), g.best_batch && *g.best_batch == p.batch ? "<- best" : ""));
    if (g.within_5_percent.size() > 1)
      line(fmt::format("within 5 % of the best goodput: batches {}", fmt::join(g.within_5_percent, ", ")));
  }
  if (r.race) {
    const BatchRace& race = *r.race;
    line("");
    std::vector<std::string> horizons;
    for (double h : race.horizons_s) horizons.push_back(fmt::format("{:.1f}", h));
    line(fmt::format("batch race (successive halving on held-out loss, {}): every batch trains from your initial "
                     "weights at its own learning rate; rungs end at {} s of training",
                     race.held_out, fmt::join(horizons, ", ")));
    line(fmt::format("{:>8}  {:>10}  {:>9}  {:>6}  {:>6}  {:>10}  {:>9}  {:>8}  {}", "batch", "samples/s", "lr", "rungs",
                     "epochs", "train s", "loss", "to best", "note"));
    const int64_t epoch = r.workload.dataset_size > 0 ? r.workload.dataset_size : 1;
    for (const auto& e : race.entries) {
      std::string note = e.message;
      if (note.empty() && e.lr.capped) note = fmt::format("lr capped (rule {:.4g})", e.lr.scaled.lr);
      if (race.best_batch && *race.best_batch == e.batch) note = "<- best";
      else if (race.lead_batch && *race.lead_batch == e.batch && race.best_batch) note = "lowest loss; tied with the best";
      line(fmt::format("{:>8}  {:>10}  {:>9.4g}  {:>6}  {:>6.2f}  {:>10.2f}  {:>9}  {:>8}  {}", e.batch,
                       grouped(e.samples_per_s), e.lr.lr, e.rungs,
                       static_cast<double>(e.samples) / static_cast<double>(epoch), e.train_s,
                       e.loss_at_horizon ? fmt::format("{:.4f}", *e.loss_at_horizon) : "-",
                       e.time_ratio ? fmt::format("{:.2f}x", *e.time_ratio) : "-", note));
    }
    for (const auto& note : race.notes) line("  " + note);
    if (!race.pick_reason.empty()) line("  " + race.pick_reason);
    if (race.within_5_percent.size() > 1)
      line(fmt::format("within 5 % of the best's time at their last rung, or closer than the race resolves: batches {}",
                       fmt::join(race.within_5_percent, ", ")));
  }
  if (r.validation) {
    const ValidationResult& v = *r.validation;
    line("");
    line(fmt::format("validation: time to {} on the {}", v.target, v.held_out));
    line(fmt::format("{:>8}  {:>9}  {:>8}  {:>10}  {:>7}  {:>7}  {:>9}  {:>7}  {}", "batch", "lr", "reached",
                     "train s", "steps", "epochs", "accuracy", "loss", "note"));
    for (const auto& run : v.runs)
      line(fmt::format("{:>8}  {:>9.4g}  {:>8}  {:>10.1f}  {:>7}  {:>7.2f}  {:>9}  {:>7.4f}  {}", run.batch, run.lr.lr,
                       run.reached ? "yes" : "no", run.train_s, run.steps, run.epochs,
                       run.last.accuracy ? fmt::format("{:.4f}", *run.last.accuracy) : "-", run.last.loss,
                       v.fastest_batch && *v.fastest_batch == run.batch ? "<- soonest" : run.message));
  }
  if (r.accumulation) {
    const AccumulationPlan& a = *r.accumulation;
    line("");
    line(fmt::format("plan: global batch {} = micro-batch {} x {} accumulation step{} x {} device{}{}", a.global_batch,
                     a.micro_batch, a.accumulation_steps, a.accumulation_steps == 1 ? "" : "s", a.world_size,
                     a.world_size == 1 ? "" : "s", a.exact ? " (exact)" : fmt::format(" (asked {})", a.global_batch_asked)));
    line("  " + a.reason);
    if (!a.last_batch_note.empty())
      line(fmt::format("  epoch: {} optimizer steps; {}", a.steps_per_epoch, a.last_batch_note));
    for (const auto& warning : a.warnings) line("  warning: " + warning);
  }
  if (r.recommendation) {
    line("");
    line(fmt::format("recommendation: batch {}: {}", r.recommendation->batch, r.recommendation->reason));
  }
  if (r.lr) line(fmt::format("learning rate at batch {}: {:.4g} ({})", r.lr->scaled.batch, r.lr->lr, r.lr->advice));
  if (r.run_plan && !r.run_plan->rows.empty()) {
    const RunPlan& p = *r.run_plan;
    line("");
    line(fmt::format("run plan: the same run at each batch ({}, {} samples per epoch)", to_string(p.optimizer.optimizer),
                     grouped(static_cast<double>(p.dataset_size))));
    line(fmt::format("{:>8}  {:<12}  {:>9}  {:<22}  {:<24}  {:>11}  {}", "batch", "for", "lr", "rate from", "warm-up",
                     "steps/epoch", "optimizer"));
    for (const auto& row : p.rows) {
      const LrAdvice& l = row.lr;
      const std::string from =
          l.scaled.factor == 1 ? "the base --lr"
          : l.capped           ? fmt::format("capped (rule {:.4g})", l.scaled.lr)
                               : fmt::format("{} x{:.3g}", l.scaled.rule, l.scaled.factor);
      const std::string warmup =
          l.warmup_steps > 0    ? fmt::format("{} steps from {:.4g}", l.warmup_steps, l.warmup_from_lr)
          : l.warmup_epochs > 0 ? fmt::format("{:g} epochs from {:.4g}", l.warmup_epochs, l.warmup_from_lr)
                                : "none";
      line(fmt::format("{:>8}  {:<12}  {:>9.4g}  {:<22}  {:<24}  {:>11}  {}", row.batch, row.label, l.lr, from, warmup,
                       grouped(static_cast<double>(row.steps_per_epoch)), row.optimizer_settings));
    }
    for (const auto& note : p.notes) line("  " + note);
  }
  if (r.plan) {
    const Plan& p = *r.plan;
    line("");
    line(p.batch ? fmt::format("plan for {} ({}): batch {} predicted to peak at {} ({:.0f} % target)", p.device.name,
                               format_bytes(p.device.bytes), *p.batch, format_bytes(p.predicted_peak_bytes),
                               p.target * 100)
                 : fmt::format("plan for {} ({}): not even one sample is predicted to fit", p.device.name,
                               format_bytes(p.device.bytes)));
    for (const auto& a : p.assumptions) line("  assumes " + a);
  }
  return out;
}

}  // namespace batchwise

// The console reporter: it only reads the records (the JSON report is written and read in schema.cpp,
// from the field lists beside the records). One function per section; to add a section, write its
// function and call it from to_table where the table shows it.
#include "batchwise/report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "batchwise/noise.h"
#include "batchwise/units.h"
#include "check.h"
#include "cpu_quota.h"
#include "report/console.h"

namespace batchwise {
namespace {

// Bytes from a figure a report may hold any value of (a report read back is the user's file):
// clamped to what an int64 holds, NaN as 0, rather than a conversion that overflows.
int64_t bytes_of(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

std::string grouped(double v) { return format_grouped(v); }

// As format_percent writes it, as the HTML does: a share under 0.05 % is "< 0.1 %", not "0.0 %" of the budget
std::string percent_of(int64_t part, int64_t whole) {
  return whole > 0 ? format_percent(100.0 * static_cast<double>(part) / static_cast<double>(whole)) : "-";
}

// A trial's note: its message, after a flag when fp16 skipped some of its steps (their times and
// peak understate a trained step's).
std::string trial_note(const Trial& t) {
  if (t.skipped_steps == 0) return t.message;
  const std::string flag = fmt::format("{} of {} steps skipped (fp16 overflow)", t.skipped_steps, t.steps_run);
  return t.message.empty() ? flag : flag + "; " + t.message;
}

}  // namespace

namespace detail {

void header_table(Lines& line, const Report& r) {
  const Context& c = r.context;
  const WorkloadInfo& w = r.workload;
  line(fmt::format("batchwise {} ({}) | torch {} | {}: {} | {} thread{}{} | BLAS {}", c.batchwise_version,
                   c.build_commit, c.torch_version, c.device_type, c.device_name, c.threads, c.threads == 1 ? "" : "s",
                   c.cpu_quota > 0 ? " (a CPU quota of " + detail::quota_text(c.cpu_quota) + ")" : "", c.blas));
  if (w.is_command())
    line(
        fmt::format("workload: the command {} (its own model, data, optimizer and rate: batchwise sets the batch and "
                    "reads its steps, time and memory)",
                    w.model));
  else
    line(fmt::format("workload: {} on {} ({} samples of {}), {} lr {:g}, {}, {} parameters ({}){}", w.model, w.dataset,
                     grouped(static_cast<double>(w.dataset_size)), fmt::join(w.input_shape, "x"), w.optimizer, w.lr,
                     detail::precision_text(w), grouped(static_cast<double>(w.parameter_count)),
                     format_bytes(w.parameter_bytes),
                     detail::trainable_text(w).empty() ? "" : ", " + detail::trainable_text(w)));
  if (w.seq_len_range.size() >= 2)
    line(fmt::format("sequences of {} to {} tokens: every trial runs at {}, the worst case for memory",
                     w.seq_len_range[0], w.seq_len_range[1], w.seq_len_range[1]));
  if (r.loader && !r.fit && !r.sweep)  // its settings train within the whole budget: no target (it refuses --target)
    line(fmt::format("budget: {}", format_bytes(r.budget_bytes)));
  else
    line(fmt::format("budget: {}, target {:.0f} % ({})", format_bytes(r.budget_bytes), r.target * 100,
                     format_bytes(bytes_of(r.target * static_cast<double>(r.budget_bytes)))));
  if (r.distributed) {
    std::vector<std::string> budgets;
    for (const int64_t b : r.distributed->rank_budget_bytes) budgets.push_back(format_bytes(b));
    line(
        fmt::format("data-parallel: {} ranks ({}); batches are per device (global batch = batch x {}), samples/s "
                    "counts every rank; rank budgets {}",
                    r.distributed->world_size, to_string(r.distributed->backend), r.distributed->world_size,
                    fmt::join(budgets, ", ")));
  }
  for (const auto& warning : c.warnings) line("warning: " + warning);
}

}  // namespace detail

namespace {

using detail::Lines;

// The largest miss of a peak predicted before its trial ran (the probing lines' too): not the error
// of the line printed, which goes through its two batches exactly.
std::string residual_text(const MemoryModel& m) {
  return m.residual_bytes > 0 ? fmt::format("; the peaks predicted before their trials ran missed by up to {}",
                                            format_bytes(m.residual_bytes))
                              : "";
}

void fit_table(Lines& line, const FitResult& f) {
  line("");
  std::string verdict =
      f.outcome == FitOutcome::Fits
          ? fmt::format("batch {} fits{}{}", *f.batch, f.limited_by_max ? " (the --max searched)" : "",
                        f.message.empty() ? "" : "; " + f.message)
          : (f.outcome == FitOutcome::DoesNotFit ? "no batch fits: " + f.message : "error: " + f.message);
  line(fmt::format("fit ({}, {} trial{}): {}", to_string(f.mode), f.trials.size(), f.trials.size() == 1 ? "" : "s",
                   verdict));
  line(fmt::format("{:>8}  {:<8}  {:>11}  {:>11}  {:>9}  {:>6}  {}", "batch", "outcome", "peak memory", "predicted",
                   "of budget", "target", "note"));
  for (const auto& t : f.trials) {
    line(fmt::format("{:>8}  {:<8}  {:>11}  {:>11}  {:>9}  {:>6}  {}", t.batch, to_string(t.outcome),
                     format_bytes(t.peak_bytes), t.predicted_peak_bytes ? format_bytes(*t.predicted_peak_bytes) : "-",
                     percent_of(t.peak_bytes, f.budget_bytes), target_text(t), trial_note(t)));
  }
  if (f.above)
    line(fmt::format("{:>8}  {:<8}  {:>11}  {:>11}  {:>9}  {:>6}  {}", f.above->batch, "untried", "-",
                     format_bytes(f.above->predicted_bytes), percent_of(f.above->predicted_bytes, f.budget_bytes),
                     "over", "not run: the line that predicted the answer's peak puts it over the target"));
  if (f.memory_model) {
    const MemoryModel& m = *f.memory_model;
    if (m.grows())
      line(fmt::format("memory model: peak = {} + {} x batch (through batches {} and {}{})",
                       format_bytes(bytes_of(m.fixed_bytes)), format_bytes(bytes_of(m.per_sample_bytes)), m.batch_a,
                       m.batch_b, residual_text(m)));
    else
      line(
          fmt::format("memory model: none: the peak did not grow from batch {} to batch {} ({} and {}), so no line "
                      "predicts a larger batch's peak; the answer rests on the trials alone",
                      m.batch_a, m.batch_b, format_bytes(m.predict(m.batch_a)), format_bytes(m.predict(m.batch_b))));
    for (const auto& b : m.breaks)
      line(fmt::format(
          "the line breaks before batch {}: predicted {}, measured {} ({:+.1f} %); refitted through the "
          "batches nearest the answer",
          b.batch, format_bytes(b.predicted_bytes), format_bytes(b.measured_bytes),
          100.0 * static_cast<double>(b.measured_bytes - b.predicted_bytes) / static_cast<double>(b.predicted_bytes)));
  }
  if (f.breakdown) {
    const MemoryBreakdown& d = *f.breakdown;
    line(fmt::format("at batch {}: parameters and buffers {}, gradients {}, optimizer state {}, activations {} ({} per "
                     "sample), rest {}",
                     d.batch, format_bytes(d.parameter_bytes), format_bytes(d.gradient_bytes),
                     format_bytes(d.optimizer_state_bytes), format_bytes(d.activation_bytes()),
                     format_bytes(bytes_of(d.activation_bytes_per_sample)), format_bytes(d.rest_bytes)) +
         (d.rest_bytes < 0 ? " (negative: not all of the gradients and optimizer state are alive at the peak, "
                             "which comes while the backward pass is still making gradients and freeing activations)"
                           : ""));
  }
}

void sweep_table(Lines& line, const SweepResult& s) {
  line("");
  const int warmup = s.points.empty() ? 0 : s.points.front().warmup_steps;
  const int steps = s.points.empty() ? 0 : s.points.front().steps;
  // each step accumulated over micro-batches (--accumulation-steps): said, as the JSON's points say it
  const int64_t micro = s.points.empty() ? 1 : s.points.front().accumulation_steps;
  line(
      fmt::format("sweep ({} repetition{} of {} warm-up + {} measured step{}{}{}, interleaved; spread: the step "
                  "times' interquartile range over their median)",
                  s.repetitions, s.repetitions == 1 ? "" : "s", warmup, steps, steps == 1 ? "" : "s",
                  s.min_time_s > 0 ? fmt::format(" or more, at least {:g} s", s.min_time_s) : "",
                  micro > 1 ? fmt::format(", each step {} accumulated micro-batches", micro) : ""));
  line(fmt::format("{:>8}  {:<8}  {:>10}  {:>7}  {:>10}  {:>11}  {}", "batch", "outcome", "samples/s", "spread",
                   "step ms", "peak memory", "note"));
  for (const auto& t : s.points) {
    const bool ok = t.outcome == Outcome::Ok;
    // A spread needs two timed steps; the wall-time fallback's steps are one figure split evenly.
    const bool spread_known = ok && t.step_time_s_median > 0 && t.step_times_s.size() > 1 && !t.wall_timing;
    const std::string spread = spread_known ? fmt::format("{:.1f} %", 100 * step_spread(t)) : "-";
    std::string note = trial_note(t);
    if (std::count(s.remeasured.begin(), s.remeasured.end(), t.batch) > 0)
      note = fmt::format("measured again ({} repetitions)", t.repetitions) + (note.empty() ? "" : "; " + note);
    if (std::count(s.retimed.begin(), s.retimed.end(), t.batch) > 0)
      note = fmt::format("timed again before the race ({} repetitions)", t.repetitions) +
             (note.empty() ? "" : "; " + note);
    if (std::count(s.cpu_retried.begin(), s.cpu_retried.end(), t.batch) > 0)
      note =
          std::string("a trial that shared the CPU ran again at the sweep's end") + (note.empty() ? "" : "; " + note);
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
                     ok ? fmt::format("{:.2f}", t.step_time_s_median * 1e3) : "-",
                     t.peak_bytes > 0 ? format_bytes(t.peak_bytes) : "-", note));
  }
  if (!s.not_run.empty()) line(fmt::format("batches {}: {}", fmt::join(s.not_run, ", "), s.not_run_reason));
}

}  // namespace

namespace detail {

std::string loader_note(const LoaderSearch& l, const LoaderTrial& t, bool given, const std::string& use) {
  std::vector<std::string> parts;
  if (given) parts.emplace_back("given");
  if (t.input_bound) parts.emplace_back("input-bound");
  if (!given && l.after && t.workers == l.after->workers && t.prefetch == l.after->prefetch) parts.push_back(use);
  if (t.outcome != Outcome::Ok && !t.message.empty()) parts.push_back(t.message);
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace detail

namespace {

void loader_table(Lines& line, const LoaderSearch& l) {
  line("");
  line(
      fmt::format("input pipeline at batch {} (a trial per setting; input-bound: over {:.0f} % of the step waiting "
                  "for data):",
                  l.batch, 100 * kInputBoundShare));
  line(fmt::format("{:>8}  {:>8}  {:>10}  {:>9}  {}", "workers", "prefetch", "samples/s", "data wait", "note"));
  auto row = [&](const LoaderTrial& t, bool given) {
    const bool ran = t.outcome == Outcome::Ok;  // one that did not measured no wait: "-", and its message
    line(fmt::format(
        "{:>8}  {:>8}  {:>10}  {:>9}  {}", t.workers, t.prefetch, ran ? grouped(t.samples_per_s) : to_string(t.outcome),
        ran ? fmt::format("{:.1f}%", 100 * t.data_wait_share) : "-", detail::loader_note(l, t, given, "<- use")));
  };
  row(l.before, true);
  for (const auto& t : l.trials) row(t, false);
  if (l.step_consumes_samples_per_s > 0)  // nothing to compare where the given setting did not train
    line(fmt::format(
        "  the pipeline alone (given setting) delivers {} samples/s; the step consumes {} samples/s{}",
        grouped(l.pipeline_samples_per_s), grouped(l.step_consumes_samples_per_s),
        l.pipeline_samples_per_s >= l.step_consumes_samples_per_s ? "" : ": the pipeline is the bottleneck"));
  line("  " + l.advice);
}

void precision_table(Lines& line, const std::vector<PrecisionPoint>& precisions) {
  line("");
  line(fmt::format("precision comparison (throughput at batch {}):", precisions.front().batch));
  line(fmt::format("{:<9}  {:>9}  {:>10}  {:>11}  {:>7}  {:>7}  {}", "precision", "fit batch", "samples/s",
                   "peak memory", "speed", "memory", "verdict"));
  for (const auto& p : precisions)
    line(fmt::format("{:<9}  {:>9}  {:>10}  {:>11}  {:>6.2f}x  {:>6.2f}x  {}", to_string(p.precision),
                     p.fit_batch ? std::to_string(*p.fit_batch) + (p.fit_limited_by_max ? "+" : "") : "-",
                     grouped(p.samples_per_s), format_bytes(p.peak_bytes), p.speed_ratio, p.memory_ratio, p.verdict));
}

void profile_table(Lines& line, const std::vector<StepProfile>& profiles) {
  line("");
  line(
      "step profile (a separate pass, each phase timed apart: on a CPU on the host, on a GPU by CUDA events or "
      "synchronised after each; mean ms per step, share of the step):");
  line(fmt::format("{:>8}  {:>13}  {:>13}  {:>13}  {:>13}  {:>13}  {:>9}", "batch", "data", "to device", "forward",
                   "backward", "optimizer", "step"));
  for (const auto& p : profiles) {
    const StepPhases& m = p.mean;
    auto cell = [&](double s) {
      return fmt::format("{:.2f} {:>3.0f}%", s * 1e3, m.total_s > 0 ? 100 * s / m.total_s : 0.0);
    };
    line(fmt::format("{:>8}  {:>13}  {:>13}  {:>13}  {:>13}  {:>13}  {:>9.2f}", p.batch, cell(m.data_s), cell(m.h2d_s),
                     cell(m.forward_s), cell(m.backward_s), cell(m.optimizer_s), m.total_s * 1e3));
  }
}

void noise_table(Lines& line, const NoiseResult& n) {
  line("");
  line(fmt::format("gradient noise scale ({} steps at batch {} in micro-batches of {}, {:.1f} s):", n.steps, n.batch,
                   n.micro_batch, n.wall_s));
  // |G|^2 and tr(Sigma) are each step's own (noisy, even negative); B is the ratio of their moving averages
  line(fmt::format("{:>6}  {:>9}  {:>12}  {:>12}  {:>12}", "step", "loss", "|G|^2", "tr(Sigma)", "B, averaged"));
  const size_t every = std::max<size_t>(1, n.timeline.size() / 10);
  for (size_t i = 0; i < n.timeline.size(); ++i) {
    if (i % every != every - 1 && i + 1 != n.timeline.size()) continue;
    const NoiseStep& s = n.timeline[i];
    // A diverging loss in 4 significant digits (1.088e+29), not 30 digits past the column
    line(fmt::format("{:>6}  {:>9}  {:>12.4g}  {:>12.4g}  {:>12}", s.step, format_loss(s.loss), s.g2, s.trace,
                     s.b_simple_smoothed ? fmt::format("{:.1f}", *s.b_simple_smoothed) : "-"));
  }
  line(
      fmt::format("(|G|^2 and tr(Sigma): each step's estimate; B: their moving averages' ratio, factor {:g}, "
                  "bias-corrected)",
                  n.smoothing));
  if (n.b_simple) {
    line(fmt::format("B_simple = tr(Sigma) / |G|^2 = {:.1f} (band {:.1f} to {:.1f}, 2 standard errors){}", *n.b_simple,
                     n.b_simple_low, n.b_simple_high,
                     n.drift ? fmt::format("; it drifted {:.2f}x from the first to the last quarter", *n.drift) : ""));
    if (const std::string unbounded = unbounded_noise_text(n); !unbounded.empty())
      line("critical batch: not known: " + unbounded);
    else
      line(
          fmt::format("critical batch ~ {:.0f}: below it a bigger batch cuts the steps to a target almost "
                      "proportionally; above it, each doubling buys less (McCandlish et al. 2018)",
                      *n.b_simple));
  } else {
    line("B_simple: not measured: " + n.message);
  }
}

void goodput_table(Lines& line, const Goodput& g) {
  line("");
  line(fmt::format("goodput at B_simple {:.0f} (Pollux: efficiency = (B_simple + {}) / (B_simple + batch)):",
                   g.b_simple, g.base_batch));
  line(fmt::format("{:>8}  {:>10}  {:>10}  {:>10}  {}", "batch", "samples/s", "efficiency", "goodput", "note"));
  for (const auto& p : g.points)
    line(fmt::format("{:>8}  {:>10}  {:>9.1f}%  {:>10}  {}", p.batch, grouped(p.samples_per_s), p.efficiency * 100,
                     grouped(p.goodput), g.best_batch && *g.best_batch == p.batch ? "<- best" : ""));
  if (g.within_5_percent.size() > 1)
    line(fmt::format("within 5 % of the best goodput: batches {}", fmt::join(g.within_5_percent, ", ")));
}

// The run race: the reference's compressed runs, then per batch how far behind its own two
// compressed runs ended, the factor the gap shrank by, and how far behind its full run is predicted.
void run_race_table(Lines& line, const RunRace& race) {
  line("");
  const bool accuracy = race.measure == "accuracy";
  const auto amount = [&](const std::optional<double>& g) {
    return g ? (accuracy ? fmt::format("{:.2f} pt", 100 * *g) : fmt::format("{:.1f} %", 100 * *g)) : "-";
  };
  line(
      fmt::format("run race (your {:g}-epoch {} run; batch {} trained it compressed to {:.3g} epochs, the others to "
                  "the last two{}; final {} on the {})",
                  race.epochs, race.lr_schedule, race.reference_batch, fmt::join(race.lengths_epochs, ", "),
                  first_round_lengths_note(race), race.measure, race.held_out));
  const auto at = [](double epochs) { return fmt::format("@{:.2g} ep", epochs); };
  const bool lengths = race.lengths_epochs.size() == 3;
  line(fmt::format("{:>8}  {:>10}  {:>9}  {:>10}  {:>10}  {:>10}  {:>9}  {:>9}  {}", "batch", "samples/s", "lr",
                   "full run s", lengths ? at(race.lengths_epochs[1]) : "", lengths ? at(race.lengths_epochs[2]) : "",
                   "x/doubling", "at end", "note"));
  // A race that ended before it judged (its reference gave no curve) leaves its batches not judged, not worse
  const bool judged = std::any_of(race.entries.begin(), race.entries.end(),
                                  [](const RunRaceEntry& e) { return e.predicted_gap.has_value(); });
  for (const auto& e : race.entries) {
    std::string note = e.message;
    if (note.empty())
      note = race.best_batch && *race.best_batch == e.batch ? "<- soonest without a worse model"
             : e.good                                       ? "no worse a model"
             : judged                                       ? "worse"
                                                            : "not judged";
    if (e.cap_factor < 1) note += fmt::format(" (rate capped: {:.0f} % of the rule's)", 100 * e.cap_factor);
    if (e.gap_as) note += fmt::format(" ({})", gap_as_note(e));
    if (e.earlier_round) note += fmt::format(" ({})", earlier_round_note(e));
    line(fmt::format("{:>8}  {:>10}  {:>9.4g}  {:>10}  {:>10}  {:>10}  {:>9}  {:>9}  {}", e.batch,
                     grouped(e.samples_per_s), e.lr.lr, format_seconds_figure(e.full_run_s),
                     amount(compressed_gap(race, e.shorter_run, 1)), amount(compressed_gap(race, e.run, 2)),
                     gap_trend_text(e.gap_trend), amount(e.predicted_gap), note));
  }
  if (judged) line(fmt::format("  within {} is within the held-out noise", amount(race.tolerance)));
  if (const std::string floored = floored_trend_note(race); !floored.empty()) line("  " + floored);
  for (const auto& note : race.notes) line("  " + note);
  if (!race.pick_reason.empty()) line("  " + race.pick_reason);
  if (!race.schedule_reason.empty()) line("  " + race.schedule_reason);
}

void race_table(Lines& line, const BatchRace& race, int64_t dataset_size) {
  line("");
  std::vector<std::string> horizons;
  for (double h : race.horizons_s) horizons.push_back(fmt::format("{:.1f}", h));
  line(
      fmt::format("batch race (successive halving on {} loss, {}): every batch trains from your initial "
                  "weights at its own learning rate; {}",
                  race.on_training_data ? "training-sample" : "held-out", race.held_out,
                  horizons.empty() ? "no rung ended (its notes say why)"
                                   : fmt::format("rungs end at {} s of training", fmt::join(horizons, ", "))));
  line(fmt::format("{:>8}  {:>10}  {:>9}  {:>6}  {:>6}  {:>10}  {:>9}  {:>8}  {}", "batch", "samples/s", "lr", "rungs",
                   "epochs", "train s", "loss", "to best", "note"));
  const int64_t epoch = dataset_size > 0 ? dataset_size : 1;
  for (const auto& e : race.entries) {
    std::string note = e.message;
    if (note.empty() && e.lr.capped) note = fmt::format("lr capped (rule {:.4g})", e.lr.scaled.lr);
    if (race.best_batch && *race.best_batch == e.batch)
      note = "<- best";
    else if (race.lead_batch && *race.lead_batch == e.batch && race.best_batch)
      note = "lowest loss; tied with the best";
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

// Full runs: each batch's final quality after the same epochs and schedule, and its time.
void full_runs_table(Lines& line, const ValidationResult& v) {
  line("");
  line(fmt::format("validation: {} on the {}", v.target, v.held_out));
  line(fmt::format("{:>8}  {:>9}  {:>8}  {:>10}  {:>7}  {:>9}  {:>10}  {}", "batch", "lr", "warm-up", "train s",
                   "steps", "accuracy", "final loss", "note"));
  // An interrupted validation judged the runs that ended among themselves: no pick, no arrow.
  const char* fastest = v.interrupted ? "fastest of the runs that ended" : "<- fastest within noise of the best";
  for (const auto& run : v.runs) {
    std::string note = run.message;
    const bool fixed = run.schedule.empty();
    if (run.final_loss && run.message.empty())
      note = fixed && v.fastest_batch && *v.fastest_batch == run.batch ? fastest
             : fixed && v.best_batch && *v.best_batch == run.batch     ? "best"
             : run.good                                                ? "within noise of the best"
                                                                       : "";
    if (!fixed)
      note = fmt::format(
          "schedule {}{}{}", run.schedule, note.empty() ? "" : ": " + note,
          v.schedule_saving ? fmt::format("; {:.0f} % {} time than the fastest good batch",
                                          100 * std::abs(*v.schedule_saving), *v.schedule_saving >= 0 ? "less" : "more")
                            : "");
    line(fmt::format("{:>8}  {:>9.4g}  {:>8}  {:>10}  {:>7}  {:>9}  {:>10}  {}", run.batch, run.lr.lr, run.warmup_steps,
                     format_seconds_figure(run.train_s), run.steps,
                     run.final_accuracy ? fmt::format("{:.4f}", *run.final_accuracy) : "-",
                     run.final_loss ? fmt::format("{:.4f}", *run.final_loss) : "-", note));
  }
  if (v.interrupted) line("  " + stopped_line(v));  // what it did not train: the table may have no row
}

void validation_table(Lines& line, const ValidationResult& v) {
  if (v.epochs > 0) return full_runs_table(line, v);
  line("");
  line(fmt::format("validation: time to {} on the {}", v.target, v.held_out));
  line(fmt::format("{:>8}  {:>9}  {:>8}  {:>10}  {:>7}  {:>7}  {:>9}  {:>7}  {}", "batch", "lr", "reached", "train s",
                   "steps", "epochs", "accuracy", "loss", "note"));
  for (const auto& run : v.runs)
    line(fmt::format("{:>8}  {:>9.4g}  {:>8}  {:>10}  {:>7}  {:>7.2f}  {:>9}  {:>7}  {}", run.batch, run.lr.lr,
                     run.reached ? "yes" : "no", format_seconds_figure(run.train_s), run.steps, run.epochs,
                     run.last.accuracy ? fmt::format("{:.4f}", *run.last.accuracy) : "-",
                     run.evaluated() ? format_loss(run.last.loss) : "-",
                     v.fastest_batch && *v.fastest_batch == run.batch
                         ? (v.interrupted ? "soonest of the runs that ended" : "<- soonest")
                         : run.message));
  if (v.interrupted) line("  " + stopped_line(v));  // what it did not train: the table may have no row
}

void accumulation_table(Lines& line, const AccumulationPlan& a) {
  line("");
  line(fmt::format("plan: global batch {} = micro-batch {} x {} accumulation step{} x {} device{}{}", a.global_batch,
                   a.micro_batch, a.accumulation_steps, a.accumulation_steps == 1 ? "" : "s", a.world_size,
                   a.world_size == 1 ? "" : "s",
                   a.exact ? " (exact)" : fmt::format(" (asked {})", a.global_batch_asked)));
  line("  " + a.reason);
  if (!a.last_batch_note.empty())
    line(fmt::format("  epoch: {} optimizer step{}; {}", a.steps_per_epoch, a.steps_per_epoch == 1 ? "" : "s",
                     a.last_batch_note));
  for (const auto& warning : a.warnings) line("  warning: " + warning);
}

void run_plan_table(Lines& line, const RunPlan& p) {
  line("");
  line(fmt::format("run plan: the same run at each batch ({}, {} samples per epoch)", to_string(p.optimizer.optimizer),
                   grouped(static_cast<double>(p.dataset_size))));
  line(fmt::format("{:>8}  {:<12}  {:>9}  {:<22}  {:<32}  {:>11}  {}", "batch", "for", "lr", "rate from", "warm-up",
                   "steps/epoch", "optimizer"));
  for (const auto& row : p.rows) {
    const LrAdvice& l = row.lr;
    const std::string from = l.scaled.factor == 1 ? "the base --lr"
                             : l.capped           ? fmt::format("capped (rule {:.4g})", l.scaled.lr)
                                                  : fmt::format("{} x{:.3g}", l.scaled.rule, l.scaled.factor);
    const std::string warmup = warmup_text(l, row.steps_per_epoch);
    line(fmt::format("{:>8}  {:<12}  {:>9.4g}  {:<22}  {:<32}  {:>11}  {}", row.batch, row.label, l.lr, from, warmup,
                     grouped(static_cast<double>(row.steps_per_epoch)), row.optimizer_settings));
  }
  for (const auto& note : p.notes) line("  " + note);
}

void plan_table(Lines& line, const Plan& p) {
  line("");
  line(p.batch
           ? fmt::format("plan for {} ({}): batch {} predicted to peak at {} ({:.0f} % target)", p.device.name,
                         format_bytes(p.device.bytes), *p.batch, format_bytes(p.predicted_peak_bytes), p.target * 100)
           : fmt::format("plan for {} ({}): not even one sample is predicted to fit", p.device.name,
                         format_bytes(p.device.bytes)));
  for (const auto& a : p.assumptions) line("  assumes " + a);
}

// The reason's clauses (it joins them with "; "), one per line: a reason runs to several hundred
// characters, and a line each reads. A "; " inside parentheses stays within its clause.
std::vector<std::string> clauses(const std::string& reason) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (size_t i = 0; i < reason.size(); ++i) {
    const char c = reason[i];
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (c == ';' && depth <= 0 && i + 1 < reason.size() && reason[i + 1] == ' ') {
      out.emplace_back();
      ++i;
      continue;
    }
    out.back() += c;
  }
  return out;
}

}  // namespace

namespace detail {

std::string timing_line(const TuneTiming& t) {
  std::vector<std::string> phases;
  for (const auto& p : t.phases)
    // 0.4, not "~0"; none where the phase was expected to take no time to speak of (a race of no candidates had
    // read "race 0.0 s (~1e-09)")
    phases.push_back(p.expected_s >= 0.01
                         ? fmt::format("{} {:.1f} s (~{})", p.phase, p.wall_s, format_seconds_figure(p.expected_s))
                         : fmt::format("{} {:.1f} s", p.phase, p.wall_s));
  std::string expected;
  if (t.expected_s > 0) {
    expected = fmt::format(" ({:.0f} s expected, at most {:.0f} s: {:.2f}x and {:.2f}x", t.expected_s, t.at_most_s,
                           t.total_s / t.expected_s, t.total_s / t.at_most_s);
    if (t.restated_s > 0)
      expected +=
          fmt::format("; {:.0f} s as stated again before the race: {:.2f}x", t.restated_s, t.total_s / t.restated_s);
    if (const std::string past = past_the_most(t); !past.empty()) expected += "; " + past;
    expected += ")";
  }
  return fmt::format("time: {:.0f} s in all{}: {}", t.total_s, expected, fmt::join(phases, ", "));
}

void requested_tables(Lines& line, const Report& r) {
  if (r.loader) loader_table(line, *r.loader);
  if (!r.precisions.empty()) precision_table(line, r.precisions);
  if (!r.step_profile.empty()) profile_table(line, r.step_profile);
  if (r.validation) validation_table(line, *r.validation);
  if (r.plan) plan_table(line, *r.plan);
}

}  // namespace detail

std::string to_table(const Report& r) {
  Lines line;
  detail::header_table(line, r);
  if (r.fit) fit_table(line, *r.fit);
  if (r.sweep) sweep_table(line, *r.sweep);
  if (r.loader) loader_table(line, *r.loader);
  if (!r.precisions.empty()) precision_table(line, r.precisions);
  if (!r.step_profile.empty()) profile_table(line, r.step_profile);
  if (r.noise) noise_table(line, *r.noise);
  if (r.goodput && !r.goodput->points.empty()) goodput_table(line, *r.goodput);
  if (r.race) race_table(line, *r.race, r.workload.dataset_size);
  if (r.run_race) run_race_table(line, *r.run_race);
  if (r.validation) validation_table(line, *r.validation);
  if (r.accumulation) accumulation_table(line, *r.accumulation);
  if (r.recommendation) {
    line("");
    const Recommendation& rec = *r.recommendation;
    line(fmt::format("recommendation: batch {}{}", rec.batch,
                     rec.confidence ? fmt::format(" (confidence {})", to_string(*rec.confidence)) : ""));
    for (const std::string& clause : clauses(rec.reason)) line("  " + clause);
    if (rec.confidence) line(fmt::format("confidence {}: {}", to_string(*rec.confidence), rec.confidence_reason));
  } else if (r.validation) {  // validate's own answer: none, and why
    line("");
    line(closing_line(r));
  }
  if (r.lr) {  // a scaled rate no range test looked at is the rule's guess, and says so
    const bool unchecked = !r.lr->range && r.lr->scaled.factor != 1;
    line(fmt::format("learning rate at batch {}: {:.4g}{}{} ({})", r.lr->scaled.batch, r.lr->lr,
                     unchecked ? ", unchecked: the scaling rule alone, no range test capped it" : "",
                     unchecked && !r.timing ? " (tune runs one)" : "", r.lr->advice));  // tune's report has timing
  }
  if (r.run_plan && !r.run_plan->rows.empty()) run_plan_table(line, *r.run_plan);
  if (r.plan) plan_table(line, *r.plan);
  if (r.timing) line(detail::timing_line(*r.timing));
  return std::move(line).text();
}

}  // namespace batchwise

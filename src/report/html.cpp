// The HTML page, drawn from the report record (report_from_json reads a JSON report back into it):
// the answer box, the tables, the page around them and the script that draws the charts
// (html_charts.cpp writes each chart's section). Each section reads only its part of the record and
// is absent when that part is; to add a section: write a `..._section(const Report&)` and call it
// from render() where it belongs.
#include "batchwise/html.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/loader.h"
#include "batchwise/noise.h"
#include "batchwise/recommend.h"
#include "batchwise/report.h"
#include "batchwise/units.h"
#include "check.h"
#include "cpu_quota.h"
#include "report/console.h"
#include "report/html_parts.h"
#include "report_file.h"

namespace batchwise {
namespace detail {
extern const char kChartJs[];
extern const char kChartJsVersion[];
}  // namespace detail

std::string chartjs_version() { return detail::kChartJsVersion; }

namespace detail::html {

std::string esc(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string list_items(const std::vector<std::string>& items, const char* open) {
  std::string out;
  for (const auto& item : items) out += fmt::format("{}{}</li>\n", open, esc(item));
  return out;
}

}  // namespace detail::html

namespace {

using namespace detail::html;

// ---- the answer box ---------------------------------------------------------------------------

// One bullet of the answer box: a sentence, then a link to the section that shows its evidence.
std::string bullet(const std::string& sentence, const char* section, const char* evidence) {
  return fmt::format("<li>{} <a href=\"#{}\">{} &#8595;</a></li>\n", esc(sentence), section, evidence);
}

const Trial* ok_trial_at(const std::vector<Trial>& trials, int64_t batch) {
  for (const Trial& t : trials)
    if (ok(t) && t.batch == batch) return &t;
  return nullptr;
}

// What chose the batch, from the strongest evidence that picked it: a validation, the run race, the
// batch race, goodput, the throughput knee, the fit.
std::string decided_bullet(const Report& r, int64_t batch) {
  if (r.validation && r.validation->fastest_batch == batch) {
    const ValidationResult& v = *r.validation;
    if (v.epochs > 0)
      return bullet(fmt::format("Trained {} beside {} other candidate(s), it was the fastest within noise "
                                "of the best final quality.",
                                format_epochs(v.epochs), v.runs.size() - 1),
                    "validation", "the runs");
    return bullet(fmt::format("Reached {} in the least training time of {} candidates.", v.target, v.runs.size()),
                  "validation", "the runs");
  }
  if (r.run_race && r.run_race->best_batch == batch)
    return bullet(fmt::format("The fastest {:g}-epoch run without a worse model, {}.", r.run_race->epochs,
                              r.run_race->whole_run()
                                  ? "measured: each candidate trained your whole run once"
                                  : "predicted from your schedule compressed into short runs at each candidate"),
                  "run-race", "the run race");
  if (r.race && r.race->best_batch == batch) {
    const BatchRace& race = *r.race;
    std::string s =
        fmt::format("Chosen by the batch race of {} candidates at equal training time", race.entries.size());
    for (const RaceEntry& e : race.entries)
      if (e.batch == batch && e.loss_at_horizon)
        s += fmt::format(" (held-out loss {:.4f} after {:.1f} s)", *e.loss_at_horizon, e.train_s);
    if (race.within_5_percent.size() > 1)
      s += fmt::format("; batches {} were within 5 %", fmt::join(race.within_5_percent, ", "));
    return bullet(s + ".", "race", "the race");
  }
  if (r.race && r.race->stuck)  // a stuck race has no best_batch
    return bullet(
        "No batch left the plateau at the start in the race, so nothing measured ranks them: the smallest "
        "batch it trained longest, since steps move the weights off a plateau. Check it with --validate.",
        "race", "the race");
  if (r.goodput && r.goodput->best_batch == batch)
    return bullet(fmt::format("The most useful samples per second at the measured gradient noise scale "
                              "(B_simple {:.0f}).",
                              r.goodput->b_simple),
                  "goodput", "goodput");
  if (r.sweep && r.sweep->knee_batch == batch)
    return bullet(fmt::format("The throughput knee: the smallest batch within {:g} % of the best samples/s.",
                              r.sweep->knee_tolerance * 100),
                  "throughput", "throughput");
  if (r.sweep && knee_within(*r.sweep, per_device_training_samples(r)) == batch)
    return bullet(fmt::format("The throughput knee among the batches up to {} (a larger batch "
                              "repeats samples within a step): the smallest within {:g} % of their best samples/s.",
                              detail::training_set_text(r), r.sweep->knee_tolerance * 100),
                  "throughput", "throughput");
  if (r.fit && r.fit->batch == batch)
    return bullet(
        r.fit->limited_by_max
            ? fmt::format("The --max searched: its peak memory stays under {:g} % of the budget, and "
                          "larger batches may fit too.",
                          r.target * 100)
            : fmt::format("The largest batch whose peak memory stays under {:g} % of the budget.", r.target * 100),
        "fit-trials", "the fit");
  return "";
}

// The sweep's throughput at the batch, against the fastest batch's.
std::string throughput_bullet(const Report& r, int64_t batch) {
  const Trial* t = r.sweep ? ok_trial_at(r.sweep->points, batch) : nullptr;
  if (!t) return "";
  const Trial* best = t;
  for (const Trial& p : r.sweep->points)
    if (ok(p) && p.samples_per_s > best->samples_per_s) best = &p;
  std::string s = fmt::format("{} samples/s", grouped(t->samples_per_s));
  s += best == t ? ", the fastest batch measured"
                 : fmt::format(", {:.0f} % of the fastest (batch {}, {} samples/s)",
                               100 * t->samples_per_s / best->samples_per_s, best->batch, grouped(best->samples_per_s));
  if (step_spread(*t) > 0) s += fmt::format("; its steps spread {:.0f} %", 100 * step_spread(*t));
  return bullet(s + ".", "throughput", "throughput");
}

// The batch's peak memory against the budget, and the largest batch that fits.
std::string memory_bullet(const Report& r, int64_t batch) {
  const Trial* t = r.sweep ? ok_trial_at(r.sweep->points, batch) : nullptr;
  if (!t && r.fit) t = ok_trial_at(r.fit->trials, batch);
  std::string s;
  if (t && t->peak_bytes > 0) {
    s = "Peak memory " + format_bytes(t->peak_bytes);
    if (r.budget_bytes > 0)
      s += fmt::format(", {} of the {} budget",
                       percent_of(static_cast<double>(t->peak_bytes), static_cast<double>(r.budget_bytes)),
                       format_bytes(r.budget_bytes));
  }
  if (r.fit && r.fit->batch && *r.fit->batch != batch) {
    const std::string fitted = fit_answer_text(*r.fit);  // "the largest batch that fits is N", or up to the --max
    s += s.empty() ? static_cast<char>(std::toupper(static_cast<unsigned char>(fitted[0]))) + fitted.substr(1)
                   : "; " + fitted;
  }
  return s.empty() ? "" : bullet(s + ".", "memory", "memory");
}

std::string answer(const Recommendation& rec, const Report& r) {
  std::string out =
      fmt::format("<p class=\"big\">Train with batch <b id=\"recommended-batch\">{}</b></p>\n", rec.batch);
  if (rec.confidence)
    out += fmt::format("<p class=\"confidence\" id=\"confidence\"><b>Confidence: {}</b>: {}</p>\n",
                       to_string(*rec.confidence), esc(rec.confidence_reason));
  const std::string bullets =
      decided_bullet(r, rec.batch) + throughput_bullet(r, rec.batch) + memory_bullet(r, rec.batch);
  if (!bullets.empty()) out += "<ul class=\"why\">\n" + bullets + "</ul>\n";
  return out + fmt::format("<details><summary>The whole reasoning</summary><p class=\"reason\">{}</p></details>\n",
                           esc(rec.reason));
}

// "micro-batch 16 x 3 accumulation steps x 2 devices" (the devices only where there are several)
std::string split_text(const AccumulationPlan& a) {
  return fmt::format("micro-batch {} x {} accumulation step{}{}", a.micro_batch, a.accumulation_steps,
                     a.accumulation_steps == 1 ? "" : "s",
                     a.world_size > 1 ? fmt::format(" x {} devices", a.world_size) : "");
}

// noise, loader and plan recommend no batch: their page leads with what they answer (the top box's last choice)
bool own_answer_page(const Report& r) {
  return !r.recommendation && !(r.fit && !r.accumulation) && !r.sweep && !r.validation && !r.race && !r.run_race &&
         (r.noise || r.loader || r.accumulation);
}

std::string recommendation_section(const Report& r) {
  // The box's colour is the answer's confidence: green only where it was measured and resolved.
  const std::optional<Confidence> confidence = r.recommendation ? r.recommendation->confidence : std::nullopt;
  std::string out = fmt::format("<section id=\"recommendation\" class=\"answer{}\">\n<h2>Recommendation</h2>\n",
                                confidence ? fmt::format(" {}", to_string(*confidence)) : "");
  if (r.recommendation) {
    out += answer(*r.recommendation, r);
  } else if (r.fit && !r.accumulation) {  // plan's fit is in the fit section and the plan's own reason
    const FitResult& fit = *r.fit;
    if (fit.outcome == FitOutcome::Fits)
      out += fmt::format("<p class=\"big\">{}: <b id=\"fit-batch\">{}</b></p>\n",
                         fit.limited_by_max ? "Fits up to the --max searched" : "Largest batch that fits",
                         text(fit.batch));
    else if (fit.outcome == FitOutcome::DoesNotFit)
      out += "<p class=\"big bad\">No batch fits within the target</p>\n";
    else
      out += "<p class=\"big bad\">The fit failed</p>\n";
    if (!fit.message.empty()) out += fmt::format("<p class=\"reason\">{}</p>\n", esc(fit.message));
  } else if (own_answer_page(r)) {
    // noise, loader and plan recommend no batch: the page leads with what they answer
    const std::string unbounded = r.noise ? unbounded_noise_text(*r.noise) : "";
    if (!unbounded.empty())
      out += fmt::format(
          "<p class=\"big bad\">No critical batch: the noise scale's band has no upper end</p>\n<p "
          "class=\"reason\">B_simple {:.0f}, band {:.0f} to {:.0f}: {}.</p>\n",
          *r.noise->b_simple, r.noise->b_simple_low, r.noise->b_simple_high, esc(unbounded));
    else if (r.noise && r.noise->b_simple)
      out += fmt::format(
          "<p class=\"big\">Critical batch (gradient noise scale B_simple): <b>{:.0f}</b></p>\n<p class=\"reason\">"
          "Band {:.0f} to {:.0f} (2 standard errors), from {} steps at batch {}; the noise section below has its "
          "steps.</p>\n",
          *r.noise->b_simple, r.noise->b_simple_low, r.noise->b_simple_high, r.noise->timeline.size(), r.noise->batch);
    else if (r.noise)
      out += fmt::format("<p class=\"big bad\">The noise scale was not measured</p>\n<p class=\"reason\">{}</p>\n",
                         esc(r.noise->message));
    else if (r.loader)
      out += fmt::format("<p class=\"big\">Input pipeline at batch {}</p>\n<p class=\"reason\">{}</p>\n",
                         r.loader->batch, esc(r.loader->advice));
    else
      out += fmt::format("<p class=\"big\">Global batch {}: {}</p>\n<p class=\"reason\">{}</p>\n",
                         r.accumulation->global_batch, split_text(*r.accumulation), esc(r.accumulation->reason));
  } else {
    // Why, as the console's closing line says it ("answer: none: interrupted before batch 256 trained ...").
    std::string why = closing_line(r);
    if (const std::string none = "answer: none: "; why.rfind(none, 0) == 0) why = why.substr(none.size());
    out += fmt::format("<p class=\"big bad\">No batch was recommended</p>\n<p class=\"reason\">{}</p>\n", esc(why));
  }
  return out + "</section>\n";
}

// ---- the tables and notes ---------------------------------------------------------------------

std::string warnings_section(const Report& r) {
  if (r.context.warnings.empty()) return "";
  return "<section id=\"warnings\" class=\"warn\">\n<h2>Warnings</h2>\n<ul>\n" + list_items(r.context.warnings) +
         "</ul>\n</section>\n";
}

// The run race (tune --epochs): per batch, how far behind its compressed runs ended, the factor the
// gap shrank by per doubling, and how far behind its full run is predicted.
std::string run_race_section(const Report& r) {
  if (!r.run_race) return "";
  const RunRace& race = *r.run_race;
  const bool accuracy = race.measure == "accuracy";
  const auto amount = [&](const std::optional<double>& g) {
    return g ? (accuracy ? fmt::format("{:.2f} pt", 100 * *g) : fmt::format("{:.1f} %", 100 * *g)) : "-";
  };
  std::string rows;
  for (const RunRaceEntry& e : race.entries) {
    std::string note = !e.message.empty() ? esc(e.message)
                       : race.best_batch == e.batch
                           ? "soonest without a worse model" + (e.gap_as ? "; " + esc(gap_as_note(e)) : std::string())
                           : esc(gap_as_note(e));
    if (e.earlier_round) note += (note.empty() ? "" : "; ") + esc(earlier_round_note(e));
    rows += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.4g}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td>{}</td></tr>\n",
        e.good ? "ok" : "bad", e.batch, grouped(e.samples_per_s), e.lr.lr, format_seconds_figure(e.full_run_s),
        amount(compressed_gap(race, e.shorter_run, 1)), amount(compressed_gap(race, e.run, 2)),
        gap_trend_text(e.gap_trend), amount(e.predicted_gap), note);
  }
  std::string notes = list_items(race.notes);
  if (const std::string floored = floored_trend_note(race); !floored.empty()) notes += list_items({floored});
  if (!race.pick_reason.empty()) notes += list_items({race.pick_reason});
  if (!race.schedule_reason.empty()) notes += list_items({race.schedule_reason});
  const auto length = [&](size_t l) {
    return l < race.lengths_epochs.size() ? format_epochs(race.lengths_epochs[l], 2) : std::string("-");
  };
  return fmt::format(
      "<section id=\"run-race\">\n<h2>Run race: your {:g}-epoch {} run</h2>\n<p class=\"caption\">Batch {} trained "
      "your schedule compressed to {} epochs, every other batch to the last two{}; how far behind batch {} each ended "
      "there, and how that gap shrank as the run doubled, carried to your run's end, is how far behind its full run "
      "is predicted ({} on the {}{}).</p>\n<table>\n"
      "<tr><th>batch</th><th>samples/s</th><th>lr</th><th>full run s</th><th>behind after {}</th><th>behind after "
      "{}</th><th>gap x per doubling</th><th>behind at the end</th><th>note</th></tr>\n{}</table>\n<ul>{}</ul>\n"
      "</section>\n",
      race.epochs, esc(race.lr_schedule), race.reference_batch,
      fmt::format("{:.3g}", fmt::join(race.lengths_epochs, ", ")), first_round_lengths_note(race), race.reference_batch,
      esc(race.measure), esc(race.held_out),
      race.tolerance > 0 ? "; within " + amount(race.tolerance) + " is noise"
                         : "; no noise measured: no reference curve",
      length(1), length(2), rows, notes);
}

std::string run_plan_section(const Report& r) {
  if (!r.run_plan) return "";
  std::string rows;
  for (const RunPlanRow& row : r.run_plan->rows)
    rows += fmt::format(
        "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{:.4g}</td><td>{}</td><td "
        "class=\"n\">{}</td><td>{}</td></tr>\n",
        row.batch, esc(row.label), row.lr.lr, warmup_text(row.lr, row.steps_per_epoch), row.steps_per_epoch,
        esc(row.optimizer_settings));
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
    out += fmt::format("<li>Global batch {} = {}{}. {}</li>\n", a.global_batch, split_text(a),
                       a.exact ? " (exact)" : " (not the one asked)", esc(a.reason));
    // The JSON has the epoch exactly when the dataset size is known.
    if (a.dataset_size > 0) out += fmt::format("<li>Epoch: {}</li>\n", esc(a.last_batch_note));
    out += list_items(a.warnings, "<li class=\"bad\">Warning: ");
  }
  return out + "</ul>\n</section>\n";
}

std::string plan_section(const Report& r) {
  if (!r.plan) return "";
  const Plan& p = *r.plan;
  std::string out = fmt::format(
      "<section id=\"plan\">\n<h2>Planned for {}</h2>\n<table>\n<tr><td>device memory</td><td>{}</td></tr>\n"
      "<tr><td>largest batch</td><td>{}</td></tr>\n<tr><td>predicted peak</td><td>{}</td></tr>\n</table>\n",
      esc(p.device.name), esc(format_bytes(p.device.bytes)), esc(or_dash(p.batch)),
      esc(format_bytes(p.predicted_peak_bytes)));
  if (!p.assumptions.empty())
    out += "<p>It rests on these assumptions:</p>\n<ul>\n" + list_items(p.assumptions) + "</ul>\n";
  return out + "</section>\n";
}

std::string fit_section(const Report& r) {
  if (!r.fit) return "";
  const FitResult& fit = *r.fit;
  const double budget = static_cast<double>(r.budget_bytes);
  const std::string summary = fit.outcome == FitOutcome::Fits         ? fmt::format("batch {} fits", text(fit.batch))
                              : fit.outcome == FitOutcome::DoesNotFit ? "no batch fits"
                                                                      : "the fit failed";
  // The fit's own word where it has one: a fit reused from the history (tune --reuse) ran no trials, and the page
  // had shown an empty table under "0 trials" without saying why
  std::string said = fit.message;
  if (!said.empty() && said.back() == '.') said.pop_back();
  std::string out =
      fmt::format("<section id=\"fit-trials\">\n<h2>Fit</h2>\n<p class=\"caption\">{} ({} mode, {} trial{}{}){}.</p>\n",
                  esc(summary), esc(to_string(fit.mode)), fit.trials.size(), fit.trials.size() == 1 ? "" : "s",
                  fit.trials.empty() ? "" : ", in the order they ran", said.empty() ? "" : ": " + esc(said));
  if (fit.trials.empty()) return out + "</section>\n";
  out +=
      "<table>\n<tr><th>#</th><th>batch</th><th>outcome</th><th>peak memory</th><th>predicted</th>"
      "<th>of budget</th><th>target</th><th>note</th></tr>\n";
  int i = 0;
  for (const Trial& t : fit.trials) {
    out += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>\n",
        ok(t) ? "ok" : "bad", ++i, t.batch, esc(to_string(t.outcome)), esc(format_bytes(t.peak_bytes)),
        esc(bytes_text(t.predicted_peak_bytes)), esc(percent_of(static_cast<double>(t.peak_bytes), budget)),
        esc(target_text(t)), esc(t.message));
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
        p.peak_bytes > 0 ? esc(format_bytes(p.peak_bytes)) : "-", esc(note));
  }
  out += "</table>\n";
  // The batches it left unswept, as the console says them (a page had shown "batch 512 fits" beside a sweep that
  // stopped at 128, and no word why)
  if (!r.sweep->not_run.empty())
    out += fmt::format("<p>batch{} {}: {}</p>\n", r.sweep->not_run.size() > 1 ? "es" : "",
                       esc(fmt::format("{}", fmt::join(r.sweep->not_run, ", "))), esc(r.sweep->not_run_reason));
  return out + "</section>\n";
}

// The input-pipeline search (loader; tune where the step waited for its data): each setting tried.
std::string loader_section(const Report& r) {
  if (!r.loader) return "";
  const LoaderSearch& l = *r.loader;
  std::string rows;
  const auto row = [&](const LoaderTrial& t, bool given) {
    const bool ran = t.outcome == Outcome::Ok;
    rows += fmt::format(
        "<tr class=\"{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td>{}</td></tr>\n",
        ran ? "ok" : "bad", t.workers, t.prefetch, esc(to_string(t.outcome)), ran ? grouped(t.samples_per_s) : "-",
        ran ? fmt::format("{:.1f} %", 100 * t.data_wait_share) : "-", esc(detail::loader_note(l, t, given, "use")));
  };
  row(l.before, true);
  for (const LoaderTrial& t : l.trials) row(t, false);
  // A loader page leads with its advice (the top box): the section does not say it again (it had, word for word)
  const bool leads = own_answer_page(r) && !r.noise;  // the top box takes the noise scale's answer first
  const std::string caption =
      leads ? "Each setting tried: its samples per second and the share of its steps spent waiting for data."
            : l.advice;
  return fmt::format(
      "<section id=\"loader\">\n<h2>{} at batch {}</h2>\n<p class=\"caption\">{}</p>\n<table>\n"
      "<tr><th>workers</th><th>prefetch</th><th>outcome</th><th>samples/s</th><th>data wait</th><th>note</th></tr>\n"
      "{}</table>\n</section>\n",
      leads ? "The settings tried" : "Input pipeline", l.batch, esc(caption), rows);
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
  out +=
      "<table>\n<tr><th>batch</th><th>global batch</th><th>samples/s</th><th>1 process</th><th>scaling</th>"
      "<th>all-reduce</th><th>rank step ms</th><th>rank outcomes</th></tr>\n";
  for (const Trial& p : r.sweep->points)
    if (p.distributed) out += distributed_row(p, *p.distributed);
  return out + "</table>\n</section>\n";
}

// Where tune's time went: each phase as it took and as tune stated it at its start, and the whole
// run against what tune expected once its fit had timed the steps, stated again before the race, and
// gave as the most (report.timing).
std::string timing_section(const Report& r) {
  if (!r.timing) return "";
  const TuneTiming& t = *r.timing;
  std::string rows;
  for (const PhaseTime& p : t.phases)
    rows += fmt::format("<tr><td>{}</td><td class=\"n\">{:.1f} s</td><td class=\"n\">{}</td></tr>\n", esc(p.phase),
                        p.wall_s, p.expected_s >= 0.01 ? fmt::format("{:.1f} s", p.expected_s) : "-");  // as the text
  std::vector<std::string> stated;
  const auto against = [&t](double s) { return fmt::format("{:.0f} s ({:.2f}x)", s, t.total_s / s); };
  if (t.expected_s > 0) stated.push_back(against(t.expected_s) + " expected once the fit had timed the steps");
  if (t.restated_s > 0) stated.push_back(against(t.restated_s) + " as stated again before the race");
  if (t.at_most_s > 0) stated.push_back("at most " + against(t.at_most_s));
  if (const std::string past = detail::past_the_most(t); !past.empty()) stated.push_back(past);
  return fmt::format(
      "<section id=\"timing\">\n<h2>Where the time went</h2>\n<p>{:.0f} s in all{}.</p>\n<table>\n<tr><th>phase</th>"
      "<th>took</th><th>stated at its start</th></tr>\n{}</table>\n</section>\n",
      t.total_s, stated.empty() ? "" : fmt::format("; {}", fmt::join(stated, "; ")), rows);
}

std::string context_section(const Report& r) {
  const Context& c = r.context;
  const WorkloadInfo& w = r.workload;
  // A training command's model, data and rate are its own: "(the command's)", not 0 samples at lr 0.
  const bool own = w.is_command();
  const std::string kOwn = "(the command's)";
  const std::string frozen = detail::trainable_text(w);  // "650 trainable"
  const std::string trainable = frozen.empty() ? "" : " (" + frozen + ")";
  std::vector<std::pair<std::string, std::string>> rows = {
      {own ? "command" : "model", w.model},
      {"dataset", own ? w.dataset : w.dataset + " (" + grouped(static_cast<double>(w.dataset_size)) + " samples)"},
      {"input shape", own ? kOwn : fmt::format("[{}]", fmt::join(w.input_shape, ","))},  // as the JSON has it
      {"loss", w.loss},
      {"optimizer", own ? w.optimizer : w.optimizer + fmt::format(", lr {:g}", w.lr)},
      {"precision", detail::precision_text(w)},
      {"parameters", own ? kOwn : grouped(static_cast<double>(w.parameter_count)) + trainable},
      {"budget", fmt::format("{}, target {:g} %", format_bytes(r.budget_bytes), r.target * 100)},
      {"device", c.device_type + ": " + c.device_name},
      {"device memory", format_bytes(c.device_total_bytes)},
      {"threads / cores", fmt::format("{} / {}{}", c.threads, c.cores,
                                      c.cpu_quota > 0 ? ", a CPU quota of " + detail::quota_text(c.cpu_quota) : "")},
      {"BLAS", c.blas},
      {"torch", c.torch_version},
      {"batchwise", c.batchwise_version + " (" + c.build_commit + ", " + c.build_type + ")"},
      {"host", c.host},
      {"date", c.date},
  };
  if (!w.data_path.empty())  // the files it read, below the dataset's name
    rows.insert(rows.begin() + 2,
                {"data", w.labels_path.empty() ? w.data_path : w.data_path + " (labels " + w.labels_path + ")"});
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
.answer ul.why{margin:6px 0;padding-left:22px}.answer ul.why li{margin:2px 0}.answer a{color:#1a5fa0;white-space:nowrap}
.answer details{margin:6px 0 0;color:#444}.answer summary{cursor:pointer;color:#555}
.answer.medium{background:#f4f6ea;border-color:#bcc48a}.answer.low{background:#fdf1e4;border-color:#e0a860}
.warn{background:#fff6e0;border:1px solid #e0b040;border-radius:6px;padding:4px 18px;margin-top:16px}
.chart{position:relative;height:340px}
.split{display:flex;gap:24px;align-items:center}.split .chart{flex:1;height:260px}
table{border-collapse:collapse;font-size:14px}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}tr.bad td{color:#a00}tr.total td{font-weight:600}
footer{color:#666;font-size:13px;margin-top:32px;border-top:1px solid #ddd;padding-top:8px}
)css";

// Draws every chart-config block on its canvas; animation off, so what a screenshot or a printer
// sees is the final chart. A point's "note" is its tooltip. What JSON cannot say is added here: a
// scale's batchTicks become its ticks, labelled in full (a log scale labels only 1, 2 and 5 x 10^n);
// a scale marked mibTicks (MiB) gets ticks at powers of 4, labelled in KiB, MiB or GiB; and a
// dataset marked hideInLegend (a band's lower edge) stays out of the legend.
constexpr const char* kDraw = R"js(
(function () {
  'use strict';
  if (typeof Chart === 'undefined') return;
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  function batchTicks(scale) {
    var values = scale.batchTicks;
    scale.afterBuildTicks = function (axis) {
      axis.ticks = values.map(function (v) { return {value: v}; });
    };
    scale.ticks = Object.assign({}, scale.ticks, {maxRotation: 0, autoSkipPadding: 6,
                                                  callback: function (v) { return Number(v).toLocaleString('en-US'); }});
  }
  function mibTicks(scale) {  // MiB on a log scale: a tick at every 4x from 1 byte, or 16x when that is too many
    scale.afterBuildTicks = function (axis) {
      var ticks = [];
      for (var k = -20; k <= 40; k += 2) {
        var v = Math.pow(2, k);
        if (v >= axis.min && v <= axis.max) ticks.push({value: v});
      }
      axis.ticks = ticks.length > 9 ? ticks.filter(function (t, i) { return i % 2 === 0; }) : ticks;
    };
    scale.ticks = Object.assign({}, scale.ticks, {callback: function (v) {
      return v >= 1024 * 1024 ? v / 1024 / 1024 + ' TiB' : v >= 1024 ? v / 1024 + ' GiB' : v >= 1 ? v + ' MiB'
          : v >= 1 / 1024 ? v * 1024 + ' KiB' : Math.round(v * 1024 * 1024) + ' B';
    }});
  }
  document.querySelectorAll('script.chart-config').forEach(function (block) {
    var config = JSON.parse(block.textContent);
    config.options = config.options || {};
    config.options.plugins = config.options.plugins || {};
    config.options.plugins.tooltip = {callbacks: {label: function (item) {
      var raw = item.raw;
      return raw && raw.note ? raw.note : item.dataset.label + ': ' + item.formattedValue;
    }}};
    config.options.plugins.legend = Object.assign({}, config.options.plugins.legend, {labels: {
      filter: function (item, data) {  // a doughnut's items are its slices, with no datasetIndex
        var d = data.datasets[item.datasetIndex];
        return !(d && d.hideInLegend);
      }}});
    Object.values(config.options.scales || {}).forEach(function (scale) {
      if (scale.batchTicks) batchTicks(scale);
      if (scale.mibTicks) mibTicks(scale);
    });
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
  for (auto section :
       {recommendation_section, warnings_section,  advice_section,   run_plan_section,    distributed_section,
        throughput_section,     precision_section, profile_section,  utilisation_section, goodput_section,
        noise_section,          race_section,      run_race_section, validation_section,  memory_section,
        breakdown_section,      plan_section,      fit_section,      sweep_section,       loader_section,
        timing_section,         context_section})
    html += section(r);
  html += fmt::format(
      "<footer>Written by batchwise {} ({}) from its JSON report (docs/report-schema.md). Charts drawn with Chart.js "
      "{} "
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

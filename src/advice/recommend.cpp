// The recommendation, from the fit alone up to a validation: one unit for every way tune decides;
// how sure it is, in confidence.cpp.
#include "batchwise/recommend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "batchwise/sweep.h"
#include "batchwise/units.h"
#include "check.h"

namespace batchwise {

namespace {

// A full run's final quality on the held-out set, as the reasons cite it.
std::string quality(const ValidationRun& r) {
  return r.final_accuracy ? fmt::format("test accuracy {:.4f}", *r.final_accuracy)
         : r.final_loss   ? fmt::format("test loss {:.4g}", *r.final_loss)
                          : "no final quality (" + r.message + ")";
}

std::optional<Recommendation> recommend_fit(const FitResult& fit) {
  if (fit.outcome != FitOutcome::Fits) return std::nullopt;
  const Trial* at = nullptr;
  for (const auto& t : fit.trials)
    if (t.batch == *fit.batch && t.outcome == Outcome::Ok) at = &t;
  Recommendation rec;
  rec.batch = *fit.batch;
  if (!at) {  // a fit reused from the history keeps its answer, not its trials
    rec.reason = fmt::format(
        "batch {} is the largest that fit the {} budget{} (no batch of the sweep ran, so this is "
        "the fit's answer alone)",
        rec.batch, format_bytes(fit.budget_bytes), fit.limited_by_max ? " up to the --max searched" : "");
  } else if (fit.limited_by_max) {
    rec.reason = fmt::format(
        "batch {} is the --max searched; its peak memory ({}) is within {:.0f} % of the {} "
        "budget, so larger batches may fit too",
        rec.batch, format_bytes(at->peak_bytes), fit.target * 100, format_bytes(fit.budget_bytes));
  } else {
    rec.reason = fmt::format("batch {} is the largest whose peak memory ({}) stays within {:.0f} % of the {} budget",
                             rec.batch, format_bytes(at->peak_bytes), fit.target * 100, format_bytes(fit.budget_bytes));
    // What the next batch tried above the answer met: a timeout or an error ends a fit as a batch
    // that does not fit, and memory did not decide it.
    const Trial* above = nullptr;
    for (const auto& t : fit.trials)
      if (t.batch > rec.batch && (!above || t.batch < above->batch)) above = &t;
    if (above && (above->outcome == Outcome::Timeout || above->outcome == Outcome::Error))
      rec.reason = fmt::format(
          "batch {} is the largest that trained: batch {}, the next tried, {} ({}), so memory did not decide it; "
          "batch {}'s peak memory ({}) is within {:.0f} % of the {} budget",
          rec.batch, above->batch,
          above->outcome == Outcome::Timeout ? "ran past the --trial-timeout" : "failed with an error", above->message,
          rec.batch, format_bytes(at->peak_bytes), fit.target * 100, format_bytes(fit.budget_bytes));
  }
  return rec;
}

// The rungs' leads when they changed: the best batch for a run depends on its length.
std::string lead_history(const BatchRace& race) {
  std::vector<std::string> leads;
  bool changed = false;
  for (const auto& l : race.rung_leads) {
    changed = changed || l.batch != race.rung_leads.front().batch;
    leads.push_back(fmt::format("{} at {:.1f} s ({})", l.batch, l.horizon_s, format_epochs(l.epochs, 2)));
  }
  if (!changed) return "";
  if (race.rung_leads.back().batch > race.rung_leads.front().batch)
    return fmt::format(
        "; the lead grew as training went on ({}), as the critical batch grows when the loss falls: a run that stops "
        "near an earlier horizon is likely faster with that rung's lead, and one far longer than the race may be "
        "faster with a batch larger than the pick",
        fmt::join(leads, ", "));
  return fmt::format(
      "; the lead changed between rungs ({}): the ranking depends on how long the candidates train, so a run much "
      "shorter than the race may favour an earlier rung's lead",
      fmt::join(leads, ", "));
}

}  // namespace

std::string fit_answer_text(const FitResult& fit) {
  if (!fit.batch) return "";
  return fit.limited_by_max ? fmt::format("batches up to {} fit (the --max searched)", *fit.batch)
                            : fmt::format("the largest batch that fits is {}", *fit.batch);
}

std::optional<Recommendation> recommend(const std::optional<FitResult>& fit_result,
                                        const std::optional<SweepResult>& sweep_result) {
  // A sweep in which no batch trained (each diverged, failed or ran out of memory) leaves no answer: the fit's
  // batch had been answered with the rate that diverged at it ("never an answer built on something that did not
  // train")
  if (sweep_result && !sweep_result->points.empty() &&
      std::none_of(sweep_result->points.begin(), sweep_result->points.end(),
                   [](const Trial& p) { return p.outcome == Outcome::Ok; }))
    return std::nullopt;
  if (!sweep_result || !sweep_result->knee_batch) return fit_result ? recommend_fit(*fit_result) : std::nullopt;
  const SweepResult& sweep = *sweep_result;
  const FitResult empty_fit;
  const FitResult& fit = fit_result ? *fit_result : empty_fit;
  const Trial* knee = nullptr;
  const Trial* best = nullptr;
  for (const auto& p : sweep.points) {
    if (p.outcome != Outcome::Ok) continue;
    if (p.batch == *sweep.knee_batch) knee = &p;
    if (!best || p.samples_per_s > best->samples_per_s) best = &p;
  }
  BATCHWISE_ASSERT(knee && best);
  Recommendation rec;
  rec.batch = knee->batch;
  const int64_t budget = fit_result ? fit.budget_bytes : sweep.budget_bytes;
  const double pct_budget =
      budget > 0 ? 100.0 * static_cast<double>(knee->peak_bytes) / static_cast<double>(budget) : 0;
  const std::string fit_part = fit.batch ? "; " + fit_answer_text(fit) : std::string();
  if (knee == best) {
    rec.reason = fmt::format(
        "batch {} is the fastest measured at {:.0f} samples/s, peaking at {} ({} of the "
        "budget){}",
        knee->batch, knee->samples_per_s, format_bytes(knee->peak_bytes), format_percent(pct_budget), fit_part);
  } else {
    rec.reason = fmt::format(
        "batch {} trains at {:.0f} samples/s, within {:.0f} % of the fastest ({:.0f} at batch {}), peaking at {} "
        "({} of the budget); bigger batches are not meaningfully faster{}",
        knee->batch, knee->samples_per_s, sweep.knee_tolerance * 100, best->samples_per_s, best->batch,
        format_bytes(knee->peak_bytes), format_percent(pct_budget), fit_part);
  }
  return rec;
}

std::optional<Recommendation> recommend(const std::optional<FitResult>& fit, const std::optional<SweepResult>& sweep,
                                        const std::optional<NoiseResult>& noise, const std::optional<Goodput>& good) {
  if (!sweep || !noise || !noise->b_simple || !good || !good->best_batch || !sweep->knee_batch)
    return recommend(fit, sweep);
  const GoodputPoint* best = nullptr;
  for (const auto& p : good->points)
    if (p.batch == *good->best_batch) best = &p;
  const Trial* at = nullptr;
  const Trial* knee = nullptr;
  for (const auto& t : sweep->points) {
    if (t.outcome != Outcome::Ok) continue;
    if (t.batch == *good->best_batch) at = &t;
    if (t.batch == *sweep->knee_batch) knee = &t;
  }
  if (!best || !at || !knee) return recommend(fit, sweep);
  const int64_t budget = fit ? fit->budget_bytes : sweep->budget_bytes;
  const std::string memory =
      budget > 0
          ? fmt::format("peaking at {} ({} of the budget)", format_bytes(at->peak_bytes),
                        format_percent(100.0 * static_cast<double>(at->peak_bytes) / static_cast<double>(budget)))
          : fmt::format("peaking at {}", format_bytes(at->peak_bytes));
  const std::string knee_part =
      knee->batch == at->batch
          ? "it is also the throughput knee"
          : fmt::format("the throughput knee is batch {} ({:.0f} samples/s{})", knee->batch, knee->samples_per_s,
                        knee->batch > at->batch ? ", but its extra samples per step mostly repeat what the gradient "
                                                  "already knows"
                                                : "");
  const std::string fit_part = fit && fit->batch ? "; " + fit_answer_text(*fit) : std::string();
  Recommendation rec;
  rec.batch = at->batch;
  rec.reason = fmt::format(
      "batch {} makes the most training progress per second: {:.0f} samples/s x {:.0f} % statistical efficiency at "
      "the gradient noise scale measured now (B_simple {:.0f}, band {:.0f} to {:.0f}) = {:.0f} useful samples/s, {}; "
      "{}{}",
      at->batch, best->samples_per_s, best->efficiency * 100, *noise->b_simple, noise->b_simple_low,
      noise->b_simple_high, best->goodput, memory, knee_part, fit_part);
  return rec;
}

std::optional<int64_t> knee_within(const SweepResult& sweep, int64_t training_samples) {
  if (!sweep.knee_batch || training_samples <= 0 || *sweep.knee_batch <= training_samples) return sweep.knee_batch;
  std::vector<int64_t> larger;
  const std::optional<int64_t> knee =
      knee_batch(within_dataset(sweep.points, training_samples, larger), sweep.knee_tolerance);
  return knee ? knee : sweep.knee_batch;
}

std::optional<Recommendation> recommend(const std::optional<FitResult>& fit, const std::optional<SweepResult>& sweep,
                                        const std::optional<NoiseResult>& noise, const std::optional<Goodput>& good,
                                        int64_t training_samples) {
  if (!sweep) return recommend(fit, sweep, noise, good);
  const std::optional<int64_t> knee = knee_within(*sweep, training_samples);
  if (knee == sweep->knee_batch) return recommend(fit, sweep, noise, good);
  std::vector<int64_t> larger;
  SweepResult within = *sweep;
  within.points = within_dataset(sweep->points, training_samples, larger);
  within.knee_batch = knee;
  std::optional<Goodput> good_within;  // goodput weighs the same batches
  if (good) good_within = goodput(within.points, good->b_simple);
  std::optional<Recommendation> rec = recommend(fit, within, noise, good_within);
  const Trial* fastest = nullptr;  // of those left out
  for (const Trial& t : sweep->points)
    if (t.outcome == Outcome::Ok && t.batch > training_samples &&
        (!fastest || t.samples_per_s > fastest->samples_per_s))
      fastest = &t;
  const std::string measured = rec ? fmt::format("batch {} is the fastest measured", rec->batch) : "";
  double best_within = 0;
  for (const Trial& t : within.points)
    if (t.outcome == Outcome::Ok) best_within = std::max(best_within, t.samples_per_s);
  if (rec && fastest && fastest->samples_per_s > best_within && rec->reason.rfind(measured, 0) == 0)
    // it is not the fastest measured: one past the training set ran faster
    rec->reason.insert(measured.size(), fmt::format(" within the {} training samples", training_samples));
  if (rec && fastest)
    rec->reason += fmt::format(
        "; batches above the {} training samples were not weighed, a step would repeat samples (the fastest of "
        "them, batch {}, at {:.0f} samples/s)",
        training_samples, fastest->batch, fastest->samples_per_s);
  return rec;
}

SweepAnswer recommend_sweep(const SweepResult& sweep, int64_t training_samples, int64_t budget_bytes, double target) {
  const double limit = target * static_cast<double>(budget_bytes);
  SweepResult within = sweep;
  std::vector<std::string> over;  // "256 at 7.00 MiB"
  const Trial* least = nullptr;   // the smallest peak past the target
  within.points.clear();
  for (const Trial& t : sweep.points)
    if (budget_bytes > 0 && t.outcome == Outcome::Ok && static_cast<double>(t.peak_bytes) > limit) {
      over.push_back(fmt::format("{} at {}", t.batch, format_bytes(t.peak_bytes)));
      if (!least || t.peak_bytes < least->peak_bytes) least = &t;
    } else {
      within.points.push_back(t);
    }
  SweepAnswer a;
  if (over.empty()) {
    a.recommendation = recommend(std::nullopt, sweep, std::nullopt, std::nullopt, training_samples);
    return a;
  }
  within.knee_batch = knee_batch(within.points, sweep.knee_tolerance);
  const std::string past = fmt::format("the {} target of the {} budget ({})", format_percent(100 * target),
                                       format_bytes(budget_bytes), format_bytes(static_cast<int64_t>(limit)));
  if (!within.knee_batch) {
    a.none_within_target = true;
    a.warnings.push_back(fmt::format(
        "no batch swept peaks within {}: the least, batch {}, peaked at {}; nothing is recommended: sweep smaller "
        "batches, or raise --target or --memory-budget",
        past, least->batch, format_bytes(least->peak_bytes)));
    return a;
  }
  a.warnings.push_back(fmt::format(
      "{} {} peaked past {}: measured as asked, and not weighed for the answer; raise --target or --memory-budget to "
      "weigh {}",
      over.size() > 1 ? "batches" : "batch", fmt::join(over, ", "), past, over.size() > 1 ? "them" : "it"));
  a.recommendation = recommend(std::nullopt, within, std::nullopt, std::nullopt, training_samples);
  // The answer is weighed within the target: where a batch past it ran faster, the reason says so, not that the
  // answer is the fastest measured (the report's knee_batch, over every point, is that faster one)
  const Trial* fastest = nullptr;
  for (const Trial& t : sweep.points)
    if (t.outcome == Outcome::Ok && (!fastest || t.samples_per_s > fastest->samples_per_s)) fastest = &t;
  if (a.recommendation && fastest && static_cast<double>(fastest->peak_bytes) > limit) {
    std::string& reason = a.recommendation->reason;
    const std::string measured = fmt::format("batch {} is the fastest measured", a.recommendation->batch);
    if (reason.rfind(measured, 0) == 0) reason.insert(measured.size(), " within the memory target");
    reason += fmt::format("; batch {} ran faster ({:.0f} samples/s) but peaked at {}, past {}, and was not weighed",
                          fastest->batch, fastest->samples_per_s, format_bytes(fastest->peak_bytes), past);
  }
  return a;
}

std::optional<Recommendation> recommend(const std::optional<FitResult>& fit, const std::optional<SweepResult>& sweep,
                                        const BatchRace& race, double run_epochs) {
  if (!race.best_batch || race.horizons_s.empty()) return std::nullopt;
  const RaceEntry* best = nullptr;
  for (const auto& e : race.entries)
    if (e.batch == *race.best_batch) best = &e;
  if (!best || !best->loss_at_horizon) return std::nullopt;
  std::string flat;
  if (race.within_5_percent.size() > 1)
    flat = fmt::format(
        "; batches {} came within 5 % of the time of the best at their last rung, or closer than the "
        "race can resolve, so the optimum is flat across them",
        fmt::join(race.within_5_percent, ", "));
  std::vector<std::string> dropped;
  for (const auto& e : race.entries)
    if (e.batch != best->batch && e.rungs < static_cast<int>(race.horizons_s.size()))
      dropped.push_back(e.message.empty() ? fmt::format("{} after {:.1f} s", e.batch, race.horizons_s[e.rungs - 1])
                                          : fmt::format("{} ({})", e.batch, e.message));
  const double horizon = race.horizons_s.back();
  std::string finalists;
  std::vector<int64_t> short_of_target;
  for (const auto& e : race.entries) {
    if (e.batch == best->batch || e.rungs != static_cast<int>(race.horizons_s.size())) continue;
    if (!e.message.empty())
      finalists += fmt::format("; batch {} ended in the last rung ({})", e.batch, e.message);
    else if (best->target_s && e.target_s)
      finalists += fmt::format("; batch {} reached it after {:.1f} s", e.batch, *e.target_s);
    else if (best->target_s)
      short_of_target.push_back(e.batch);
    else
      finalists +=
          fmt::format("; in the last rung against batch {} ({:.4f})", e.batch, e.loss_at_horizon.value_or(NAN));
  }
  if (!short_of_target.empty())
    finalists += fmt::format("; {} {} had not reached it by {:.1f} s", short_of_target.size() > 1 ? "batches" : "batch",
                             fmt::join(short_of_target, ", "), horizon);
  const std::string accuracy =
      best->curve.back().accuracy ? fmt::format(", accuracy {:.3f}", *best->curve.back().accuracy) : "";
  const std::string headline =
      best->target_s
          ? fmt::format("reached the target ({}) first, after {:.1f} s of training", race.target, *best->target_s)
          : fmt::format("{} ({:.4f}{}) after {:.1f} s of training",
                        fmt::format("reached {} {}", race.pick_reason.empty() ? "the lowest" : "a",
                                    race.on_training_data ? "loss on training samples" : "held-out loss"),
                        *best->loss_at_horizon, accuracy, horizon);
  std::string knee;
  if (sweep && sweep->knee_batch && *sweep->knee_batch != best->batch)
    knee = fmt::format("; the throughput knee is batch {}", *sweep->knee_batch);
  const std::string fitted = fit && fit->batch ? "; " + fit_answer_text(*fit) : std::string();
  Recommendation rec;
  rec.batch = best->batch;
  rec.reason = fmt::format(
      "batch {} {} from your initial weights ({} samples/s, lr {:.4g}), racing {} candidates at equal training time, "
      "each at its own advised learning rate, the better half going on at each rung (dropped: {}{}){}{}{}{}{}{}",
      best->batch, headline, format_grouped(best->samples_per_s), best->lr.lr, race.entries.size(),
      dropped.empty() ? "none" : fmt::format("{}", fmt::join(dropped, ", ")),
      race.left_out.empty() ? "" : fmt::format("; left out, not raced: {}", fmt::join(race.left_out, ", ")), finalists,
      race.pick_reason.empty() ? "" : "; " + race.pick_reason, lead_history(race), flat, knee, fitted);
  // The horizon the race answered for: the run it stands for is this short.
  const std::string horizon_text =
      race.rung_leads.empty() ? std::string("this answers for the race's horizon")
                              : fmt::format(
                                    "this answers for about {} of training (the race's last "
                                    "horizon at batch {})",
                                    format_epochs(race.rung_leads.back().epochs, 2), race.rung_leads.back().batch);
  if (run_epochs > 0)
    rec.reason += fmt::format(
        "; {}, not for your {:g}-epoch run, whose compressed runs never left the plateau at the start: `validate "
        "--epochs {:g}` compares full runs, and a larger --advice-budget trains the compressed runs longer",
        horizon_text, run_epochs, run_epochs);
  else if (!race.rung_leads.empty())
    rec.reason +=
        fmt::format("; {}: for your run's length, `tune --epochs N --lr-schedule cosine` answers for it", horizon_text);
  return rec;
}

std::optional<Recommendation> recommend_on_the_plateau(const BatchRace& race, double run_epochs) {
  if (!race.stuck) return std::nullopt;
  const RaceEntry* pick = nullptr;  // of the entries trained longest, the smallest batch
  const RaceEntry* lowest = nullptr;
  for (const auto& e : race.entries) {
    if (!e.loss_at_horizon) continue;
    if (!pick || e.rungs > pick->rungs || (e.rungs == pick->rungs && e.batch < pick->batch)) pick = &e;
  }
  if (!pick) return std::nullopt;
  std::vector<int64_t> longest;  // the others trained as long
  for (const auto& e : race.entries) {
    if (!e.loss_at_horizon || e.rungs != pick->rungs) continue;
    if (&e != pick) longest.push_back(e.batch);
    if (!lowest || *e.loss_at_horizon < *lowest->loss_at_horizon) lowest = &e;
  }
  const std::string lowest_text =
      lowest == pick ? "the lowest of them"
                     : fmt::format("batch {}'s {:.4f} the lowest of them", lowest->batch, *lowest->loss_at_horizon);
  const std::string others = longest.empty() ? ""
                                             : fmt::format(" (as long as batch{} {})", longest.size() > 1 ? "es" : "",
                                                           fmt::join(longest, ", "));
  Recommendation rec;
  rec.batch = pick->batch;
  rec.reason = fmt::format(
      "batch {} is the smallest batch the race trained longest{}, {:.1f} s of training: no batch's held-out loss "
      "fell 2 % below where all began ({:.3f}; batch {}'s {:.4f}, {}), so nothing measured ranks them. This is the "
      "plateau's answer, not a measured one: steps move the weights off a plateau, and the smallest batch takes "
      "the most in as many samples ({} samples/s, lr {:.4g})",
      pick->batch, others, pick->train_s, race.loss_before, pick->batch, *pick->loss_at_horizon, lowest_text,
      format_grouped(pick->samples_per_s), pick->lr.lr);
  const std::string around = pick->batch > 1 ? fmt::format("{},{},{}", pick->batch / 2, pick->batch, 2 * pick->batch)
                                             : fmt::format("{},{}", pick->batch, 2 * pick->batch);
  rec.reason += run_epochs > 0
                    ? fmt::format(
                          "; neither race saw your {:g}-epoch run leave the plateau: `batchwise validate --epochs {:g} "
                          "--batch-sizes {}` compares full runs, and a larger --advice-budget trains the "
                          "races longer",
                          run_epochs, run_epochs, around)
                    : "; --validate trains the batches around it, and a larger --advice-budget trains the "
                      "race longer";
  return rec;
}

std::optional<Recommendation> recommend(const ValidationResult& v) {
  const ValidationRun* run = v.fastest_batch ? fixed_run(v, *v.fastest_batch) : nullptr;
  if (!run) return std::nullopt;
  Recommendation rec;
  rec.batch = run->batch;
  if (v.epochs <= 0) {
    rec.reason = fmt::format("batch {} reached {} soonest: {} of training ({} steps, {:.2f} epochs, lr {:.4g})",
                             run->batch, v.target, format_seconds(run->train_s), run->steps, run->epochs, run->lr.lr);
    return rec;
  }
  const ValidationRun* best = v.best_batch ? fixed_run(v, *v.best_batch) : nullptr;
  // A faster run that ended worse beyond noise: the least time is of the good runs only.
  const bool faster_worse = std::any_of(v.runs.begin(), v.runs.end(), [&](const ValidationRun& r) {
    return r.schedule.empty() && r.final_loss && r.train_s < run->train_s;
  });
  rec.reason = fmt::format(
      "batch {} trained {} ({} rate, lr {:.4g}) in the least time{}, {}, to {}{}", run->batch, format_epochs(v.epochs),
      v.lr_schedule, run->lr.lr, faster_worse ? " of the runs within noise of the best" : "",
      format_seconds(run->train_s), quality(*run),
      best && best != run
          ? fmt::format(", within the test set's noise of the best, batch {}'s {}", best->batch, quality(*best))
          : std::string(", the best of the runs"));
  return rec;
}

Recommendation confirm(const Recommendation& rec, const ValidationResult& v) {
  if (v.interrupted) {  // a part of the candidates judged among themselves moves nothing
    Recommendation out = rec;
    out.reason = fmt::format("{}; not validated: the validation was stopped before {} trained", rec.reason,
                             fmt::join(not_trained_names(v), ", "));
    return out;
  }
  const ValidationRun* predicted = nullptr;
  const ValidationRun* fastest = nullptr;
  const ValidationRun* schedule = nullptr;  // a batch-size schedule's run: reported, never a fixed batch
  for (const auto& r : v.runs) {
    if (!r.schedule.empty()) {
      schedule = &r;
      continue;
    }
    if (r.batch == rec.batch) predicted = &r;
    if (v.fastest_batch && r.batch == *v.fastest_batch) fastest = &r;
  }
  auto took = [&](const ValidationRun& r) {
    return fmt::format("{} of training ({} steps, {:.2f} epochs, lr {:.4g})", format_seconds(r.train_s), r.steps,
                       r.epochs, r.lr.lr);
  };
  Recommendation out = rec;
  if (v.epochs > 0) {  // full runs: the fastest whose final quality is within noise of the best
    if (!fastest)
      out.reason = fmt::format(
          "{}; not validated: no full run of {} {}", rec.reason, format_epochs(v.epochs),
          v.any_fixed_run_finished() ? "left the start at a fixed batch (each run's note says so)" : "finished");
    else if (fastest->batch == rec.batch)
      out.reason = fmt::format(
          "{}; validated by full runs of {} ({} rate): the fastest within noise of the "
          "best final quality, {} to {}",
          rec.reason, format_epochs(v.epochs), v.lr_schedule, format_seconds(fastest->train_s), quality(*fastest));
    else {
      out.batch = fastest->batch;
      out.reason = fmt::format(
          "batch {} trained the {:g}-epoch run soonest without a worse model, {} to {}, where the predicted "
          "batch {} {}; the prediction was: {}",
          fastest->batch, v.epochs, format_seconds(fastest->train_s), quality(*fastest), rec.batch,
          predicted ? fmt::format("took {} to {}{}", format_seconds(predicted->train_s), quality(*predicted),
                                  predicted->good ? "" : ", worse than the best beyond noise")
                    : "was not run",
          rec.reason);
    }
    if (schedule)
      out.reason +=
          schedule->final_loss
              ? fmt::format("; the batch-size schedule {} trained in {} to {}{}", schedule->schedule,
                            format_seconds(schedule->train_s), quality(*schedule),
                            v.schedule_saving
                                ? fmt::format(", {:.0f} % {} time than {}", 100 * std::abs(*v.schedule_saving),
                                              *v.schedule_saving >= 0 ? "less" : "more",
                                              fastest ? fmt::format("batch {}", fastest->batch)
                                                      : std::string("the fastest good batch"))
                            : !schedule->message.empty() ? "; it " + schedule->message  // still at the start
                            : !v.best_batch              ? std::string()  // no fixed batch's run to judge it by
                                                         : std::string(", worse than the best beyond noise"))
              : fmt::format("; the batch-size schedule {} did not finish: {}", schedule->schedule, schedule->message);
    return out;
  }
  if (!fastest) {
    out.reason = fmt::format("{}; not validated: no candidate reached {} ({})", rec.reason, v.target,
                             v.runs.empty() ? "none ran" : v.runs.front().message);
  } else if (fastest->batch == rec.batch) {
    out.reason = fmt::format("{}; validated: it reached {} soonest, in {}", rec.reason, v.target, took(*fastest));
  } else {
    out.batch = fastest->batch;
    out.reason = fmt::format(
        "batch {} reached {} soonest, in {}, where the predicted batch {} {}; the prediction was: {}", fastest->batch,
        v.target, took(*fastest), rec.batch,
        predicted ? (predicted->reached ? "took " + took(*predicted) : "did not reach it (" + predicted->message + ")")
                  : "was not run",
        rec.reason);
  }
  return out;
}

std::optional<Recommendation> recommend(const RunRace& race) {
  if (!race.best_batch) return std::nullopt;
  std::vector<int64_t> good;
  for (const auto& e : race.entries)
    if (e.good) good.push_back(e.batch);
  std::string reason = race.pick_reason;
  if (good.size() > 1) reason += fmt::format("; no worse a model either: batches {}", fmt::join(good, ", "));
  std::vector<int64_t> as_fast;  // the good batches the sweep cannot order against the pick
  for (int64_t b : race.within_5_percent)
    if (b != *race.best_batch) as_fast.push_back(b);
  if (!as_fast.empty())
    reason += fmt::format(
        "; {} {} {} within 5 % of batch {}'s time by the sweep's samples/s, closer than the sweep can order them: {} "
        "trains about as fast",
        as_fast.size() > 1 ? "batches" : "batch", fmt::join(as_fast, ", "), as_fast.size() > 1 ? "are" : "is",
        *race.best_batch, as_fast.size() > 1 ? "any of them" : "either");
  if (!race.not_raced.empty())
    reason += fmt::format("; {} {} not raced (larger and no faster than the fastest candidate; not judged)",
                          race.not_raced.size() > 1 ? "batches" : "batch", fmt::join(race.not_raced, ", "));
  const std::vector<int64_t> unfinished = past_wall_limit(race);
  if (!unfinished.empty())
    reason += fmt::format("; {} {} not judged: the race stopped at its wall limit before {} runs finished",
                          unfinished.size() > 1 ? "batches" : "batch", fmt::join(unfinished, ", "),
                          unfinished.size() > 1 ? "their" : "its");
  if (race.schedule) reason += "; " + race.schedule_reason;
  Recommendation r;
  r.batch = *race.best_batch;
  r.reason = reason;
  return r;
}

}  // namespace batchwise

// The recommendation, from the fit alone up to a validation: one unit for every way tune decides.
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

const char* to_string(Confidence c) {
  switch (c) {
    case Confidence::High:
      return "high";
    case Confidence::Medium:
      return "medium";
    case Confidence::Low:
      return "low";
  }
  return "low";
}

namespace {

struct Assessed {
  Confidence level;
  std::string reason;
};

// From a validation: the candidates trained in full (or to the target).
Assessed from_validation(const ValidationResult& v, int64_t batch) {
  const std::string how = v.epochs > 0 ? "full runs of " + format_epochs(v.epochs) : "training to " + v.target;
  if (!v.fastest_batch && v.epochs > 0 && v.any_fixed_run_finished())
    return {Confidence::Low,
            fmt::format("the validation's {} left the plateau at the start at none of its fixed batches, so nothing "
                        "checked the answer; a longer --epochs trains past it",
                        how)};
  if (!v.fastest_batch)
    return {Confidence::Low, fmt::format("the validation's {} finished none of its candidates, so nothing checked the "
                                         "answer; give a reachable target or more --max-epochs",
                                         how)};
  if (*v.fastest_batch != batch)  // a batch-size schedule's saving is reported beside it, never the answer
    return {Confidence::Medium,
            fmt::format("validated by {}, but batch {} was the fastest there", how, *v.fastest_batch)};
  int64_t smallest = 0;  // the smallest fixed batch trained
  for (const auto& r : v.runs)
    if (r.schedule.empty() && (smallest == 0 || r.batch < smallest)) smallest = r.batch;
  if (v.epochs > 0 && v.best_batch == smallest && smallest > 1) {
    std::vector<int64_t> below{std::max<int64_t>(1, smallest / 4), smallest / 2, smallest};
    below.erase(std::unique(below.begin(), below.end()), below.end());
    return {Confidence::Medium,
            fmt::format("validated by {}, but the best final quality was at batch {}, the smallest trained: a smaller "
                        "batch may end better still (`batchwise validate --batch-sizes {} --epochs {:g} --lr-schedule "
                        "{} --extend-below 2` says)",
                        how, smallest, fmt::join(below, ","), v.epochs, v.lr_schedule)};
  }
  return {Confidence::High, fmt::format("validated: {} trained it and its neighbours, and it was the fastest{}", how,
                                        v.epochs > 0 ? " without a worse model" : "")};
}

// The --advice-budget that trains a race `factor` times longer than one that took `wall_s`: about
// its wall time that many times over (its fixed costs, the range tests, do not grow with it, which
// leaves room), up to a whole 10 s; "a larger --advice-budget" where the race's wall time is not known.
// `shared_s`: the time it took where that was more, sharing the CPU.
std::string larger_budget(double wall_s, double factor, double shared_s = 0) {
  if (!(wall_s > 0) || !(factor > 1) || !std::isfinite(factor)) return "a larger --advice-budget";
  return fmt::format("--advice-budget {:.0f} (about {:.3g}x this race's {:.0f} s{})",
                     std::ceil(wall_s * factor / 10) * 10, factor, wall_s,
                     shared_s > wall_s ? fmt::format(" on its own: it took {:.0f} s sharing the CPU", shared_s) : "");
}

// The run race's wall time as this machine takes it alone: less the share its threads waited for a core
// where it shared the CPU (an --advice-budget from its whole time had asked 4.6x a race slowed 9x by another
// process's work).
double quiet_wall_s(const RunRace& race) {
  const double waited = race.cpu_wait_share && *race.cpu_wait_share > kSharedCpuShare ? *race.cpu_wait_share : 0;
  return race.wall_s * (1 - waited);
}

// The run race's compressed runs snap to a grid of steps that may cost a third of their budget
// (on_step_grid): a budget this much larger still sees what it is asked to.
constexpr double kStepGridMargin = 1.5;

// From the run race (tune --epochs): a prediction for the user's run from compressed runs; low
// where its gaps were carried over more than kFarthestCarry doublings (the race saw less than an
// eighth of the run: lenet's 15 epochs from 0.4, where 64-256's gaps had not begun to shrink and
// its full runs end level).
constexpr double kFarthestCarry = 3;

Assessed from_run_race(const RunRace& race) {
  std::vector<int64_t> good;
  for (const auto& e : race.entries)
    if (e.good) good.push_back(e.batch);
  const std::vector<int64_t> unjudged = past_wall_limit(race);
  if (race.stopped_at_wall_limit)
    return {
        Confidence::Low,
        fmt::format("the run race stopped at its wall limit (the machine trained far slower than the sweep "
                    "measured) {} (no worse: {}); tune again on a quiet machine, or --validate trains the full runs",
                    unjudged.empty() ? "before it raced on to check its answer"
                                     : fmt::format("before it judged {}", fmt::join(unjudged, ", ")),
                    fmt::join(good, ", "))};
  const std::string judged =
      fmt::format("{} judged no worse: {}", good.size() == 1 ? "one batch" : fmt::format("{} batches", good.size()),
                  fmt::join(good, ", "));
  const double seen = race.lengths_epochs.empty() ? 0 : race.lengths_epochs.back();
  const double doublings = seen > 0 ? std::log2(race.epochs / seen) : 0;  // carried past the longest run
  if (doublings > kFarthestCarry)
    return {Confidence::Low,
            fmt::format("predicted for your {:g}-epoch run from compressed runs of at most {} ({:.1f} % of "
                        "it): each batch's gap was carried over {:.1f} doublings of the run ({}); {} sees an eighth of "
                        "it, and --validate trains the full runs",
                        race.epochs, format_epochs(seen, 2), 100 * seen / race.epochs, doublings, judged,
                        larger_budget(quiet_wall_s(race),
                                      kStepGridMargin * race.epochs / std::exp2(kFarthestCarry) / seen, race.wall_s))};
  if (race.whole_run())  // its longest run was the user's: measured, one run a batch, one seed
    return {Confidence::Medium,
            fmt::format("measured, not predicted: each batch trained your whole {:g}-epoch run once from your weights "
                        "({}), so one seed's spread is not in it; `batchwise validate --epochs {:g} --lr-schedule {} "
                        "--batch-sizes {} --seed S` with another seed trains them again from other weights",
                        race.epochs, judged, race.epochs, race.lr_schedule, fmt::join(good, ","))};
  return {Confidence::Medium,
          fmt::format("predicted for your {:g}-epoch run from compressed runs ({}), not trained in full; --validate "
                      "trains the candidates' full runs to check it",
                      race.epochs, judged)};
}

// From the batch race: resolved or within noise, and for how long a run.
Assessed from_race(const BatchRace& race) {
  const double epochs = race.rung_leads.empty() ? 0 : race.rung_leads.back().epochs;
  if (race.stopped_at_wall_limit)
    return {Confidence::Low,
            fmt::format("the race stopped at its wall limit (the machine trained far slower than the sweep "
                        "measured){}, so batch {} is the best of what it had trained, about {}; tune "
                        "again on a quiet machine",
                        race.left_out.empty() ? ""
                                              : fmt::format("; left out: {} {} (its notes say why)",
                                                            race.left_out.size() > 1 ? "batches" : "batch",
                                                            fmt::join(race.left_out, ", ")),
                        *race.best_batch, format_epochs(epochs, 2))};
  // Every candidate ended worse than where all began (the lead's loss is the lowest): it had left the
  // start on the way (a dip 2 % below it), so the race ranked them, but it ranked the least worse.
  if (!race.rung_leads.empty() && race.loss_before > 0 && race.rung_leads.back().loss > race.loss_before)
    return {
        Confidence::Low,
        fmt::format("every candidate's held-out loss ended above the {:.4g} all began at (the lead's {:.4g}): their "
                    "models got worse over the race (a rate that diverges, or overfitting), so batch {} is the "
                    "least worse, not a good one; lower the base --lr, or check with --validate",
                    race.loss_before, race.rung_leads.back().loss, *race.best_batch)};
  // A race behind its planned wall time fits its later rungs to what is left, down to a few steps
  // each: a lenet race stopped for 95 s trained its rungs 2 and 3 for 0.09 and 0.05 s per entry
  // instead of 2.2 and 4.4 s, and ranked there.
  if (const size_t n = race.horizons_s.size();
      n > 0 && race.planned_horizons_s.size() == n && race.horizons_s.back() < 0.5 * race.planned_horizons_s.back())
    return {Confidence::Low,
            fmt::format("the race fell behind its planned wall time and fitted its later rungs to what was left, so "
                        "batch {} leads after {:.3g} s of training per candidate, not the {:.3g} s planned (its notes "
                        "say where); tune again on a quiet machine, or give the race a larger --advice-budget",
                        *race.best_batch, race.horizons_s.back(), race.planned_horizons_s.back())};
  if (epochs < 0.1)
    return {Confidence::Low,
            fmt::format("the race trained each candidate for {}, the first minutes of a run, and its lead "
                        "may not hold for longer; {} trains them for 0.1 epochs, or --epochs N answers for your run",
                        format_epochs(epochs, 2), larger_budget(race.wall_s, 0.1 / epochs))};
  // The pick is the largest batch raced, and larger candidates were left out before the first rung (too
  // few steps fitted it): no larger batch was compared, so the lead is not known to be the best (a
  // race of 16 and 32 picked 32 as "resolved", where the same tune with 64 raced picked 64).
  std::vector<int64_t> larger;
  for (const int64_t b : race.left_out)
    if (b > *race.best_batch) larger.push_back(b);
  const bool at_the_top = std::none_of(race.entries.begin(), race.entries.end(),
                                       [&](const RaceEntry& e) { return e.batch > *race.best_batch && e.rungs > 0; });
  if (!larger.empty() && at_the_top)
    return {Confidence::Medium,
            fmt::format("measured among the batches the race trained, but batch {} is the largest of them: {} {} {} "
                        "left out before its first rung (too few steps fitted it; its notes say why), so no larger "
                        "batch was compared; a larger --advice-budget races {} too",
                        *race.best_batch, larger.size() > 1 ? "batches" : "batch", fmt::join(larger, ", "),
                        larger.size() > 1 ? "were" : "was", larger.size() > 1 ? "them" : "it")};
  if (race.within_5_percent.size() > 1)
    return {Confidence::Medium,
            fmt::format("measured, but within the race's noise of batches {}: any of them trains about as fast, for "
                        "about {}; --epochs N answers for your run's length",
                        fmt::join(race.within_5_percent, ", "), format_epochs(epochs, 2))};
  if (epochs < 1)
    return {Confidence::Medium, fmt::format("measured and resolved, but for about {} of training; --epochs N "
                                            "answers for your run's length",
                                            format_epochs(epochs, 2))};
  return {Confidence::High, fmt::format("measured and resolved over {} of training", format_epochs(epochs, 2))};
}

}  // namespace

namespace {

// A command that printed no step line was timed by its whole run, start-up and imports in it: nothing says it
// trained, and no figure of it is a step's (an answer had rested on a script that only slept, "confidence low" for
// the race it could not run, without a word of it). Empty where every batch that trained printed its steps.
std::string wall_timed(const SweepResult& sweep) {
  std::vector<int64_t> wall;
  for (const Trial& t : sweep.points)
    if (t.wall_timing && t.outcome == Outcome::Ok) wall.push_back(t.batch);
  const auto ok =
      std::count_if(sweep.points.begin(), sweep.points.end(), [](const Trial& t) { return t.outcome == Outcome::Ok; });
  if (wall.empty()) return "";
  if (static_cast<long>(wall.size()) == ok)
    return "; and no batch of the sweep printed a step line, so each was timed by its whole run (start-up and imports "
           "in it) and nothing says it trained: print `batchwise: step` lines (docs/cmd.md)";
  const bool many = wall.size() > 1;
  return fmt::format(
      "; and batch{} {} printed no step line, so {} timed by {} whole run (start-up and imports in it) and nothing "
      "says {} trained: print `batchwise: step` lines (docs/cmd.md)",
      many ? "es" : "", fmt::join(wall, ", "), many ? "they were" : "it was", many ? "their" : "its",
      many ? "they" : "it");
}

}  // namespace

Recommendation with_confidence(Recommendation rec, const Evidence& e) {
  Assessed a{Confidence::Low, ""};
  // A validation stopped before its runs ended (a Ctrl-C) checked nothing: the answer is the races'.
  const ValidationResult* checked = e.validation && !e.validation->interrupted ? e.validation : nullptr;
  if (checked)
    a = from_validation(*checked, rec.batch);
  else if (e.run_race && e.run_race->best_batch)
    a = from_run_race(*e.run_race);
  else if (e.run_race && e.race && e.race->best_batch)  // the batch race after a run race that saw no learning
    a = {Confidence::Low,
         fmt::format("the run race's compressed runs never left the plateau at the start, so batch {} is the batch "
                     "race's: the one that left it first at a constant rate, not judged on your run's final model; "
                     "check it with --validate",
                     *e.race->best_batch)};
  else if (e.race && e.race->best_batch)
    a = from_race(*e.race);
  else if (e.race && e.race->stuck)
    a = {Confidence::Low,
         fmt::format("no race saw a batch leave the plateau at the start, so batch {} is the plateau's answer (the "
                     "smallest batch the race trained longest), not a measured ranking: check it with --validate, "
                     "or train the races longer with a larger --advice-budget",
                     rec.batch)};
  else if (e.run_race && e.run_race->stopped_at_wall_limit)
    a = {Confidence::Low,
         fmt::format("the run race stopped at its wall limit before its reference's runs finished (the machine "
                     "trained far slower than the sweep measured), so the answer is {}; tune again on a quiet machine",
                     e.goodput ? "the noise scale's goodput" : "the throughput knee")};
  else if (e.race || e.run_race)
    a = {Confidence::Low,
         fmt::format("the {} could not rank its candidates (its notes say why), so the answer is {}; a "
                     "larger --advice-budget trains them longer",
                     e.run_race ? "run race" : "batch race",
                     e.goodput ? "the noise scale's goodput" : "the throughput knee")};
  else if (e.goodput)
    a = {Confidence::Medium,
         fmt::format("from the noise scale's goodput, a model of training progress, not progress measured ({} ran no "
                     "race)",
                     e.no_race_reason.empty() ? "this run" : e.no_race_reason)};
  else
    a = {Confidence::Low, fmt::format("throughput alone: no training progress was compared ({}), and the fastest batch "
                                      "per sample is not the one that trains soonest",
                                      e.no_race_reason.empty() ? "no race ran" : e.no_race_reason)};
  const bool the_knee =
      !checked && !(e.run_race && e.run_race->best_batch) && !(e.race && e.race->best_batch) && !e.goodput;
  if (the_knee && e.sweep && !e.sweep->unsettled.empty()) {  // the answer is the knee, and the knee is noise's
    a.level = Confidence::Low;
    a.reason += fmt::format(
        "; and the sweep's figures at {} are noise's (its repetitions disagreed): run on a quiet "
        "machine",
        fmt::join(e.sweep->unsettled, ", "));
  }
  if (const std::string wall = e.sweep ? wall_timed(*e.sweep) : std::string(); !wall.empty())
    a.level = Confidence::Low, a.reason += wall;
  // A sweep that shared the CPU read its larger batches slower than they are (sweep.h): an answer not
  // validated rests on its figures, the candidates a race trained and the times it weighed them by.
  if (!checked && e.sweep && !e.sweep->shared_cpu_warning.empty()) {
    a.level = Confidence::Low;
    a.reason += fmt::format(
        "; and the sweep shared the CPU (its threads waited for a core {:.0f} % of the time they were ready to "
        "run), which skews its figures (on a CPU the larger batches read slower than they are) and with them the "
        "knee and the candidates{}",
        100 * cpu_wait_share(*e.sweep),
        a.reason.find("quiet machine") == std::string::npos ? ": tune again on a quiet machine" : "");
  }
  if (e.validation && e.validation->interrupted)  // the answer stands as the races gave it
    a.reason += "; the validation was stopped before all its runs ended, so it checked nothing";
  // A validation that shared the CPU timed its runs with another process's share in them, and its
  // times chose the fastest good batch (its final qualities are not skewed).
  if (const double most = checked ? most_cpu_wait_share(*checked) : 0;
      most > kSharedCpuShare && a.level != Confidence::Low) {
    a.level = Confidence::Low;
    a.reason += fmt::format(
        "; but the validation shared the CPU (a run's threads waited for a core {:.0f} % of the time they were ready "
        "to run), which skews the times that chose the fastest good batch: validate again on a quiet machine",
        100 * most);
  }
  rec.confidence = a.level;
  rec.confidence_reason = std::move(a.reason);
  return rec;
}

}  // namespace batchwise

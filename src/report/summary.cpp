// The short console answer (tune without --verbose): the header and its warnings, at most five lines
// of why (the fit, the knee, the noise scale, what decided, the confidence), and one closing line
// with the answer. Every table stays in to_table (--verbose) and the JSON and HTML reports.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "batchwise/noise.h"
#include "batchwise/plan.h"
#include "batchwise/recommend.h"
#include "batchwise/report.h"
#include "batchwise/units.h"
#include "report/console.h"

namespace batchwise {
namespace {

using detail::Lines;

// "64 to 256" where no batch between those ends was left out of `batches`: none of `considered` (what the deciding
// part trained or judged; empty: not known, then doublings one after another), else each named ("8, 64"): a range
// over good batches 8 and 64 had said 16 and 32 were about as good, where the race left them out or judged them worse.
std::string range_text(std::vector<int64_t> batches, const std::vector<int64_t>& considered = {}) {
  if (batches.size() < 2) return {};
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  bool whole = true;
  for (size_t k = 1; k < batches.size() && considered.empty(); ++k) whole = whole && batches[k] == 2 * batches[k - 1];
  for (const int64_t b : considered)
    whole =
        whole && (b <= batches.front() || b >= batches.back() || std::binary_search(batches.begin(), batches.end(), b));
  return whole ? fmt::format("{} to {}", batches.front(), batches.back()) : fmt::format("{}", fmt::join(batches, ", "));
}

std::string fit_line(const FitResult& f, int64_t budget_bytes) {
  if (!f.batch)
    return (f.outcome == FitOutcome::Error ? "fit: no batch trained: " : "fit: no batch fits: ") + f.message;
  std::string peak;
  const double budget = static_cast<double>(budget_bytes);
  for (const auto& t : f.trials)
    if (t.batch == *f.batch && t.peak_bytes > 0)
      peak = fmt::format(", peaking at {} ({:.1f} % of the budget)", format_bytes(t.peak_bytes),
                         budget > 0 ? 100.0 * static_cast<double>(t.peak_bytes) / budget : 0.0);
  if (f.trials.empty()) return fmt::format("fit: batch {} (reused: no fit trials ran)", *f.batch);
  const char* verdict = f.limited_by_max ? "fits (the --max: no larger batch was tried)" : "is the largest that fits";
  return fmt::format("fit: batch {} {}{}", *f.batch, verdict, peak);
}

// `set`: "the N training samples" (training_set_text).
std::string knee_line(const SweepResult& s, int64_t training_samples, const std::string& set,
                      const std::optional<Recommendation>& answer) {
  if (!s.knee_batch) return "knee: none (no batch trained in the sweep)";
  // The knee within the training set, where the answer took it (tune; a sweep's answer is its own knee)
  std::optional<int64_t> within = knee_within(s, training_samples);
  if (!answer || answer->batch != within) within = s.knee_batch;
  const auto at = [&s](int64_t batch) {
    for (const auto& p : s.points)
      if (p.batch == batch) return fmt::format("batch {} at {} samples/s", batch, format_grouped(p.samples_per_s));
    return fmt::format("batch {}", batch);
  };
  if (within != s.knee_batch)  // the answer's knee, where the sweep's would repeat samples in a step
    return fmt::format("knee: {} among the batches up to {}; {} over all", at(*within), set, at(*s.knee_batch));
  int64_t largest = 0, swept = 0;  // where no larger batch trained in the sweep, none was measured to add little
  for (const auto& p : s.points) {
    swept = std::max(swept, p.batch);
    if (p.outcome == Outcome::Ok) largest = std::max(largest, p.batch);
  }
  if (*s.knee_batch == largest)  // the training set stopped it where nothing larger was tried and it held no double
    return fmt::format("knee: {}, the largest batch that trained in the sweep{}", at(largest),
                       training_samples > 0 && largest > training_samples
                           ? fmt::format(" (itself larger than {}: a step repeats some of them)", set)
                       : training_samples > 0 && swept == largest && 2 * largest > training_samples
                           ? fmt::format(" (none above {})", set)
                           : "");
  return fmt::format("knee: {}; a larger batch adds under {:.0f} %", at(*s.knee_batch), 100 * s.knee_tolerance);
}

std::string noise_line(const NoiseResult& n) {
  if (!n.b_simple) return "noise scale: not measured: " + n.message;
  if (const std::string unbounded = unbounded_noise_text(n); !unbounded.empty())
    return fmt::format("noise scale: B_simple {:.0f} ({:.0f} to {:.0f}): {}", *n.b_simple, n.b_simple_low,
                       n.b_simple_high, unbounded);
  return fmt::format("noise scale: B_simple {:.0f} ({:.0f} to {:.0f}): above it, each doubling of the batch buys less",
                     *n.b_simple, n.b_simple_low, n.b_simple_high);
}

std::vector<int64_t> race_batches(const BatchRace& race) {
  std::vector<int64_t> out;
  for (const auto& e : race.entries) out.push_back(e.batch);
  return out;
}

// The batches about as good as the answer, from what decided it; `considered`, where given, gets every batch that
// part trained or judged (range_text's gaps).
std::vector<int64_t> flat_range(const Report& r, std::vector<int64_t>* considered = nullptr) {
  std::vector<int64_t> none;
  std::vector<int64_t>& all = considered ? *considered : none;
  if (r.validation)
    for (const ValidationRun& run : r.validation->runs)
      if (run.schedule.empty()) all.push_back(run.batch);
  if (r.validation && r.validation->epochs > 0 && !r.validation->good_batches.empty())
    return r.validation->good_batches;
  // A validation to a target: the runs that reached it within 5 % of the soonest's time (the race's range had
  // been said beside a validation in which some of it never reached the target)
  if (r.validation && r.validation->epochs <= 0 && r.validation->fastest_batch) {
    const ValidationRun* soonest = fixed_run(*r.validation, *r.validation->fastest_batch);
    std::vector<int64_t> near;
    for (const ValidationRun& run : r.validation->runs)
      if (soonest && run.schedule.empty() && run.reached && run.train_s <= 1.05 * soonest->train_s)
        near.push_back(run.batch);
    return near;
  }
  all.clear();  // no validation decided: the race's, or goodput's, candidates
  if (r.run_race && r.run_race->best_batch) {
    std::vector<int64_t> good;
    for (const auto& e : r.run_race->entries) {
      all.push_back(e.batch);
      if (e.good) good.push_back(e.batch);
    }
    return good;
  }
  if (r.race && r.race->best_batch) {
    all = race_batches(*r.race);
    return r.race->within_5_percent;
  }
  if (r.race && r.race->stuck) return {};  // nothing measured ranks the batches
  if (r.goodput && r.goodput->best_batch) {
    for (const GoodputPoint& p : r.goodput->points) all.push_back(p.batch);
    return r.goodput->within_5_percent;
  }
  return {};
}

// What decided the answer, in one line: validation, the run race, the batch race, or goodput.
std::string decider_line(const Report& r) {
  if (r.validation && r.validation->fastest_batch && !r.validation->interrupted) {  // stopped: it decided nothing
    const ValidationResult& v = *r.validation;
    if (const ValidationRun* run = fixed_run(v, *v.fastest_batch))
      return v.epochs > 0 ? fmt::format(
                                "validation: batch {} trained your {:g}-epoch run fastest ({}) without a "
                                "worse model",
                                run->batch, v.epochs, format_seconds(run->train_s))
                          : fmt::format("validation: batch {} reached {} soonest ({} of training)", run->batch,
                                        v.target, format_seconds(run->train_s));
  }
  if (r.run_race && r.run_race->best_batch) {
    const RunRace& race = *r.run_race;
    const std::vector<int64_t> good = flat_range(r);
    for (const auto& e : race.entries)
      if (e.batch == *race.best_batch)
        return fmt::format("run race: batch {} finishes your {:g}-epoch run soonest ({}) without a worse model{}",
                           e.batch, race.epochs, format_seconds(e.full_run_s),
                           good.size() > 1 ? fmt::format("; no worse: {}", fmt::join(good, ", ")) : "");
  }
  if (r.race && r.race->best_batch) {
    const BatchRace& race = *r.race;
    const RaceEntry *best = nullptr, *lead = nullptr;
    for (const auto& e : race.entries) {
      if (e.batch == *race.best_batch && e.loss_at_horizon) best = &e;
      if (race.lead_batch && e.batch == *race.lead_batch && e.loss_at_horizon) lead = &e;
    }
    // What the lead did: reached the target first, or the lowest loss at the horizon; a pick the race could not
    // tell from it is the larger (it had said the pick "reached the lowest" of a loss the lead was below)
    const auto did = [&](const RaceEntry& e) {
      if (!race.target.empty() && e.target_s)
        return fmt::format("reached the target ({}) first, after {:.1f} s of training", race.target, *e.target_s);
      return fmt::format("reached the lowest {} ({:.4f}) in {:.1f} s of training",
                         race.on_training_data ? "loss on training samples" : "held-out loss", *e.loss_at_horizon,
                         race.horizons_s.empty() ? e.train_s : race.horizons_s.back());
    };
    const std::string range =
        race.within_5_percent.size() > 1
            ? fmt::format("; {} within 5 %", range_text(race.within_5_percent, race_batches(race)))
            : "";
    if (best && lead && lead != best)
      return fmt::format("race: batch {} {}; batch {}, which the race could not tell from it, is the larger{}",
                         lead->batch, did(*lead), best->batch, range);
    if (best) return fmt::format("race: batch {} {}{}", best->batch, did(*best), range);
  }
  if (r.race && r.race->stuck && r.recommendation)
    return fmt::format(
        "race: no batch left the plateau at the start in {:.1f} s of training; batch {}, the smallest trained longest, "
        "is the plateau's answer, not a measured one",
        r.race->horizons_s.empty() ? 0.0 : r.race->horizons_s.back(), r.recommendation->batch);
  if (r.goodput && r.goodput->best_batch)
    return fmt::format("goodput: batch {} makes the most progress per second at B_simple {:.0f}",
                       *r.goodput->best_batch, r.goodput->b_simple);
  return {};
}

}  // namespace

std::string answered_run(const Report& r) {
  // tune --epochs's validation stopped: said as validate's is (its run race's line had hidden it)
  const char* stopped = r.validation && r.validation->interrupted ? ", interrupted" : "";
  if (r.run_race)
    return fmt::format("{}, {} rate{}", format_epochs(r.run_race->epochs), r.run_race->lr_schedule, stopped);
  if (r.validation && r.validation->epochs > 0)
    return fmt::format("{}, {} rate{}", format_epochs(r.validation->epochs), r.validation->lr_schedule,
                       r.validation->interrupted ? ", interrupted" : "");
  if (r.validation && r.validation->interrupted) return "to a target, interrupted";
  return "-";
}

std::string stopped_line(const ValidationResult& v) {
  if (!v.interrupted) return "";
  return fmt::format("stopped{}: not trained: {}", v.runs.empty() ? " before any run ended" : "",
                     fmt::join(not_trained_names(v, "the schedule"), ", "));
}

std::string closing_line(const Report& r) {
  if (!r.recommendation) {
    if (r.fit && !r.fit->batch)  // out of memory at the smallest batch, or an error that is not memory's
      return fmt::format("answer: none: {} ({})",
                         r.fit->outcome == FitOutcome::Error ? "no batch trained" : "no batch fits", r.fit->message);
    if (r.validation && r.validation->interrupted) {
      const std::vector<int64_t>& rest = r.validation->not_trained;
      std::string what =
          rest.empty() ? "" : fmt::format("{} {}", rest.size() > 1 ? "batches" : "batch", fmt::join(rest, ", "));
      if (r.validation->schedule_not_trained) what += what.empty() ? "the schedule" : " and the schedule";
      return fmt::format("answer: none: interrupted before {} trained (the warning says how to finish it)", what);
    }
    if (const ValidationResult* v = r.validation ? &*r.validation : nullptr; v && !v->runs.empty()) {
      if (v->epochs > 0 && v->any_fixed_run_finished())
        return fmt::format(
            "answer: none: no fixed batch's run left the start in {} (each run's note says so): a longer "
            "--epochs trains past it",
            format_epochs(v->epochs));
      return v->epochs > 0 ? "answer: none: no full run finished (each run's note says why)"
                           : fmt::format("answer: none: no batch reached {} (each run's note says why)", v->target);
    }
    if (r.noise && !r.fit && !r.sweep && !r.race && !r.run_race) {  // noise answers the critical batch, not a batch
      // No upper end: no critical batch, as the table and the HTML say (the answer had stated one)
      if (const std::string unbounded = unbounded_noise_text(*r.noise); !unbounded.empty())
        return "answer: none: no critical batch: " + unbounded;
      return r.noise->b_simple
                 ? fmt::format(
                       "answer: the critical batch (gradient noise scale B_simple) is {:.0f}, band {:.0f} to "
                       "{:.0f}, from {} steps at batch {}",
                       *r.noise->b_simple, r.noise->b_simple_low, r.noise->b_simple_high, r.noise->timeline.size(),
                       r.noise->batch)
                 : fmt::format("answer: none: the noise scale was not measured ({})", r.noise->message);
    }
    if (r.run_race && r.run_race->reference_diverged && !r.run_race->entries.empty())
      return fmt::format("answer: none: the learning rate diverged at batch {} (lr {:.4g}): lower --lr",
                         r.run_race->entries.front().batch, r.run_race->entries.front().lr.lr);
    return "answer: none: no batch trained (the report's warnings say why)";
  }
  std::vector<std::string> parts{fmt::format("answer: batch {}", r.recommendation->batch)};
  if (r.lr) {
    const LrAdvice& l = *r.lr;
    // An optimizer step takes the global batch the rate is for (every rank's, data-parallel: the per-device batch had
    // counted twice the warm-up steps of the plan's table at 2 ranks)
    const int64_t global = l.scaled.batch > 0 ? l.scaled.batch : r.recommendation->batch;
    const int64_t per_epoch =
        r.workload.dataset_size > 0 && global > 0 ? (r.workload.dataset_size + global - 1) / global : 0;
    const std::string warmup = warmup_text(l, per_epoch);
    parts.push_back(warmup == "none" ? fmt::format("lr {:.4g}, no warm-up", l.lr)
                                     : fmt::format("lr {:.4g}, warm-up {}", l.lr, warmup));
  }
  std::vector<int64_t> considered;
  const std::vector<int64_t> good = flat_range(r, &considered);
  const std::string flat = range_text(good, considered);
  if (!flat.empty()) parts.push_back(fmt::format("batches {} about as good", flat));
  if (r.recommendation->confidence)
    parts.push_back(fmt::format("confidence {}", to_string(*r.recommendation->confidence)));
  return fmt::format("{}", fmt::join(parts, " | "));
}

std::string to_summary(const Report& r) {
  Lines line;
  detail::header_table(line, r);
  detail::requested_tables(line, r);
  std::vector<std::string> why;
  if (r.fit) why.push_back(fit_line(*r.fit, r.budget_bytes));
  if (r.sweep)
    why.push_back(knee_line(*r.sweep, per_device_training_samples(r), detail::training_set_text(r), r.recommendation));
  if (r.noise) why.push_back(noise_line(*r.noise));
  if (const std::string decided = decider_line(r); !decided.empty()) why.push_back(decided);
  if (r.recommendation && r.recommendation->confidence)
    why.push_back(fmt::format("confidence {}: {}", to_string(*r.recommendation->confidence),
                              r.recommendation->confidence_reason));
  line("");
  line("why:");
  for (const auto& w : why) line("  " + w);
  line("");
  if (r.timing) line(detail::timing_line(*r.timing));
  line("every table: --verbose; the whole report: --json FILE or --html FILE");
  line(closing_line(r));
  return std::move(line).text();
}

std::vector<NothingTrained> nothing_trained(const Report& report) {
  std::vector<NothingTrained> out;
  // Counts (ok, out of memory, all) over `items` by `outcome`.
  const auto count = [](const auto& items, auto outcome) {
    int ok = 0, oom = 0;
    for (const auto& item : items) ok += outcome(item) == Outcome::Ok, oom += outcome(item) == Outcome::Oom;
    return std::tuple{ok, oom, static_cast<int>(items.size())};
  };
  if (report.sweep && !report.sweep->points.empty()) {
    const auto [ok, oom, n] = count(report.sweep->points, [](const Trial& t) { return t.outcome; });
    if (ok == 0)
      out.push_back({NothingTrained::Part::Sweep, oom == n,
                     fmt::format("no batch trained: {} of {} swept batches ended in an error or a timeout, {} ran "
                                 "out of memory; nothing was measured (each batch's message says why)",
                                 n - oom, n, oom)});
  }
  if (report.loader) {
    std::vector<Outcome> outcomes{report.loader->before.outcome};
    for (const auto& t : report.loader->trials) outcomes.push_back(t.outcome);
    const auto [ok, oom, n] = count(outcomes, [](Outcome o) { return o; });
    if (ok == 0) out.push_back({NothingTrained::Part::Loader, oom == n, ""});
  }
  if (report.validation && !report.validation->interrupted && !report.validation->runs.empty()) {
    const auto [ok, oom, n] = count(report.validation->runs, [](const ValidationRun& r) { return r.outcome; });
    if (ok == 0)
      out.push_back({NothingTrained::Part::Validation, oom == n,
                     fmt::format("no run trained: {} of {} validation runs ended in an error or a loss that was not "
                                 "finite, {} ran out of memory; nothing was validated (each run's message says why)",
                                 n - oom, n, oom)});
  }
  if (report.run_race && report.run_race->reference_diverged && !report.recommendation &&
      !report.run_race->entries.empty()) {
    const RunRaceEntry& ref = report.run_race->entries.front();
    out.push_back(
        {NothingTrained::Part::RunRace, false,
         fmt::format("no answer: the run race's reference, batch {}, diverged at lr {:.4g} (its loss stopped "
                     "being finite in a compressed run of the {:.3g}-epoch run): no candidate was judged, and "
                     "an answer would hand out a rate no run showed to train; lower the learning rate (--lr) "
                     "and tune again",
                     ref.batch, ref.lr.lr, report.run_race->epochs)});
  }
  return out;
}

}  // namespace batchwise

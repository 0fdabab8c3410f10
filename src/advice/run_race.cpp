// The answer for the user's run: the reference batch trains the schedule squeezed into three
// fractions of the run, every other candidate the two longer of them; how far behind the
// reference's each ends, and how that gap shrank as the run doubled, carried to the run's end, say
// what a larger batch's run loses against the reference's.
#include "batchwise/run_race.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <type_traits>

#include "advice/race_rank.h"
#include "advice/run_race_internal.h"
#include "advice/target.h"
#include "batchwise/convergence.h"
#include "batchwise/schedule.h"
#include "batchwise/sweep.h"
#include "batchwise/units.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"
#include "check.h"
#include "engine/held_out_probe.h"
#include "torch_error.h"

namespace batchwise {

double detail::now_s(const RunRaceOptions& o) {
  if (o.clock()) return o.clock()();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool detail::out_of_time(const RunRaceOptions& o, Trained& trained) {
  if (!trained.out_of_time && now_s(o) > trained.deadline_s) trained.out_of_time = true;
  return trained.out_of_time;
}

std::vector<int64_t> past_wall_limit(const RunRace& race) {
  std::vector<int64_t> batches;
  for (const RunRaceEntry& e : race.entries)
    if (e.past_wall_limit && e.batch != race.reference_batch) batches.push_back(e.batch);
  return batches;
}

namespace {

using detail::compressed_cost_s;
using detail::kLongestShare;
using detail::kNoiseUnbounded;
using detail::kTrendNoise;
using detail::noise_batch_of;
using detail::now_s;
using detail::out_of_time;
using detail::race_once;
using detail::saves_enough;
using detail::Trained;
// A measured noise scale below one sample (its trace estimate can come out at or below 0): every
// batch is far above it.
constexpr double kNoiseFloor = 1.0;

// What tune's notes and warnings say of a race past its wall limit.
constexpr const char* kSlowerThanMeasured =
    "the machine trained slower than the sweep measured (another process on the cores?)";

// Entry `e` (the race's reference where `reference`) not judged: the race passed its wall limit
// `before` its compressed run of `epochs` started, or while it trained.
void past_the_wall_limit(RunRaceEntry& e, const RunRaceOptions& o, double epochs, bool before, bool reference) {
  e.past_wall_limit = true;
  e.message = fmt::format("{}the race passed its wall limit ({}) {} its {:.3g}-epoch run: {}",
                          reference ? "" : "not judged: ", format_seconds(o.max_wall_s()), before ? "before" : "during",
                          epochs, kSlowerThanMeasured);
}

// A race whose longest compressed run is more than this many doublings short of the run runs its
// contested candidates longer (run_longer): once, one doubling, within its budget of training. A
// second round (mlp at 35 epochs, to 1.09 epochs) passed one more of six mlp tunes and took tune
// --epochs to 1.8x plain tune's time, past issue #30's 1.5x (docs/advice.md, "Contested candidates
// run longer").
constexpr double kMostCarried = 5;

// The reference's shortest run needs this many steps for its learning curve to mean something;
// fewer get a note.
constexpr int64_t kFewestSteps = 8;
static_assert(kReferenceSteps == kFewestSteps * 8 / 2, "run_race.h: 8x the reference in its shorter run (2f)");

// One compressed run of a candidate from the workload's current state: `epochs` of the schedule,
// then the held-out quality. The warm-up keeps the full run's steps, up to a quarter of the
// compressed run: a warm-up is there for stability, which takes steps, and squeezed with the run
// to the same share it left lenet at batch 512 (SGD, 0.149) at chance after 2 warm-up steps of 37,
// where its full run warms up over 117 steps and ends at 0.90.
// Past RunRaceOptions::max_wall_s (Trained::deadline_s), it stops between steps, without a
// quality, and trained.out_of_time says why.
CompressedRun run_compressed(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o,
                             const RunRaceEntry& entry, double epochs, Trained& trained) {
  const int64_t dataset = w.data().size();
  CompressedRun run;
  run.epochs = epochs;
  run.steps = run_steps(epochs, dataset, entry.batch);
  const LrAdvice& lr = entry.lr;                       // its warmup_steps: the full run's (advise_rates)
  run.warmup_steps = run_warmup_steps(lr, run.steps);  // what scheduled_lr applies
  double reported_s = 0, loss_sum = 0;                 // the last report's time: the first step's start at first
  int64_t since_report = 0;
  for (int64_t k = 0; k < run.steps; ++k) {
    w.set_lr(scheduled_lr(lr, o.lr_schedule(), k, run.steps));
    const double start = now_s(o);
    if (k == 0) reported_s = start;
    const Batch b = w.next_batch(entry.batch);
    const double loss = w.train_step(b).item<double>();  // reading it waits for the device
    const double end = now_s(o);
    run.train_s += end - start;
    if (!std::isfinite(loss)) return run;  // no quality: the caller says why
    loss_sum += loss, ++since_report;
    if (o.on_step() && end - reported_s >= 1) {
      o.on_step()(RunRaceStep{entry.batch, epochs, k + 1, run.steps, loss_sum / static_cast<double>(since_report),
                              end - trained.start_s});
      reported_s = end, loss_sum = 0, since_report = 0;
    }
    if (end > trained.deadline_s && k + 1 < run.steps) {
      trained.out_of_time = true;
      return run;
    }
  }
  const auto [loss, accuracy] = w.evaluate(held_out);
  if (std::isfinite(loss)) run.loss = loss, run.accuracy = accuracy;  // else no quality, as above
  return run;
}

// The noise scale at the workload's current weights, in micro-batches of an eighth of `batch`;
// kNoiseUnbounded where the gradient cannot be told from its noise; none where its training diverged
// (not unbounded: that would read as every batch efficient), or where it ran out of memory (a limit
// on the process's, ulimit -v, can end its steps where the race's own trained), or where one training sample
// holds no batch of two: `out_of_memory` then says why, and the race goes on without the figure, as tune's own
// noise phase does.
std::optional<double> noise_scale(ModuleWorkload& w, int64_t batch, int steps, std::string& out_of_memory) {
  if (w.data().size() < 2) {  // no batch of two: its refusal had named a --batch never given
    out_of_memory = "one training sample holds no batch of two to compare with its micro-batches";
    return std::nullopt;
  }
  int64_t micro = std::max<int64_t>(1, batch / 8);
  while (batch % micro != 0) --micro;
  NoiseResult r;
  try {
    r = measure_noise_scale(w, NoiseOptions().batch(batch).micro_batch(micro).steps(steps));
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    if (!detail::ran_out_of_memory(e)) throw;
    out_of_memory =
        fmt::format("its steps at batch {} ran out of memory ({})", batch, detail::classify_failure(e).second);
    return std::nullopt;
  }
  if (r.diverged) return std::nullopt;
  if (!r.b_simple) return kNoiseUnbounded;
  return std::isfinite(*r.b_simple) ? std::max(kNoiseFloor, *r.b_simple) : kNoiseUnbounded;
}

std::string noise_text(double b) { return b >= kNoiseUnbounded ? "beyond measure" : fmt::format("{:.0f}", b); }

// Why the pick is the answer, how the noise scale moved, and the learning curve.
void explain(RunRace& race, const RunRaceEntry* pick, double noise_end, int64_t dataset) {
  const bool accuracy = race.measure == "accuracy";
  const auto amount = [&](double g) {
    return accuracy ? fmt::format("{:.2f} accuracy points", 100 * g) : fmt::format("{:.1f} % of the loss", 100 * g);
  };
  std::vector<std::string> along;
  double last = *race.noise_at_start;
  for (size_t l = 0; l < race.runs.size(); ++l)
    if (race.runs[l].b_simple) {
      along.push_back(
          fmt::format("{} after {}", noise_text(*race.runs[l].b_simple), format_epochs(race.lengths_epochs[l], 3)));
      last = *race.runs[l].b_simple;
    }
  const char* moved = along.empty()                 ? "was"
                      : last > *race.noise_at_start ? "grew from"
                      : last < *race.noise_at_start ? "fell from"  // a measurement's noise, or a plateau's
                                                    : "stayed at";
  race.notes.push_back(fmt::format(
      "the noise scale (critical batch) {} {} at the start{}; carried on, {} "
      "at the run's end",
      moved, noise_text(*race.noise_at_start),
      along.empty() ? " (a round run longer measures none along its runs)"
                    : fmt::format(" to {}", fmt::join(along, ", ")),
      noise_end > dataset && noise_end < kNoiseUnbounded ? fmt::format("past your dataset's {} samples", dataset)
                                                         : noise_text(noise_end)));
  race.notes.push_back(fmt::format(
      "batch {}'s held-out {} {} as its run doubled, then {}: {}", race.reference_batch,
      accuracy ? "error fell by" : "loss fell by",
      accuracy ? fmt::format("{:.2f} points", 100 * race.gains[0]) : fmt::format("{:.4g}", race.gains[0]),
      accuracy ? fmt::format("{:.2f}", 100 * race.gains[1]) : fmt::format("{:.4g}", race.gains[1]),
      race.curve_exponent
          ? fmt::format("a power law in the samples, S^-{:.2f}, carried to the run's end", *race.curve_exponent)
      : race.gains[1] <= 0 ? std::string("the last doubling bought nothing, so fewer samples cost nothing either")
                           : std::string("not flattening yet, so every doubling is taken to buy the last gain")));
  if (race.middle_on_line && (accuracy ? race.runs[1].accuracy : race.runs[1].loss)) {
    const double off = accuracy ? *race.middle_on_line - *race.runs[1].accuracy
                                : (*race.runs[1].loss - *race.middle_on_line) / *race.middle_on_line;
    race.notes.push_back(fmt::format(
        "batch {}'s run of {} ended {} {} the line through its other two, within the noise of three runs: "
        "a learning curve does not steepen as its run doubles, so every gap after {} is read against the "
        "line (read against the run, each would be {}{} smaller)",
        race.reference_batch, format_epochs(race.lengths_epochs[1], 3), amount(off), accuracy ? "below" : "above",
        format_epochs(race.lengths_epochs[1], 3), accuracy ? "" : "about ", amount(off)));
  }
  if (pick) race.pick_reason = detail::pick_reason(race, *pick);
}

}  // namespace

std::string detail::pick_reason(const RunRace& race, const RunRaceEntry& pick) {
  const bool accuracy = race.measure == "accuracy";
  const auto amount = [&](double g) {
    return accuracy ? fmt::format("{:.2f} accuracy points", 100 * g) : fmt::format("{:.1f} % of the loss", 100 * g);
  };
  const bool whole_run = race.whole_run();  // the gaps were measured at its end, not carried
  if (pick.batch == race.reference_batch) {
    const bool floored = std::any_of(race.entries.begin(), race.entries.end(),
                                     [](const RunRaceEntry& e) { return e.gap_as.has_value(); });
    // A faster batch that failed, or that the wall limit cut, was not judged; one within the noise
    // but still at the start was judged, and not good (the notes say why).
    const bool unjudged = std::any_of(race.entries.begin(), race.entries.end(), [&](const RunRaceEntry& e) {
      return e.full_run_s < pick.full_run_s && !e.message.empty();
    });
    return fmt::format(
        "batch {} finishes the {:g}-epoch run soonest ({} at {:.0f} samples/s) of the batches without a worse "
        "model: every faster batch {}{} further behind it than the held-out noise of {}{}",
        pick.batch, race.epochs, format_seconds(pick.full_run_s), pick.samples_per_s,
        unjudged ? "judged (the notes name those that were not) " : "",
        whole_run ? "ended the whole run" : "is predicted to end", amount(race.tolerance),
        floored
            ? ", or is taken to end as far behind as a smaller batch that is (a larger batch is not predicted nearer)"
            : "");
  }
  // Measured against the reference's run of the same length; where the reference's quality has no
  // share to be read in (a loss at or below zero), the gap as judged.
  const auto gap = [&](const std::optional<CompressedRun>& run, size_t l) {
    return compressed_gap(race, run, l).value_or(*pick.predicted_gap);
  };
  // A gap as it reads: behind, ahead (a negative one had read "-1.80 accuracy points"), or level
  const auto where = [&](double g, const char* ahead) {
    return g > 0 ? amount(g) + " behind" : g < 0 ? amount(-g) + " " + ahead : std::string("level with");
  };
  if (whole_run)
    return fmt::format(
        "batch {} finishes the {:g}-epoch run soonest ({} at {:.0f} samples/s) without a worse model: it ended "
        "the whole run {} batch {}, within the held-out noise of {}",
        pick.batch, race.epochs, format_seconds(pick.full_run_s), pick.samples_per_s,
        where(gap(pick.run, 2), "ahead of"), race.reference_batch, amount(race.tolerance));
  return fmt::format(
      "batch {} finishes the {:g}-epoch run soonest ({} at {:.0f} samples/s) without a worse model: against "
      "batch {}'s runs, {} after {:.3g} epochs and {} after {:.3g}, the gap carried on at x{:.2f} per doubling of the "
      "run ends {} behind{}, within the held-out noise of {}",
      pick.batch, race.epochs, format_seconds(pick.full_run_s), pick.samples_per_s, race.reference_batch,
      where(gap(pick.shorter_run, 1), "ahead"), race.lengths_epochs[1], where(gap(pick.run, 2), "ahead"),
      race.lengths_epochs[2], *pick.gap_trend, amount(*pick.predicted_gap),
      pick.gap_as
          ? fmt::format(" (taken as far behind as batch {}: a larger batch is not predicted nearer)", *pick.gap_as)
          : "",
      amount(race.tolerance));
}

double detail::error_at(const std::vector<double>& samples, const std::vector<double>& errors, double run_samples) {
  const double d1 = errors[0] - errors[1], d2 = errors[1] - errors[2];
  if (d2 <= 0) return errors[2];
  if (d2 >= d1) return std::max(0.5 * errors[2], errors[2] - d2 * std::log2(run_samples / samples[2]));
  const double r = d2 / d1, alpha = -std::log2(r), scale = d1 / (1 - r);
  const double on_the_law = errors[0] - scale + scale * std::pow(run_samples / samples[0], -alpha);
  // A floor below zero is no loss's: on a law with its floor at zero or above, every doubling past
  // the last run keeps at least the last run's ratio.
  if (errors[1] <= 0 || errors[2] <= 0) return on_the_law;
  const double no_floor = errors[2] * std::pow(errors[2] / errors[1], std::log2(run_samples / samples[2]));
  return std::max(on_the_law, no_floor);
}

namespace {

// Each candidate's advised rate, with the warm-up its full run applies (at most a quarter of it)
// and the schedule after it in its advice; a candidate whose range test fails gets a message.
// `advised`: the range tests already run (the reserve's second race reuses the first's), and where
// this one's go.
void advise_rates(ModuleWorkload& w, const WorkloadState& initial, RunRace& race, const RunRaceOptions& o,
                  int64_t dataset, std::map<int64_t, LrAdvice>& advised) {
  for (auto& e : race.entries) {
    w.restore_state(initial);
    try {
      const auto known = advised.find(e.batch);
      e.lr = known != advised.end() ? known->second : advise_lr(w, e.batch, o.lr());
      advised[e.batch] = e.lr;
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& failure) {  // out of memory at this batch, or a failing step
      const std::string what = failure.what();
      e.message = "failed: " + what.substr(0, what.find('\n'));
      continue;
    }
    e.lr = for_the_run(e.lr, o.epochs(), dataset, e.batch, o.lr_schedule());
  }
}

// One compressed run of `e`; none where it failed (out of memory at this batch, or a failing step), and then
// `e.message` says how. The reference's only out of memory (a limit on the process's, ulimit -v, can end its steps
// where the sweep's trained): any other failure of it ends the race, as it did.
std::optional<CompressedRun> try_compressed(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o,
                                            RunRaceEntry& e, double epochs, Trained& trained, bool reference) {
  try {
    return run_compressed(w, held_out, o, e, epochs, trained);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& failure) {
    if (reference && !detail::ran_out_of_memory(failure)) throw;
    const std::string what = failure.what();
    e.message = "failed: " + what.substr(0, what.find('\n'));
    return std::nullopt;
  }
}

// The held-out loss at the initial weights, once a race; false where it ran out of memory (the held-out probe vouched
// for the data), and then the reference's message says so.
bool held_out_loss_before(ModuleWorkload& w, const Dataset& held_out, Trained& trained, RunRaceEntry& ref) {
  if (trained.loss_before) return true;
  try {
    trained.loss_before = w.evaluate(held_out).first;
    return true;
  } catch (const std::exception& failure) {
    if (!detail::ran_out_of_memory(failure)) throw;
    ref.message = "failed: the held-out loss before training: " + detail::classify_failure(failure).second;
    return false;
  }
}

// The reference's three compressed runs, the noise scale after the two longer ones where
// `noise_batch` is given (with the one at the start, three points for the schedule and the notes;
// one after the shortest run shaped only the curve before the middle run and cost about 0.7 s of
// mlp's 8 s first race); then every other candidate's two longer ones. False when the reference
// did not train (the race then recommends nothing).
bool train_runs(ModuleWorkload& w, const WorkloadState& initial, const Dataset& held_out, RunRace& race,
                const RunRaceOptions& o, std::optional<int64_t> noise_batch, Trained& trained, bool& only_longest) {
  RunRaceEntry& ref = race.entries.front();
  w.restore_state(initial);
  if (!held_out_loss_before(w, held_out, trained, ref)) return false;
  const double loss_before = *trained.loss_before;
  const int64_t dataset = w.data().size();
  const auto known = [&](int64_t batch, double epochs) -> const CompressedRun* {
    const auto it = trained.runs.find({batch, run_steps(epochs, dataset, batch)});
    return it == trained.runs.end() ? nullptr : &it->second;
  };
  for (size_t l = 0; l < race.lengths_epochs.size(); ++l) {
    const double epochs = race.lengths_epochs[l];
    const bool noise_after = noise_batch && l > 0;
    if (const CompressedRun* run = known(ref.batch, epochs); run && (run->b_simple || !noise_after)) {
      race.runs.push_back(*run);
      continue;
    }
    if (out_of_time(o, trained)) {
      past_the_wall_limit(ref, o, epochs, true, true);
      return false;
    }
    if (o.on_progress()) o.on_progress()(compressed_run_text(ref.batch, o.epochs(), epochs));
    w.restore_state(initial);
    std::optional<CompressedRun> tried = try_compressed(w, held_out, o, ref, epochs, trained, true);
    if (!tried) return false;
    CompressedRun run = std::move(*tried);
    if (!run.loss && trained.out_of_time) {
      past_the_wall_limit(ref, o, epochs, false, true);
      return false;
    }
    race.runs.push_back(std::move(run));
    if (!race.runs.back().loss) {
      race.reference_diverged = true;
      ref.message = fmt::format(
          "the training loss or its held-out loss stopped being finite in its {:.3g}-epoch run "
          "at lr {:.4g}",
          epochs, ref.lr.lr);
      return false;
    }
    std::string out_of_memory;
    if (noise_after) race.runs.back().b_simple = noise_scale(w, *noise_batch, o.noise_steps(), out_of_memory);
    if (!out_of_memory.empty())
      race.notes.push_back(
          fmt::format("no noise scale after the {}-epoch run: {}", format_epochs(epochs, 3), out_of_memory));
    trained.runs[{ref.batch, race.runs.back().steps}] = race.runs.back();
  }
  // A reference whose held-out loss never fell kLeftTheStart below the initial weights' has no
  // learning curve yet: nothing about the run follows from it (a flat curve would say that fewer
  // samples cost nothing, and the largest batch would win). Nor has one that left it only in its
  // longest run: the other batches' gaps are read after the two longer runs, and with the reference
  // on the plateau after the shorter one they cannot say how the gaps close.
  const double longest = *race.runs.back().loss;
  if (!off_the_start(longest, loss_before)) {
    race.reference_stuck = true;
    ref.message = fmt::format(
        "its longest compressed run ({}) did not leave the start: held-out loss {:.4g} against {:.4g} at "
        "your initial weights, so its learning curve says nothing about the run (a larger --advice-budget trains the "
        "compressed runs longer)",
        format_epochs(race.lengths_epochs.back(), 3), longest, loss_before);
    return false;
  }
  // Where the longest run is the whole run, every gap is read at the run's end and carried nowhere:
  // a reference off the plateau only there is judged (mobilenet_v3_small with SGD, 2 epochs: the
  // reserve's 32 at chance after 1 epoch and 0.83 accuracy after 2, 64 and 128 at chance after 2).
  const size_t middle = race.runs.size() >= 3 ? race.runs.size() - 2 : 0;
  const bool only_in_longest = middle > 0 && !off_the_start(*race.runs[middle].loss, loss_before);
  if (only_in_longest && race.whole_run())
    race.notes.push_back(fmt::format(
        "batch {} (the reference) left the start only in its longest compressed run, your whole {:g}-epoch run "
        "(held-out loss {:.4g} after {} against {:.4g} at your initial weights): every gap is read at the "
        "run's end, not carried",
        ref.batch, o.epochs(), *race.runs[middle].loss, format_epochs(race.lengths_epochs[middle], 3), loss_before));
  else if (only_in_longest) {
    race.reference_stuck = only_longest = true;
    ref.message = fmt::format(
        "its compressed runs left the start only in the longest ({}): held-out loss {:.4g} after {} "
        "against {:.4g} at your initial weights, so the other batches' gaps, read after the two longer runs, "
        "cannot say how they close (a larger --advice-budget trains the compressed runs longer)",
        format_epochs(race.lengths_epochs.back(), 3), *race.runs[middle].loss,
        format_epochs(race.lengths_epochs[middle], 3), loss_before);
    return false;
  }
  for (size_t i = 1; i < race.entries.size(); ++i) {
    RunRaceEntry& e = race.entries[i];
    for (size_t l = 1; l < race.lengths_epochs.size() && e.message.empty(); ++l) {
      const double epochs = race.lengths_epochs[l];
      std::optional<CompressedRun>& slot = l == 1 ? e.shorter_run : e.run;
      if (const CompressedRun* run = known(e.batch, epochs)) {
        slot = *run;
        continue;
      }
      if (out_of_time(o, trained)) {
        past_the_wall_limit(e, o, epochs, true, false);
        break;
      }
      if (o.on_progress()) o.on_progress()(compressed_run_text(e.batch, o.epochs(), epochs));
      w.restore_state(initial);
      slot = try_compressed(w, held_out, o, e, epochs, trained, false);
      if (slot && slot->loss) trained.runs[{e.batch, slot->steps}] = *slot;
      if (slot && !slot->loss && trained.out_of_time) {
        past_the_wall_limit(e, o, epochs, false, false);
        slot.reset();
      } else if (slot && !slot->loss) {
        e.message = fmt::format(
            "the training loss or its held-out loss stopped being finite in its {:.3g}-epoch "
            "run at lr {:.4g}",
            epochs, e.lr.lr);
      }
    }
  }
  return true;
}

// Every candidate's gap behind the reference at the run's end, carried on from its two compressed
// runs, and the share of samples that counts for it; the pick.
// `loss_before`: the held-out loss at the initial weights. A candidate whose longest compressed run
// did not leave the start (kLeftTheStart) is not judged good, however near the reference it ended:
// within the noise of a reference that barely left it, a batch still at chance would be picked for
// its speed (a race whose longest run is the whole run, its reference off the plateau only there).
void judge(RunRace& race, const RunRaceOptions& o, int64_t dataset, int64_t held_out_size, bool accuracy,
           double loss_before) {
  const RunRaceEntry& ref = race.entries.front();
  std::vector<double> samples, errors;  // the samples each run actually trained
  for (const auto& run : race.runs) {
    samples.push_back(static_cast<double>(run.steps * ref.batch));
    errors.push_back(accuracy ? 1 - *run.accuracy : *run.loss);
  }
  if (race.runs.front().steps < kFewestSteps)
    race.notes.push_back(
        fmt::format("batch {}'s shortest run had only {} step{}: its learning curve is rough; a longer "
                    "--advice-budget gives it more",
                    ref.batch, race.runs.front().steps, race.runs.front().steps == 1 ? "" : "s"));
  race.gains = {errors[0] - errors[1], errors[1] - errors[2]};
  if (race.gains[1] > 0 && race.gains[1] < race.gains[0])
    race.curve_exponent = -std::log2(race.gains[1] / race.gains[0]);
  const double run_samples = o.epochs() * static_cast<double>(dataset);
  race.tolerance = accuracy ? accuracy_tolerance(*race.runs.back().accuracy, held_out_size) : kLossTolerance;
  const double loss_at_end = accuracy ? 1 : std::max(detail::error_at(samples, errors, run_samples), 1e-12);
  std::vector<std::pair<double, double>> noise{{0.0, *race.noise_at_start}};
  for (size_t l = 0; l < race.runs.size(); ++l)  // a longer race's reference measures it on its shorter runs only
    if (race.runs[l].b_simple) noise.emplace_back(samples[l], *race.runs[l].b_simple);
  const auto cap = [](const RunRaceEntry& e) {
    return e.lr.scaled.lr > 0 ? std::min(1.0, e.lr.lr / e.lr.scaled.lr) : 1.0;
  };
  const double ref_cap = cap(ref);
  const double noise_abs = accuracy ? race.tolerance : race.tolerance * errors[2];  // in the error's units
  const std::optional<double> middle = line_through_middle(errors, noise_abs);      // as the gaps read it
  race.middle_on_line.reset();
  if (middle) race.middle_on_line = accuracy ? 1 - *middle : *middle;
  const double doublings = std::max(0.0, std::log2(o.epochs() / race.lengths_epochs.back()));
  const auto error_of = [&](const CompressedRun& run) { return accuracy ? 1 - *run.accuracy : *run.loss; };
  std::vector<std::optional<CompressedGaps>> measured;  // every candidate but the reference
  for (size_t i = 1; i < race.entries.size(); ++i) {
    const RunRaceEntry& e = race.entries[i];
    if (e.message.empty())
      measured.push_back(
          CompressedGaps{error_of(*e.shorter_run) - middle.value_or(errors[1]), error_of(*e.run) - errors[2]});
    else
      measured.emplace_back();
  }
  const std::vector<std::optional<CarriedGap>> carried = carry_gaps(measured, noise_abs, doublings);
  const RunRaceEntry* pick = nullptr;
  std::vector<int64_t> at_the_start;  // within the noise, but still on the plateau at the start
  for (size_t i = 0; i < race.entries.size(); ++i) {
    RunRaceEntry& e = race.entries[i];
    if (!e.message.empty()) continue;
    e.efficiency = run_efficiency(noise, run_samples, ref.batch, e.batch);
    e.cap_factor = std::min(1.0, cap(e) / ref_cap);
    double gap = 0;
    if (i > 0) {  // every candidate but the reference trained both longer runs
      const double own = static_cast<double>(e.run->steps * e.batch);
      e.measured_efficiency =
          std::min(1.0, measured_share(samples, errors, error_of(*e.run), noise_abs) * samples.back() / own);
      e.gap_trend = carried[i - 1]->trend;
      gap = carried[i - 1]->gap;
      e.gap_as = carried[i - 1]->as ? std::optional(race.entries[1 + *carried[i - 1]->as].batch) : std::nullopt;
    }
    e.share = share_for_gap(samples, errors, run_samples, gap, noise_abs);
    e.predicted_gap = gap / loss_at_end;
    e.good = *e.predicted_gap <= race.tolerance;
    if (e.good && i > 0 && !off_the_start(*e.run->loss, loss_before)) {
      e.good = false;
      at_the_start.push_back(e.batch);
    }
    if (e.good && (!pick || e.full_run_s < pick->full_run_s)) pick = &e;
  }
  if (!at_the_start.empty())
    race.notes.push_back(fmt::format(
        "{} {} within the held-out noise of batch {} but did not leave the start in {} longest compressed run ({:.3g} "
        "epochs: held-out loss above {:.0f} % of the initial weights' {:.4g}), so {} not judged good",
        at_the_start.size() > 1 ? "batches" : "batch", fmt::join(at_the_start, ", "), ref.batch,
        at_the_start.size() > 1 ? "their" : "its", race.lengths_epochs.back(), 100 * kLeftTheStart, loss_before,
        at_the_start.size() > 1 ? "they are" : "it is"));
  if (pick) {
    race.best_batch = pick->batch;
    race.within_5_percent = detail::within_5_percent(race.entries, *pick);
  }
  explain(race, pick, std::min(kNoiseUnbounded, noise_at(noise, run_samples)), dataset);
  if (pick) detail::propose_schedule(race, noise, samples, errors, run_samples, loss_at_end, dataset, *pick);
}

}  // namespace

std::vector<int64_t> contested_batches(const RunRace& race) {
  std::vector<int64_t> out;
  if (!race.best_batch || race.runs.size() < 3 || race.lengths_epochs.size() < 3) return out;
  if (!(std::log2(race.epochs / race.lengths_epochs.back()) > kMostCarried)) return out;
  const auto pick = std::find_if(race.entries.begin(), race.entries.end(),
                                 [&](const RunRaceEntry& e) { return e.batch == *race.best_batch; });
  if (pick == race.entries.end()) return out;
  for (const RunRaceEntry& e : race.entries) {
    if (!e.message.empty() || e.good || !saves_enough(e.full_run_s, pick->full_run_s)) continue;
    const std::optional<double> shorter = compressed_gap(race, e.shorter_run, 1),
                                longer = compressed_gap(race, e.run, 2);
    if (shorter && longer && *shorter > kTrendNoise * race.tolerance && *longer < *shorter) out.push_back(e.batch);
  }
  return out;
}

RunRace detail::race_once(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o, Trained& trained,
                          bool noise_along, bool& only_longest, std::optional<int64_t> noise_batch_given) {
  BATCHWISE_CHECK(o.batches().size() >= 2 && o.samples_per_s().size() == o.batches().size(), ConfigError,
                  "the run race needs two or more candidates, each with its samples/s ({} and {} given)",
                  o.batches().size(), o.samples_per_s().size());
  BATCHWISE_CHECK(o.epochs() > 0 && std::isfinite(o.epochs()), ConfigError,
                  "--epochs {:g}: the run race needs the run's length in epochs, e.g. --epochs 10", o.epochs());
  BATCHWISE_CHECK(o.budget_s() > 0 && o.noise_steps() >= 2, ConfigError,
                  "the run race's budget ({:g} s, --advice-budget) must be positive and its noise-scale steps ({}, "
                  "--noise-steps) at least 2",
                  o.budget_s(), o.noise_steps());
  BATCHWISE_CHECK(held_out.size() > 0, DataError, "{}the held-out set is empty",
                  held_out.name.empty() ? "" : held_out.name + ": ");
  const double start = now_s(o);
  const int64_t dataset = w.data().size();
  const bool accuracy = held_out.targets.scalar_type() == at::kLong;
  RunRace race;
  race.epochs = o.epochs();
  race.lr_schedule = to_string(o.lr_schedule());
  race.measure = accuracy ? "accuracy" : "loss";
  race.held_out = fmt::format("{}, {} samples", held_out.name, held_out.size());
  plan_race(race, o, dataset);
  const int64_t noise_batch = noise_batch_given.value_or(noise_batch_of(o.batches(), dataset));

  // However it ends, the weights, the optimizer (its rate too) and the data order are as they were.
  const StateGuard initial(w);
  advise_rates(w, initial.state(), race, o, dataset, trained.advised);
  RunRaceEntry& ref = race.entries.front();
  if (ref.message.empty()) {
    w.restore_state(initial.state());
    std::string out_of_memory;
    race.noise_at_start = o.noise_at_start() ? std::max(kNoiseFloor, *o.noise_at_start())
                                             : noise_scale(w, noise_batch, o.noise_steps(), out_of_memory);
    if (!race.noise_at_start) {  // its steps diverged, or ran out of memory: the floor, so that no growth is read into
                                 // it
      race.noise_at_start = kNoiseFloor;
      race.notes.push_back(fmt::format(
          "the noise scale at the start could not be measured ({}): taken as {:g}, the least, so that it reads no "
          "batch as efficient",
          out_of_memory.empty() ? fmt::format("its training steps at batch {} diverged", noise_batch) : out_of_memory,
          kNoiseFloor));
    }
    if (train_runs(w, initial.state(), held_out, race, o, noise_along ? std::optional(noise_batch) : std::nullopt,
                   trained, only_longest))
      judge(race, o, dataset, held_out.size(), accuracy, *trained.loss_before);
  }
  w.restore_state(initial.state());
  if (!ref.message.empty())
    race.notes.push_back(fmt::format("batch {} (the reference) {}: {}; the run race recommends no batch", ref.batch,
                                     race.reference_stuck ? "trained, with no learning curve" : "did not train",
                                     ref.message));
  race.wall_s = now_s(o) - start;
  return race;
}

namespace {

// o without the candidates larger than the fastest (by the sweep's samples/s), which cannot be the
// pick: one is picked only where it is good and no faster good batch is, and no larger batch is
// predicted to end nearer the reference than a smaller one (carry_gaps), so where the fastest is
// judged worse so are they, and where it is good it is faster. The budget falls by their compressed
// runs' share (mlp SGD, 35 epochs: 2,048 and 4,096, a little slower than 1,024, 30 %), so the others
// train the same runs as beside them, and the answer is the same for less. At least two candidates
// stay. `slower`: those left out.
RunRaceOptions without_slower_larger(const RunRaceOptions& o, std::vector<int64_t>& slower) {
  slower.clear();
  if (o.batches().size() != o.samples_per_s().size() || o.batches().size() < 3) return o;
  for (size_t i = 0; i < o.batches().size(); ++i)  // plan_race names a bad one; nothing is left out
    if (o.batches()[i] < 1 || !(o.samples_per_s()[i] > 0) || !std::isfinite(o.samples_per_s()[i])) return o;
  std::vector<std::pair<int64_t, double>> by_batch;
  for (size_t i = 0; i < o.batches().size(); ++i) by_batch.emplace_back(o.batches()[i], o.samples_per_s()[i]);
  std::sort(by_batch.begin(), by_batch.end());
  const size_t fastest = static_cast<size_t>(  // the smallest of the fastest, where two tie
      std::max_element(by_batch.begin(), by_batch.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; }) -
      by_batch.begin());
  if (fastest == 0) return o;  // two candidates at least
  std::vector<int64_t> batches;
  std::vector<double> rates;
  for (size_t i = 0; i < by_batch.size(); ++i) {
    if (i > fastest) {
      slower.push_back(by_batch[i].first);
      continue;
    }
    batches.push_back(by_batch[i].first);
    rates.push_back(by_batch[i].second);
  }
  // compressed_cost_s's ratio: the full runs' times are epochs x samples over samples/s
  const auto cost = [](const std::vector<double>& r) {
    std::vector<double> inverse;
    for (double x : r) inverse.push_back(1 / x);
    return compressed_cost_s(inverse);
  };
  std::vector<double> all_rates;
  for (const auto& [b, rate] : by_batch) all_rates.push_back(rate);
  RunRaceOptions raced = o;
  raced.batches(batches).samples_per_s(rates).budget_s(o.budget_s() * cost(rates) / cost(all_rates));
  return raced;
}

}  // namespace

RunRaceOptions raced_options(const RunRaceOptions& options, std::vector<int64_t>* not_raced) {
  std::vector<int64_t> slower;
  RunRaceOptions raced = without_slower_larger(options, slower);
  if (not_raced) *not_raced = std::move(slower);
  return raced;
}

std::string compressed_run_text(int64_t batch, double run_epochs, double epochs) {
  return fmt::format("run race: batch {}, your {:g}-epoch run compressed to {}", batch, run_epochs,
                     format_epochs(epochs, 3));
}

// "compressed to 0.55 epochs" or "to 1 epoch": the line up to its length, which a step's line extends.
std::string compressed_run_key(const std::string& line) { return line.substr(0, line.find(" epoch")); }

RunRace race_runs(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o) {
  std::vector<int64_t> slower;
  const RunRaceOptions raced = raced_options(o, &slower);
  BATCHWISE_CHECK(o.max_wall_s() >= 0 && std::isfinite(o.max_wall_s()), ConfigError,
                  "the run race's wall limit ({:g} s) must be a number of seconds, or 0 for none", o.max_wall_s());
  detail::probe_held_out(w, held_out);
  const std::optional<SchedulerTimes> before = w.device().is_cpu() ? scheduler_times() : std::nullopt;
  Trained trained;
  trained.start_s = now_s(o);
  if (o.max_wall_s() > 0) trained.deadline_s = trained.start_s + o.max_wall_s();
  RunRace race = detail::race_with_rounds(w, held_out, raced, o.budget_s(),
                                          noise_batch_of(o.batches(), w.data().size()), slower, trained);
  race.not_raced = slower;
  // A race whose reference gave no learning curve judged no one: each says so, not a bare good: false in the JSON
  if (!race.entries.empty() && !race.entries.front().message.empty())
    for (RunRaceEntry& e : race.entries)
      if (&e != &race.entries.front() && e.message.empty() && !e.past_wall_limit && !e.predicted_gap && !e.good)
        e.message = fmt::format("not judged: batch {} (the reference) {}", race.reference_batch,
                                race.reference_stuck ? "gave no learning curve" : "did not train");
  if (trained.out_of_time) {
    race.stopped_at_wall_limit = true;
    const std::vector<int64_t> cut = past_wall_limit(race);
    race.notes.insert(
        race.notes.begin(),
        fmt::format("the race stopped at its wall limit, {}: {}; it trained nothing after that (no run, no "
                    "reserve, no round){}{}",
                    format_seconds(o.max_wall_s()), kSlowerThanMeasured,
                    cut.empty() ? ""
                                : fmt::format("; {} {}, whose runs it had not finished, {} not judged",
                                              cut.size() > 1 ? "batches" : "batch", fmt::join(cut, ", "),
                                              cut.size() > 1 ? "are" : "is"),
                    race.best_batch                        ? ""
                    : race.entries.front().past_wall_limit ? "; its reference's runs did not finish: no pick"
                                                           : "; no pick"));
  }
  if (!slower.empty())
    race.notes.push_back(fmt::format(
        "{} {} not raced: larger than batch {}, the fastest candidate by the sweep ({:.0f} samples/s), and no faster, "
        "so {} be the pick (no larger batch is predicted to end nearer the reference than a smaller "
        "one); the budget fell by {} share, so the others trained the compressed runs they would have beside {}",
        slower.size() > 1 ? "batches" : "batch", fmt::join(slower, ", "), raced.batches().back(),
        raced.samples_per_s().back(), slower.size() > 1 ? "none could" : "it could not",
        slower.size() > 1 ? "their" : "its", slower.size() > 1 ? "them" : "it"));
  if (before) race.cpu_wait_share = cpu_wait_share(before, scheduler_times());
  if (race.cpu_wait_share && *race.cpu_wait_share > kSharedCpuShare)
    race.notes.push_back(fmt::format(
        "the race shared the CPU: its threads waited for a core {:.0f} % of the time they were ready to run, so it "
        "took longer than this machine takes alone; its verdicts train the same samples however long they take and "
        "stand, and an --advice-budget suggested from its time counts the rest of it",
        100 * *race.cpu_wait_share));
  return race;
}

}  // namespace batchwise

// What follows a run race's first race (race_with_rounds): the reserve's race below it, and its
// compressed runs run longer: the contested candidates beside the reference where the race is many
// doublings short of the run (run_longer, once), and the whole race where its reference had not
// left the plateau at the start in its middle run (past_the_plateau, until it has). Both train every
// compressed run twice as long, smallest batch first up to the first judged worse.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "advice/run_race_internal.h"
#include "batchwise/error.h"
#include "batchwise/run_race.h"
#include "batchwise/units.h"
#include "check.h"

namespace batchwise::detail {

namespace {

// What one round of longer runs did: the last race (the reference and the candidates raced), the
// candidates not run and why, and its wall time.
struct Round {
  RunRace race;
  std::vector<int64_t> not_run;            // after the first judged worse
  std::vector<int64_t> past_allowance;     // left out: their runs would pass the allowance
  std::vector<std::string> saving_little;  // left out: their run saves too little on a good one's
  std::vector<int64_t> past_wall_limit;    // not judged: the race passed its wall limit (the first in part)
  double wall_s = 0;
};

// Races batches[0] (the reference) with batches[1...] (in batch order) at the compressed lengths
// whose shortest is `f` of the run, smallest first, each beside the ones before it, up to the first
// judged worse: no larger batch can then be judged good (none is predicted nearer the reference than
// a smaller one, carry_gaps), so its run would train for nothing (mlp SGD, 35 epochs: 512 still
// worse, 1,024 and larger not run). One difference from racing them all at once: a batch whose
// shorter gap is near the noise takes the next larger batch's trend, which has not run yet, so it is
// judged on none (the cautious 1). A batch whose run is not kLeastSaving shorter than the last one
// judged good is left out, and a batch after the first whose two runs (6f of its full run) would
// take the round past `allowance_s` of wall time, with the ones after it. The runs trained already
// are not trained again (trained).
Round smallest_first(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o,
                     const std::vector<int64_t>& batches, const std::vector<double>& rates,
                     const std::vector<double>& full_runs_s, double f, std::optional<double> noise_at_start,
                     Trained& trained, double allowance_s = std::numeric_limits<double>::infinity()) {
  Round round;
  std::vector<size_t> raced{0};  // where in batches: the reference, then the candidates raced
  const auto of_raced = [&raced](const auto& v) {
    std::vector<typename std::decay_t<decltype(v)>::value_type> out;
    for (size_t i : raced) out.push_back(v[i]);
    return out;
  };
  for (size_t c = 1; c < batches.size(); ++c) {
    const size_t last = raced.back();
    if (raced.size() > 1 && !saves_enough(full_runs_s[c], full_runs_s[last])) {
      const double saving = 1 - full_runs_s[c] / full_runs_s[last];  // in batch order, not speed's
      round.saving_little.push_back(
          saving > 0
              ? fmt::format("{} not run (its run {:.1f} % shorter than {}'s, judged good)", batches[c], 100 * saving,
                            batches[last])
              : fmt::format("{} not run (its run no shorter than {}'s, judged good)", batches[c], batches[last]));
      continue;
    }
    if (raced.size() > 1 && out_of_time(o, trained)) {
      round.past_wall_limit.assign(batches.begin() + static_cast<long>(c), batches.end());
      break;
    }
    if (raced.size() > 1 && round.wall_s + 6 * f * full_runs_s[c] > allowance_s) {
      round.past_allowance.assign(batches.begin() + static_cast<long>(c), batches.end());
      break;
    }
    raced.push_back(c);
    RunRaceOptions longer = o;
    longer.batches(of_raced(batches))
        .samples_per_s(of_raced(rates))
        .reserve({})
        .reserve_samples_per_s({})
        .noise_at_start(noise_at_start);
    longer.budget_s(f * compressed_cost_s(of_raced(full_runs_s)) * (1 + 1e-9));
    bool only_longest = false;
    round.race = race_once(w, held_out, longer, trained, false, only_longest);
    round.wall_s += round.race.wall_s;
    if (trained.out_of_time) {  // its reference's or its last candidate's runs cut: not judged
      round.past_wall_limit.assign(batches.begin() + static_cast<long>(c), batches.end());
      break;
    }
    if (!round.race.entries.back().good) {  // the reference failing in its longer run leaves none good
      round.not_run.assign(batches.begin() + static_cast<long>(c) + 1, batches.end());
      break;
    }
  }
  round.race.wall_s = round.wall_s;
  return round;
}

// Why a round left candidates out, in words ("" where it left none out); `contested`: a longer
// round's (its candidates were judged worse once already), else a round past the plateau's.
std::string left_out_text(const Round& round, bool contested) {
  std::vector<std::string> left_out;
  if (!round.not_run.empty())
    left_out.push_back(
        fmt::format("smallest first, up to the first {}judged worse ({} not run: a larger batch "
                    "is not judged nearer than a smaller one)",
                    contested ? "still " : "", fmt::join(round.not_run, ", ")));
  if (!round.past_allowance.empty())
    left_out.push_back(fmt::format("smallest first, within {:g} budgets ({} not run: not judged)", kPlateauBudgets,
                                   fmt::join(round.past_allowance, ", ")));
  if (!round.past_wall_limit.empty())
    left_out.push_back(
        fmt::format("{} not judged: the race passed its wall limit", fmt::join(round.past_wall_limit, ", ")));
  if (!round.saving_little.empty())
    left_out.push_back(fmt::format("{}: a {} races for a run at least {:.0f} % shorter",
                                   fmt::join(round.saving_little, ", "), contested ? "contested batch" : "larger batch",
                                   100 * kLeastSaving));
  return left_out.empty() ? "" : fmt::format(", {}", fmt::join(left_out, "; "));
}

// The candidates' gaps at the run's end as a race predicts them, in words.
std::string predicted_gaps(const RunRace& race) {
  std::vector<std::string> gaps;
  for (const RunRaceEntry& e : race.entries)
    if (e.batch != race.reference_batch)
      gaps.push_back(e.predicted_gap
                         ? fmt::format("{} {:.2f}", e.batch, 100 * *e.predicted_gap)
                         : fmt::format("{} ({})", e.batch,
                                       e.past_wall_limit ? "not judged: the race passed its wall limit"
                                       : e.message.empty() || e.message.rfind("not judged", 0) == 0 ? "not judged"
                                                                                                    : "did not train"));
  return fmt::format("predicted behind it at the run's end, {}: {}",
                     race.measure == "accuracy" ? "accuracy points" : "% of the loss", fmt::join(gaps, ", "));
}

}  // namespace

// The first round's verdicts on the candidates the longer round did not race (the first pick and
// the others judged good there, the contested batches it left out or did not reach) join its
// entries, marked as the first round's, so that every candidate judged keeps a row and the good ones
// the range about as good as the pick (mlp SGD at 10 epochs: 128 good in the first round, 256 in
// the longer one; the answer's "no worse" had read 64 and 256). The pick is the longer round's,
// the fastest good batch of all, and its within_5_percent stands: a contested batch's run is 5 %
// shorter than the first pick's (contested_batches), and no first-round good one is shorter.
// A kept batch judged worse within the first round's noise did not leave the start there (judge):
// the first round's note said so, and the race's notes now are the longer round's, so one says it.
void keep_first_round_verdicts(const RunRace& first, RunRace& next) {
  std::vector<int64_t> at_the_start;
  for (const RunRaceEntry& e : first.entries) {
    const auto at = std::lower_bound(next.entries.begin(), next.entries.end(), e.batch,
                                     [](const RunRaceEntry& n, int64_t batch) { return n.batch < batch; });
    if (at != next.entries.end() && at->batch == e.batch) continue;
    if (!e.good && e.message.empty() && e.predicted_gap && *e.predicted_gap <= first.tolerance)
      at_the_start.push_back(e.batch);
    RunRaceEntry kept = e;
    kept.earlier_round = true;
    next.entries.insert(at, std::move(kept));
  }
  if (!at_the_start.empty())
    next.notes.push_back(fmt::format(
        "in the first round, {} {} within the held-out noise of batch {} but did not leave the start in {} longest "
        "compressed run ({}), so {} not judged good",
        at_the_start.size() > 1 ? "batches" : "batch", fmt::join(at_the_start, ", "), first.reference_batch,
        at_the_start.size() > 1 ? "their" : "its", format_epochs(first.lengths_epochs.back(), 3),
        at_the_start.size() > 1 ? "they are" : "it is"));
}

// Runs the contested candidates of `race` longer, once: beside its reference, with every compressed
// run twice as long (the shorter ones trained already), where that trains at most the race's budget.
// The pick is not raced again: nothing contested it, and a longer race that judges a contested
// candidate good moves the answer to that faster batch, while one that judges them worse again
// leaves the answer as it was (lenet at 15 epochs: 256's gap, within the noise at 0.27 epochs, grows
// between 0.27 and 0.55 and closes by the run's end).
RunRace run_longer(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o, RunRace race,
                   Trained& trained) {
  const std::vector<int64_t> faster = contested_batches(race);
  if (faster.empty() || out_of_time(o, trained)) return race;  // past the wall limit: race_runs says so
  const bool many = faster.size() > 1;
  const std::string which =
      fmt::format("{} {}, faster than batch {}, {} judged worse on gaps that shrank", many ? "batches" : "batch",
                  fmt::join(faster, ", "), *race.best_batch, many ? "were" : "was");
  std::vector<int64_t> batches;
  std::vector<double> rates, full_runs_s;
  for (const RunRaceEntry& e : race.entries)
    if (e.batch == race.reference_batch || std::find(faster.begin(), faster.end(), e.batch) != faster.end())
      batches.push_back(e.batch), rates.push_back(e.samples_per_s), full_runs_s.push_back(e.full_run_s);
  const double f = 2 * race.lengths_epochs.front() / race.epochs;  // the new shortest run's share
  // What is new: every batch's longest run (its shorter one is this race's longest); every contested
  // batch counts, though the round may leave some out (kLeastSaving): which is not known before.
  double cost_s = 0;
  for (double s : full_runs_s) cost_s += 4 * f * s;
  if (cost_s > o.budget_s()) {
    race.notes.push_back(
        fmt::format("{} as the run doubled; running {} longer would train {}, past the race's budget ({}): a larger "
                    "--advice-budget trains every compressed run longer",
                    which, many ? "them" : "it", format_seconds(cost_s), format_seconds(o.budget_s())));
    return race;
  }
  if (o.on_round())
    o.on_round()(
        fmt::format("{} as the run doubled: racing {} again beside batch {} with every compressed run twice "
                    "as long (to {}), smallest first; up to about {} of training",
                    which, many ? "them" : "it", race.reference_batch, format_epochs(2 * race.lengths_epochs.back(), 3),
                    format_seconds(cost_s)));
  Round round = smallest_first(w, held_out, o, batches, rates, full_runs_s, f, race.noise_at_start, trained);
  RunRace& next = round.race;
  const std::string done = fmt::format(
      "{} from well beyond the noise as the run doubled, with {:.1f} doublings to your {:g}-epoch run to carry them "
      "over: {} raced again beside batch {} with every compressed run twice as long ({:.3g} to {:.3g} epochs){}",
      which, std::log2(race.epochs / race.lengths_epochs.back()), race.epochs, many ? "they" : "it",
      race.reference_batch, next.lengths_epochs.front(), next.lengths_epochs.back(), left_out_text(round, true));
  if (next.best_batch && *next.best_batch != next.reference_batch) {  // a contested batch judged good
    next.notes.insert(next.notes.begin(), fmt::format("{}; batch {} is now judged no worse, and faster than batch {}",
                                                      done, *next.best_batch, *race.best_batch));
    keep_first_round_verdicts(race, next);
    next.first_reference = race.first_reference;
    next.wall_s += race.wall_s;
    next.longer_rounds = 1;
    return next;
  }
  race.notes.insert(
      race.notes.begin(),
      trained.out_of_time  // the reference's or a contested batch's runs cut: nothing judged there
          ? fmt::format("{}; it stopped at the race's wall limit before judging {}, so batch {} stands", done,
                        many ? "them" : "it", *race.best_batch)
          : next.best_batch  // else the reference failed in its longer run
                ? fmt::format("{}; still judged worse there ({}; the held-out noise {:.2f}), so batch {} stands", done,
                              predicted_gaps(next), 100 * next.tolerance, *race.best_batch)
                : fmt::format("{}, and gave no answer (batch {}: {}); batch {} stands", done, race.reference_batch,
                              next.entries.front().message, *race.best_batch));
  race.wall_s += next.wall_s;
  race.longer_rounds = 1;
  return race;
}

// The reference did not leave the plateau at the start in its middle compressed run (in its longest
// only, or in none), so the gaps read after the two longer runs cannot say how they close, and the
// race recommends nothing. Where a longest run twice as long still fits the run, the race runs again
// with every compressed run twice as long (the ones trained already are not trained again), its
// candidates smallest first, and again while its reference is still on the plateau in its middle run,
// within kPlateauBudgets: once the reference's learning curve has begun in both longer runs, the gaps
// behind it are read as in any race. A plateau is left in steps, and a batch still on it in a
// compressed run leaves it later in the run as well: mobilenet_v3_small with SGD at 2 epochs,
// reference 16 off the plateau only at 0.68 epochs, 32 about 51 points behind it at 1.37, 16 the
// only batch in the good set. The batch race at a constant rate, which answered here before, ranks
// time to a held-out loss near the plateau, not the run's end (it picked 32 or 16 by the draw).
// A candidate that did not train in the race (its range test failed) stays out, and a note names it.
// A round that answers is not followed by run_longer's: that one is for races more than five
// doublings short of the run, and a plateau's rounds leave the longest run at least a quarter of it.
// The rounds take at most kPlateauBudgets of wall time: a round starts where its reference's run
// and its smallest candidate's fit what is left, and races a larger candidate only where its runs
// fit too. mobilenet_v3_small with AdamW, 2 epochs, reference 8 on the plateau in 0.256 epochs (a
// budget of 56 s): two rounds, to 0.512 and 1.02 epochs, 153 s, where the batch race took 184 s and
// picked 8, 1.9 points behind 16, which leads 8 at 1.02 epochs.
RunRace past_the_plateau(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o, RunRace race,
                         bool only_longest, Trained& trained) {
  if (!race.reference_stuck || race.lengths_epochs.size() < 3 || race.entries.size() < 2 || race.runs.size() < 3)
    return race;
  std::vector<int64_t> batches, failed;
  std::vector<double> rates, full_runs_s;
  for (const RunRaceEntry& e : race.entries) {
    if (e.batch != race.reference_batch && !e.message.empty()) {
      failed.push_back(e.batch);
      continue;
    }
    batches.push_back(e.batch), rates.push_back(e.samples_per_s), full_runs_s.push_back(e.full_run_s);
  }
  if (batches.size() < 2) return race;
  const std::string why = fmt::format(
      "batch {} (the reference) {} in its longest compressed run ({})", race.reference_batch,
      only_longest ? "left the start only" : "did not leave the start", format_epochs(race.lengths_epochs.back(), 3));
  Round round;
  const RunRace* last = &race;
  int rounds = 0;
  bool ended = false;  // the last round's longest run is the whole run, not twice the one before
  double spent_s = 0;
  std::string stopped;
  while (last->reference_stuck) {
    if (out_of_time(o, trained)) {
      stopped = "the race passed its wall limit";
      break;
    }
    double f = 2 * last->lengths_epochs.front() / last->epochs;  // the next shortest run's share
    double reference_adds = 4 * f;                               // of its full run: its new longest run
    const bool to_the_end = 4 * f > 1 + 1e-9;
    if (to_the_end) {  // twice as long would pass the run's end: the longest run is the whole run
      if (last->whole_run()) {
        stopped = fmt::format("that run was your whole {:g}-epoch run: none longer fits", race.epochs);
        break;
      }
      f = kLongestShare, reference_adds = 7 * f;  // none of its runs is one trained before, as a rule
    }
    const std::string how =
        to_the_end ? "its longest compressed run your whole run" : "every compressed run twice as long";
    // What the reference and the smallest candidate add (their longest runs, and the candidate's
    // shorter one): the least a round that judges trains; a larger candidate races only beside a good one.
    const double cost_s = reference_adds * full_runs_s[0] + 6 * f * full_runs_s[1];
    if (spent_s + cost_s > kPlateauBudgets * o.budget_s()) {
      stopped = fmt::format(
          "racing again with {} would train about {} more, past {:g} times the race's budget ({}): a "
          "larger --advice-budget trains every compressed run longer",
          how, format_seconds(cost_s), kPlateauBudgets, format_seconds(o.budget_s()));
      break;
    }
    if (o.on_round())
      o.on_round()(fmt::format(
          "{}: racing again with {} (to {}), smallest first; at least about {} of training, "
          "within the {} of wall time its rounds have left",
          rounds == 0 ? why
                      : fmt::format("batch {} (the reference) still had not left the start in its middle compressed "
                                    "run ({})",
                                    last->reference_batch, format_epochs(last->lengths_epochs[1], 3)),
          how, format_epochs(to_the_end ? race.epochs : 2 * last->lengths_epochs.back(), 3), format_seconds(cost_s),
          format_seconds(kPlateauBudgets * o.budget_s() - spent_s)));
    round = smallest_first(w, held_out, o, batches, rates, full_runs_s, f, race.noise_at_start, trained,
                           kPlateauBudgets * o.budget_s() - spent_s);
    spent_s += round.wall_s;
    ++rounds;
    ended = to_the_end;
    last = &round.race;
  }
  if (rounds == 0) {
    race.notes.insert(race.notes.begin(), fmt::format("{}: {}", why, stopped));
    return race;
  }
  RunRace& next = round.race;
  // No candidate raced beside a reference that did not train: what a round left out is said only of
  // one that judged.
  const int doubled = rounds - (ended ? 1 : 0);
  std::string how = doubled > 0 ? "every compressed run twice as long" : "";
  if (doubled > 1) how += fmt::format(", {} times", doubled);
  if (ended) how += (doubled > 0 ? ", then " : "") + std::string("its longest compressed run your whole run");
  const std::string done =
      fmt::format("{}: the race ran again with {} ({:.3g} to {:.3g} epochs){}", why, how, next.lengths_epochs.front(),
                  next.lengths_epochs.back(), next.best_batch ? left_out_text(round, false) : "");
  if (!next.best_batch) {  // still on the plateau in its middle run, or it failed
    race.notes.insert(race.notes.begin(),
                      fmt::format("{}, and gave no answer either (batch {}: {}){}", done, next.reference_batch,
                                  next.entries.front().message, stopped.empty() ? "" : "; " + stopped));
    race.wall_s += spent_s;
    race.plateau_rounds = rounds;
    race.plateau_round_failed = !next.reference_stuck && !trained.out_of_time;  // its reference failed
    return race;
  }
  next.notes.insert(next.notes.begin(),
                    *next.best_batch != next.reference_batch
                        ? fmt::format("{}; batch {} is judged no worse than it, and faster", done, *next.best_batch)
                        : fmt::format("{}; every faster batch {} is judged worse ({}; the held-out noise {:.2f})", done,
                                      !past_wall_limit(next).empty() ? "it judged" : "raced", predicted_gaps(next),
                                      100 * next.tolerance));
  if (!failed.empty())
    next.notes.push_back(fmt::format("{} {} not raced past the plateau: {} did not train in the race before",
                                     failed.size() > 1 ? "batches" : "batch", fmt::join(failed, ", "),
                                     failed.size() > 1 ? "they" : "it"));
  next.first_reference = race.first_reference;
  next.wall_s = race.wall_s + spent_s;
  next.plateau_rounds = rounds;
  return next;
}

RunRace race_with_rounds(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o, double budget_s,
                         int64_t noise_batch, const std::vector<int64_t>& not_raced, Trained& trained) {
  BATCHWISE_CHECK(o.reserve().size() == o.reserve_samples_per_s().size(), ConfigError,
                  "the run race: {} reserve batches with {} throughput figures; give one figure per batch",
                  o.reserve().size(), o.reserve_samples_per_s().size());
  bool first_only_longest = false, second_only_longest = false;
  RunRace first = race_once(w, held_out, o, trained, true, first_only_longest, noise_batch);
  if (trained.out_of_time) return first;  // no reserve, no round: the machine is slower than planned
  std::vector<int64_t> batches;
  std::vector<double> rates;
  for (size_t i = 0; i < o.reserve().size(); ++i)
    if (std::find(o.batches().begin(), o.batches().end(), o.reserve()[i]) == o.batches().end())
      batches.push_back(o.reserve()[i]), rates.push_back(o.reserve_samples_per_s()[i]);
  // The reference led on the run itself: its longest compressed run was the whole run (a fast
  // device's race, or a short run), so every gap was measured, not carried, and every larger
  // candidate ended worse beyond the noise. The best batch may then lie below the candidates (an
  // H200's transformer, 4 epochs: 2,048 led 4,096 to 65,536, and 256 ends 4.6 points above it).
  // Within a compressed run the smallest batch leads as a rule, which says nothing of the run's end.
  const bool led_the_run =
      first.best_batch == first.reference_batch && first.whole_run() &&
      std::none_of(first.entries.begin() + 1, first.entries.end(), [](const RunRaceEntry& e) { return e.good; });
  if (!(first.reference_stuck || led_the_run) || batches.empty())
    return first.reference_stuck
               ? past_the_plateau(w, held_out, RunRaceOptions(o).budget_s(budget_s), std::move(first),
                                  first_only_longest, trained)
               : run_longer(w, held_out, RunRaceOptions(o).budget_s(budget_s), std::move(first), trained);
  if (out_of_time(o, trained)) return first;  // the reserve would train past the wall limit
  // The reference never left the start, or led the run: smaller batches take more steps in the same
  // samples, which is what leaves a plateau (mobilenet with SGD: 64 stays at chance where 16 and 32
  // learn) and what a run too short for the larger batches rewards. They join, the smallest the new
  // reference, beside the first reference, for one more budget. The larger candidates stay out: in
  // as many samples they take fewer steps than the first reference, which did not leave the start
  // or ended ahead of them, and leaving them out gives the runs that can do better more of it.
  const std::vector<int64_t> reserve = batches;
  std::vector<int64_t> left_out;
  for (size_t i = 0; i < o.batches().size(); ++i) {
    if (o.batches()[i] == first.reference_batch)
      batches.push_back(o.batches()[i]), rates.push_back(o.samples_per_s()[i]);
    else
      left_out.push_back(o.batches()[i]);
  }
  left_out.insert(left_out.end(), not_raced.begin(), not_raced.end());
  std::sort(left_out.begin(), left_out.end());
  RunRaceOptions again = o;
  again.batches(batches).samples_per_s(rates).reserve({}).reserve_samples_per_s({}).budget_s(budget_s);
  const std::string why =
      first_only_longest ? fmt::format("left the start only in its longest compressed run ({})",
                                       format_epochs(first.lengths_epochs.back(), 3))
      : first.reference_stuck
          ? "did not leave the start in " + format_epochs(first.lengths_epochs.back(), 3)
          : fmt::format("ended your whole {:g}-epoch run ahead of every larger candidate beyond the noise",
                        first.epochs);
  if (o.on_round())
    o.on_round()(
        fmt::format("batch {} (the first reference) {}: the reserve {} races beside it, batch {} the "
                    "reference, for one more budget (about {} of training)",
                    first.reference_batch, why, fmt::join(reserve, ", "),
                    *std::min_element(batches.begin(), batches.end()), format_seconds(budget_s)));
  RunRace second = race_once(w, held_out, again, trained, true, second_only_longest);
  const bool second_stuck = second.reference_stuck;  // before the rounds past the plateau
  if (second_stuck) second = past_the_plateau(w, held_out, again, std::move(second), second_only_longest, trained);
  if (trained.out_of_time && !second.best_batch) {  // cut short: it judged nothing, and the first race stands
    first.notes.insert(first.notes.begin(),
                       fmt::format("batch {} (the first reference) {}, so the reserve {} raced beside it, batch {} the "
                                   "reference, and the race passed its wall limit before that race judged: {}",
                                   first.reference_batch, why, fmt::join(reserve, ", "), second.reference_batch,
                                   first.best_batch ? fmt::format("batch {} stands", *first.best_batch) : "no pick"));
    first.wall_s += second.wall_s;
    return first;
  }
  // The reserve's smaller reference diverged at its rate: the first race's pick, judged at rates that trained, stands
  // (its answer had been thrown away for "no answer", the CLI's exit 1)
  if (second.reference_diverged && first.best_batch && !second.entries.empty()) {
    first.notes.insert(first.notes.begin(),
                       fmt::format("batch {} (the first reference) {}, so the reserve {} raced beside it, batch {} the "
                                   "reference, whose loss stopped being finite at lr {:.4g}: batch {} stands",
                                   first.reference_batch, why, fmt::join(reserve, ", "), second.reference_batch,
                                   second.entries.front().lr.lr, *first.best_batch));
    first.wall_s += second.wall_s;
    return first;
  }
  second.notes.insert(
      second.notes.begin(),
      fmt::format("batch {} (the first reference) {}, so the reserve {} joined, batch {} the reference, "
                  "for one more budget, without {} (larger: fewer steps in as many samples) ({}{})",
                  first.reference_batch, why, fmt::join(reserve, ", "), second.reference_batch,
                  fmt::join(left_out, ", "),
                  second_only_longest ? "it left the start only in its longest run"
                  : second_stuck ? "it did not leave the start" + std::string(first.reference_stuck ? " either" : "")
                                 : "it left the start",
                  !second.best_batch ? "; no pick"
                  : second_stuck     ? "; with its runs twice as long it did, and the race answered: the next note"
                                     : ""));
  second.first_reference = first.reference_batch;
  second.wall_s += first.wall_s;
  return second;
}

}  // namespace batchwise::detail

// The run race's reserve: the smaller swept batches held back from the candidates, which race
// after a first race whose reference did not leave the start or led the whole run, and once more,
// at the same lengths, where the reserve's reference itself only just left the start.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "advice/run_race_rounds.h"
#include "batchwise/run_race.h"
#include "batchwise/workload.h"
#include "check.h"

namespace batchwise {

namespace {

using detail::race_once;

using Batches = std::vector<std::pair<int64_t, double>>;  // batch, samples/s

// The deeper round trains at most this many budgets: its batches are the slowest swept, at the
// lengths the reserve's reference needed to leave the start.
constexpr double kDeeperBudgets = 2;

// The reserve's reference left the start only in its longest compressed run: it sits at the end of
// the plateau, and the next smaller batches, which take more steps in as many samples, leave it
// sooner and may end the run ahead. They race beside it at its lengths, not at those the budget
// buys at their slower samples/s, which would be shorter and end them on the plateau too, where the
// one that leaves it first says nothing of the run's end (mobilenet with AdamW, 2 epochs: over
// 0.68 epochs 8 leads and 16 has barely left the start; over 1.37, 16 leads, and ends the run best).
// At most kDeeperBudgets budgets; where it gives no pick, the reserve's answer stands.
RunRace deeper_round(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o,
                     std::map<int64_t, LrAdvice>& advised, RunRace second, const Batches& deeper) {
  std::vector<int64_t> batches, joining, left_out;
  std::vector<double> rates;
  for (const auto& [b, rate] : deeper) batches.push_back(b), rates.push_back(rate), joining.push_back(b);
  for (const RunRaceEntry& e : second.entries) {
    if (e.batch == second.reference_batch)
      batches.push_back(e.batch), rates.push_back(e.samples_per_s);
    else
      left_out.push_back(e.batch);
  }
  const auto& l = second.lengths_epochs;
  const double dataset = static_cast<double>(w.data().size());
  double train_s = 0;
  for (size_t i = 0; i < batches.size(); ++i)
    train_s += (i == 0 ? l[0] + l[1] + l[2] : l[1] + l[2]) * dataset / rates[i];
  const std::string late = fmt::format(
      "batch {} (the reserve's reference) left the start only in its longest compressed run ({:.3g} epochs)",
      second.reference_batch, l.back());
  if (train_s > kDeeperBudgets * o.budget_s()) {
    second.notes.push_back(fmt::format(
        "{}; the smaller batches {} would race beside it at the same lengths, but that trains about {:.0f} s, more "
        "than {:g} budgets ({:.0f} s): they stay out, and a larger --advice-budget lets them race",
        late, joining, train_s, kDeeperBudgets, o.budget_s()));
    return second;
  }
  RunRaceOptions again = o;
  again.batches(batches).samples_per_s(rates).reserve({}).reserve_samples_per_s({});
  RunRace third = race_once(w, held_out, again, advised, l);
  third.wall_s += second.wall_s;
  third.first_reference = second.first_reference;
  const std::string joined = fmt::format(
      "{}, so the smaller batches {} joined it at the same lengths, batch {} the reference, about {:.0f} s of "
      "training, without {} (larger: fewer steps in as many samples)",
      late, joining, third.reference_batch, train_s, left_out);
  if (!third.best_batch) {
    second.notes.push_back(fmt::format("{}; {}: the reserve's pick stands", joined,
                                       third.reference_stuck ? "it did not leave the start" : "they gave no pick"));
    second.wall_s = third.wall_s;
    return second;
  }
  third.notes.insert(third.notes.begin(), {second.notes.front(), joined});
  return third;
}

}  // namespace

RunRace race_runs(ModuleWorkload& w, const Dataset& held_out, const RunRaceOptions& o) {
  BATCHWISE_CHECK(o.reserve().size() == o.reserve_samples_per_s().size(), ConfigError,
                  "the run race: {} reserve batches with {} throughput figures; give one figure per batch",
                  o.reserve().size(), o.reserve_samples_per_s().size());
  std::map<int64_t, LrAdvice> advised;
  RunRace first = race_once(w, held_out, o, advised);
  Batches held;  // the reserve, in batch order: the two largest join first, the next two deeper
  for (size_t i = 0; i < o.reserve().size(); ++i)
    if (std::find(o.batches().begin(), o.batches().end(), o.reserve()[i]) == o.batches().end())
      held.emplace_back(o.reserve()[i], o.reserve_samples_per_s()[i]);
  std::sort(held.begin(), held.end());
  const size_t split = held.size() > 2 ? held.size() - 2 : 0;
  const Batches deeper(held.begin() + static_cast<std::ptrdiff_t>(split > 2 ? split - 2 : 0),
                       held.begin() + static_cast<std::ptrdiff_t>(split));
  std::vector<int64_t> batches;
  std::vector<double> rates;
  for (size_t i = split; i < held.size(); ++i) batches.push_back(held[i].first), rates.push_back(held[i].second);
  // The reference led on the run itself: its longest compressed run was the whole run (a fast
  // device's race, or a short run), so every gap was measured, not carried, and every larger
  // candidate ended worse beyond the noise. The best batch may then lie below the candidates (an
  // H200's transformer, 4 epochs: 2,048 led 4,096 to 65,536, and 256 ends 4.6 points above it).
  // Within a compressed run the smallest batch leads as a rule, which says nothing of the run's end.
  const bool led_the_run =
      first.best_batch == first.reference_batch && !first.lengths_epochs.empty() &&
      first.lengths_epochs.back() >= first.epochs * (1 - 1e-9) &&
      std::none_of(first.entries.begin() + 1, first.entries.end(), [](const RunRaceEntry& e) { return e.good; });
  if (!(first.reference_stuck || led_the_run) || batches.empty()) return first;
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
  RunRaceOptions again = o;
  again.batches(batches).samples_per_s(rates).reserve({}).reserve_samples_per_s({});
  RunRace second = race_once(w, held_out, again, advised);
  const std::string why =
      first.reference_stuck
          ? fmt::format("did not leave the start in {:.3g} epochs", first.lengths_epochs.back())
          : fmt::format("ended your whole {:g}-epoch run ahead of every larger candidate beyond the noise",
                        first.epochs);
  second.notes.insert(
      second.notes.begin(),
      fmt::format("batch {} (the first reference) {}, so the reserve {} joined, batch {} the reference, "
                  "for one more budget, without {} (larger: fewer steps in as many samples) ({}{})",
                  first.reference_batch, why, reserve, second.reference_batch, left_out,
                  second.reference_stuck
                      ? "it did not leave the start" + std::string(first.reference_stuck ? " either" : "")
                      : "it left the start",
                  second.best_batch ? "" : "; no pick"));
  second.first_reference = first.reference_batch;
  second.wall_s += first.wall_s;
  if (deeper.empty() || !detail::left_the_start_late(second)) return second;
  return deeper_round(w, held_out, o, advised, std::move(second), deeper);
}

}  // namespace batchwise

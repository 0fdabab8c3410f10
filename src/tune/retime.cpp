#include "tune/retime.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "batchwise/race.h"
#include "batchwise/units.h"

namespace batchwise::detail {

namespace {

// The close batches in the order they count: the fastest, the dips, then the nearest, the faster
// first; uncapped.
std::vector<int64_t> ranked_close(const std::vector<Trial>& points) {
  const std::vector<int64_t> candidates = race_candidates(points);  // ascending, each ok
  if (candidates.empty()) return {};
  const std::vector<double> rates = race_rates(points, candidates);
  const size_t top = static_cast<size_t>(std::max_element(rates.begin(), rates.end()) - rates.begin());
  const int64_t fastest_batch = candidates[top];
  // A dip: a batch between the smallest candidate and the fastest that reads slower than a smaller
  // one (race_candidates leaves it out where that is by 5 %). Noise only slows a trial, and a CPU's
  // samples/s rises with the batch up to its plateau, so the dip is the likelier misread, and it
  // moves the pick to a smaller batch.
  std::vector<int64_t> dips;
  double below = 0;
  for (const Trial& p : points) {  // ascending
    if (p.outcome != Outcome::Ok || p.batch < candidates.front() || p.batch >= fastest_batch) continue;
    if (p.samples_per_s < below) dips.push_back(p.batch);
    below = std::max(below, p.samples_per_s);
  }
  std::vector<size_t> near;  // indices into candidates
  for (size_t i = 0; i < candidates.size(); ++i)
    if (i != top && rates[i] >= (1 - kCloseShare) * rates[top] &&
        std::find(dips.begin(), dips.end(), candidates[i]) == dips.end())
      near.push_back(i);
  std::sort(near.begin(), near.end(), [&](size_t a, size_t b) { return rates[a] > rates[b]; });
  std::vector<int64_t> close{fastest_batch};
  close.insert(close.end(), dips.begin(), dips.end());
  for (size_t i : near) close.push_back(candidates[i]);
  return close;
}

// The close batches that count most, kMostClose at most, ascending; none where fewer than two.
std::vector<int64_t> ascending_or_none(std::vector<int64_t> ranked) {
  if (ranked.size() > static_cast<size_t>(kMostClose)) ranked.resize(kMostClose);
  if (ranked.size() < 2) return {};
  std::sort(ranked.begin(), ranked.end());
  return ranked;
}

// What one trial of `batch` took in the sweep, on average.
double trial_s(const std::vector<Trial>& points, int64_t batch) {
  for (const Trial& p : points)
    if (p.batch == batch && p.repetitions > 0) return p.wall_s / p.repetitions;
  return 0;
}

}  // namespace

std::vector<int64_t> close_batches(const std::vector<Trial>& points) { return ascending_or_none(ranked_close(points)); }

std::string retime_close(TrialRunner& runner, const SweepOptions& s, SweepResult& sweep, int64_t dataset,
                         double budget_s, const std::function<void(const std::string&)>& say) {
  std::vector<int64_t> larger;
  const std::vector<Trial> points = within_dataset(sweep.points, dataset, larger);
  std::vector<int64_t> ranked = ranked_close(points);
  if (ranked.size() > static_cast<size_t>(kMostClose)) ranked.resize(kMostClose);  // before the budget's cut
  RetimeOptions o = RetimeOptions().budget_s(budget_s);
  // The least rounds must fit the budget: the batches that count least are left out until they do.
  const auto least_s = [&] {
    double round_s = 0;
    for (int64_t b : ranked) round_s += trial_s(points, b);
    return o.min_rounds() * round_s;
  };
  while (ranked.size() > 2 && least_s() > budget_s) ranked.pop_back();
  const std::vector<int64_t> close = ascending_or_none(ranked);
  if (close.empty() || budget_s <= 0) return "";
  if (least_s() > budget_s) {
    sweep.retime_note =
        fmt::format("{} not timed again: {} rounds of their trials would take about {}, past the {} its budget allows",
                    fmt::join(close, " and "), o.min_rounds(), format_seconds(least_s()), format_seconds(budget_s));
    say(fmt::format("run race: {} ({:.0f} % of the run race's planned time); the sweep's figures stand",
                    sweep.retime_note, 100 * kRetimeShare));
    return "";
  }
  o.batches(close);
  say(
      fmt::format("run race: before it, {} {} timed again, the batches it turns on (the fastest, any that read slower "
                  "than a smaller one, and those within {:.0f} % of the fastest: an order one sweep cannot settle): "
                  "rounds of alternated trials until each one's samples/s against the "
                  "fastest's is known to {:.1f} %, {} to {} rounds, at most {}",
                  close.size() > 1 ? "batches" : "batch",
                  fmt::format("{} {}", fmt::join(close, ", "), close.size() > 1 ? "are" : "is"), 100 * kCloseShare,
                  100 * o.precision(), o.min_rounds(), o.max_rounds(), format_seconds(budget_s)));
  retime(runner, s, sweep, o);
  if (sweep.retimed.empty()) {
    say(fmt::format("run race: nothing timed again: {}", sweep.retime_note));
    return "";
  }
  std::vector<std::string> figures;
  const Trial* failed = nullptr;  // the first retimed point a trial failed at
  for (const Trial& p : sweep.points) {
    if (std::find(sweep.retimed.begin(), sweep.retimed.end(), p.batch) == sweep.retimed.end()) continue;
    figures.push_back(fmt::format("{} at {} samples/s", p.batch, format_grouped(p.samples_per_s)));
    if (!failed && p.outcome != Outcome::Ok) failed = &p;
  }
  say(fmt::format("run race: timed again in {} round{}: {}; {} (standard error {:.1f} %)", sweep.retime_rounds,
                  sweep.retime_rounds == 1 ? "" : "s", fmt::join(figures, ", "), sweep.retime_note,
                  100 * sweep.retime_error));
  if (!failed) return "";
  return fmt::format("the run race's retiming: {}; batch {} no longer races ({}){}", sweep.retime_note, failed->batch,
                     failed->message.empty() ? to_string(failed->outcome) : failed->message,
                     failed->outcome == Outcome::Oom ? ", nor any larger batch" : "");
}

}  // namespace batchwise::detail

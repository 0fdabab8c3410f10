// The run race's plan: the compressed runs' lengths from the budget and the candidates' samples/s, and what a race
// costs, as tune states it before the race (run_race.cpp trains the runs the plan names).
#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "advice/run_race_internal.h"
#include "batchwise/run_race.h"
#include "check.h"

namespace batchwise {

using detail::compressed_cost_s;
using detail::kLongestShare;
using detail::noise_batch_of;

double detail::compressed_cost_s(const std::vector<double>& full_runs_s) {
  double others_s = 0;
  for (size_t i = 1; i < full_runs_s.size(); ++i) others_s += full_runs_s[i];
  return 7 * full_runs_s.front() + 6 * others_s;
}

namespace {

// The share f that `budget_s` of training buys, at most a quarter (the longest run the whole run).
double compressed_share(double budget_s, const std::vector<double>& full_runs_s) {
  return std::min(kLongestShare, budget_s / compressed_cost_s(full_runs_s));
}

// The share f on a grid of the reference's steps: its shortest run takes 2^k or 3 x 2^(k-1) steps,
// the most of them that f buys (at least one). The budget's f follows the sweep's samples/s, which
// move a few percent from one tune to the next, and the compressed runs' gaps with it, by about
// the held-out noise (lenet AdamW, 15 epochs: 0.328 and 0.334 epochs picked 64 and 16); on the grid,
// two such tunes train the same runs from the same seed and give the same answer. It costs at most a
// third of the budget. A quarter (the longest run the whole run) stays as it is.
double on_step_grid(double f, double epochs, int64_t dataset, int64_t reference) {
  if (f >= kLongestShare) return f;
  const double per_step = static_cast<double>(reference) / (epochs * static_cast<double>(dataset));
  const double steps = f / per_step * (1 + 1e-9);           // 32 steps planned (run_race_train_s) are 32, not 31.99...
  if (steps < 2) return std::min(kLongestShare, per_step);  // one step, within the run
  double grid = std::exp2(std::floor(std::log2(steps)));
  if (1.5 * grid <= steps) grid *= 1.5;
  return grid * per_step;
}

}  // namespace

// The candidates, sorted, each with its full run's time; and the compressed lengths: a fraction f
// of the run (on the step grid), twice and four times it, the reference's three runs and every
// other candidate's two longer ones taking the budget at their samples/s; at most a quarter, half
// and the whole run.
void detail::plan_race(RunRace& race, const RunRaceOptions& o, int64_t dataset) {
  for (size_t i = 0; i < o.batches().size(); ++i) {
    RunRaceEntry e;
    e.batch = o.batches()[i];
    e.samples_per_s = o.samples_per_s()[i];
    BATCHWISE_CHECK(e.batch >= 1 && e.samples_per_s > 0, ConfigError,
                    "the run race: batch {} with {:g} samples/s; both must be positive", e.batch, e.samples_per_s);
    e.full_run_s = o.epochs() * static_cast<double>(dataset) / e.samples_per_s;
    race.entries.push_back(e);
  }
  std::sort(race.entries.begin(), race.entries.end(), [](const auto& a, const auto& b) { return a.batch < b.batch; });
  race.reference_batch = race.entries.front().batch;
  std::vector<double> full_runs_s;
  for (const auto& e : race.entries) full_runs_s.push_back(e.full_run_s);
  const double f = on_step_grid(compressed_share(o.budget_s(), full_runs_s), o.epochs(), dataset, race.reference_batch);
  race.lengths_epochs = {f * o.epochs(), 2 * f * o.epochs(), 4 * f * o.epochs()};
}

int64_t detail::noise_batch_of(const std::vector<int64_t>& batches, int64_t dataset) {
  int64_t b = 0;
  for (int64_t c : batches)
    if (c <= 1024) b = std::max(b, c);
  if (b == 0) b = *std::min_element(batches.begin(), batches.end());
  b = std::max<int64_t>(8, b);
  return dataset >= 2 ? std::min(b, dataset) : b;  // 7 training samples had ended tune --epochs "--batch 8: larger"
}

double run_race_train_s(double default_s, double ceiling_s, const std::vector<int64_t>& batches,
                        const std::vector<double>& samples_per_s, double epochs, int64_t dataset) {
  if (batches.size() < 2 || batches.size() != samples_per_s.size() || !(epochs > 0) || dataset <= 0) return default_s;
  std::vector<std::pair<int64_t, double>> by_batch;
  for (size_t i = 0; i < batches.size(); ++i) by_batch.emplace_back(batches[i], samples_per_s[i]);
  std::sort(by_batch.begin(), by_batch.end());
  std::vector<double> full_runs_s;
  for (const auto& [b, rate] : by_batch) {
    if (!(rate > 0)) return default_s;
    full_runs_s.push_back(epochs * static_cast<double>(dataset) / rate);
  }
  // The share that gives the reference kReferenceSteps in its shortest run; where the default buys
  // more, it stands.
  const double share = std::min(kLongestShare, static_cast<double>(kReferenceSteps * by_batch.front().first) /
                                                   (epochs * static_cast<double>(dataset)));
  return std::max(default_s, std::min(ceiling_s, share * compressed_cost_s(full_runs_s)));
}

double run_race_overhead_s(const RunRaceOptions& o, int64_t held_out_size,
                           const std::function<double(int64_t)>& step_s) {
  const std::vector<int64_t> raced = raced_options(o).batches();
  double range_tests = 0;
  for (int64_t b : raced) range_tests += o.lr().steps() * step_s(b);
  const int64_t noise_batch = noise_batch_of(o.batches());  // the candidates given choose it
  const int noise_scales = o.noise_at_start() ? 2 : 3;      // after the reference's two longer runs
  const double noise = noise_scales * o.noise_steps() * 8 * step_s(std::max<int64_t>(1, noise_batch / 8));
  const double evaluations = 1 + 3 + 2 * static_cast<double>(raced.size() - 1);
  const double evaluation = static_cast<double>(held_out_size) / 1024 * step_s(1024) / 3;
  return range_tests + noise + evaluations * evaluation;
}

}  // namespace batchwise

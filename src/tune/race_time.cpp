#include "tune/race_time.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "batchwise/schedule.h"

namespace batchwise::detail {

double race_ceiling_s(double spent_s) { return std::max(30.0, 2 * spent_s); }

namespace {

// The training and wall time from the race's predicted overhead: --advice-budget's wall time, the
// overhead in it; else default_race_budget_s's training, the overhead on top.
RaceTime race_time(const TuneOptions& o, double spent_s, int64_t dataset_size, const std::vector<double>& rates,
                   double overhead_s) {
  if (o.race_budget_s() > 0)
    return {std::max(o.race_budget_s() / 4, o.race_budget_s() - overhead_s), o.race_budget_s(), {}, {}, 0};
  const double train = default_race_budget_s(spent_s, dataset_size, *std::max_element(rates.begin(), rates.end()));
  return {train, train + overhead_s, {}, {}, 0};
}

}  // namespace

BatchRaceOptions batch_race_options(const TuneOptions& o, const Report& report, const std::vector<int64_t>& candidates,
                                    const std::vector<double>& rates) {
  return BatchRaceOptions(candidates, rates, LrAdviceOptions(o.base_batch(), report.workload.lr));
}

RunRaceOptions run_race_options(const TuneOptions& o, const Report& report, const std::vector<int64_t>& candidates,
                                const std::vector<double>& rates) {
  std::optional<double> noise_at_start;
  if (report.noise && report.noise->b_simple) noise_at_start = *report.noise->b_simple;
  return RunRaceOptions(candidates, rates, LrAdviceOptions(o.base_batch(), report.workload.lr))
      .epochs(o.epochs())
      .lr_schedule(o.lr_schedule())
      .noise_at_start(noise_at_start)
      .noise_steps(o.noise_steps());
}

RaceTime race_time(const TuneOptions& o, const Report& report, const std::vector<Trial>& points, const StepCost& cost,
                   double spent_s, int64_t dataset_size, int64_t held_out_size) {
  const std::vector<int64_t> candidates = race_candidates(points);
  if (candidates.size() < 2) return {};
  const std::vector<double> rates = race_rates(points, candidates);
  const auto step_s = [&cost](int64_t b) { return cost.at(b); };
  const double overhead =
      o.epochs() > 0 ? run_race_overhead_s(run_race_options(o, report, candidates, rates), held_out_size, step_s)
                     : race_overhead_s(batch_race_options(o, report, candidates, rates),
                                       std::min<int64_t>(2048, held_out_size), step_s);
  RaceTime t = race_time(o, spent_s, dataset_size, rates, overhead);
  if (o.epochs() > 0 && o.race_budget_s() <= 0) {  // enough steps for the reference's learning curve
    const double train =
        run_race_train_s(t.train_s, race_ceiling_s(spent_s), candidates, rates, o.epochs(), dataset_size);
    t.wall_s += train - t.train_s;
    t.train_s = train;
  }
  return t;
}

double batch_race_most_s(const RaceTime& t) { return t.wall_s + t.train_s + kFixedCostSlackS; }

double run_race_most_s(const RaceTime& t) { return 3 * t.wall_s + kPlateauBudgets * t.train_s + kFixedCostSlackS; }

RaceTime run_race_time(const TuneOptions& o, const Report& report, const std::vector<Trial>& points,
                       const StepCost& cost, double spent_s, int64_t dataset_size, int64_t held_out_size) {
  RaceTime t = race_time(o, report, points, cost, spent_s, dataset_size, held_out_size);
  const std::vector<int64_t> candidates = race_candidates(points);
  if (candidates.size() < 2) return t;
  const RunRaceOptions raced = raced_options(
      run_race_options(o, report, candidates, race_rates(points, candidates)).budget_s(t.train_s), &t.not_raced);
  t.raced = raced.batches();
  t.raced_train_s = raced.budget_s();
  t.wall_s -= t.train_s - t.raced_train_s;
  return t;
}

std::vector<LrAdvice> flat_range_rates(const Report& report, int64_t pick, int64_t base_batch, double epochs,
                                       LrSchedule shape) {
  const int64_t dataset = report.workload.dataset_size;
  std::vector<LrAdvice> rates;
  const auto flat = [&](const std::vector<int64_t>& range, int64_t batch) {
    return batch != pick && batch != base_batch && std::count(range.begin(), range.end(), batch) > 0;
  };
  if (report.race)
    for (const auto& e : report.race->entries)
      if (e.rungs > 0 && e.lr.scaled.batch > 0 && flat(report.race->within_5_percent, e.batch))  // advised
        // an epoch's warm-up had been kept beside a recommendation fitted to the run (15 of 128's 32 steps)
        rates.push_back(epochs > 0 && dataset > 0 ? for_the_run(e.lr, epochs, dataset, e.batch, shape) : e.lr);
  if (report.run_race && report.run_race->best_batch == pick)  // the run race answered
    for (const auto& e : report.run_race->entries)
      if (e.lr.lr > 0 && e.lr.scaled.batch > 0 && flat(report.run_race->within_5_percent, e.batch))
        rates.push_back(e.lr);
  return rates;
}

std::string duration_text(double s) {
  if (s < 90) return fmt::format("{:.0f} s", std::max(1.0, s));
  if (s < 5400) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

std::string wall_limit_warning(const char* which, double limit_s, const char* then) {
  return fmt::format(
      "{} stopped at its wall limit{}: this machine trained far slower than the sweep measured (another process on "
      "the cores?); {}; tune again on a quiet machine",
      which, limit_s > 0 ? " (" + duration_text(limit_s) + ")" : "", then);
}

std::string restated_plan(double stated_left_s, double left_s, double most_left_s,
                          const std::vector<PhaseTime>& since_plan, double stated_race_s, bool more) {
  if (!(stated_race_s > 0)) return "";
  const double moved = std::abs(left_s - stated_left_s);
  if (moved <= std::max(15.0, 0.3 * std::max(left_s, stated_left_s))) return "";
  // What moved it: each figure off by a fifth of the move or more (3 s or more: the move is over 15 s)
  const auto off = [moved](double took, double stated) { return std::abs(took - stated) >= moved / 5; };
  std::vector<std::string> why;
  for (const PhaseTime& p : since_plan)
    if (p.expected_s > 0 && off(p.wall_s, p.expected_s))
      why.push_back(fmt::format("the {} took {}, not the {} stated", p.phase, duration_text(p.wall_s),
                                duration_text(p.expected_s)));
  if (off(left_s, stated_race_s))
    why.push_back(fmt::format("the race about {}, not {}", duration_text(left_s), duration_text(stated_race_s)));
  if (more) why.push_back("the validation and the precision comparison come on top");
  return fmt::format("expected now: about {} more, at most {}{}", duration_text(left_s), duration_text(most_left_s),
                     why.empty() ? "" : fmt::format(" ({})", fmt::join(why, "; ")));
}

std::string unplanned_race_plan(double wall_s, double most_s, bool more) {
  return fmt::format(
      "expected now: about {} more, at most {} (the run race found no answer: its reference did not leave the "
      "plateau at the start; a batch race follows, which the plan did not count{})",
      duration_text(wall_s), duration_text(most_s),
      more ? "; the validation and the precision comparison come on top" : "");
}

std::string run_race_step_text(double run_epochs, const RunRaceStep& p) {
  return fmt::format("{}: {:.0f} % ({} of {} steps), training loss {:.4g}; {:.0f} s elapsed",
                     compressed_run_text(p.batch, run_epochs, p.epochs),
                     std::floor(100.0 * static_cast<double>(p.step) / static_cast<double>(p.steps)), p.step, p.steps,
                     p.loss, p.elapsed_s);
}

}  // namespace batchwise::detail

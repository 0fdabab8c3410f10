#include "batchwise/time_plan.h"

#include <algorithm>
#include <cmath>

#include "batchwise/sweep.h"

namespace batchwise {

double StepCost::at(int64_t batch) const {
  if (step_s.empty() || batch <= 0) return 0;
  const auto& [first_batch, first_s] = step_s.front();
  const auto& [last_batch, last_s] = step_s.back();
  if (batch <= first_batch) return first_s;
  if (batch >= last_batch) return last_s * static_cast<double>(batch) / static_cast<double>(last_batch);
  const auto above =
      std::lower_bound(step_s.begin(), step_s.end(), batch, [](const auto& p, int64_t b) { return p.first < b; });
  if (above->first == batch) return above->second;
  const auto below = above - 1;
  const double x = std::log(static_cast<double>(batch)), x0 = std::log(static_cast<double>(below->first)),
               x1 = std::log(static_cast<double>(above->first));
  const double y0 = std::log(below->second), y1 = std::log(above->second);
  return std::exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0));
}

StepCost step_cost(const std::vector<Trial>& trials) {
  StepCost cost;
  std::vector<double> overheads;
  for (const Trial& t : trials) {
    if (t.outcome != Outcome::Ok || t.step_times_s.empty()) continue;
    const double fastest = *std::min_element(t.step_times_s.begin(), t.step_times_s.end());
    if (!(fastest > 0)) continue;
    double stepped = 0;
    for (double s : t.step_times_s) stepped += s;
    if (t.wall_s > stepped) overheads.push_back(t.wall_s - stepped);
    const auto known =
        std::find_if(cost.step_s.begin(), cost.step_s.end(), [&](const auto& p) { return p.first == t.batch; });
    if (known == cost.step_s.end())
      cost.step_s.emplace_back(t.batch, fastest);
    else
      known->second = std::min(known->second, fastest);
  }
  std::sort(cost.step_s.begin(), cost.step_s.end());
  // The step time never falls as the batch grows: a smaller figure above a larger one is noise.
  for (size_t i = cost.step_s.size(); i-- > 1;)
    cost.step_s[i - 1].second = std::min(cost.step_s[i - 1].second, cost.step_s[i].second);
  if (!overheads.empty()) {
    std::nth_element(overheads.begin(), overheads.begin() + overheads.size() / 2, overheads.end());
    cost.trial_overhead_s = overheads[overheads.size() / 2];
  }
  return cost;
}

double sweep_trial_seconds(const StepCost& cost, int64_t batch, int warmup, int steps, double min_time_s) {
  const double step = cost.at(batch);
  if (step <= 0) return cost.trial_overhead_s;
  const double measured = std::max(static_cast<double>(steps), std::ceil(min_time_s / step));
  return cost.trial_overhead_s + (warmup + measured) * step;
}

double sweep_seconds(const StepCost& cost, const SweepOptions& o) {
  double total = 0;
  for (int64_t b : o.batch_sizes()) total += sweep_trial_seconds(cost, b, o.warmup(), o.steps(), o.min_time_s());
  return total * o.repetitions();
}

std::vector<int64_t> expected_sweep_batches(const StepCost& cost, const SweepOptions& o) {
  std::vector<int64_t> batches;
  double best = 0;
  int flat = 0;
  for (int64_t b : o.batch_sizes()) {
    batches.push_back(b);
    const double step = cost.at(b);
    if (step <= 0) continue;
    const double rate = static_cast<double>(b) / step;
    flat = rate > (1 + o.knee_tolerance()) * best ? 0 : flat + 1;
    best = std::max(best, rate);
    if (o.stop_after_flat() > 0 && flat >= o.stop_after_flat()) break;
  }
  return batches;
}

std::vector<Trial> expected_points(const StepCost& cost, const std::vector<int64_t>& batches) {
  std::vector<Trial> points;
  for (int64_t b : batches) {
    const double step = cost.at(b);
    if (step <= 0) continue;
    Trial t;
    t.batch = b;
    t.outcome = Outcome::Ok;
    t.step_time_s_median = step;
    t.samples_per_s = static_cast<double>(b) / step;
    points.push_back(t);
  }
  return points;
}

double noise_scale_seconds(const StepCost& cost, int64_t batch, int64_t micro_batch, int steps) {
  if (micro_batch <= 0) return 0;
  const double slices = static_cast<double>(batch) / static_cast<double>(micro_batch);
  return steps * slices * cost.at(micro_batch);
}

void Eta::finished(double predicted_s, double actual_s) {
  predicted_done_s_ += predicted_s;
  actual_done_s_ += actual_s;
}

double Eta::left_s() const {
  const double left = planned_s_ - predicted_done_s_ - dropped_s_;
  return left > 0 ? left * ratio() : 0;
}

}  // namespace batchwise

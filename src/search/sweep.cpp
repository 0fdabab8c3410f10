#include "batchwise/sweep.h"

#include <algorithm>

#include "batchwise/units.h"
#include "batchwise/workload.h"
#include "check.h"

namespace batchwise {

std::optional<int64_t> knee_batch(const std::vector<Trial>& points, double tolerance) {
  double best = 0;
  for (const auto& p : points)
    if (p.outcome == Outcome::Ok) best = std::max(best, p.samples_per_s);
  if (best <= 0) return std::nullopt;
  std::optional<int64_t> knee;
  for (const auto& p : points)
    if (p.outcome == Outcome::Ok && p.samples_per_s >= (1.0 - tolerance) * best && (!knee || p.batch < *knee))
      knee = p.batch;
  return knee;
}

namespace {

// A further repetition of the same batch joins its point: step times pooled, peaks the largest, the
// data wait and the all-reduce share their means, a failure the point's outcome.
void merge_repetition(Trial& point, const Trial& t) {
  point.step_times_s.insert(point.step_times_s.end(), t.step_times_s.begin(), t.step_times_s.end());
  point.peak_bytes = std::max(point.peak_bytes, t.peak_bytes);
  point.peak_allocated_bytes = std::max(point.peak_allocated_bytes, t.peak_allocated_bytes);
  point.steps_run += t.steps_run;
  point.skipped_steps += t.skipped_steps;
  point.wall_s += t.wall_s;
  point.loss_last = t.loss_last;
  point.data_wait_share = (point.data_wait_share * point.repetitions + t.data_wait_share) / (point.repetitions + 1);
  point.repetitions += 1;
  point.wall_timing = point.wall_timing || t.wall_timing;
  if (t.outcome != Outcome::Ok) {
    point.outcome = t.outcome;
    point.message = t.message;
    point.non_finite = t.non_finite;
  }
  point.input_bound = point.outcome == Outcome::Ok && point.data_wait_share > kInputBoundShare;
  if (point.distributed && t.distributed)  // the mean over repetitions, like the data wait
    point.distributed->allreduce_share =
        (point.distributed->allreduce_share * (point.repetitions - 1) + t.distributed->allreduce_share) /
        point.repetitions;
}

// Each point's figures from its pooled repetitions: step statistics; a runner's own samples/s (a
// command's step lines) when every repetition reported one; data-parallel scaling against one
// process's median.
void summarize_points(SweepResult& r, const std::vector<std::vector<double>>& reported,
                      const std::vector<std::vector<double>>& alone) {
  for (size_t i = 0; i < r.points.size(); ++i) {
    Trial& p = r.points[i];
    summarize_steps(p);
    if (p.outcome == Outcome::Ok && !reported[i].empty() && static_cast<int>(reported[i].size()) == p.repetitions) {
      p.samples_per_s = median(reported[i]);
      p.throughput_reported = true;
    }
    if (p.distributed && !alone[i].empty()) {  // the median of one process's figures, against the median here
      const double solo = median(alone[i]);
      p.distributed->single_process_samples_per_s = solo;
      p.distributed->scaling_efficiency =
          p.outcome == Outcome::Ok ? std::optional<double>(p.samples_per_s / (p.distributed->world_size * solo))
                                   : std::nullopt;
    }
  }
}

// A batch that ran out of memory in any repetition bounds them all: a larger one that ran in another
// repetition is above a batch that did not fit, and is never recommended.
void bound_by_failure(SweepResult& r, int64_t smallest_failure) {
  for (Trial& p : r.points)
    if (p.batch > smallest_failure && p.outcome == Outcome::Ok) {
      p.outcome = Outcome::Oom;
      p.input_bound = false;
      p.message = fmt::format("treated as out of memory: it ran, but batch {} (smaller) ran out of memory in "
                              "another repetition, so memory at this size is not reliable",
                              smallest_failure);
    }
}

}  // namespace

SweepResult sweep(Workload& workload, const SweepOptions& options) {
  WorkloadRunner runner(workload);
  return sweep(runner, options);
}

SweepResult sweep(TrialRunner& runner, const SweepOptions& o) {
  BATCHWISE_CHECK(!o.batch_sizes().empty(), ConfigError,
                  "sweep: no batch sizes; pass --batch-sizes 16,32,64 or --range 8-4096*2");
  BATCHWISE_CHECK(o.repetitions() >= 1, ConfigError, "--repetitions {}: must be at least 1", o.repetitions());
  BATCHWISE_CHECK(o.knee_tolerance() >= 0 && o.knee_tolerance() < 1, ConfigError,
                  "knee tolerance {}: must be a fraction in [0, 1)", o.knee_tolerance());
  std::vector<int64_t> sizes = o.batch_sizes();
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const int64_t budget = o.budget_bytes() > 0 ? o.budget_bytes() : runner.default_budget_bytes();

  SweepResult r;
  r.repetitions = o.repetitions();
  r.budget_bytes = budget;
  r.knee_tolerance = o.knee_tolerance();
  r.points.resize(sizes.size());
  std::vector<std::vector<double>> reported(sizes.size());  // a runner's own samples/s, per repetition
  std::vector<std::vector<double>> alone(sizes.size());     // data-parallel: one process's samples/s, per repetition
  std::optional<int64_t> smallest_failure;  // a batch at or above it is not run again
  int planned = static_cast<int>(sizes.size()) * o.repetitions();
  int index = 0;
  double best_rate = 0;  // stop_after_flat: the best samples/s of the first repetition so far
  int flat = 0;

  for (int rep = 0; rep < o.repetitions(); ++rep) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t i = rep % 2 == 0 ? k : sizes.size() - 1 - k;  // A B C, C B A, ...
      Trial& point = r.points[i];
      if (smallest_failure && sizes[i] >= *smallest_failure) {
        if (point.batch == 0) {
          point.batch = sizes[i];
          point.outcome = Outcome::Oom;
          point.message = fmt::format("not run: batch {} already ran out of memory", *smallest_failure);
        }
        continue;
      }
      if (o.on_trial_start()) o.on_trial_start()(sizes[i], index, planned);
      Trial t = runner.run(TrialOptions(sizes[i])
                                        .warmup(o.warmup())
                                        .steps(o.steps())
                                        .limit_bytes(budget)
                                        .timeout_s(o.trial_timeout_s())
                                        .accumulation_steps(o.accumulation_steps())
                                        .monitor(o.monitor()));
      if (o.on_trial()) o.on_trial()(t, index, planned);
      ++index;
      if (t.throughput_reported) reported[i].push_back(t.samples_per_s);
      if (t.distributed && t.distributed->single_process_samples_per_s)
        alone[i].push_back(*t.distributed->single_process_samples_per_s);
      if (point.batch == 0) point = t;
      else merge_repetition(point, t);
      if (t.outcome == Outcome::Oom) {
        smallest_failure = smallest_failure ? std::min(*smallest_failure, sizes[i]) : sizes[i];
      }
      if (rep == 0 && o.stop_after_flat() > 0 && t.outcome == Outcome::Ok) {
        flat = t.samples_per_s > (1 + o.knee_tolerance()) * best_rate ? 0 : flat + 1;
        best_rate = std::max(best_rate, t.samples_per_s);
        if (flat >= o.stop_after_flat() && i + 1 < sizes.size()) {
          r.not_run.assign(sizes.begin() + static_cast<std::ptrdiff_t>(i) + 1, sizes.end());
          r.not_run_reason = fmt::format(
              "not swept: samples/s did not rise {:.0f} % above its best ({:.0f} samples/s) over the {} batches up to "
              "{}, so larger batches only cost time",
              o.knee_tolerance() * 100, best_rate, o.stop_after_flat(), sizes[i]);
          sizes.resize(i + 1);
          r.points.resize(i + 1);
          reported.resize(i + 1);
          alone.resize(i + 1);
          planned = index + static_cast<int>(sizes.size()) * (o.repetitions() - 1);
          break;
        }
      }
    }
  }
  summarize_points(r, reported, alone);
  if (smallest_failure) bound_by_failure(r, *smallest_failure);
  r.knee_batch = knee_batch(r.points, o.knee_tolerance());
  return r;
}

std::vector<StepProfile> profile_sweep(Workload& workload, const SweepResult& sweep, std::vector<std::string>& warnings) {
  std::vector<StepProfile> profiles;
  for (const auto& p : sweep.points) {
    if (p.outcome != Outcome::Ok) continue;
    try {
      if (auto profile = profile_steps(workload, p.batch)) profiles.push_back(*profile);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      warnings.push_back(
          fmt::format("--profile: batch {} could not be profiled: {}", p.batch, what.substr(0, what.find('\n'))));
    }
  }
  return profiles;
}

}  // namespace batchwise

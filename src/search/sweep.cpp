#include "batchwise/sweep.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "batchwise/time_plan.h"
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
  const bool waits =
      point.step_waits_s.size() == point.step_times_s.size() && t.step_waits_s.size() == t.step_times_s.size();
  point.step_times_s.insert(point.step_times_s.end(), t.step_times_s.begin(), t.step_times_s.end());
  if (waits)  // each step's wait beside its time, or none
    point.step_waits_s.insert(point.step_waits_s.end(), t.step_waits_s.begin(), t.step_waits_s.end());
  else
    point.step_waits_s.clear();
  point.peak_bytes = std::max(point.peak_bytes, t.peak_bytes);
  point.peak_allocated_bytes = std::max(point.peak_allocated_bytes, t.peak_allocated_bytes);
  point.steps_run += t.steps_run;
  point.skipped_steps += t.skipped_steps;
  point.wall_s += t.wall_s;
  point.loss_last = t.loss_last;
  point.data_wait_share = (point.data_wait_share * point.repetitions + t.data_wait_share) / (point.repetitions + 1);
  if (point.cpu_wait_share && t.cpu_wait_share)
    point.cpu_wait_share = (*point.cpu_wait_share * point.repetitions + *t.cpu_wait_share) / (point.repetitions + 1);
  else
    point.cpu_wait_share.reset();  // a repetition without it: no mean over them all
  point.repetitions += 1;
  point.wall_timing = point.wall_timing || t.wall_timing;
  if (t.outcome != Outcome::Ok) {
    point.outcome = t.outcome;
    point.message = t.message;
    point.non_finite = t.non_finite;
  }
  point.input_bound = point.outcome == Outcome::Ok && point.data_wait_share > kInputBoundShare;
  if (point.distributed && t.distributed) {  // the mean over repetitions, like the data wait
    DistributedTrial& d = *point.distributed;
    const DistributedTrial& more = *t.distributed;
    d.allreduce_share = (d.allreduce_share * (point.repetitions - 1) + more.allreduce_share) / point.repetitions;
    // Each rank's over every repetition, as the point's own figures are (they had been the first repetition's: a
    // timeout read "ok" on every rank, medians above the slowest rank's, peaks below the point's)
    if (more.rank_step_time_s.size() == d.rank_step_time_s.size())
      for (size_t r = 0; r < d.rank_step_time_s.size(); ++r)
        d.rank_step_time_s[r] =
            (d.rank_step_time_s[r] * (point.repetitions - 1) + more.rank_step_time_s[r]) / point.repetitions;
    if (more.rank_peak_bytes.size() == d.rank_peak_bytes.size())
      for (size_t r = 0; r < d.rank_peak_bytes.size(); ++r)
        d.rank_peak_bytes[r] = std::max(d.rank_peak_bytes[r], more.rank_peak_bytes[r]);
    if (t.outcome != Outcome::Ok) d.rank_outcomes = more.rank_outcomes;  // the failure's, as the point's message
  }
}

// One trial of `batch` with a sweep's settings under `budget`: the sweep's and the retiming's.
TrialOptions trial_options(const SweepOptions& o, int64_t batch, int64_t budget) {
  return TrialOptions(batch)
      .warmup(o.warmup())
      .steps(o.steps())
      .min_time_s(o.min_time_s())
      .limit_bytes(budget)
      .timeout_s(o.trial_timeout_s())
      .accumulation_steps(o.accumulation_steps())
      .monitor(o.monitor());
}

// Each of a batch's trials' samples/s that ran ok, in the order they ran.
std::vector<double> ok_rates(const std::vector<Trial>& trials) {
  std::vector<double> rates;
  for (const Trial& t : trials)
    if (t.outcome == Outcome::Ok) rates.push_back(t.samples_per_s);
  return rates;
}

// Each point's figures from its pooled repetitions (`trials`: each batch's, in the order they ran):
// step statistics; a runner's own samples/s (a command's step lines) when every repetition reported
// one; data-parallel scaling against one process's median.
void summarize_points(SweepResult& r, const std::vector<std::vector<Trial>>& trials) {
  for (size_t i = 0; i < r.points.size(); ++i) {
    Trial& p = r.points[i];
    summarize_steps(p);
    std::vector<double> reported, alone;
    double least = std::numeric_limits<double>::infinity(), most = 0;  // the reported trials' own spread
    for (const Trial& t : trials[i]) {
      if (t.throughput_reported) {
        reported.push_back(t.samples_per_s);
        least = std::min(least, t.samples_per_s_min);
        most = std::max(most, t.samples_per_s_max);
      }
      if (t.distributed && t.distributed->single_process_samples_per_s)
        alone.push_back(*t.distributed->single_process_samples_per_s);
    }
    if (p.outcome == Outcome::Ok && !reported.empty() && static_cast<int>(reported.size()) == p.repetitions) {
      p.samples_per_s = median(reported);
      // the spread about that figure (the pooled steps' is of batch / step time: a command's own 12,345 samples/s had
      // stood beside a min and max of 77 and 80, and samples=4x the batch beside a quarter of its rate)
      p.samples_per_s_min = std::min(least, p.samples_per_s);
      p.samples_per_s_max = std::max(most, p.samples_per_s);
      p.throughput_reported = true;
    }
    if (p.distributed && !alone.empty()) {  // the median of one process's figures, against the median here
      const double solo = median(alone);
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
      p.message = fmt::format(
          "treated as out of memory: it ran, but batch {} (smaller) ran out of memory in "
          "another trial, so memory at this size is not reliable",
          smallest_failure);
    }
}

// Did a trial that ran wait for a core long enough to carry it in its figures?
bool waited_for_a_core(const Trial& t) {
  return t.outcome == Outcome::Ok && t.cpu_wait_share && *t.cpu_wait_share > kSharedCpuShare &&
         t.step_time_s_median >= kInterruptibleStepS;
}

// The warning for a sweep that shared the CPU (cpu_wait_share), after its retries: what they did, and
// why they stopped early (`ended`: empty where they did not).
void warn_of_shared_cpu(SweepResult& r, const std::string& ended) {
  const double share = cpu_wait_share(r);
  if (share <= kSharedCpuShare) return;
  std::string retried;
  if (const size_t n = r.cpu_retried.size(); n > 0) {
    std::vector<int64_t> batches = r.cpu_retried;
    std::sort(batches.begin(), batches.end());
    batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
    const size_t kept = static_cast<size_t>(r.cpu_retries_kept);
    const std::string verdict = kept == 0   ? (n == 1 ? "it does not count in its place" : "none of them counts")
                                : kept == n ? (n == 1 ? "it waited less and counts in its place"
                                                      : fmt::format("all {} waited less and count in their place", n))
                                            : fmt::format("{} of {} waited less and count in their place", kept, n);
    retried = fmt::format(". {} that waited ran again at the sweep's end (batch{} {}), and {}; {}",
                          n == 1 ? "A trial" : fmt::format("{} trials", n), batches.size() > 1 ? "es" : "",
                          fmt::join(batches, ", "), verdict,
                          ended.empty() ? "the trials not run again still carry the wait" : ended);
  }
  r.shared_cpu_warning = fmt::format(
      "the sweep shared the CPU: its threads waited for a core {:.0f} % of the time they were ready to run (the "
      "median over its batches; Linux's run-queue delay), held by another process, by more of its own threads "
      "than there are cores, or paused by a CPU quota. A step longer than the scheduler's slice is then nearly always "
      "interrupted and a "
      "shorter one often not, so the median step favours the smaller batches: the larger read slower than they "
      "are, and the knee and the candidates move down{}. Run it on a quiet machine (top shows what else runs), with "
      "--threads at most the cores (and the quota's, where a cgroup sets one)",
      100 * share, retried);
}

}  // namespace

double cpu_wait_share(const SweepResult& s) {
  std::vector<double> shares;
  for (const Trial& p : s.points)
    if (p.outcome == Outcome::Ok && p.cpu_wait_share) shares.push_back(*p.cpu_wait_share);
  return shares.empty() ? 0 : median(shares);
}

SweepResult sweep(Workload& workload, const SweepOptions& options) {
  WorkloadRunner runner(workload);
  return sweep(runner, options);
}

namespace {

// A batch's repetitions agree when most of them (more than half) ran within kNoisyShare of its
// fastest: the pooled median step is then one of theirs.
bool settled(const std::vector<double>& rates) {
  if (rates.size() < 2) return true;
  const double fastest = *std::max_element(rates.begin(), rates.end());
  const auto agree =
      std::count_if(rates.begin(), rates.end(), [&](double r) { return r >= (1 - kNoisyShare) * fastest; });
  return 2 * static_cast<size_t>(agree) > rates.size();
}

// The largest gap between a batch's repetitions, as a share of its fastest.
double disagreement(const std::vector<double>& rates) {
  if (rates.size() < 2) return 0;
  const auto [slowest, fastest] = std::minmax_element(rates.begin(), rates.end());
  return *fastest > 0 ? 1 - *slowest / *fastest : 0;
}

// One sweep in progress: its points and each batch's trials.
class SweepRun {
 public:
  SweepRun(TrialRunner& runner, const SweepOptions& o, std::vector<int64_t> sizes, int64_t budget)
      : runner_(runner), o_(o), sizes_(std::move(sizes)), budget_(budget) {
    r.repetitions = o.repetitions();
    r.budget_bytes = budget;
    r.knee_tolerance = o.knee_tolerance();
    r.min_time_s = runner.runs_steps_exactly() ? 0 : o.min_time_s();
    r.points.resize(sizes_.size());
    trials_.resize(sizes_.size());
    planned_ = static_cast<int>(sizes_.size()) * o.repetitions();
    double planned_s = 0;
    for (int64_t b : sizes_) planned_s += expected_s(b) * o.repetitions();
    eta_ = Eta(planned_s);
  }

  SweepResult finish() {
    for (int rep = 0; rep < o_.repetitions(); ++rep)
      for (size_t k = 0; k < sizes_.size(); ++k) {
        const size_t i = rep % 2 == 0 ? k : sizes_.size() - 1 - k;  // A B C, C B A, ...
        run(i);
        if (rep == 0 && stops_after(i)) break;
      }
    retry_shared_cpu();
    summarize_points(r, trials_);
    if (remeasure_noise_at_the_knee()) summarize_points(r, trials_);
    if (smallest_failure_) bound_by_failure(r, *smallest_failure_);
    r.knee_batch = knee_batch(r.points, o_.knee_tolerance());
    warn_of_noise();
    warn_of_shared_cpu(r, retries_ended_);
    return r;
  }

  SweepResult r;

 private:
  // One more trial at sizes_[i], pooled into its point. A re-measure (`again`) is outside the plan:
  // its callbacks get index -1, and the planned count stays as it was.
  void run(size_t i, bool again = false) {
    Trial& point = r.points[i];
    if (smallest_failure_ && sizes_[i] >= *smallest_failure_) {
      if (point.batch == 0) {
        point.batch = sizes_[i];
        point.outcome = Outcome::Oom;
        point.message = fmt::format("not run: batch {} already ran out of memory", *smallest_failure_);
      }
      if (!again) ++index_, eta_.dropped(expected_s(sizes_[i]));  // done, by not running
      return;
    }
    Trial t = measure(i, again ? -1 : index_, /*in_eta=*/!again);
    if (!again) ++index_;
    add(i, std::move(t));
  }

  // Runs one trial at sizes_[i], with its callbacks (at `index`: -1 outside the plan) and the time
  // left, where it is one the Eta counts (`in_eta`); pools nothing. A planned trial that waited for a
  // core (waited_for_a_core) is queued for a retry at the end, and the time left counts the retry at once,
  // up to one repetition's worth.
  Trial measure(size_t i, int index, bool in_eta) {
    if (o_.on_trial_start()) o_.on_trial_start()(sizes_[i], index, planned_);
    Trial t = runner_.run(trial_options(o_, sizes_[i], budget_));
    if (in_eta) eta_.finished(expected_s(sizes_[i]), t.wall_s);
    if (index >= 0 && waited_for_a_core(t)) {
      const bool counted = waited_.size() < sizes_.size();
      if (counted) eta_.added(expected_s(sizes_[i]));
      waited_.push_back({i, trials_[i].size(), counted});
    }
    if (o_.on_eta() && o_.expected_trial_s()) o_.on_eta()(eta_.left_s());
    if (o_.on_trial()) o_.on_trial()(t, index, planned_);
    return t;
  }

  // A trial joins batch i's pool; one that ran out of memory bounds the batches run after it.
  void add(size_t i, Trial t) {
    if (t.outcome == Outcome::Oom)
      smallest_failure_ = smallest_failure_ ? std::min(*smallest_failure_, sizes_[i]) : sizes_[i];
    trials_[i].push_back(std::move(t));
    pool(i);
  }

  // Batch i's point, from its trials in the order they ran.
  void pool(size_t i) {
    Trial& point = r.points[i];
    for (const Trial& t : trials_[i]) {
      if (&t == &trials_[i].front())
        point = t;
      else
        merge_repetition(point, t);
    }
  }

  // After the repetitions: each trial that waited for a core (waited_for_a_core) runs once more, in the order
  // they ran, and the one that waited less counts in its place, so a burst of other work that is over
  // by then no longer reads the larger batches slow. On a machine shared throughout the first retry
  // waits too, and the retries stop there: that costs one trial. At most one repetition's worth, none
  // at or above a batch that ran out of memory; the time left drops those it counted and did not run.
  // A retry that fails joins the pool, as any failure does, and ends them; one that ran past the trial
  // timeout ends them only: the batch measured its repetitions within it, and a retry runs because
  // the machine was shared.
  void retry_shared_cpu() {
    size_t run = 0;
    bool dropped = false;
    for (const Waited& w : waited_) {
      const size_t i = w.batch;
      const bool due =
          retries_ended_.empty() && run < sizes_.size() && !(smallest_failure_ && sizes_[i] >= *smallest_failure_);
      if (!due) {
        if (w.counted) eta_.dropped(expected_s(sizes_[i])), dropped = true;
        continue;
      }
      if (!w.counted) eta_.added(expected_s(sizes_[i]));
      ++run;
      Trial t = measure(i, -1, /*in_eta=*/true);
      r.cpu_retried.push_back(sizes_[i]);
      const std::optional<double> share = t.cpu_wait_share;
      if (t.outcome == Outcome::Timeout) {  // a retry's slowness: the batch keeps the repetitions it measured
        retries_ended_ = fmt::format(
            "the retries stopped at one that ran past the --trial-timeout (batch {}); its batch keeps the "
            "repetitions it measured",
            sizes_[i]);
        continue;
      }
      if (t.outcome != Outcome::Ok) {  // each ending: nothing more to learn from retrying
        retries_ended_ = fmt::format("the retries stopped at one that failed ({})", to_string(t.outcome));
        add(i, std::move(t));
        continue;
      }
      if (!share)
        retries_ended_ = "the retries stopped at one that read no wait share";
      else if (*share > kSharedCpuShare)
        retries_ended_ =
            fmt::format("the retries stopped at one that waited {:.0f} %: the machine was still shared", 100 * *share);
      if (share && *share < *trials_[i][w.trial].cpu_wait_share) {
        trials_[i][w.trial] = std::move(t);
        ++r.cpu_retries_kept;
        pool(i);
      }
    }
    if (dropped && o_.on_eta() && o_.expected_trial_s()) o_.on_eta()(eta_.left_s());  // none left
  }

  // Measures sizes_[i] once more, outside the planned repetitions (not at or above a batch that ran
  // out of memory, which run() would skip).
  void remeasure(size_t i) {
    if (smallest_failure_ && sizes_[i] >= *smallest_failure_) return;
    run(i, /*again=*/true);
    r.remeasured.push_back(sizes_[i]);
  }

  // stop_after_flat, in the first repetition: after batch i, has samples/s stayed flat for long
  // enough? A flat batch far below the best so far is measured again first, and its faster figure
  // counts. When it stops, the batches above are left out and the plan shrinks.
  bool stops_after(size_t i) {
    if (o_.stop_after_flat() <= 0 || r.points[i].outcome != Outcome::Ok || i + 1 >= sizes_.size()) return false;
    double best = 0;
    int flat = 0;
    const auto count_flat = [&] {
      best = 0, flat = 0;
      for (size_t j = 0; j <= i; ++j) {
        const std::vector<double> rates = ok_rates(trials_[j]);
        if (rates.empty()) continue;
        const double rate = *std::max_element(rates.begin(), rates.end());
        flat = rate > (1 + o_.knee_tolerance()) * best ? 0 : flat + 1;
        best = std::max(best, rate);
      }
    };
    count_flat();
    if (flat < o_.stop_after_flat()) return false;
    std::vector<size_t> again;
    for (size_t j = i + 1 - static_cast<size_t>(flat); j <= i; ++j)
      if (const std::vector<double> rates = ok_rates(trials_[j]);
          rates.size() == 1 && rates[0] < (1 - kNoisyShare) * best)
        remeasure(j), again.push_back(j);
    if (!again.empty()) count_flat();
    if (flat < o_.stop_after_flat()) {  // a slow first figure would have ended the sweep here: noise said so
      for (size_t j : again)
        if (disagreement(ok_rates(trials_[j])) >= kNoisyShare) noisy_.push_back(j);
      return false;
    }
    r.not_run.assign(sizes_.begin() + static_cast<std::ptrdiff_t>(i) + 1, sizes_.end());
    r.not_run_reason = fmt::format(
        "not swept: in the sweep's first pass, samples/s did not rise {:.0f} % above its best so far ({:.0f} "
        "samples/s, one repetition's figure: the table's are the median of all) over the {} batches up to {}, so "
        "larger batches only cost time",
        o_.knee_tolerance() * 100, best, o_.stop_after_flat(), sizes_[i]);
    sizes_.resize(i + 1);
    r.points.resize(i + 1);
    trials_.resize(i + 1);
    // The planned count stays: the trials left out count as done, so a progress total never changes.
    index_ += static_cast<int>(r.not_run.size()) * o_.repetitions();
    for (int64_t b : r.not_run) eta_.dropped(expected_s(b) * o_.repetitions());
    return true;
  }

  // Would batch i's fastest repetition, put in place of its pooled figure, move the knee? Noise only
  // slows a trial, so a batch whose figure that changes decides the knee on noise.
  bool moves_the_knee(size_t i) const {
    const std::vector<double> rates = ok_rates(trials_[i]);
    if (r.points[i].outcome != Outcome::Ok || rates.empty()) return false;
    std::vector<Trial> fastest = r.points;
    fastest[i].samples_per_s = *std::max_element(rates.begin(), rates.end());
    return knee_batch(fastest, o_.knee_tolerance()) != knee_batch(r.points, o_.knee_tolerance());
  }

  // After the repetitions: a batch whose repetitions mostly disagree, where that moves the knee, is
  // measured once more. A small batch of a few milliseconds a step can vary by a third from one
  // repetition to the next on a quiet machine; far from the knee, that decides nothing.
  bool remeasure_noise_at_the_knee() {
    std::vector<size_t> noisy;
    for (size_t i = 0; i < sizes_.size(); ++i)
      if (!settled(ok_rates(trials_[i])) && moves_the_knee(i)) noisy.push_back(i);
    for (size_t i : noisy) remeasure(i), noisy_.push_back(i);
    return !noisy.empty();
  }

  // The warning: which batches' noise would have cut the sweep or moved the knee (each measured
  // again), and whether the figures still rest on it.
  void warn_of_noise() {
    std::sort(r.remeasured.begin(), r.remeasured.end());
    r.remeasured.erase(std::unique(r.remeasured.begin(), r.remeasured.end()), r.remeasured.end());
    std::sort(noisy_.begin(), noisy_.end());
    noisy_.erase(std::unique(noisy_.begin(), noisy_.end()), noisy_.end());
    std::vector<int64_t> noisy, unsettled;
    double worst = 0;
    for (size_t i : noisy_) {
      if (i >= sizes_.size() || r.points[i].outcome != Outcome::Ok) continue;
      noisy.push_back(sizes_[i]);
      const std::vector<double> rates = ok_rates(trials_[i]);
      worst = std::max(worst, disagreement(rates));
      if (!settled(rates) && moves_the_knee(i)) unsettled.push_back(sizes_[i]);
    }
    r.unsettled = unsettled;
    if (noisy.empty()) return;
    const std::string seen = fmt::format(
        "the sweep met noise: at batch{} {} a repetition ran up to {:.0f} % slower than the same batch's fastest "
        "(another process on the cores?), enough to cut the sweep short or move the knee, so {} measured again",
        noisy.size() > 1 ? "es" : "", fmt::join(noisy, ", "), 100 * worst, noisy.size() > 1 ? "they were" : "it was");
    if (unsettled.empty())
      r.noise_warning = seen + "; most repetitions agree, and the figures are the median over all their steps";
    else
      r.noise_warning = fmt::format(
          "{}; at {} they still disagree, so the knee{} and the batches swept rest on noisy figures: run again on a "
          "quiet machine, or with more --repetitions",
          seen, fmt::join(unsettled, ", "), r.knee_batch ? fmt::format(" ({})", *r.knee_batch) : "");
  }

  TrialRunner& runner_;
  const SweepOptions& o_;
  std::vector<int64_t> sizes_;
  int64_t budget_;
  std::vector<std::vector<Trial>> trials_;  // each trial pooled, per batch, in the order they ran
  struct Waited {
    size_t batch, trial;  // indices into sizes_ and that batch's trials_
    bool counted;         // the time left counts its retry
  };
  std::vector<Waited> waited_;               // planned trials that waited for a core, in the order they ran
  std::string retries_ended_;                // why the retries stopped early; empty where they did not
  std::optional<int64_t> smallest_failure_;  // a batch at or above it is not run again
  std::vector<size_t> noisy_;                // batches whose noise would have cut the sweep or moved the knee
  int planned_ = 0, index_ = 0;
  Eta eta_;  // the time left, when the caller predicted each trial's (expected_trial_s)
  double expected_s(int64_t batch) const { return o_.expected_trial_s() ? o_.expected_trial_s()(batch) : 0; }
};

}  // namespace

SweepResult sweep(TrialRunner& runner, const SweepOptions& o) {
  BATCHWISE_CHECK(!o.batch_sizes().empty(), ConfigError,
                  "sweep: no batch sizes; pass --batch-sizes 16,32,64 or --range 8-4096*2");
  BATCHWISE_CHECK(o.repetitions() >= 1, ConfigError, "--repetitions {}: must be at least 1", o.repetitions());
  BATCHWISE_CHECK(o.trial_timeout_s() >= 0, ConfigError,  // NaN too: a limit no trial could be held to
                  "--trial-timeout {}: must be at least 0 seconds (0: no limit)", o.trial_timeout_s());
  BATCHWISE_CHECK(o.knee_tolerance() >= 0 && o.knee_tolerance() < 1, ConfigError,
                  "knee tolerance {}: must be a fraction in [0, 1)", o.knee_tolerance());
  std::vector<int64_t> sizes = o.batch_sizes();
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  // Not checked against the device here: a budget is the CLI's or Python's to check as given (tune's
  // sweep takes the fit's, checked minutes before, when the memory available may have moved since).
  const int64_t budget = o.budget_bytes() > 0 ? o.budget_bytes() : runner.default_budget_bytes();
  return SweepRun(runner, o, std::move(sizes), budget).finish();
}

namespace {

// The standard error over rounds of log(rate / the reference's rate), each round's own pair.
double ratio_error(const std::vector<double>& rates, const std::vector<double>& reference) {
  const size_t n = std::min(rates.size(), reference.size());
  if (n < 2) return 1;
  std::vector<double> logs;
  for (size_t k = 0; k < n; ++k) {
    if (!(rates[k] > 0) || !(reference[k] > 0)) return 1;  // unknown, as with fewer than two rounds
    logs.push_back(std::log(rates[k] / reference[k]));
  }
  double mean = 0;
  for (double x : logs) mean += x;
  mean /= static_cast<double>(n);
  double var = 0;
  for (double x : logs) var += (x - mean) * (x - mean);
  return std::sqrt(var / static_cast<double>(n - 1) / static_cast<double>(n));
}

}  // namespace

void retime(TrialRunner& runner, const SweepOptions& so, SweepResult& r, const RetimeOptions& o) {
  std::vector<size_t> at;  // indices into r.points of the batches timed, ascending by batch
  for (size_t i = 0; i < r.points.size(); ++i) {
    const Trial& p = r.points[i];
    const bool asked = std::count(o.batches().begin(), o.batches().end(), p.batch) > 0;
    if (asked && p.outcome == Outcome::Ok && !p.throughput_reported && !p.distributed && p.repetitions > 0)
      at.push_back(i);
  }
  std::sort(at.begin(), at.end(), [&](size_t a, size_t b) { return r.points[a].batch < r.points[b].batch; });
  if (at.size() < 2 || o.max_rounds() < 1) {
    r.retime_note = at.size() < 2 ? "fewer than two of the batches asked ran ok in the sweep" : "no rounds asked";
    return;
  }
  std::vector<std::vector<double>> rates(r.points.size());
  std::vector<double> last_s(r.points.size());
  for (size_t i : at) last_s[i] = r.points[i].wall_s / r.points[i].repetitions;
  double spent_s = 0;
  const auto fastest = [&] {
    const auto rate = [&](size_t i) { return r.points[i].outcome == Outcome::Ok ? r.points[i].samples_per_s : -1.0; };
    return *std::max_element(at.begin(), at.end(), [&](size_t a, size_t b) { return rate(a) < rate(b); });
  };
  const auto worst_error = [&] {
    const size_t ref = fastest();
    double worst = 0;
    for (size_t i : at)
      if (i != ref) worst = std::max(worst, ratio_error(rates[i], rates[ref]));
    return worst;
  };
  std::string why;
  int left_out = 0, left_out_in_a_row = 0;  // rounds left out whole: a trial in them waited for a core
  bool pooled = false;                      // a trial joined its point (a counted round's, or a failure)
  for (int round = 0; why.empty(); ++round) {
    if (left_out_in_a_row == 2) {  // as the sweep's retries stop at the first that waits again
      why = "two rounds in a row had a trial that waited for a core: the machine is still shared";
      break;
    }
    if (round - left_out >= o.min_rounds() && worst_error() <= o.precision()) {
      why = fmt::format("each batch's samples/s against the fastest's known to {:.1f} %", 100 * o.precision());
      break;
    }
    if (round >= o.max_rounds()) {
      why = fmt::format("the most rounds ({}) reached", o.max_rounds());
      break;
    }
    double round_s = 0;
    for (size_t i : at) round_s += last_s[i];
    if (o.budget_s() > 0 && spent_s + round_s > o.budget_s()) {
      why = fmt::format("its budget ({}) reached", format_seconds(o.budget_s()));
      break;
    }
    std::vector<size_t> order = at;
    if ((round - left_out) % 2 == 1) std::reverse(order.begin(), order.end());  // the counted rounds alternate
    std::vector<std::pair<size_t, Trial>> ran;  // the round's trials that ran ok, pooled once it ends
    bool shared = false;
    for (size_t i : order) {
      Trial t = runner.run(trial_options(so, r.points[i].batch, r.budget_bytes));
      if (o.on_trial()) o.on_trial()(t, -1, 0);
      spent_s += t.wall_s;
      last_s[i] = t.wall_s;
      if (t.outcome != Outcome::Ok) {  // as in the sweep: the failure is the point's, and bounds those above
        const Outcome outcome = t.outcome;
        merge_repetition(r.points[i], t);
        summarize_steps(r.points[i]);
        pooled = true;
        if (outcome == Outcome::Oom) bound_by_failure(r, r.points[i].batch);
        why = fmt::format("a trial at batch {} failed ({}), and the timing stopped there", r.points[i].batch,
                          to_string(outcome));
        break;
      }
      shared = shared || waited_for_a_core(t);
      ran.emplace_back(i, std::move(t));
    }
    // Another process's work in one trial of a pair reads as that batch's own slowness, the error the
    // rounds are there to remove: a round with a trial that waited for a core counts for nothing (the
    // sweep runs such a trial again; here the next round does, within the same budget and rounds).
    if (shared) {
      ++left_out, ++left_out_in_a_row;
    } else {
      left_out_in_a_row = 0;
      for (auto& [i, t] : ran) {
        rates[i].push_back(t.samples_per_s);  // one a round, so the rounds pair up (ratio_error: <= 0 unknown)
        merge_repetition(r.points[i], t);
        summarize_steps(r.points[i]);
        pooled = true;
      }
    }
    r.retime_rounds = round + 1;
  }
  if (pooled)
    for (size_t i : at) r.retimed.push_back(r.points[i].batch);
  r.retime_error = worst_error();
  r.retime_note = why;
  if (left_out > 0)
    r.retime_note += fmt::format(
        "; {} of its {} rounds left out, a trial in {} having waited for a core over {:.0f} % of its time (another "
        "process on the cores?)",
        left_out, r.retime_rounds, left_out == 1 ? "it" : "each", 100 * kSharedCpuShare);
  const std::optional<int64_t> knee_before = r.knee_batch;
  r.knee_batch = knee_batch(r.points, r.knee_tolerance);
  // The sweep's noise warning names the knee it found; where the rounds moved it, the warning says so
  // rather than leave two knees in one report.
  if (!r.noise_warning.empty() && r.knee_batch != knee_before)
    r.noise_warning += r.knee_batch ? fmt::format("; timed again before the race, the knee is now {}", *r.knee_batch)
                                    : std::string("; timed again before the race, no batch is a knee now");
}

std::vector<StepProfile> profile_sweep(Workload& workload, const SweepResult& sweep,
                                       std::vector<std::string>& warnings) {
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

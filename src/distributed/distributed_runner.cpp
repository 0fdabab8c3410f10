// DistributedRunner: one trial of a batch on every rank at once (the TrialRunner of data-parallel
// searches), the ranks agreeing on the budget, the outcome and the peaks, and one process's samples/s
// measured beside it for the scaling figure.
#include "batchwise/distributed.h"

#include <algorithm>

#include "batchwise/memory.h"
#include "batchwise/units.h"
#include "check.h"
#include "distributed/distributed_detail.h"
#include "torch_error.h"

namespace batchwise {

using namespace detail::status;

namespace {
// What rank 0 shares in place of its single-process samples/s when it has none.
constexpr double kSoloFailed = -1, kSoloSkipped = -2;
// A rank's row of a trial's figures, by place: its status, its peaks (reserved, then allocated), its
// median step, its all-reduce share, how many steps it measured, its wait share (kNoShare where it
// read none), then its step times.
enum RowAt : size_t { kStatusAt, kPeakAt, kAllocatedAt, kMedianAt, kAllReduceAt, kMeasuredAt, kShareAt, kStepsAt };
constexpr double kNoShare = -1;

// Of the measured steps' time, the share this rank spent in the gradient all-reduces (the last of
// `allreduce_s`, one per step).
double allreduce_share(const std::vector<double>& allreduce_s, const std::vector<double>& step_times_s) {
  const size_t m = std::min(allreduce_s.size(), step_times_s.size());
  double stepped = 0, reducing = 0;
  for (double s : step_times_s) stepped += s;
  for (size_t i = allreduce_s.size() - m; i < allreduce_s.size(); ++i) reducing += allreduce_s[i];
  return stepped > 0 ? reducing / stepped : 0;
}

// The sweep decides from the wait share whether to run a trial again, and every rank must decide
// alike or their all-reduces no longer pair up: the share is the most any rank waited (the step is
// as slow as its slowest rank), or none where no rank read one.
std::optional<double> agreed_wait_share(const std::vector<std::vector<double>>& rows) {
  std::optional<double> most;
  for (const auto& r : rows)
    if (r[kShareAt] != kNoShare) most = std::max(most.value_or(0.0), r[kShareAt]);
  return most;
}
}  // namespace

std::optional<std::pair<int, int>> plan_single_process_run(int warmup, int steps, double step_s, double patience_s) {
  const int wanted = warmup + steps;
  if (step_s <= 0) return std::make_pair(warmup, steps);
  // Room for one step half again as slow as measured, past the planned ones.
  const int fit = static_cast<int>(std::floor(patience_s / step_s - 1.5));
  if (fit >= wanted) return std::make_pair(warmup, steps);
  if (fit < 2) return std::nullopt;  // one warm-up and one measured step at least
  const int w = std::min(warmup, 1);
  return std::make_pair(w, fit - w);
}

DistributedRunner::DistributedRunner(DataParallelWorkload& workload, int64_t local_limit_bytes, bool measure_scaling)
    : workload_(workload), local_limit_bytes_(local_limit_bytes), measure_scaling_(measure_scaling) {}

std::vector<int64_t> DistributedRunner::gather(int64_t bytes, const std::string& what) {
  std::vector<int64_t> out;
  for (const auto& row : workload_.group().all_gather({static_cast<double>(bytes)}, what))
    out.push_back(static_cast<int64_t>(row[0]));
  return out;
}

int64_t DistributedRunner::agree_min(int64_t bytes, const std::string& what) {
  const std::vector<int64_t> all = gather(bytes, what);
  return *std::min_element(all.begin(), all.end());
}

int64_t DistributedRunner::held_bytes() {
  const std::vector<int64_t> all = gather(WorkloadRunner(workload_.inner()).held_bytes(), "agreeing on held memory");
  return *std::max_element(all.begin(), all.end());
}

int64_t DistributedRunner::default_budget_bytes() {
  return agree_min(WorkloadRunner(workload_.inner()).default_budget_bytes(), "agreeing on the default budget");
}

int64_t DistributedRunner::device_total_bytes() {
  return agree_min(WorkloadRunner(workload_.inner()).device_total_bytes(), "agreeing on the device memory");
}

int64_t DistributedRunner::device_usable_bytes() {
  return agree_min(WorkloadRunner(workload_.inner()).device_usable_bytes(), "agreeing on the memory a rank may use");
}

Trial DistributedRunner::run(const TrialOptions& options) {
  Group& group = workload_.group();
  const int world = group.size(), rank = group.rank();
  const int trial_index = ++trials_;
  const std::string label = fmt::format("batch {}'s trial", options.batch());
  TrialOptions local = options;
  local.timeout_s(0);   // agreed at each all-reduce instead
  local.min_time_s(0);  // every rank runs the same steps: the all-reduces pair up
  if (options.limit_bytes() > 0 && local_limit_bytes_ > 0) local.limit_bytes(local_limit_bytes_);
  workload_.begin_trial(label, options.timeout_s(), local.limit_bytes());
  Trial t = run_trial(workload_, local);
  if (workload_.collective_error()) std::rethrow_exception(workload_.collective_error());

  // This rank's own status: a failure it had (reported at an all-reduce or still pending after
  // the last step), or one run_trial met outside the data-parallel step.
  int own = kOk;
  std::string own_message;
  if (const auto& f = workload_.own_failure()) {
    own = static_cast<int>(status_of(f->first));
    own_message = f->second;
  } else if (t.outcome != Outcome::Ok && !workload_.failure()) {
    own = static_cast<int>(status_of(t.outcome));
    own_message = t.message;
  }
  if (own != kOk) group.post(fmt::format("batchwise/trial/{}/rank/{}", trial_index, rank), own_message);

  const size_t k = static_cast<size_t>(options.steps());
  std::vector<double> row(kStepsAt);
  row[kStatusAt] = static_cast<double>(own);
  row[kPeakAt] = static_cast<double>(t.peak_bytes);
  row[kAllocatedAt] = static_cast<double>(t.peak_allocated_bytes);
  row[kMedianAt] = t.step_time_s_median;
  row[kAllReduceAt] = allreduce_share(workload_.allreduce_s(), t.step_times_s);
  row[kMeasuredAt] = static_cast<double>(t.step_times_s.size());
  row[kShareAt] = t.cpu_wait_share.value_or(kNoShare);
  for (size_t i = 0; i < k; ++i) row.push_back(i < t.step_times_s.size() ? t.step_times_s[i] : 0.0);
  const auto rows = group.all_gather(row, fmt::format("agreeing on {}'s outcome", label));

  DistributedTrial d;
  d.world_size = world;
  d.backend = group.backend();
  d.global_batch = options.batch() * world;
  std::vector<int> statuses;
  double share = 0;
  for (const auto& r : rows) {
    statuses.push_back(static_cast<int>(std::lround(r[kStatusAt])));
    d.rank_peak_bytes.push_back(static_cast<int64_t>(r[kPeakAt]));
    d.rank_step_time_s.push_back(r[kMedianAt]);
    share += r[kAllReduceAt] / world;
    t.peak_bytes = std::max(t.peak_bytes, static_cast<int64_t>(r[kPeakAt]));
    t.peak_allocated_bytes = std::max(t.peak_allocated_bytes, static_cast<int64_t>(r[kAllocatedAt]));
  }
  d.allreduce_share = share;
  const auto [status, ranks] = worst(statuses);
  t.cpu_wait_share = status == kOk ? agreed_wait_share(rows) : std::nullopt;  // a failure keeps no steps
  // The deadline is one for all ranks: whichever rank's clock saw it pass first, every rank's time
  // ran out, so a rank that was fine is timed out too.
  for (const int own_status : statuses)
    d.rank_outcomes.push_back(outcome_of_status(status == kTimeout && own_status == kOk ? kTimeout : own_status));
  if (status == kOk) {
    // The step is as slow as its slowest rank: step by step, the largest time.
    const size_t measured = static_cast<size_t>(rows[0][kMeasuredAt]);
    t.step_times_s.assign(measured, 0.0);
    for (const auto& r : rows)
      for (size_t i = 0; i < measured && i < k; ++i) t.step_times_s[i] = std::max(t.step_times_s[i], r[kStepsAt + i]);
  } else {
    t.outcome = outcome_of_status(status);
    const int first = ranks.front();
    const std::string message =
        first == rank ? own_message : group.read(fmt::format("batchwise/trial/{}/rank/{}", trial_index, first));
    const std::string what = t.outcome == Outcome::Oom       ? "out of memory"
                             : t.outcome == Outcome::Timeout ? "timed out"
                                                             : "failed";
    t.message = fmt::format("{} on rank {} of {}: {}", what, fmt::join(ranks, ", "), world, message);
    t.step_times_s.clear();
  }
  t.step_waits_s.clear();  // this rank's own, beside the slowest rank's step times: not each step's
  t.distributed = d;
  summarize_steps(t);

  if (measure_scaling_ && t.outcome == Outcome::Ok) {
    // Rank 0 alone at the same per-device batch, the others waiting: what one process does here.
    double solo = 0;
    if (rank == 0) {
      // Within the others' patience: they wait in a collective meanwhile, and the time limit is
      // checked only between steps. So the run is planned from the step time just measured (a solo
      // step at this per-device batch is that, less the all-reduce), with room for a slower step.
      const double patience = 0.8 * static_cast<double>(group.timeout().count()) / 1000.0;
      const auto plan = plan_single_process_run(local.warmup(), local.steps(), t.step_time_s_median, patience);
      if (plan) {
        TrialOptions solo_options = local;
        solo_options.warmup(plan->first).steps(plan->second);
        solo_options.timeout_s(options.timeout_s() > 0 ? std::min(options.timeout_s(), patience) : patience);
        const Trial alone = run_trial(workload_.inner(), solo_options);
        solo = alone.outcome == Outcome::Ok ? alone.samples_per_s : kSoloFailed;
      } else {
        solo = kSoloSkipped;
      }
    }
    // One figure for every rank: samples/s, or why there is none (rank 0 alone decided).
    solo = group.all_gather({solo}, fmt::format("sharing rank 0's single-process run of {}", label))[0][0];
    if (solo > 0) {
      t.distributed->single_process_samples_per_s = solo;
      t.distributed->scaling_efficiency = t.samples_per_s / (world * solo);
    } else {
      t.distributed->single_process_note =
          solo == kSoloSkipped ? fmt::format(
                                     "not run: a step takes {:.1f} s, and rank 0's run alone must end within the other "
                                     "ranks' patience ({:.1f} s, 0.8 x --dist-timeout) with room for a slower step; a "
                                     "longer --dist-timeout measures it",
                                     t.step_time_s_median, 0.8 * static_cast<double>(group.timeout().count()) / 1000.0)
                               : "rank 0's run alone did not end ok (out of memory, a failure, or its time limit)";
    }
  }
  return t;
}

}  // namespace batchwise

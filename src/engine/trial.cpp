#include "batchwise/trial.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "batchwise/error_text.h"
#include "batchwise/memory.h"
#include "batchwise/units.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"
#include "check.h"
#include "torch_error.h"

namespace batchwise {

const char* to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::Ok:
      return "ok";
    case Outcome::Oom:
      return "oom";
    case Outcome::Error:
      return "error";
    case Outcome::Timeout:
      return "timeout";
  }
  return "error";
}

namespace {

std::string first_line(const std::string& text) { return detail::error_line(text); }

// Why the loss is not a number, by where it happened: at the first step nothing has been updated
// yet, so the data or the model made it; later, the updates did.
std::string non_finite_message(double loss, int step, double first) {
  const std::string what = std::isnan(loss) ? "NaN" : "infinite";
  if (step == 0)
    return fmt::format(
        "the training loss is {} at the first step, before any update: the data or the model gives "
        "values that are not finite numbers; check the inputs and targets for NaN or infinity, and the "
        "model's output on one batch",
        what);
  return fmt::format(
      "the training loss became {} at step {} (it was {:.4g} at the first): training diverged; the "
      "learning rate is too high for this batch (lower --lr), or the model overflows",
      what, step + 1, first);
}

// Lifts the memory limit however the trial ends.
struct LimitGuard {
  LimitGuard(DeviceMemory& memory, int64_t bytes) : memory_(memory) { memory_.set_limit(bytes); }
  ~LimitGuard() {
    try {
      memory_.set_limit(0);
    } catch (...) {  // a sticky CUDA error while unwinding (an allocator backend that asks the device)
    }
  }
  DeviceMemory& memory_;
};

}  // namespace

void summarize_steps(Trial& t) {
  const auto& s = t.step_times_s;
  if (s.empty()) return;
  t.step_time_s_median = median(s);
  double mean = 0;
  for (double x : s) mean += x;
  mean /= static_cast<double>(s.size());
  double var = 0;
  for (double x : s) var += (x - mean) * (x - mean);
  t.step_time_s_stddev = s.size() > 1 ? std::sqrt(var / static_cast<double>(s.size() - 1)) : 0.0;
  t.step_time_s_iqr = quantile(s, 0.75) - quantile(s, 0.25);
  const auto [fastest, slowest] = std::minmax_element(s.begin(), s.end());
  // A data-parallel step trains the batch on every rank.
  const double b = static_cast<double>(t.batch) * (t.distributed ? t.distributed->world_size : 1);
  t.samples_per_s = t.outcome == Outcome::Ok && t.step_time_s_median > 0 ? b / t.step_time_s_median : 0.0;
  t.samples_per_s_min = t.outcome == Outcome::Ok ? b / *slowest : 0.0;
  t.samples_per_s_max = t.outcome == Outcome::Ok ? b / *fastest : 0.0;
}

double step_spread(const Trial& t) { return t.step_time_s_median > 0 ? t.step_time_s_iqr / t.step_time_s_median : 0.0; }

double fed_samples_per_s(const Trial& t) {
  const auto& s = t.step_times_s;
  const auto& w = t.step_waits_s;
  if (t.outcome != Outcome::Ok || s.empty() || w.size() != s.size()) return t.samples_per_s;
  std::vector<double> own(s.size());  // each step less its wait: one another process delayed is the median's to drop
  double waited = 0;
  for (size_t i = 0; i < s.size(); ++i) own[i] = std::max(0.0, s[i] - w[i]), waited += w[i];
  const double step = median(own) + waited / static_cast<double>(w.size());
  const double b = static_cast<double>(t.batch) * (t.distributed ? t.distributed->world_size : 1);
  return step > 0 ? b / step : 0.0;
}

Trial run_trial(Workload& workload, const TrialOptions& o) {
  BATCHWISE_CHECK(o.batch() >= 1, ConfigError, "batch size {}: must be at least 1", o.batch());
  BATCHWISE_CHECK(o.steps() >= 1, ConfigError,
                  "--steps {}: a trial must run at least one measured training step, or it measures nothing",
                  o.steps());
  BATCHWISE_CHECK(o.warmup() >= 0, ConfigError, "--warmup {}: cannot be negative", o.warmup());
  BATCHWISE_CHECK(o.min_time_s() >= 0 && std::isfinite(o.min_time_s()), ConfigError,
                  "--min-time {}: must be a number of seconds, 0 or more", o.min_time_s());
  using clock = std::chrono::steady_clock;
  const auto trial_start = clock::now();
  auto memory = device_memory(workload);

  Trial t;
  t.batch = o.batch();
  t.warmup_steps = o.warmup();
  t.steps = o.steps();
  t.outcome = Outcome::Ok;
  const auto saved = workload.save_state();

  const int64_t accumulation = std::min(o.accumulation_steps(), o.batch());
  t.accumulation_steps = accumulation;
  memory->synchronize();
  // Cached blocks of an earlier, larger trial would otherwise count towards this trial's peak
  // (CUDA's reserved bytes); on CPU there is no cache.
  memory->release_cached();
  std::optional<LimitGuard> limit(std::in_place, *memory, o.limit_bytes());
  memory->reset_peak();
  const int64_t skipped_before = workload.skipped_steps();
  double data_wait_s = 0;
  std::optional<UtilisationMonitor> monitor;
  if (o.monitor()) monitor.emplace(0.25, workload.device().is_cuda() ? workload.device().index() : -1);
  try {
    int total = o.warmup() + o.steps();
    double measured_s = 0;
    std::optional<SchedulerTimes> before;  // the threads' times before the first measured step
    for (int i = 0; i < total; ++i) {
      if (i == o.warmup()) before = scheduler_times();
      const auto start = clock::now();
      const Batch batch = workload.next_batch(o.batch());
      const auto got = clock::now();
      BATCHWISE_ASSERT(batch.input.size(0) == o.batch());
      const double loss =
          (accumulation > 1 ? train_step_accumulated(workload, batch, accumulation) : workload.train_step(batch))
              .item<double>();  // item() waits for the device
      memory->synchronize();
      const auto end = clock::now();
      if (monitor) monitor->step_boundary();  // a due sample is taken here, outside the timed step
      if (!std::isfinite(loss)) {             // a loss that is not a number trains nothing: say where it came from
        t.outcome = Outcome::Error;
        t.non_finite = true;
        t.message = non_finite_message(loss, i, t.loss_first);
        t.loss_last = loss;
        if (i == 0) t.loss_first = loss;
        break;
      }
      if (i == 0) t.loss_first = loss;
      t.loss_last = loss;
      ++t.steps_run;
      if (i >= o.warmup()) {
        t.step_times_s.push_back(std::chrono::duration<double>(end - start).count());
        measured_s += t.step_times_s.back();
        t.step_waits_s.push_back(std::chrono::duration<double>(got - start).count());
        data_wait_s += t.step_waits_s.back();
        // Short steps: on until they add up to the minimum measured time.
        if (i + 1 == total && measured_s < o.min_time_s() && total - o.warmup() < kMaxMeasuredSteps) ++total;
      }
      const double elapsed = std::chrono::duration<double>(end - trial_start).count();
      if (o.timeout_s() > 0 && elapsed > o.timeout_s() && i + 1 < total) {
        t.outcome = Outcome::Timeout;
        t.message = fmt::format(
            "stopped after {} of {} steps: {} exceeds the {} trial timeout (raise --trial-timeout to measure it)",
            i + 1, total, format_seconds(elapsed), format_seconds(o.timeout_s()));
        break;
      }
    }
    if (!t.step_times_s.empty()) t.cpu_wait_share = cpu_wait_share(before, scheduler_times());
    t.state = workload.state_bytes();
  } catch (const std::exception& e) {
    std::tie(t.outcome, t.message) = detail::classify_failure(e);
  }
  if (monitor) t.utilisation = monitor->finish();
  t.skipped_steps = static_cast<int>(workload.skipped_steps() - skipped_before);
  limit.reset();
  t.peak_bytes = memory->peak_bytes();
  t.peak_allocated_bytes = memory->peak_allocated_bytes();

  try {
    workload.restore_state(*saved);
  } catch (const std::exception& e) {
    throw Error(
        fmt::format("batch {}: the workload's state could not be restored after the trial, so the model "
                    "can no longer be trusted: {}",
                    o.batch(), first_line(e.what())));
  }
  memory->release_cached();
  summarize_steps(t);
  double stepped = 0;
  for (double s : t.step_times_s) stepped += s;
  t.data_wait_share = stepped > 0 ? data_wait_s / stepped : 0;
  t.input_bound = t.outcome == Outcome::Ok && t.data_wait_share > kInputBoundShare;
  t.wall_s = std::chrono::duration<double>(clock::now() - trial_start).count();
  return t;
}

WorkloadInfo WorkloadRunner::info() const { return workload_.info(); }
Trial WorkloadRunner::run(const TrialOptions& options) {
  Trial first = run_trial(workload_, options);
  if (first.outcome != Outcome::Ok || first.skipped_steps == 0 || first.skipped_steps >= first.steps_run) return first;
  Trial t = run_trial(workload_, options);
  const std::string note = fmt::format(
      "ran twice: the first run skipped {} of its {} steps while fp16's loss "
      "scale settled",
      first.skipped_steps, first.steps_run);
  t.message = t.message.empty() ? note : t.message + "; " + note;
  t.wall_s += first.wall_s;
  return t;
}
// What the process holds before a trial: its cache is handed back first, so a fit after another
// workload's trials (tune --compare-precision's second precision, on CUDA) does not count their
// cached blocks as this model's own size. A no-op on a CPU, which caches nothing.
int64_t WorkloadRunner::held_bytes() {
  const auto memory = device_memory(workload_);
  memory->synchronize();
  memory->release_cached();
  return memory->current_bytes();
}
int64_t WorkloadRunner::default_budget_bytes() {
  return workload_.device().is_cuda() ? device_usable_bytes() : device_total_bytes() / 10 * 8;
}
int64_t WorkloadRunner::device_total_bytes() { return device_memory(workload_)->total_bytes(); }
int64_t WorkloadRunner::device_usable_bytes() { return device_memory(workload_)->usable_bytes(); }

int64_t checked_budget_bytes(TrialRunner& runner, int64_t requested, double target) {
  BATCHWISE_CHECK(requested >= 0, ConfigError,
                  "memory budget {} bytes: a budget is a positive size, or 0 for the device's default", requested);
  if (requested == 0) return runner.default_budget_bytes();
  const int64_t total = runner.device_total_bytes();
  BATCHWISE_CHECK(total <= 0 || requested <= total, ConfigError,
                  "--memory-budget {}: more than the {} of memory the device has (on a CPU: the RAM available now, "
                  "with what batchwise holds); a trial past it would not stop at the budget but run out of the "
                  "device's memory (on a CPU, the kernel kills the process and the run is lost); give at most {}, or "
                  "leave --memory-budget out",
                  format_bytes(requested), format_bytes(total), format_bytes_at_most(total));
  const int64_t usable = runner.device_usable_bytes();
  BATCHWISE_CHECK(usable <= 0 || usable >= total || requested <= usable, ConfigError,
                  "--memory-budget {}: more than the {} of the device's {} this process may use (its share is capped "
                  "at {:.3g} %, as torch.cuda.set_per_process_memory_fraction sets it); a trial past it would run out "
                  "of memory at the cap, not stop at the budget; give at most {}, raise the process's fraction, or "
                  "leave --memory-budget out",
                  format_bytes(requested), format_bytes(usable), format_bytes(total),
                  100.0 * static_cast<double>(usable) / static_cast<double>(total), format_bytes_at_most(usable));
  // No batch trains in a budget (its target's share, for a fit) the model fills before its first sample
  const WorkloadInfo info = runner.info();
  const int64_t held = std::max(info.parameter_bytes, runner.held_bytes());
  const double within = target * static_cast<double>(requested);
  const int64_t budget_needed = static_cast<int64_t>(std::ceil(static_cast<double>(held) / target));
  BATCHWISE_CHECK(held < requested, ConfigError,
                  "--memory-budget {} is below the model's own size: {} holds {} before training a single sample "
                  "({} of parameters and buffers), so no batch can train in it; raise --memory-budget well above {}: "
                  "that is the model alone within the target's share, and a step holds its gradients and the "
                  "optimizer's state beside it (up to "
                  "three times the parameters more, with Adam) and the batch's activations",
                  format_bytes(requested), info.model, format_bytes(held), format_bytes(info.parameter_bytes),
                  total <= 0 || budget_needed <= total
                      ? format_bytes(budget_needed)
                      : fmt::format("{}, and --target above the share the model takes of it", format_bytes(held)));
  // The budget holds the model, but not within its target's share (--target 0.001 of 1 GiB is 1 MiB)
  BATCHWISE_CHECK(static_cast<double>(held) < within, ConfigError,
                  "--target {:g}: {} of --memory-budget {} is {}, below the model's own size: {} holds {} before "
                  "training a single sample ({} of parameters and buffers), so no batch can train within it; raise "
                  "--target above {:.3g}{}",
                  target, format_percent(100 * target), format_bytes(requested),
                  format_bytes(static_cast<int64_t>(within)), info.model, format_bytes(held),
                  format_bytes(info.parameter_bytes), static_cast<double>(held) / static_cast<double>(requested),
                  total <= 0 || budget_needed <= total
                      ? fmt::format(", or --memory-budget above {}", format_bytes(budget_needed))
                      : "");
  return requested;
}

std::string error_text(const std::exception& e) { return detail::error_line(detail::plain_what(e)); }

}  // namespace batchwise

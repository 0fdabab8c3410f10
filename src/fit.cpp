#include "batchwise/fit.h"

#include "batchwise/memory.h"
#include "batchwise/units.h"
#include "batchwise/workload.h"
#include "check.h"

namespace batchwise {

const char* to_string(FitMode mode) { return mode == FitMode::Power ? "power" : "binsearch"; }

FitMode parse_fit_mode(const std::string& text) {
  if (text == "power") return FitMode::Power;
  if (text == "binsearch") return FitMode::Binsearch;
  BATCHWISE_CHECK(false, ConfigError, "--mode {}: unknown fit mode; choose power or binsearch", text);
  return FitMode::Binsearch;
}

const char* to_string(FitOutcome outcome) {
  switch (outcome) {
    case FitOutcome::Fits: return "fits";
    case FitOutcome::DoesNotFit: return "does_not_fit";
    case FitOutcome::Error: return "error";
  }
  return "error";
}

int64_t default_budget_bytes(Workload& workload) {
  auto memory = device_memory(workload);
  const int64_t total = memory->total_bytes();
  return workload.device().is_cuda() ? total : total / 10 * 8;
}

FitResult fit(Workload& workload, const FitOptions& o) {
  const int64_t m = o.multiple_of();
  BATCHWISE_CHECK(m >= 1, ConfigError, "--multiple-of {}: must be at least 1", m);
  BATCHWISE_CHECK(o.min() >= 1, ConfigError, "--min {}: must be at least 1", o.min());
  BATCHWISE_CHECK(o.min() <= o.max(), ConfigError, "--min {} is above --max {}; swap them or lower --min", o.min(),
                  o.max());
  BATCHWISE_CHECK(o.target() > 0 && o.target() <= 1, ConfigError,
                  "--target {}: must be a fraction of the budget in (0, 1], like 0.9", o.target());
  BATCHWISE_CHECK(o.warmup() >= 0, ConfigError, "--warmup {}: cannot be negative", o.warmup());
  BATCHWISE_CHECK(o.steps() >= 1, ConfigError, "fit steps {}: a trial must run at least one training step",
                  o.steps());
  const int64_t first = (o.min() + m - 1) / m * m;
  const int64_t last = o.max() / m * m;
  BATCHWISE_CHECK(first <= last, ConfigError, "--min {} --max {} --multiple-of {}: no multiple of {} lies between them",
                  o.min(), o.max(), m, m);

  FitResult r;
  r.mode = o.mode();
  r.target = o.target();
  r.multiple_of = m;
  r.budget_bytes = o.budget_bytes() > 0 ? o.budget_bytes() : default_budget_bytes(workload);
  const WorkloadInfo info = workload.info();
  const int64_t held = device_memory(workload)->current_bytes();
  const int64_t allowed = static_cast<int64_t>(o.target() * static_cast<double>(r.budget_bytes));
  BATCHWISE_CHECK(std::max(info.parameter_bytes, held) < allowed, ConfigError,
                  "--memory-budget {} is below the model's own size: {} holds {} before training a single sample "
                  "({} of parameters and buffers); raise --memory-budget above {}",
                  format_bytes(r.budget_bytes), info.model, format_bytes(held), format_bytes(info.parameter_bytes),
                  format_bytes(static_cast<int64_t>(static_cast<double>(std::max(info.parameter_bytes, held)) / o.target())));

  // try_batch: one trial; true when it ran every step and its peak is within target x budget.
  auto try_batch = [&](int64_t batch) {
    Trial t = run_trial(workload, TrialOptions(batch)
                                      .warmup(o.warmup())
                                      .steps(o.steps())
                                      .limit_bytes(r.budget_bytes)
                                      .timeout_s(o.trial_timeout_s()));
    t.within_target = t.outcome == Outcome::Ok && t.peak_bytes <= allowed;
    r.trials.push_back(t);
    if (o.on_trial()) o.on_trial()(r.trials.back(), static_cast<int>(r.trials.size()) - 1, -1);
    return r.trials.back();
  };

  std::optional<int64_t> fits, fails;
  for (int64_t b = first;;) {
    const Trial& t = try_batch(b);
    if (t.outcome == Outcome::Error) {
      r.outcome = FitOutcome::Error;
      r.message = fmt::format("batch {} failed with an error, so no batch size is reported: {}", b, t.message);
      return r;
    }
    if (!*t.within_target) {
      fails = b;
      break;
    }
    fits = b;
    if (b == last) {
      r.limited_by_max = true;
      break;
    }
    b = std::min(b * 2, last);
  }
  if (!fits) {
    const Trial& t = r.trials.back();
    r.outcome = FitOutcome::DoesNotFit;
    r.message = t.outcome == Outcome::Ok
                    ? fmt::format("batch {} peaks at {}, above the target of {} ({:.0f} % of {})", first,
                                  format_bytes(t.peak_bytes), format_bytes(allowed), o.target() * 100,
                                  format_bytes(r.budget_bytes))
                    : fmt::format("batch {} did not complete: {}", first, t.message);
    return r;
  }
  if (o.mode() == FitMode::Binsearch && fails) {
    while (*fails - *fits > m) {
      const int64_t mid = *fits + (*fails - *fits) / m / 2 * m;
      const Trial& t = try_batch(mid);
      if (t.outcome == Outcome::Error) {
        r.outcome = FitOutcome::Error;
        r.message = fmt::format("batch {} failed with an error, so no batch size is reported: {}", mid, t.message);
        return r;
      }
      (*t.within_target ? fits : fails) = mid;
    }
  }
  r.outcome = FitOutcome::Fits;
  r.batch = fits;
  return r;
}

}  // namespace batchwise

// The learning rate over a run of known length: warm-up, then constant, cosine or step decay.
#include "batchwise/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "batchwise/choices.h"
#include "check.h"
#include "parse_number.h"

namespace batchwise {

namespace {
constexpr double kPi = 3.14159265358979323846;
}  // namespace

int64_t run_warmup_steps(const LrAdvice& advice, int64_t total_steps) {
  return std::max<int64_t>(0, std::min(advice.warmup_steps, total_steps / 4));
}

namespace {
// Within rounding of a whole number, that number: a run planned as 48 steps is 48, not 49 by a last bit.
int64_t whole_ceil(double exact) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(exact - 1e-9 * std::max(1.0, exact))));
}
}  // namespace

int64_t run_steps(double epochs, int64_t dataset, int64_t batch) {
  return whole_ceil(epochs * static_cast<double>(dataset) / static_cast<double>(batch));
}

int64_t run_samples(double epochs, int64_t dataset) { return whole_ceil(epochs * static_cast<double>(dataset)); }

void check_run_length(double epochs, int64_t dataset) {
  BATCHWISE_CHECK(!(epochs > 0) || dataset <= 0 || epochs * static_cast<double>(dataset) >= 1 - 1e-9, ConfigError,
                  "--epochs {:g}: a run of {:g} epochs of {} samples trains less than one sample; give the length of "
                  "the run you will train, e.g. --epochs 10",
                  epochs, epochs, dataset);
}

void check_batches_within_run(const std::vector<int64_t>& batches, double epochs, int64_t dataset) {
  if (!(epochs > 0) || dataset <= 0) return;
  const int64_t run = run_samples(epochs, dataset);
  for (const int64_t batch : batches)
    BATCHWISE_CHECK(batch <= run, ConfigError,
                    "--batch-sizes: batch {} is more samples than a {:g}-epoch run of {} samples trains ({}): its one "
                    "step would train {:.3g} times the run, and the runs would not compare; give batches up to {}, or "
                    "a longer --epochs",
                    batch, epochs, dataset, run, static_cast<double>(batch) / static_cast<double>(run), run);
}

LrAdvice for_the_run(LrAdvice advice, double epochs, int64_t dataset, int64_t batch, LrSchedule shape) {
  const int64_t steps = run_steps(epochs, dataset, batch);
  // The rule alone (no range test ran: fp16, a command, data-parallel ranks) states its warm-up in
  // epochs, Goyal et al.'s 5: in this run's steps, then capped as a measured one is (it had read as none).
  if (advice.warmup_steps <= 0 && advice.warmup_epochs > 0)
    advice.warmup_steps = run_steps(advice.warmup_epochs, dataset, batch);
  const int64_t advised = advice.warmup_steps;
  advice.warmup_steps = run_warmup_steps(advice, steps);
  advice.warmup_epochs = static_cast<double>(advice.warmup_steps * batch) / static_cast<double>(dataset);
  // The steps batchwise trains run batches across the epochs' ends; a loader that ends each epoch on a partial
  // batch (a DataLoader without drop_last) steps more, and a schedule given too few steps ends early (OneCycleLR
  // raises): both are said where they differ
  const int64_t per_epoch = run_steps(1, dataset, batch);
  const std::string partial =
      epochs == std::floor(epochs) && static_cast<double>(per_epoch) * epochs != static_cast<double>(steps)
          ? fmt::format(", {} where each epoch ends on a partial batch", per_epoch * static_cast<int64_t>(epochs))
          : std::string();
  advice.advice +=
      fmt::format("; in your {:g}-epoch run ({} steps{}): {}{}, then the {} schedule", epochs, steps, partial,
                  advice.warmup_steps > 0 ? fmt::format("warm-up over its first {}", advice.warmup_steps)
                                          : std::string("no warm-up"),
                  advice.warmup_steps < advised ? " (a quarter of the run at most)" : "", to_string(shape));
  return advice;
}

namespace {
// The shape's multiple of the rate after the share `done` of the steps after the warm-up.
double shaped(LrSchedule shape, double done) {
  switch (shape) {
    case LrSchedule::Cosine:
      return 0.5 * (1 + std::cos(kPi * done));
    case LrSchedule::Step:
      return done < 0.5 ? 1.0 : done < 0.75 ? 0.1 : 0.01;
    case LrSchedule::Constant:
      break;
  }
  return 1;
}
}  // namespace

double scheduled_lr(const LrAdvice& advice, LrSchedule shape, int64_t step, int64_t total_steps) {
  const int64_t warmup = run_warmup_steps(advice, total_steps);
  if (step < warmup) {
    const double f = static_cast<double>(step + 1) / static_cast<double>(warmup);
    return advice.warmup_from_lr + (advice.lr - advice.warmup_from_lr) * f;
  }
  const int64_t decaying = std::max<int64_t>(1, total_steps - warmup);
  const double done = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decaying));
  return advice.lr * shaped(shape, done);
}

double phased_lr(double lr, double warmup_from_lr, LrSchedule shape, double samples, double step_samples,
                 double warmup_samples, double total_samples) {
  if (samples < warmup_samples)  // as scheduled_lr's (step + 1) / warmup: the step ends at its share of the warm-up
    return warmup_from_lr + (lr - warmup_from_lr) * std::min(1.0, (samples + step_samples) / warmup_samples);
  const double decaying = std::max(1.0, total_samples - warmup_samples);
  return lr * shaped(shape, std::clamp((samples - warmup_samples) / decaying, 0.0, 1.0));
}

std::vector<BatchPhase> parse_batch_schedule(const std::string& text, const std::string& what) {
  const std::string hint =
      "write each phase as BATCH:FROM_EPOCH, e.g. 64:0,256:2 (64 from the start, 256 from epoch 2)";
  std::vector<BatchPhase> phases;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    const size_t colon = item.find(':');
    BatchPhase p;
    BATCHWISE_CHECK(colon != std::string::npos, ConfigError, "{}: '{}' in '{}' has no ':'; {}", what, item, text, hint);
    BATCHWISE_CHECK(detail::parse_int64(item.substr(0, colon), p.batch) && p.batch >= 1, ConfigError,
                    "{}: '{}' in '{}' is not a batch size (a whole number, at least 1); {}", what,
                    item.substr(0, colon), text, hint);
    const double most = find_option_bound("--batch")->high;
    BATCHWISE_CHECK(static_cast<double>(p.batch) <= most, ConfigError,
                    "{}: batch {} in '{}' is more than the most batchwise takes, {:.0f}; {}", what, p.batch, text, most,
                    hint);
    BATCHWISE_CHECK(detail::parse_double(item.substr(colon + 1), p.from_epoch) && p.from_epoch >= 0, ConfigError,
                    "{}: '{}' in '{}' is not an epoch (a number, at least 0); {}", what, item.substr(colon + 1), text,
                    hint);
    BATCHWISE_CHECK(!phases.empty() || p.from_epoch == 0, ConfigError,
                    "{}: the first phase of '{}' starts at epoch {:g}; it starts the run, at 0; {}", what, text,
                    p.from_epoch, hint);
    BATCHWISE_CHECK(phases.empty() || p.from_epoch > phases.back().from_epoch, ConfigError,
                    "{}: the phases of '{}' must start at later and later epochs (epoch {:g} does not come after "
                    "{:g}); {}",
                    what, text, p.from_epoch, phases.back().from_epoch, hint);
    BATCHWISE_CHECK(phases.empty() || p.batch != phases.back().batch, ConfigError,
                    "{}: two phases of '{}' in a row train batch {}: one phase; {}", what, text, p.batch, hint);
    phases.push_back(p);
    start = comma + 1;
  }
  BATCHWISE_CHECK(phases.size() >= 2, ConfigError,
                  "{}: '{}' is one phase, a fixed batch; give it in --batch-sizes, or two or more phases ({})", what,
                  text, hint);
  return phases;
}

void check_schedule_within(const std::vector<BatchPhase>& phases, double epochs) {
  BATCHWISE_CHECK(phases.empty() || phases.back().from_epoch < epochs, ConfigError,
                  "--batch-schedule {}: its last phase starts at epoch {:g}, not within the {:g}-epoch run; start "
                  "every phase before epoch {:g}, or give a longer --epochs",
                  schedule_text(phases), phases.back().from_epoch, epochs, epochs);
}

std::string phase_without_a_step(const std::vector<BatchPhase>& phases, double epochs, int64_t dataset) {
  if (phases.size() < 2 || dataset <= 0 || !(epochs > 0)) return "";
  const double total = static_cast<double>(run_samples(epochs, dataset)), per = static_cast<double>(dataset);
  double at = 0, last_start = 0;  // the samples before a phase's first step; the last step's start
  for (size_t k = 0; k < phases.size(); ++k) {
    BATCHWISE_CHECK(phases[k].batch >= 1, ConfigError, "batch schedule {}: a phase of batch {}; batches start at 1",
                    schedule_text(phases), phases[k].batch);
    // validate steps at the phase its first sample falls in: this one's steps start before the next's
    // start (or the run's end), the last of them at most there
    const double end = k + 1 < phases.size() ? std::min(total, phases[k + 1].from_epoch * per) : total;
    if (at >= end)
      return fmt::format(
          "the phase of batch {} from epoch {:g} gets no step: the run's last step begins at epoch {:.4g} (an epoch "
          "of {} samples)",
          phases[k].batch, phases[k].from_epoch, last_start / per, dataset);
    const double steps = std::ceil((end - at) / static_cast<double>(phases[k].batch));
    last_start = at + (steps - 1) * static_cast<double>(phases[k].batch);
    at += steps * static_cast<double>(phases[k].batch);
  }
  return "";
}

void check_schedule_steps(const std::vector<BatchPhase>& phases, double epochs, int64_t dataset) {
  const std::string none = phase_without_a_step(phases, epochs, dataset);
  BATCHWISE_CHECK(none.empty(), ConfigError, "--batch-schedule {}: {}; start it earlier, or give a longer --epochs",
                  schedule_text(phases), none);
}

std::string schedule_text(const std::vector<BatchPhase>& phases) {
  std::string out;
  for (const auto& p : phases) out += fmt::format("{}{}:{:g}", out.empty() ? "" : ",", p.batch, p.from_epoch);
  return out;
}

const BatchPhase& phase_at(const std::vector<BatchPhase>& phases, double epochs) {
  size_t i = 0;
  while (i + 1 < phases.size() && epochs >= phases[i + 1].from_epoch) ++i;
  return phases[i];
}

}  // namespace batchwise

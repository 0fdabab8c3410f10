// The learning rate over a run of known length: warm-up, then constant, cosine or step decay.
#include "batchwise/schedule.h"

#include <algorithm>
#include <cmath>

namespace batchwise {

namespace {
constexpr double kPi = 3.14159265358979323846;
}  // namespace

int64_t run_warmup_steps(const LrAdvice& advice, int64_t total_steps) {
  return std::max<int64_t>(0, std::min(advice.warmup_steps, total_steps / 4));
}

double scheduled_lr(const LrAdvice& advice, LrSchedule shape, int64_t step, int64_t total_steps) {
  const int64_t warmup = run_warmup_steps(advice, total_steps);
  if (step < warmup) {
    const double f = static_cast<double>(step + 1) / static_cast<double>(warmup);
    return advice.warmup_from_lr + (advice.lr - advice.warmup_from_lr) * f;
  }
  const int64_t decaying = std::max<int64_t>(1, total_steps - warmup);
  const double done = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decaying));
  switch (shape) {
    case LrSchedule::Cosine:
      return advice.lr * 0.5 * (1 + std::cos(kPi * done));
    case LrSchedule::Step:
      return advice.lr * (done < 0.5 ? 1.0 : done < 0.75 ? 0.1 : 0.01);
    case LrSchedule::Constant:
      break;
  }
  return advice.lr;
}

}  // namespace batchwise

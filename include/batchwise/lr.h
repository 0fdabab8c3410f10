#pragma once
/// The learning rate a batch can take: the scaling rule's rate, capped by a stability limit measured
/// at that batch (a short learning-rate range test, Smith 2017), and the warm-up that reaches it.
#include <torch/arg.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/choices.h"
#include "batchwise/convergence.h"
#include "batchwise/fields.h"
#include "batchwise/trial.h"

namespace batchwise {

class ModuleWorkload;

/// A learning-rate range test (Smith 2017): `steps` real training steps at `batch`, the rate rising
/// geometrically from lr_low to lr_high, the training loss of each step recorded before its update.
/// Example: `lr_range_test(workload, LrRangeOptions(256).lr_low(1e-3).lr_high(1))`.
struct LrRangeOptions {
  explicit LrRangeOptions(int64_t batch) : batch_(batch) {}
  TORCH_ARG(int64_t, batch);
  TORCH_ARG(double, lr_low) = 1e-4;
  TORCH_ARG(double, lr_high) = 1;
  /// Training steps in the ramp. REQUIRES: >= 4.
  TORCH_ARG(int, steps) = 24;
  /// Moving-average factor of the loss (bias-corrected), so one noisy batch does not end the ramp.
  TORCH_ARG(double, smoothing) = 0.6;
  /// The ramp stops once the smoothed loss rises past this multiple of its lowest value, or a loss
  /// is not finite: the rate has left the stable range.
  TORCH_ARG(double, divergence) = 2;
};

struct LrRangePoint {
  int step = 0;
  double lr = 0;
  double loss = 0;      ///< this step's training loss, before its update
  double smoothed = 0;  ///< the bias-corrected moving average up to this step
};

/// The JSON fields of an LrRangePoint, in JSON order (fields.h).
template <class V, class T, IfRecord<T, LrRangePoint> = 0>
void fields(V& v, T& p) {
  v("lr", p.lr);
  v("loss", p.loss);
  v("smoothed", p.smoothed);
}

struct LrRange {
  int64_t batch = 0;
  double lr_low = 0, lr_high = 0;
  std::vector<LrRangePoint> points;
  /// The rate at the lowest smoothed loss (Smith's "the loss stops falling"); none when the loss never
  /// fell below where it started.
  std::optional<double> min_loss_lr;
  /// The rate at which the ramp stopped because the smoothed loss ran away (past divergence x its
  /// lowest) or a loss was not finite; none when it stayed under control up to lr_high.
  std::optional<double> diverged_lr;
  /// The largest rate the loss stayed under control at: the step before diverged_lr.
  std::optional<double> stable_lr;
  double wall_s = 0;
};

/// The JSON fields of an LrRange, in JSON order (fields.h); its stable_lr is written beside the cap it sets.
template <class V, class T, IfRecord<T, LrRange> = 0>
void fields(V& v, T& r) {
  v("batch", r.batch);
  v("lr_low", r.lr_low);
  v("lr_high", r.lr_high);
  v("min_loss_lr", r.min_loss_lr);
  v("diverged_lr", r.diverged_lr);
  v("points", r.points);
}

/// Runs the range test from the workload's current state and restores it afterwards (weights,
/// optimizer state, data order, learning rate). Throws ConfigError for rates that are not positive
/// and increasing.
LrRange lr_range_test(ModuleWorkload& workload, const LrRangeOptions& options);

/// The stability limit is the largest rate a ramp of a few steps survived; a run holds a rate for
/// thousands of steps, so the advised rate stays this factor below it.
constexpr double kLrSafety = 3.0;

/// The learning rate to train a batch with: the scaling rule's rate, capped by the stability limit
/// measured at that batch, with the warm-up that reaches it.
struct LrAdvice {
  ScaledLr scaled;               ///< the rule: linear (SGD) or square root (Adam family) from the base
  std::optional<LrRange> range;  ///< the range test at this batch, when one ran (the rule scales up)
  std::optional<double> cap_lr;  ///< the range test's stable_lr / safety; none without a measured limit
  bool capped = false;           ///< the cap is below the rule's rate and set lr
  double lr = 0;                 ///< the rate to train with: min(rule, cap), a cap never below the base rate
  /// Linear warm-up from warmup_from_lr (the base rate) to lr over the first warmup_steps optimizer
  /// steps when lr is above the base rate (Goyal et al. 2017 warm up over 5 of 90 epochs; here one
  /// epoch of samples, or LrAdviceOptions::warmup_samples; the range test's own ramp is too short,
  /// docs/advice.md).
  int64_t warmup_steps = 0;
  double warmup_from_lr = 0;
  double warmup_epochs = 0;  ///< the warm-up in epochs of the workload's data (the rule's own when unmeasured)
  std::string advice;        ///< one sentence: the rule, the cap and its measurement, the warm-up
};

/// The JSON fields of an LrAdvice, in JSON order (fields.h).
template <class V, class T, IfRecord<T, LrAdvice> = 0>
void fields(V& v, T& l) {
  v("batch", l.scaled.batch);
  v("lr", l.lr);
  v("rule", l.scaled.rule);
  v("base_batch", l.scaled.base_batch);
  v("base_lr", l.scaled.base_lr);
  v("factor", l.scaled.factor);
  v("rule_lr", l.scaled.lr);
  v("capped", l.capped);
  v("cap_lr", l.cap_lr);
  // The range test's stable rate, beside the cap it sets (range_test, below, has the rest of the test).
  v.property(
      "stable_lr", l, [](const auto& advice) { return advice.range ? advice.range->stable_lr : std::nullopt; },
      [](auto& advice, const std::optional<double>& stable_lr) {
        if (!stable_lr) return;  // no range test, or none that found a stable rate
        if (!advice.range) advice.range.emplace();
        advice.range->stable_lr = stable_lr;
      });
  v("warmup_steps", l.warmup_steps);
  v("warmup_from_lr", l.warmup_from_lr);
  v("warmup_epochs", l.warmup_epochs);
  v("advice", l.advice);
  v("range_test", l.range, When{l.range.has_value()});
}

/// advise_lr's settings. Example: `advise_lr(workload, 1024, LrAdviceOptions(32, 0.01))`.
struct LrAdviceOptions {
  LrAdviceOptions(int64_t base_batch, double base_lr) : base_batch_(base_batch), base_lr_(base_lr) {}
  /// The batch the base rate is meant for, and that rate: the user's own setting. REQUIRES: positive.
  TORCH_ARG(int64_t, base_batch);
  TORCH_ARG(double, base_lr);
  /// The range test (for a batch whose rule rate is above the base rate): from the base rate to
  /// rule x high_factor, in `steps` steps.
  TORCH_ARG(double, high_factor) = 8;
  TORCH_ARG(int, steps) = 24;
  TORCH_ARG(double, safety) = kLrSafety;
  /// Samples of linear warm-up when the rate is above the base; 0: one epoch of the workload's data.
  TORCH_ARG(int64_t, warmup_samples) = 0;
  /// The memory the range test's steps may use (bytes; 0: no limit). Where they run out of it, the rate is the
  /// rule's, unchecked, and its advice says so.
  TORCH_ARG(int64_t, limit_bytes) = 0;
};

/// The rule's rate for the workload's optimizer at `batch`. When it is above the base rate (which
/// the user's setting trains at), a range test at `batch` from the workload's current state (the
/// weights training starts from; restored afterwards) caps it at stable_lr / safety, and the rate
/// is warmed up. A rate at or below the base needs neither.
LrAdvice advise_lr(ModuleWorkload& workload, int64_t batch, const LrAdviceOptions& options);

/// The rule's rate alone, for workloads that cannot be range-tested (a --cmd command): no cap, and
/// the rule's own warm-up advice (scaled.warmup_epochs).
LrAdvice unmeasured_lr(Optimizer optimizer, int64_t base_batch, double base_lr, int64_t batch);

/// The built-in optimizer `workload` trains with; ConfigError naming it where it is none of them (a
/// Workload of the user's may train with any optimizer; the rules cover sgd, adam and adamw).
Optimizer rule_optimizer(const WorkloadInfo& workload);

/// The rate at optimizer step `step` (0-based) of a run that follows `advice`: the warm-up, then lr.
double lr_at_step(const LrAdvice& advice, int64_t step);

}  // namespace batchwise

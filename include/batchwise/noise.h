#pragma once
/// The gradient noise scale (McCandlish et al. 2018, appendix A.1), B_simple = tr(Sigma) / |G|^2,
/// measured during a short real training run from the gradients of micro-batches and of the step.
#include <torch/arg.h>

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/choices.h"
#include "batchwise/fields.h"
#include "batchwise/trial.h"

namespace batchwise {

class Workload;

// ---- gradient noise scale -----------------------------------------------------------------------

/// Example: `measure_noise_scale(workload, NoiseOptions().batch(512).micro_batch(32).steps(100))`.
struct NoiseOptions {
  /// B: samples per training step; its gradient is the mean of the micro-batches'.
  TORCH_ARG(int64_t, batch) = 256;
  /// b: samples per micro-batch, the small batch. REQUIRES: divides batch, below it.
  TORCH_ARG(int64_t, micro_batch) = 32;
  /// Training steps measured.
  TORCH_ARG(int, steps) = 50;
  /// Moving-average factor of |G|^2 and tr(Sigma), each smoothed on its own (bias-corrected).
  TORCH_ARG(double, smoothing) = 0.9;
  /// Take the optimizer step after each measurement (the noise scale is then followed along
  /// training); false: measure at fixed weights. The workload's state is restored either way.
  TORCH_ARG(bool, train) = true;
  /// The memory the measurement may use (the session's budget); past it a step throws out of memory,
  /// as a trial's does. 0: no limit.
  TORCH_ARG(int64_t, limit_bytes) = 0;
};

/// One measured step.
struct NoiseStep {
  int step = 0;
  double loss = 0;
  double g2_small = 0;                      ///< |G_b|^2: mean squared norm of the micro-batch gradients
  double g2_big = 0;                        ///< |G_B|^2: squared norm of the step's (mean) gradient
  double g2 = 0;                            ///< this step's unbiased estimate of |G|^2
  double trace = 0;                         ///< this step's unbiased estimate of tr(Sigma)
  std::optional<double> b_simple_smoothed;  ///< smoothed tr(Sigma) / smoothed |G|^2 so far
};

/// The JSON fields of a NoiseStep, in JSON order (fields.h).
template <class V, class T, IfRecord<T, NoiseStep> = 0>
void fields(V& v, T& s) {
  v("step", s.step);
  v("loss", s.loss);
  v("g2_small", s.g2_small);
  v("g2_big", s.g2_big);
  v("g2", s.g2);
  v("trace", s.trace);
  v("b_simple_smoothed", s.b_simple_smoothed);
}

/// A training loss this many times its first two steps' mean on three steps running, and rising, is
/// diverging (no noise scale there).
inline constexpr double kDivergedLossRise = 10;

struct NoiseResult {
  int64_t batch = 0, micro_batch = 0;
  int steps = 0;
  double g2 = 0;     ///< |G|^2, the mean over steps
  double trace = 0;  ///< tr(Sigma), the mean over steps
  /// B_simple = tr(Sigma) / |G|^2 over the whole run; none when |G|^2 is not positive (the
  /// gradient is indistinguishable from noise at this batch).
  std::optional<double> b_simple;
  double b_simple_stderr = 0;  ///< jackknife over steps
  /// b_simple -/+ 2 standard errors (low >= 0); the high end infinite where |G|^2 is within two standard errors
  /// of 0 (the mean of the steps' estimates over their standard error): the gradient's mean was not told from
  /// its noise, and no critical batch is read from it.
  double b_simple_low = 0, b_simple_high = 0;
  double smoothing = 0.9;  ///< the moving averages' factor of the timeline's b_simple_smoothed (--smoothing)
  /// The smoothed estimate over the last quarter of the run over that of the first quarter.
  std::optional<double> drift;
  std::vector<NoiseStep> timeline;
  std::string message;  ///< why b_simple is missing, when it is
  /// The training loss or the gradients stopped being finite, or the loss rose past kDivergedLossRise
  /// times its first two steps' mean on three steps running, rising (at the step `message` names): nothing was measured
  /// (g2 and trace are null in the JSON), and the steps before it are the timeline (with the risen step). A failure, as
  /// a sweep's NaN loss is.
  bool diverged = false;
  double wall_s = 0;
};

/// The JSON fields of a NoiseResult, in JSON order (fields.h).
template <class V, class T, IfRecord<T, NoiseResult> = 0>
void fields(V& v, T& n) {
  const bool measured = n.b_simple.has_value();
  v("batch", n.batch);
  v("micro_batch", n.micro_batch);
  v("steps", n.steps);
  v("g2", n.g2, NullUnless{!n.diverged});
  v("trace", n.trace, NullUnless{!n.diverged});
  v("b_simple", n.b_simple);
  v("b_simple_stderr", n.b_simple_stderr, NullUnless{measured});
  v.property(
      "b_simple_band", n,
      [](const auto& noise) {
        return std::vector<double>{noise.b_simple_low, noise.b_simple_high};
      },
      [](auto& noise, const std::vector<double>& band) {
        if (band.size() != 2) return;
        noise.b_simple_low = band[0];
        noise.b_simple_high = band[1];
        // JSON writes an infinite high end (and error) as null, read back as 0: the high end is never below
        // B_simple, so 0 above a positive B_simple was infinite
        if (band[1] == 0 && noise.b_simple && *noise.b_simple > 0) {
          noise.b_simple_high = std::numeric_limits<double>::infinity();
          if (noise.b_simple_stderr == 0) noise.b_simple_stderr = noise.b_simple_high;  // null too
        }
      },
      NullUnless{measured});
  v("drift", n.drift);
  v("smoothing", n.smoothing);
  v("message", n.message);
  v("diverged", n.diverged, When{n.diverged});
  v("wall_s", n.wall_s);
  v("timeline", n.timeline);
}

/// Empty where the band bounds B_simple above; else that it does not (|G|^2 within its errors of 0: the
/// gradient's mean was not told from its noise), so no critical batch is read from it, and the fix:
/// "the band has no upper end: ... measure more steps (--noise-steps) or a larger --micro-batch".
std::string unbounded_noise_text(const NoiseResult& noise);

/// The options measure_noise_scale refuses (ConfigError), for a workload of `training_samples`
/// (0: not known): a micro-batch that does not divide the batch or is not below it, fewer than 2
/// steps, a smoothing outside [0, 1), and a batch larger than the training set (a step would repeat
/// samples, and the noise scale would measure the repeats). measure_noise_scale checks them; a
/// caller can before it says what it will measure.
void check_noise_options(const NoiseOptions& options, int64_t training_samples);

/// A short real training run at `batch`, split into micro-batches: each step's micro-batch
/// gradients give |G_b|^2 and their mean |G_B|^2, from which the two-batch estimators give |G|^2 and
/// tr(Sigma). Restores the workload's state afterwards. Throws ConfigError for a workload that does
/// not expose its gradients (Workload::backward) or options that do not divide.
NoiseResult measure_noise_scale(Workload& workload, const NoiseOptions& options);

}  // namespace batchwise

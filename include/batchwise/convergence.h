#pragma once
/// Convergence-aware advice: the learning rate for a batch size, gradient-accumulation plans that
/// keep the global batch exact, the gradient noise scale (McCandlish et al. 2018) measured during a
/// short real training run, and goodput (Pollux, OSDI '21) from it and a throughput curve.
#include <torch/arg.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/choices.h"
#include "batchwise/fields.h"
#include "batchwise/trial.h"

namespace batchwise {

class Workload;

// ---- learning-rate scaling ----------------------------------------------------------------------

/// The learning rate for a batch size, scaled from a base the user trained with.
struct ScaledLr {
  int64_t base_batch = 0;
  double base_lr = 0;
  int64_t batch = 0;
  double lr = 0;
  double factor = 1;      ///< lr / base_lr
  std::string rule;       ///< "linear" (SGD) or "sqrt" (Adam family)
  int warmup_epochs = 0;  ///< linear rule, scaling up: 5 (Goyal et al. 2017); otherwise 0
  std::string advice;     ///< one sentence: the rule, its source, and the warm-up
};

/// sgd: linear, lr x batch/base_batch, with 5 epochs of linear warm-up from base_lr when the batch
/// grows (Goyal et al. 2017); adam, adamw: square root, lr x sqrt(batch/base_batch) (Malladi et al.
/// 2022). Throws ConfigError for a non-positive batch or learning rate.
ScaledLr scale_lr(Optimizer optimizer, int64_t base_batch, double base_lr, int64_t batch);

// ---- gradient-accumulation plans ----------------------------------------------------------------

/// What becomes of an epoch's last, short global batch.
enum class LastBatch {
  Drop,  ///< drop_last: the remainder is not trained on this epoch
  Pad,   ///< the remainder is topped up with repeated samples to a full global batch
  Keep,  ///< a short final step with the remainder, split over the ranks
};
const char* to_string(LastBatch policy);
constexpr std::array<LastBatch, 3> enum_values(LastBatch) { return {LastBatch::Drop, LastBatch::Pad, LastBatch::Keep}; }
/// "drop", "pad", "keep"; throws ConfigError naming `what` otherwise.
LastBatch parse_last_batch(const std::string& text, const std::string& what);

/// What the plan must satisfy.
/// Example: `plan_accumulation(PlanRequest(4096, 256).world_size(2).dataset_size(60000))`.
struct PlanRequest {
  PlanRequest(int64_t global_batch, int64_t max_micro_batch)
      : global_batch_(global_batch), max_micro_batch_(max_micro_batch) {}
  /// Samples per optimizer step over all devices. REQUIRES: >= 1.
  TORCH_ARG(int64_t, global_batch);
  /// The largest batch one device can run (a fit's answer). REQUIRES: >= 1.
  TORCH_ARG(int64_t, max_micro_batch);
  TORCH_ARG(int64_t, world_size) = 1;
  /// Every micro-batch is a multiple of this.
  TORCH_ARG(int64_t, multiple_of) = 1;
  /// Samples in an epoch; 0: unknown (no epoch arithmetic).
  TORCH_ARG(int64_t, dataset_size) = 0;
  TORCH_ARG(LastBatch, last_batch) = LastBatch::Drop;
  /// The model normalises with BatchNorm (statistics per micro-batch, per device).
  TORCH_ARG(bool, batchnorm) = false;
};

/// micro_batch x accumulation_steps x world_size = global_batch.
struct AccumulationPlan {
  int64_t global_batch_asked = 0;
  int64_t global_batch = 0;  ///< what the plan trains with: the asked one when exact
  bool exact = false;
  int64_t world_size = 1;
  int64_t per_device_batch = 0;    ///< micro_batch x accumulation_steps
  int64_t micro_batch = 0;         ///< samples per forward/backward on one device
  int64_t accumulation_steps = 0;  ///< backward passes per optimizer step
  std::string reason;              ///< why this split; when not exact, why the asked batch cannot be kept
  // The epoch (dataset_size > 0):
  int64_t dataset_size = 0;
  LastBatch last_batch = LastBatch::Drop;
  int64_t steps_per_epoch = 0;        ///< optimizer steps, the short or padded last one included
  int64_t dropped_samples = 0;        ///< drop: samples not trained on each epoch
  int64_t padded_samples = 0;         ///< pad: repeated samples added to the last step
  int64_t last_step_samples = 0;      ///< samples in the epoch's last optimizer step
  std::string last_batch_note;        ///< the policy in one sentence, with its numbers
  std::vector<std::string> warnings;  ///< empty or single-sample batches (BatchNorm), ...
};

/// The JSON fields of an AccumulationPlan, in JSON order (fields.h).
template <class V, class T, IfRecord<T, AccumulationPlan> = 0>
void fields(V& v, T& a) {
  v("global_batch_asked", a.global_batch_asked);
  v("global_batch", a.global_batch);
  v("exact", a.exact);
  v("world_size", a.world_size);
  v("per_device_batch", a.per_device_batch);
  v("micro_batch", a.micro_batch);
  v("accumulation_steps", a.accumulation_steps);
  v("reason", a.reason);
  v.object("epoch", When{a.dataset_size > 0}, [&](auto& e) {
    e("dataset_size", a.dataset_size);
    e("last_batch", a.last_batch);
    e("steps", a.steps_per_epoch);
    e("dropped_samples", a.dropped_samples);
    e("padded_samples", a.padded_samples);
    e("last_step_samples", a.last_step_samples);
    e("note", a.last_batch_note);
  });
  v("warnings", a.warnings);
}

/// The split of the global batch with the fewest accumulation steps whose micro-batch fits
/// (<= max_micro_batch, a multiple of multiple_of) and divides evenly over the devices; when none
/// exists, the nearest achievable global batch (ties: the smaller), with the reason. Throws
/// ConfigError for non-positive inputs.
AccumulationPlan plan_accumulation(const PlanRequest& request);

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

struct NoiseResult {
  int64_t batch = 0, micro_batch = 0;
  int steps = 0;
  double g2 = 0;     ///< |G|^2, the mean over steps
  double trace = 0;  ///< tr(Sigma), the mean over steps
  /// B_simple = tr(Sigma) / |G|^2 over the whole run; none when |G|^2 is not positive (the
  /// gradient is indistinguishable from noise at this batch).
  std::optional<double> b_simple;
  double b_simple_stderr = 0;                  ///< jackknife over steps
  double b_simple_low = 0, b_simple_high = 0;  ///< b_simple -/+ 2 standard errors (low >= 0)
  /// The smoothed estimate over the last quarter of the run over that of the first quarter.
  std::optional<double> drift;
  std::vector<NoiseStep> timeline;
  std::string message;  ///< why b_simple is missing, when it is
  double wall_s = 0;
};

/// The JSON fields of a NoiseResult, in JSON order (fields.h).
template <class V, class T, IfRecord<T, NoiseResult> = 0>
void fields(V& v, T& n) {
  const bool measured = n.b_simple.has_value();
  v("batch", n.batch);
  v("micro_batch", n.micro_batch);
  v("steps", n.steps);
  v("g2", n.g2);
  v("trace", n.trace);
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
      },
      NullUnless{measured});
  v("drift", n.drift);
  v("message", n.message);
  v("wall_s", n.wall_s);
  v("timeline", n.timeline);
}

/// A short real training run at `batch`, split into micro-batches: each step's micro-batch
/// gradients give |G_b|^2 and their mean |G_B|^2, from which the two-batch estimators give |G|^2 and
/// tr(Sigma). Restores the workload's state afterwards. Throws ConfigError for a workload that does
/// not expose its gradients (Workload::backward) or options that do not divide.
NoiseResult measure_noise_scale(Workload& workload, const NoiseOptions& options);

// ---- goodput ------------------------------------------------------------------------------------

/// Pollux's statistical efficiency of batch M against the base batch M0, from the noise scale:
/// gain(M) = (var + sqr) / (var/s + sqr), s = M/M0, var/sqr = B_simple/M0, efficiency = gain/s
/// = (B_simple + M0) / (B_simple + M). 1 at M0, falling as M passes B_simple.
double statistical_efficiency(double b_simple, int64_t base_batch, int64_t batch);

struct GoodputPoint {
  int64_t batch = 0;
  double samples_per_s = 0;
  double efficiency = 0;
  double goodput = 0;  ///< samples_per_s x efficiency: useful samples per second
};

/// The JSON fields of a GoodputPoint, in JSON order (fields.h).
template <class V, class T, IfRecord<T, GoodputPoint> = 0>
void fields(V& v, T& p) {
  v("batch", p.batch);
  v("samples_per_s", p.samples_per_s);
  v("efficiency", p.efficiency);
  v("goodput", p.goodput);
}

struct Goodput {
  double b_simple = 0;
  int64_t base_batch = 0;
  std::vector<GoodputPoint> points;  ///< the sweep's ok points
  std::optional<int64_t> best_batch;
  /// Batches whose goodput is within 5 % of the best: how flat the optimum is.
  std::vector<int64_t> within_5_percent;
};

/// The JSON fields of a Goodput, in JSON order (fields.h).
template <class V, class T, IfRecord<T, Goodput> = 0>
void fields(V& v, T& g) {
  v("b_simple", g.b_simple);
  v("base_batch", g.base_batch);
  v("best_batch", g.best_batch);
  v("within_5_percent", g.within_5_percent);
  v("points", g.points);
}

/// Goodput of every ok sweep point; the base batch is the smallest measured.
Goodput goodput(const std::vector<Trial>& sweep_points, double b_simple);

}  // namespace batchwise

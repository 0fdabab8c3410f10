#pragma once
/// Convergence-aware advice: the learning rate for a batch size, and goodput (Pollux, OSDI '21) from
/// the gradient noise scale and a throughput curve. The noise scale itself is noise.h's, the
/// accumulation plans accumulation.h's; both are included here for the callers that read them
/// together.
#include <torch/arg.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/accumulation.h"
#include "batchwise/choices.h"
#include "batchwise/fields.h"
#include "batchwise/noise.h"
#include "batchwise/trial.h"

namespace batchwise {

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

/// Goodput at the noise scale measured, where that measurement can weigh batches: none without a
/// B_simple, or where its band reaches infinity (with one of its steps left out, the gradient could
/// not be told from its noise: any noise scale at all fits it).
std::optional<Goodput> goodput(const std::vector<Trial>& sweep_points, const NoiseResult& noise);

}  // namespace batchwise

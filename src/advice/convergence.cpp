// Learning-rate scaling and goodput: arithmetic on measured figures, no torch. (The noise scale,
// which trains, is in noise.cpp; the accumulation plans in accumulation.cpp.)
#include "batchwise/convergence.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "batchwise/units.h"
#include "check.h"

namespace batchwise {

ScaledLr scale_lr(Optimizer optimizer, int64_t base_batch, double base_lr, int64_t batch) {
  BATCHWISE_CHECK(base_batch >= 1 && batch >= 1, ConfigError,
                  "learning-rate scaling: batch sizes must be at least 1 (base {}, target {})", base_batch, batch);
  BATCHWISE_CHECK(base_lr > 0 && std::isfinite(base_lr), ConfigError,
                  "learning-rate scaling: the base learning rate must be positive, not {}", base_lr);
  ScaledLr s;
  s.base_batch = base_batch;
  s.base_lr = base_lr;
  s.batch = batch;
  const double ratio = static_cast<double>(batch) / static_cast<double>(base_batch);
  if (optimizer == Optimizer::Sgd) {
    s.rule = "linear";
    s.factor = ratio;
    s.warmup_epochs = batch > base_batch ? 5 : 0;
    s.advice = fmt::format("SGD: linear scaling, lr {:g} x {}/{} = {:g} (Goyal et al. 2017){}", base_lr, batch,
                           base_batch, base_lr * ratio,
                           s.warmup_epochs ? fmt::format(", warmed up linearly from {:g} over the first {}", base_lr,
                                                         format_epochs(s.warmup_epochs))
                                           : "");
  } else {  // the Adam family
    s.rule = "sqrt";
    s.factor = std::sqrt(ratio);
    s.advice =
        fmt::format("{}: square-root scaling, lr {:g} x sqrt({}/{}) = {:.4g} (Malladi et al. 2022)",
                    optimizer == Optimizer::Adam ? "Adam" : "AdamW", base_lr, batch, base_batch, base_lr * s.factor);
  }
  s.lr = base_lr * s.factor;
  return s;
}

double statistical_efficiency(double b_simple, int64_t base_batch, int64_t batch) {
  const double b = std::max(b_simple, 0.0);
  return (b + static_cast<double>(base_batch)) / (b + static_cast<double>(batch));
}

Goodput goodput(const std::vector<Trial>& sweep_points, double b_simple) {
  Goodput g;
  g.b_simple = b_simple;
  for (const auto& t : sweep_points)
    if (t.outcome == Outcome::Ok && (g.base_batch == 0 || t.batch < g.base_batch)) g.base_batch = t.batch;
  if (g.base_batch == 0) return g;
  double best = 0;
  for (const auto& t : sweep_points) {
    if (t.outcome != Outcome::Ok) continue;
    GoodputPoint p;
    p.batch = t.batch;
    p.samples_per_s = t.samples_per_s;
    p.efficiency = statistical_efficiency(b_simple, g.base_batch, t.batch);
    p.goodput = p.samples_per_s * p.efficiency;
    if (p.goodput > best) {
      best = p.goodput;
      g.best_batch = p.batch;
    }
    g.points.push_back(p);
  }
  for (const auto& p : g.points)
    if (p.goodput >= 0.95 * best) g.within_5_percent.push_back(p.batch);
  return g;
}

std::optional<Goodput> goodput(const std::vector<Trial>& sweep_points, const NoiseResult& noise) {
  if (!noise.b_simple || !std::isfinite(noise.b_simple_high)) return std::nullopt;
  return goodput(sweep_points, *noise.b_simple);
}

}  // namespace batchwise

// The gradient noise scale (McCandlish et al. 2018, appendix A.1), measured during real training.
#include "batchwise/noise.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "batchwise/workload.h"
#include "check.h"
#include "engine/memory_limit.h"

namespace batchwise {

namespace {

// All gradients as one flat fp32 vector. A parameter the forward pass does not use has none, and
// has none in every slice, so the vectors of one step line up.
at::Tensor flat_gradients(Workload& workload) {
  std::vector<at::Tensor> parts;
  for (const auto& g : workload.gradients())
    if (g.defined()) parts.push_back(g.detach().reshape(-1).to(at::kFloat));
  BATCHWISE_CHECK(!parts.empty(), ConfigError, "noise scale: {} has no gradients after a backward pass",
                  workload.info().model);
  return at::cat(parts);
}

double squared_norm(const at::Tensor& t) { return t.to(at::kDouble).pow(2).sum().item<double>(); }

}  // namespace

std::string unbounded_noise_text(const NoiseResult& n) {
  if (!n.b_simple || std::isfinite(n.b_simple_high)) return "";
  return fmt::format(
      "the band has no upper end: |G|^2 is within two standard errors of 0 over the {} steps at batch {}, so the "
      "gradient's mean was not told from its noise and no critical batch follows from it (goodput is not weighed); "
      "measure more steps (--noise-steps) or a larger --micro-batch",
      n.steps, n.batch);
}

void check_noise_options(const NoiseOptions& o, int64_t samples) {
  BATCHWISE_CHECK(o.batch() >= 2, ConfigError,
                  "noise scale: --batch {}: it compares a batch's gradient with its micro-batches', so --batch must "
                  "be at least 2",
                  o.batch());
  if (o.micro_batch() < 1 || o.micro_batch() >= o.batch() || o.batch() % o.micro_batch() != 0) {
    int64_t fits = 1;  // the largest micro-batch up to the one given (and half the batch) that divides it
    for (int64_t d = std::min(std::max<int64_t>(1, o.micro_batch()), o.batch() / 2); d >= 1; --d)
      if (o.batch() % d == 0) {
        fits = d;
        break;
      }
    throw ConfigError(
        fmt::format("noise scale: --micro-batch {} must be below --batch {} and divide it: e.g. "
                    "--micro-batch {}",
                    o.micro_batch(), o.batch(), fits));
  }
  BATCHWISE_CHECK(o.steps() >= 2, ConfigError, "noise scale: --noise-steps {}: at least 2 steps are needed", o.steps());
  BATCHWISE_CHECK(o.smoothing() >= 0 && o.smoothing() < 1, ConfigError, "noise scale: --smoothing {} must be in [0, 1)",
                  o.smoothing());
  // A batch larger than the training set repeats samples within a step: its gradient against its
  // micro-batches' would measure the repeats, not the data's noise.
  // One training sample leaves no batch of 2 (it had said "give --batch at most 1", which the check above refuses)
  BATCHWISE_CHECK(samples <= 0 || o.batch() <= samples, ConfigError,
                  "--batch {}: larger than the {} training samples, so a step would repeat samples and the noise "
                  "scale would measure the repeats; {}",
                  o.batch(), samples,
                  samples >= 2 ? fmt::format("give --batch at most {}", samples)
                               : std::string("it needs at least 2 training samples to compare a batch with its "
                                             "micro-batches: give a larger dataset"));
}

namespace {

// Why the step `s` after `before` ends the measurement as a training that diverged, if it does.
// A loss or gradients that stop being finite leave nothing to measure past them. A loss still finite
// but many times where it began, and rising step on step, is a training that diverges too: its
// gradients grow with it, and their ratio is no noise scale (at lr 3, mlp's loss rose from 2.3 to 1.6e5
// in five steps and "measured" B_simple 16). Where it began is the mean of the first two steps, and
// the last three steps must each be past it and rising: one hard batch of a small, noisy loss near a
// minimum (0.010, 0.012, 0.015, then 0.11) is not divergence.
std::optional<std::string> divergence(const std::vector<NoiseStep>& before, const NoiseStep& s, const NoiseOptions& o) {
  if (!std::isfinite(s.loss) || !std::isfinite(s.g2) || !std::isfinite(s.trace))
    return fmt::format(
        "{} at step {} of {} (batch {}): the noise scale of a training that diverged, or of a loss that is not a "
        "number, is no measurement; lower the learning rate, or check the loss",
        std::isfinite(s.loss) ? "the gradients stopped being finite"
                              : fmt::format("the training loss became {}", std::isnan(s.loss) ? "NaN" : "infinite"),
        s.step, o.steps(), o.batch());
  const size_t n = before.size();
  if (!o.train() || n == 0) return std::nullopt;
  // A million times the first step's loss diverged, whatever came between: the three rising steps below need
  // five steps, and --noise-steps 2 had measured B_simple 15.4 from a loss of 1.5e18
  constexpr double kRunAway = 1e6;
  if (before[0].loss > 0 && s.loss > kRunAway * before[0].loss)
    return fmt::format(
        "the training loss rose from {:.4g} at its first step to {:.4g} at step {} of {} (batch {}), more than "
        "{:g}x: the noise scale of a training that diverges is no measurement; lower the learning rate",
        before[0].loss, s.loss, s.step, o.steps(), o.batch(), kRunAway);
  if (n < 3) return std::nullopt;
  const double start = (before[0].loss + before[1].loss) / 2, past = kDivergedLossRise * start;
  if (start > 0 && s.loss > past && before[n - 1].loss > past && before[n - 2].loss > past &&
      s.loss > before[n - 1].loss && before[n - 1].loss > before[n - 2].loss)
    return fmt::format(
        "the training loss rose from {:.4g} over its first two steps to {:.4g} at step {} of {} (batch {}), more "
        "than {:g}x and rising: the noise scale of a training that diverges is no measurement; lower the learning "
        "rate",
        start, s.loss, s.step, o.steps(), o.batch(), kDivergedLossRise);
  return std::nullopt;
}

}  // namespace

NoiseResult measure_noise_scale(Workload& workload, const NoiseOptions& o) {
  check_noise_options(o, workload.info().dataset_size);
  const auto start = std::chrono::steady_clock::now();
  const StateGuard restore(workload);
  const detail::MemoryLimit limit(workload, o.limit_bytes());  // lifted before the state is put back

  const int64_t k = o.batch() / o.micro_batch();
  const double big = static_cast<double>(o.batch()), small = static_cast<double>(o.micro_batch());
  NoiseResult r;
  r.batch = o.batch();
  r.micro_batch = o.micro_batch();
  r.smoothing = o.smoothing();
  r.steps = o.steps();

  double ema_g2 = 0, ema_trace = 0, decay = 1;
  for (int step = 1; step <= o.steps(); ++step) {
    const Batch batch = workload.next_batch(o.batch());
    workload.zero_grad();
    // The accumulated gradient after slice i is the mean of the first i slices' gradients over k;
    // each slice's own gradient is k x the difference.
    at::Tensor previous, current;
    double sum_small = 0, loss = 0;
    for (int64_t i = 0; i < k; ++i) {
      const Batch slice{batch.input.narrow(0, i * o.micro_batch(), o.micro_batch()),
                        batch.target.narrow(0, i * o.micro_batch(), o.micro_batch())};
      loss += workload.backward(slice, 1.0 / static_cast<double>(k)).item<double>() / static_cast<double>(k);
      current = flat_gradients(workload);
      BATCHWISE_CHECK(!previous.defined() || previous.numel() == current.numel(), ConfigError,
                      "noise scale: {} uses different parameters for different samples; its gradients cannot be "
                      "compared slice by slice",
                      workload.info().model);
      sum_small += squared_norm(previous.defined() ? (current - previous) * static_cast<double>(k)
                                                   : current * static_cast<double>(k));
      previous = current;
    }
    NoiseStep s;
    s.step = step;
    s.loss = loss;
    s.g2_small = sum_small / static_cast<double>(k);
    s.g2_big = squared_norm(current);
    s.g2 = (big * s.g2_big - small * s.g2_small) / (big - small);
    s.trace = (s.g2_small - s.g2_big) / (1.0 / small - 1.0 / big);
    if (const std::optional<std::string> why = divergence(r.timeline, s, o)) {
      r.diverged = true;
      r.message = *why;
      if (std::isfinite(s.loss) && std::isfinite(s.g2) && std::isfinite(s.trace)) r.timeline.push_back(s);
      r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return r;
    }
    // Each smoothed on its own, bias-corrected (the averages start at zero).
    ema_g2 = o.smoothing() * ema_g2 + (1 - o.smoothing()) * s.g2;
    ema_trace = o.smoothing() * ema_trace + (1 - o.smoothing()) * s.trace;
    decay *= o.smoothing();
    const double g2_hat = ema_g2 / (1 - decay), trace_hat = ema_trace / (1 - decay);
    if (g2_hat > 0) s.b_simple_smoothed = trace_hat / g2_hat;
    r.timeline.push_back(s);
    if (o.train()) workload.optimizer_step();
  }

  const double n = static_cast<double>(r.timeline.size());
  double sum_g2 = 0, sum_trace = 0;
  for (const auto& s : r.timeline) {
    sum_g2 += s.g2;
    sum_trace += s.trace;
  }
  r.g2 = sum_g2 / n;
  r.trace = sum_trace / n;
  if (r.g2 <= 0) {
    // A batch 4x larger, where the training set holds it
    const int64_t dataset = workload.info().dataset_size;
    const bool larger = dataset <= 0 || 4 * o.batch() <= dataset;
    r.message = fmt::format(
        "|G|^2 came out {:.3g}: at batch {} the gradient is indistinguishable from its noise, so the noise scale is "
        "far above {}; {} measure it (`batchwise noise --batch {} --micro-batch {} --noise-steps {}`)",
        r.g2, o.batch(), o.batch(), larger ? "a larger batch or more steps" : "more steps",
        larger ? 4 * o.batch() : o.batch(), o.micro_batch(), 4 * o.steps());  // it divides both batches
  } else {
    r.b_simple = r.trace / r.g2;
    // Jackknife over steps: leave one step out, recompute the ratio of means.
    std::vector<double> leave_one_out;
    for (const auto& s : r.timeline)
      if (sum_g2 - s.g2 > 0) leave_one_out.push_back((sum_trace - s.trace) / (sum_g2 - s.g2));
    if (leave_one_out.size() == r.timeline.size()) {
      const double mean = std::accumulate(leave_one_out.begin(), leave_one_out.end(), 0.0) / n;
      double var = 0;
      for (double b : leave_one_out) var += (b - mean) * (b - mean);
      r.b_simple_stderr = std::sqrt(var * (n - 1) / n);
    } else {
      r.b_simple_stderr = INFINITY;
    }
    r.b_simple_low = std::max(0.0, *r.b_simple - 2 * r.b_simple_stderr);
    r.b_simple_high = *r.b_simple + 2 * r.b_simple_stderr;
    // |G|^2 within two standard errors of 0 (the steps' estimates' spread over sqrt(steps)): the ratio has no
    // upper end, though every step left out kept a positive mean (a 0.027 of standard error 0.031 had stated a
    // critical batch of 1590)
    double squares = 0;
    for (const auto& s : r.timeline) squares += (s.g2 - r.g2) * (s.g2 - r.g2);
    const double g2_stderr = n > 1 ? std::sqrt(squares / (n - 1) / n) : INFINITY;
    if (r.g2 - 2 * g2_stderr <= 0) r.b_simple_high = INFINITY;
  }
  // Drift: the smoothed estimate over the last quarter against the first quarter.
  const size_t quarter = r.timeline.size() / 4;
  if (quarter >= 1) {
    auto mean_of = [&](size_t from, size_t to) -> std::optional<double> {
      double sum = 0;
      int count = 0;
      for (size_t i = from; i < to; ++i)
        if (r.timeline[i].b_simple_smoothed) {
          sum += *r.timeline[i].b_simple_smoothed;
          ++count;
        }
      return count ? std::optional<double>(sum / count) : std::nullopt;
    };
    const auto first = mean_of(0, quarter), last = mean_of(r.timeline.size() - quarter, r.timeline.size());
    if (first && last && *first > 0) r.drift = *last / *first;
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace batchwise

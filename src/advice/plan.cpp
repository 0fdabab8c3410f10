// The run plan: the optimizer's settings read from the workload, and how the rate, the warm-up, the
// steps per epoch and those settings change with the batch.
#include "batchwise/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "batchwise/workload.h"

namespace batchwise {

OptimizerSettings optimizer_settings(Optimizer optimizer, ModuleWorkload* w) {
  OptimizerSettings s;
  s.optimizer = optimizer;
  if (optimizer == Optimizer::Sgd) s.momentum = 0.9;
  if (adam_family(optimizer)) s.beta1 = 0.9, s.beta2 = 0.999, s.eps = 1e-8;
  if (optimizer == Optimizer::AdamW) s.weight_decay = 0.01;
  if (!w || w->optimizer().param_groups().empty()) return s;
  // The reference group's, whose rate the advice scales (ModuleWorkload::set_lr): the first whose rate was above 0
  // when the workload was made, as set_lr reads it (not the rates now, which a schedule may have moved)
  const std::vector<double>& ratios = w->lr_ratios();
  const size_t found = detail::reference_group(ratios), reference = found < ratios.size() ? found : 0;
  auto& options =
      w->optimizer().param_groups()[std::min(reference, w->optimizer().param_groups().size() - 1)].options();
  if (std::any_of(ratios.begin(), ratios.end(), [](double r) { return r != 1; })) s.group_rates = ratios;
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
    s.momentum = sgd->momentum();
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
    std::tie(s.beta1, s.beta2) = adamw->betas();
    s.eps = adamw->eps();
    s.weight_decay = adamw->weight_decay();
  } else if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
    std::tie(s.beta1, s.beta2) = adam->betas();
    s.eps = adam->eps();
    s.weight_decay = adam->weight_decay();
  } else if (const auto* described = dynamic_cast<const DescribesOptimizer*>(&options)) {
    const OptimizerSettings given = described->optimizer_settings();
    if (optimizer == Optimizer::Sgd) s.momentum = given.momentum;
    if (adam_family(optimizer))
      s.beta1 = given.beta1, s.beta2 = given.beta2, s.eps = given.eps, s.weight_decay = given.weight_decay;
    if (s.group_rates.empty()) s.group_rates = given.group_rates;  // the groups keep their ratios themselves
  }
  return s;
}

std::string warmup_text(const LrAdvice& l, int64_t steps_per_epoch) {
  const double per_epoch = static_cast<double>(steps_per_epoch);
  const auto epochs = [](double e) {
    const std::string text = fmt::format("{:.2g}", e);
    return text + (text == "1" ? " epoch" : " epochs");
  };
  // In epochs as the advice counts them (its samples over the data's), so the plan and the answer say one figure
  if (l.warmup_steps > 0)
    return per_epoch > 0 ? fmt::format("{} steps ({}) from {:.4g}", l.warmup_steps,
                                       epochs(l.warmup_epochs > 0 ? l.warmup_epochs
                                                                  : static_cast<double>(l.warmup_steps) / per_epoch),
                                       l.warmup_from_lr)
                         : fmt::format("{} steps from {:.4g}", l.warmup_steps, l.warmup_from_lr);
  if (l.warmup_epochs > 0)
    return per_epoch > 0 ? fmt::format("{} steps ({}) from {:.4g}", std::llround(l.warmup_epochs * per_epoch),
                                       epochs(l.warmup_epochs), l.warmup_from_lr)
                         : fmt::format("{} from {:.4g}", epochs(l.warmup_epochs), l.warmup_from_lr);
  return "none";
}

RunPlan plan_run(const OptimizerSettings& o, int64_t dataset_size,
                 const std::vector<std::pair<std::string, LrAdvice>>& rows) {
  RunPlan plan;
  plan.optimizer = o;
  plan.dataset_size = dataset_size;
  const bool adam = adam_family(o.optimizer);
  for (const auto& [label, lr] : rows) {
    RunPlanRow row;
    row.label = label;
    row.batch = lr.scaled.batch;
    row.lr = lr;
    row.steps_per_epoch = dataset_size > 0 && row.batch > 0 ? (dataset_size + row.batch - 1) / row.batch : 0;
    row.optimizer_settings = adam ? fmt::format("betas ({:g}, {:g}), eps {:g}: as they are", o.beta1, o.beta2, o.eps)
                             : o.optimizer == Optimizer::Sgd ? fmt::format("momentum {:g}: as it is", o.momentum)
                                                             : "as they are";
    plan.rows.push_back(row);
  }
  if (rows.empty()) return plan;
  const LrAdvice& base = rows.front().second;
  plan.notes.push_back(fmt::format(
      "the same epochs keep the same samples seen; anything scheduled in steps (decay milestones, the end of a "
      "cosine, evaluation intervals) scales by {} / batch: a milestone at step S at batch {} is at step S x {} / B at "
      "batch B",
      base.scaled.base_batch, base.scaled.base_batch, base.scaled.base_batch));
  if (!o.group_rates.empty()) {
    const size_t reference = detail::reference_group(o.group_rates);
    std::vector<std::string> others;
    for (size_t i = 0; i < o.group_rates.size(); ++i)
      if (i != reference)
        others.push_back(o.group_rates[i] > 0 ? fmt::format("group {} at {:.4g}x", i, o.group_rates[i])
                                              : fmt::format("group {} at 0 (frozen)", i));
    if (reference < o.group_rates.size())
      plan.notes.push_back(fmt::format(
          "the rates above are param group {}'s, the first whose rate is above 0; every other group keeps its ratio "
          "to it, as batchwise sets them: {}",
          reference, fmt::join(others, ", ")));
  }
  if (adam) {
    for (const auto& [label, lr] : rows) {
      const double k = static_cast<double>(lr.scaled.batch) / static_cast<double>(lr.scaled.base_batch);
      if (k <= 1) continue;
      const double b1 = 1 - k * (1 - o.beta1), b2 = 1 - k * (1 - o.beta2);
      plan.notes.push_back(
          b1 > 0 ? fmt::format("{} batch {}: the SDE scaling rule (Malladi et al. 2022) would also set betas ({:.3g}, "
                               "{:.4g}) and eps {:.3g} for k = {:g}; batchwise measured every rate with the betas and "
                               "eps as they are, which is what most large-batch Adam practice keeps",
                               label, lr.scaled.batch, b1, b2, o.eps / std::sqrt(k), k)
                 : fmt::format("{} batch {}: at k = {:g} times the base batch the SDE scaling rule (Malladi et al. "
                               "2022) no longer applies to beta1 (it would fall below 0); keep the betas and eps as "
                               "they are, as batchwise measured",
                               label, lr.scaled.batch, k));
    }
    if (o.weight_decay > 0)
      plan.notes.push_back(fmt::format(
          "{} decays the weights by lr x {:g} each step: a batch k times the base trains 1/k the steps per epoch at "
          "sqrt(k) times the rate, so the decay per epoch changes by sqrt(base / batch) (less for a larger batch, "
          "more for a smaller one); keep weight_decay as it is unless regularisation was tuned to the epoch",
          o.optimizer == Optimizer::AdamW ? "AdamW" : "Adam", o.weight_decay));
  } else if (o.optimizer == Optimizer::Sgd && o.momentum > 0) {
    plan.notes.push_back("SGD keeps its momentum across batch sizes with the linear rule (Goyal et al. 2017)");
  }
  return plan;
}

}  // namespace batchwise

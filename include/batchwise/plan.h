#pragma once
/// The run plan: how a run's learning rate, warm-up, steps per epoch and optimizer settings change
/// as its batch changes, in one table, from the advised rates (lr.h).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "batchwise/choices.h"
#include "batchwise/fields.h"
#include "batchwise/lr.h"

namespace batchwise {

class ModuleWorkload;

/// The optimizer's settings that a change of batch may call for changing.
struct OptimizerSettings {
  Optimizer optimizer = Optimizer::Sgd;
  double momentum = 0;                                     ///< sgd
  double beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;  ///< adam, adamw
  /// Each param group's rate over the reference group's (the first whose rate is above 0, whose rate the advice
  /// names), where the groups' rates differ; empty where there is one group or one rate. The run plan's notes say
  /// them; not a JSON field.
  std::vector<double> group_rates;
};

/// The JSON fields of an OptimizerSettings, in JSON order (fields.h).
template <class V, class T, IfRecord<T, OptimizerSettings> = 0>
void fields(V& v, T& s) {
  v("name", s.optimizer);
  v("momentum", s.momentum);
  v("beta1", s.beta1);
  v("beta2", s.beta2);
  v("eps", s.eps);
  v("weight_decay", s.weight_decay);
}

/// An optimizer's group options that are not LibTorch's own (the Python API's, over a torch.optim
/// optimizer) say the optimizer's settings through this: optimizer_settings reads them.
class DescribesOptimizer {
 public:
  virtual ~DescribesOptimizer() = default;
  virtual OptimizerSettings optimizer_settings() const = 0;
};

/// The workload's optimizer settings (read from its optimizer's reference group, the first whose rate is above 0:
/// LibTorch's options, or a DescribesOptimizer's), and its groups' rates against it; for a workload batchwise does not
/// train itself, the defaults of its built-in optimizer of that name.
OptimizerSettings optimizer_settings(Optimizer optimizer, ModuleWorkload* workload = nullptr);

/// One batch of the run plan.
struct RunPlanRow {
  std::string label;  ///< "base", "recommended", "within 5 %", "planned", ...
  int64_t batch = 0;  ///< global batch
  LrAdvice lr;
  int64_t steps_per_epoch = 0;  ///< optimizer steps per epoch (the last, short one counted; plan: by its --last-batch)
  /// What the momentum or the betas and epsilon should be at this batch (measured as they are).
  std::string optimizer_settings;
};

/// The JSON fields of a RunPlanRow, in JSON order (fields.h).
template <class V, class T, IfRecord<T, RunPlanRow> = 0>
void fields(V& v, T& r) {
  v("label", r.label);
  v("batch", r.batch);
  v("lr", r.lr);
  v("steps_per_epoch", r.steps_per_epoch);
  v("optimizer_settings", r.optimizer_settings);
}

/// A warm-up in one unit for every table: "585 steps (5 epochs) from 0.01", steps counted at
/// `steps_per_epoch` where the advice gives epochs (the rule's) and epochs where it gives steps (a
/// measured rate's); "none" without one.
std::string warmup_text(const LrAdvice& lr, int64_t steps_per_epoch);

/// How the run changes as the batch changes, in one table, so that a new batch does not silently
/// change the run: learning rate and why, warm-up, steps per epoch, optimizer settings.
struct RunPlan {
  OptimizerSettings optimizer;
  int64_t dataset_size = 0;
  std::vector<RunPlanRow> rows;
  std::vector<std::string> notes;  ///< step-based schedules, the Adam scaling rule, weight decay
};

/// The JSON fields of a RunPlan, in JSON order (fields.h).
template <class V, class T, IfRecord<T, RunPlan> = 0>
void fields(V& v, T& p) {
  v("optimizer", p.optimizer);
  v("dataset_size", p.dataset_size);
  v("rows", p.rows);
  v("notes", p.notes);
}

/// The plan for `rows` (label, advice) in the order given. The Adam family keeps its betas and
/// epsilon (that is how batchwise measured every rate), and the notes give the SDE scaling rule's
/// values beside them (Malladi et al. 2022: 1 - beta -> k(1 - beta), eps -> eps / sqrt(k) for
/// k = batch / base); SGD keeps its momentum (Goyal et al. 2017).
RunPlan plan_run(const OptimizerSettings& optimizer, int64_t dataset_size,
                 const std::vector<std::pair<std::string, LrAdvice>>& rows);

}  // namespace batchwise

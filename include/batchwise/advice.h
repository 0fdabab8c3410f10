#pragma once
/// Advice that trains instead of guessing: the learning rate a batch can take, capped by a stability
/// limit measured at that batch (a short learning-rate range test, Smith 2017), and the batch that
/// reaches the lowest held-out loss in the same training time, found by successive halving over the
/// candidates (each at its own advised rate) instead of a proxy for it.
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/convergence.h"
#include "batchwise/data.h"
#include "batchwise/fields.h"

namespace batchwise {

class ModuleWorkload;

// ---- learning-rate stability --------------------------------------------------------------------

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
  double lr = 0;                 ///< the rate to train with: min(rule, cap), never below the base rate
  /// Linear warm-up from warmup_from_lr (the base rate) to lr over the first warmup_steps optimizer
  /// steps when lr is above the base rate (Goyal et al. 2017 warm up over 5 of 90 epochs; here one
  /// epoch of samples, or LrAdviceOptions::warmup_samples; the range test's own ramp is too short,
  /// docs/advice.md).
  int64_t warmup_steps = 0;
  double warmup_from_lr = 0;
  double warmup_epochs = 0;      ///< the warm-up in epochs of the workload's data (the rule's own when unmeasured)
  std::string advice;            ///< one sentence: the rule, the cap and its measurement, the warm-up
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
  v.property("stable_lr", l, [](const auto& advice) { return advice.range ? advice.range->stable_lr : std::nullopt; },
             [](auto& advice, const std::optional<double>& stable_lr) {
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

// ---- the batch race -----------------------------------------------------------------------------

/// One candidate of the race: trained from the user's weights at its batch and advised rate.
struct RaceEntry {
  int64_t batch = 0;
  double samples_per_s = 0;  ///< the sweep's figure: the time axis (what the user's loop will see)
  LrAdvice lr;
  int rungs = 0;             ///< rungs it ran; it was dropped after the last unless it won
  int64_t steps = 0;         ///< optimizer steps trained, all rungs together
  int64_t samples = 0;
  double train_s = 0;        ///< samples / samples_per_s
  struct Point {
    double train_s = 0;      ///< on the sweep's time axis
    double loss = 0;
    std::optional<double> accuracy;
  };
  std::vector<Point> curve;  ///< held-out evaluations, the initial weights' first
  /// The held-out loss at its last rung's horizon, from a line through the latest evaluations (one
  /// noisy evaluation does not decide a rung).
  std::optional<double> loss_at_horizon;
  /// At its last rung: predicted training time to that rung's best loss, over the rung's horizon (1
  /// for the rung's best); none when its loss was not falling.
  std::optional<double> time_ratio;
  /// The race's resolution at that rung: the standard deviation of time_ratio from the scatter of
  /// this entry's and the rung's best's latest evaluations about their lines (time = loss scatter
  /// over the slope, over the horizon).
  std::optional<double> time_ratio_sd;
  /// With a target (BatchRaceOptions::target_accuracy, target_loss): the training time at which its
  /// held-out evaluations first reached it, interpolated between the evaluation before and the one
  /// at or past it; none when they did not.
  std::optional<double> target_s;
  /// At its last rung, ranked by loss: its held-out loss was not falling there (so no time_ratio), but
  /// its loss at the horizon lay within two standard deviations of the best's (the scatter of both
  /// entries' latest evaluations about their lines): the race cannot tell it from the best, and it
  /// belongs to the flat range.
  bool within_noise = false;
  std::string message;       ///< why it has no result: diverged, out of memory, ...
};

/// The JSON fields of a RaceEntry::Point, in JSON order (fields.h).
template <class V, class T, IfRecord<T, RaceEntry::Point> = 0>
void fields(V& v, T& p) {
  v("train_s", p.train_s);
  v("loss", p.loss);
  v("accuracy", p.accuracy);
}

/// The JSON fields of a RaceEntry, in JSON order (fields.h).
template <class V, class T, IfRecord<T, RaceEntry> = 0>
void fields(V& v, T& e) {
  v("batch", e.batch);
  v("samples_per_s", e.samples_per_s);
  v("lr", e.lr);
  v("rungs", e.rungs);
  v("steps", e.steps);
  v("samples", e.samples);
  v("train_s", e.train_s);
  v("loss_at_horizon", e.loss_at_horizon);
  v("time_ratio", e.time_ratio);
  v("time_ratio_sd", e.time_ratio_sd);
  v("target_s", e.target_s);
  v("within_noise", e.within_noise);
  v("message", e.message);
  v("curve", e.curve);
}

/// Progress of a race, for the caller to show.
struct RaceProgress {
  int rung = 0, rungs = 0;
  int64_t batch = 0;
  int index = 0, count = 0;  ///< the entry's place in this rung, and the rung's entries
  double epochs = 0;         ///< this entry's training so far
  double loss = 0;           ///< the latest held-out loss
  std::optional<double> accuracy;
  double elapsed_s = 0;      ///< wall time since the race began
  double left_s = 0;         ///< estimated wall time to its end
};

/// Example: `race_batches(workload, test_set, BatchRaceOptions({64, 128, 256}, {9000, 9500, 10500}, lr))`.
struct BatchRaceOptions {
  BatchRaceOptions(std::vector<int64_t> batches, std::vector<double> samples_per_s, LrAdviceOptions lr)
      : batches_(std::move(batches)), samples_per_s_(std::move(samples_per_s)), lr_(std::move(lr)) {}
  /// The candidates, and each one's measured samples/s (a sweep's): REQUIRES the same length.
  TORCH_ARG(std::vector<int64_t>, batches);
  TORCH_ARG(std::vector<double>, samples_per_s);
  /// How each candidate's rate is advised.
  TORCH_ARG(LrAdviceOptions, lr);
  /// Training time of the whole race in seconds, on the sweep's time axis: every rung of every entry.
  /// Range tests and evaluations come on top.
  TORCH_ARG(double, budget_s) = 20;
  /// Held-out evaluations per entry per rung.
  TORCH_ARG(int, evaluations) = 3;
  /// An entry trains at least this many optimizer steps in the first rung; a candidate whose steps
  /// do not fit is left out, and the race's notes say so.
  TORCH_ARG(int, min_steps) = 8;
  /// Wall-clock seconds after which no further rung starts (0: no limit): the budget is training
  /// time at the sweep's speed, and a machine that became slower must not stretch the race without
  /// end. The best of the last finished rung wins, and the notes say so. Training added over a
  /// plateau (see race_batches) raises the limit in proportion.
  TORCH_ARG(double, max_wall_s) = 0;
  /// The user's held-out target (0: none), a test accuracy (class labels) or loss, or both (either
  /// reached counts). An entry records when its evaluations reach it (RaceEntry::target_s), and a rung
  /// in which one has is the race's last: the first there wins, as no entry of that rung can get there
  /// sooner (each trained to the rung's horizon, past that time, without). Time to the target is then
  /// measured, not predicted from a horizon that may lie far beyond it. The race never trains longer
  /// for a target; one the initial weights already meet is ignored, with a note.
  TORCH_ARG(double, target_accuracy) = 0;
  TORCH_ARG(double, target_loss) = 0;
  /// Batches held back (a sweep's slower, smaller ones: race_reserve), and each one's samples/s:
  /// REQUIRES the same length. They join the first rung, from the same weights and for as long as the
  /// candidates trained, only when no candidate has left the plateau at the start by the end of its
  /// extension. On a plateau the number of steps can matter more than the samples (mobilenet with
  /// AdamW: batch 32 leaves it after about 30 s of training, 64 to 1024 not in 86 s), and a smaller
  /// batch takes more steps in the same time.
  TORCH_ARG(std::vector<int64_t>, reserve);
  TORCH_ARG(std::vector<double>, reserve_samples_per_s);
  TORCH_ARG(std::function<void(const RaceProgress&)>, on_progress);
};

/// The entry with the lowest held-out loss at one rung's horizon. The lead changes between rungs when
/// the best batch for a run of that length does (the critical batch grows as the loss falls:
/// McCandlish et al. 2018), and also when leads differ by less than the race resolves; a rung's lead
/// carries no resolution of its own, so a change is a hint about shorter runs, not a measurement.
struct RungLead {
  int rung = 0;            ///< 1-based
  double horizon_s = 0;    ///< training time since the start, on the sweep's time axis
  double epochs = 0;       ///< the lead's samples by then, in epochs of the workload's data
  int64_t batch = 0;
  double loss = 0;         ///< its held-out loss at the horizon (the line through its last evaluations)
  std::optional<double> accuracy;  ///< its last evaluation's accuracy, when the task has one
};

/// The JSON fields of a RungLead, in JSON order (fields.h).
template <class V, class T, IfRecord<T, RungLead> = 0>
void fields(V& v, T& l) {
  v("rung", l.rung);
  v("horizon_s", l.horizon_s);
  v("epochs", l.epochs);
  v("batch", l.batch);
  v("loss", l.loss);
  v("accuracy", l.accuracy);
}

struct BatchRace {
  double loss_before = 0;               ///< held-out loss at the user's weights
  std::optional<double> accuracy_before;
  std::vector<double> horizons_s;       ///< each rung's horizon: training time since the start
  std::vector<RungLead> rung_leads;     ///< each rung's lead, in rung order; none for a rung ranked on the plateau
  std::vector<RaceEntry> entries;       ///< in batch order
  std::vector<int64_t> left_out;        ///< candidates without an entry (see `notes`)
  std::vector<std::string> notes;
  /// The recommendation: of the last rung's entries that the race cannot tell from the lead (see
  /// pick_last_rung), the largest batch.
  std::optional<int64_t> best_batch;
  /// The last rung's lowest held-out loss at the horizon; best_batch unless a larger batch tied it.
  std::optional<int64_t> lead_batch;
  /// Why best_batch is not lead_batch (empty when it is).
  std::string pick_reason;
  /// Batches whose predicted time to their last rung's best loss is within 5 % of that rung's
  /// horizon, and those between them: how flat the optimum is.
  std::vector<int64_t> within_5_percent;
  std::string held_out;                 ///< what the evaluations ran on
  /// The target the race ranked by where an entry reached it ("held-out accuracy >= 0.8"); empty without
  /// one, or when the initial weights met it.
  std::string target;
  double wall_s = 0;
};

/// The JSON fields of a BatchRace, in JSON order (fields.h).
template <class V, class T, IfRecord<T, BatchRace> = 0>
void fields(V& v, T& r) {
  v("loss_before", r.loss_before);
  v("accuracy_before", r.accuracy_before);
  v("horizons_s", r.horizons_s);
  v("rung_leads", r.rung_leads);
  v("held_out", r.held_out);
  v("target", r.target);
  v("best_batch", r.best_batch);
  v("lead_batch", r.lead_batch);
  v("pick_reason", r.pick_reason);
  v("within_5_percent", r.within_5_percent);
  v("left_out", r.left_out);
  v("notes", r.notes);
  v("entries", r.entries);
  v("wall_s", r.wall_s);
}

/// The race's pick from its last rung's entries (each with loss_at_horizon, and time_ratio and
/// time_ratio_sd as the rung set them). When one reached the race's target (target_s), the first there
/// is the lead and the pick: the race measured the time to the user's target, and no tie rule about
/// longer runs applies. Otherwise the lead has the lowest loss at the horizon, and is the pick unless a
/// larger batch came within one standard deviation of the race's resolution of it (time_ratio <= 1 +
/// time_ratio_sd); then the largest such batch. The race cannot tell those apart at its horizon, and
/// the batch that reaches a loss soonest grows as training goes on (the critical batch grows as the
/// loss falls: McCandlish et al. 2018; Merrill et al. 2025), so over a real run, longer than the
/// race, the larger one is at least as fast. batch is 0 when no entry has a loss.
struct LastRungPick {
  int64_t batch = 0;
  int64_t lead_batch = 0;
  std::string reason;  ///< why batch is not lead_batch; empty when it is
};
LastRungPick pick_last_rung(const std::vector<const RaceEntry*>& last_rung);

/// Successive halving over batch sizes on held-out loss (Jamieson and Talwalkar 2016): every
/// candidate trains from the workload's current weights at its advised rate for the same training
/// time; the better half by held-out loss trains on for twice as long, and so on until two are left,
/// whose last rung decides (pick_last_rung).
/// A rung none of whose entries has brought the held-out loss 2 % below where all began (the
/// plateau at the start of training) ranks nothing: it trains on, doubling its time, while an
/// extension budget of one more `budget_s` lasts. When no entry has left the start by then, the
/// reserve (BatchRaceOptions::reserve) joins the first rung, trained as long; when none of those has
/// either, the race recommends none (best_batch empty) and its notes say why. With a target, the first rung in
/// which an entry reaches it is the last (BatchRaceOptions::target_accuracy).
/// Each entry keeps its own state between rungs and all see the same data order. Restores the
/// workload's state afterwards. Out of memory or divergence ends an entry, not the race. Throws
/// ConfigError for mismatched options or none, a target accuracy outside (0, 1] or one on a held-out
/// set without class labels, or a negative target loss.
BatchRace race_batches(ModuleWorkload& workload, const Dataset& held_out, const BatchRaceOptions& options);

/// The race's candidates from a sweep: ok points with at least 40 % of the best samples/s and not
/// more than 5 % slower than a smaller batch (dominated), at most `count`, dropping from whichever
/// end is slower.
std::vector<int64_t> race_candidates(const std::vector<Trial>& sweep_points, int count = 6);

/// Each of `batches`' samples/s in the sweep (its ok point's), in the same order: the figures
/// BatchRaceOptions takes beside the candidates and the reserve.
std::vector<double> race_rates(const std::vector<Trial>& sweep_points, const std::vector<int64_t>& batches);

/// The race's reserve from a sweep: the `count` largest ok batches below the smallest candidate
/// (race_candidates), in batch order; empty without candidates.
std::vector<int64_t> race_reserve(const std::vector<Trial>& sweep_points, const std::vector<int64_t>& candidates,
                                  int count = 2);

// ---- the run plan -------------------------------------------------------------------------------

/// The optimizer's settings that a change of batch may call for changing.
struct OptimizerSettings {
  Optimizer optimizer = Optimizer::Sgd;
  double momentum = 0;      ///< sgd
  double beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;  ///< adam, adamw
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

/// The workload's optimizer settings (read from its optimizer); for a workload batchwise does not
/// train itself, the defaults of its built-in optimizer of that name.
OptimizerSettings optimizer_settings(Optimizer optimizer, ModuleWorkload* workload = nullptr);

/// One batch of the run plan.
struct RunPlanRow {
  std::string label;            ///< "base", "recommended", "within 5 %", "planned", ...
  int64_t batch = 0;            ///< global batch
  LrAdvice lr;
  int64_t steps_per_epoch = 0;  ///< optimizer steps per epoch (the last, short one counted)
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

/// `data`'s first `samples` samples (all when fewer), sharing its storage.
Dataset head(const Dataset& data, int64_t samples);

}  // namespace batchwise

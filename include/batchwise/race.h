#pragma once
/// The batch race: the batch that reaches the lowest held-out loss in the same training time, found
/// by successive halving over a sweep's fast batches (each at its own advised rate, lr.h) trained
/// from the user's weights, instead of a proxy for it.
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/data.h"
#include "batchwise/fields.h"
#include "batchwise/lr.h"
#include "batchwise/trial.h"

namespace batchwise {

class ModuleWorkload;

/// One candidate of the race: trained from the user's weights at its batch and advised rate.
struct RaceEntry {
  int64_t batch = 0;
  double samples_per_s = 0;  ///< the sweep's figure: the time axis (what the user's loop will see)
  LrAdvice lr;
  int rungs = 0;      ///< rungs it ran; it was dropped after the last unless it won
  int64_t steps = 0;  ///< optimizer steps trained, all rungs together
  int64_t samples = 0;
  double train_s = 0;  ///< samples / samples_per_s
  struct Point {
    double train_s = 0;  ///< on the sweep's time axis
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
  std::string message;  ///< why it has no result: diverged, out of memory, ...
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
  double elapsed_s = 0;  ///< wall time since the race began
  double left_s = 0;     ///< estimated wall time to its end
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
  /// Wall-clock seconds after which no further rung starts, nor, after the first rung, another entry
  /// of the rung under way (0: no limit): the budget is training time at the sweep's speed, and a
  /// machine that became slower must not stretch the race without end. The best of the last
  /// finished rung wins, and the notes say so. In the first rung, without which nothing is ranked,
  /// the entries after the first two that trained do not start past it: they leave the race
  /// (BatchRace::left_out), and the rung ranks those that trained. Training added over a plateau
  /// (see race_batches) raises the limit in proportion.
  TORCH_ARG(double, max_wall_s) = 0;
  /// Wall-clock seconds the race was planned to take (0: none), evaluations and range tests
  /// included (race_overhead_s): before each rung after the first, its training shrinks so that the
  /// rungs left fit the wall time left at the pace the race has measured (wall seconds per second of
  /// training, range tests apart), and the notes say so. Training added over a plateau raises it in
  /// proportion, as max_wall_s.
  TORCH_ARG(double, wall_budget_s) = 0;
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
  /// extension. On a plateau the number of steps can matter more than the samples, and a smaller
  /// batch takes more steps in the same time (docs/advice.md, the reserve).
  TORCH_ARG(std::vector<int64_t>, reserve);
  TORCH_ARG(std::vector<double>, reserve_samples_per_s);
  TORCH_ARG(std::function<void(const RaceProgress&)>, on_progress);
  /// Seconds on a monotonic clock, read for the race's wall time (its limit, its fitted rungs) and
  /// the pace of its training; unset: std::chrono::steady_clock. Tests inject one, so that no
  /// decision rests on this machine's speed.
  TORCH_ARG(std::function<double()>, clock);
};

/// The entry with the lowest held-out loss at one rung's horizon. The lead changes between rungs when
/// the best batch for a run of that length does (the critical batch grows as the loss falls:
/// McCandlish et al. 2018), and also when leads differ by less than the race resolves; a rung's lead
/// carries no resolution of its own, so a change is a hint about shorter runs, not a measurement.
struct RungLead {
  int rung = 0;          ///< 1-based
  double horizon_s = 0;  ///< training time since the start, on the sweep's time axis
  double epochs = 0;     ///< the lead's samples by then, in epochs of the workload's data
  int64_t batch = 0;
  double loss = 0;                 ///< its held-out loss at the horizon (the line through its last evaluations)
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
  double loss_before = 0;  ///< held-out loss at the user's weights
  std::optional<double> accuracy_before;
  std::vector<double> horizons_s;  ///< each rung's horizon: training time since the start
  /// Each rung's horizon as planned: the running sum of the rungs' slices, each twice the last. A rung
  /// fitted to the wall time left (a race behind it: `notes` say so) ends before its plan, one
  /// trained on over the plateau at the start after it. Under half the plan at the last rung, the
  /// answer's confidence is low (with_confidence).
  std::vector<double> planned_horizons_s;
  std::vector<RungLead> rung_leads;  ///< each rung's lead, in rung order; none for a rung ranked on the plateau
  std::vector<RaceEntry> entries;    ///< in batch order
  std::vector<int64_t> left_out;     ///< candidates without an entry (see `notes`)
  std::vector<std::string> notes;
  /// The recommendation: of the last rung's entries that the race cannot tell from the lead (see
  /// pick_last_rung), the largest batch.
  std::optional<int64_t> best_batch;
  /// The last rung's lowest held-out loss at the horizon; best_batch unless a larger batch tied it.
  std::optional<int64_t> lead_batch;
  /// Why best_batch is not lead_batch (empty when it is).
  std::string pick_reason;
  /// No entry's held-out loss left the plateau at the start (2 % below loss_before), however long
  /// the rungs trained: the race ranks nothing, and best_batch is empty.
  bool stuck = false;
  /// Every candidate that trained ended with a held-out loss well above the initial weights' (past
  /// kWorseThanTheStart, no higher accuracy): training at their rates made the model worse, and the race
  /// recommends none (its notes say so).
  bool ended_worse = false;
  /// The race passed its wall limit (BatchRaceOptions::max_wall_s) where it had more to train: between
  /// rungs or within one after the first (the best of the last finished rung won), within the first
  /// (the entries not yet trained left out), or where a rung on the plateau at the start would have
  /// trained on or the reserve would have joined. `notes` say so.
  bool stopped_at_wall_limit = false;
  /// Batches whose predicted time to their last rung's best loss is within 5 % of that rung's
  /// horizon, and those between them: how flat the optimum is.
  std::vector<int64_t> within_5_percent;
  std::string held_out;  ///< what the evaluations ran on
  /// The evaluations ran on a sample of the training data (no test split): the race measured how
  /// fast each batch fits the data, not held-out quality.
  bool on_training_data = false;
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
  v("planned_horizons_s", r.planned_horizons_s);
  v("rung_leads", r.rung_leads);
  v("held_out", r.held_out);
  v("on_training_data", r.on_training_data);
  v("target", r.target);
  v("best_batch", r.best_batch);
  v("lead_batch", r.lead_batch);
  v("pick_reason", r.pick_reason);
  v("stuck", r.stuck);
  v("ended_worse", r.ended_worse, When{r.ended_worse});
  v("stopped_at_wall_limit", r.stopped_at_wall_limit);
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
/// Each entry keeps its own state between rungs and all see the same data order (the same shuffles; a
/// batch across an epoch's end moves the samples it holds later in the next). Restores the
/// workload's state afterwards. Out of memory or divergence ends an entry, not the race. Throws
/// ConfigError for mismatched options or none, a target accuracy outside (0, 1] or one on a held-out
/// set without class labels, or a negative target loss.
BatchRace race_batches(ModuleWorkload& workload, const Dataset& held_out, const BatchRaceOptions& options);

/// The race's seconds beyond its training: a range test per candidate (`lr.steps` steps at its batch)
/// and the held-out evaluations (before it starts, then `evaluations` per entry per rung) of
/// `held_out_size` samples, forward only at batch 1024 (a third of a training step's time).
/// `step_s(batch)`: a training step's seconds (time_plan.h's StepCost::at).
double race_overhead_s(const BatchRaceOptions& options, int64_t held_out_size,
                       const std::function<double(int64_t)>& step_s);

/// The race's candidates from a sweep: ok points with at least 40 % of the best samples/s and not
/// more than 5 % slower than a smaller batch (dominated), at most `count`, dropping from whichever
/// end is slower.
std::vector<int64_t> race_candidates(const std::vector<Trial>& sweep_points, int count = 6);

/// The sweep's points a race may train: those whose batch is at most the training set's `dataset`
/// samples (a larger batch repeats samples within one step, which no training run does; the fit and
/// the sweep still measure it). `larger`: the batches left out, in sweep order.
std::vector<Trial> within_dataset(const std::vector<Trial>& sweep_points, int64_t dataset,
                                  std::vector<int64_t>& larger);

/// What a race's notes say of the batches within_dataset left out; empty where none was.
std::string larger_than_dataset_note(const std::vector<int64_t>& larger, int64_t dataset);

/// What a sweep's report warns of the batches within_dataset leaves out of `sweep_points` (a sweep
/// measures them as asked, and answers within the training set); empty where none is, or where the
/// `dataset` size is not known (0): larger_than_training_set_warning (validate.h) of those batches.
std::string larger_than_dataset_warning(const std::vector<Trial>& sweep_points, int64_t dataset);

/// The batches of `options` that race_batches() trains in its first rung, ascending: each whose share of
/// the first rung holds at least min_steps steps at its samples/s (the others it leaves out, with a note).
std::vector<int64_t> first_rung_batches(const BatchRaceOptions& options);

/// Each of `batches`' samples/s in the sweep (its ok point's), in the same order: the figures
/// BatchRaceOptions takes beside the candidates and the reserve.
std::vector<double> race_rates(const std::vector<Trial>& sweep_points, const std::vector<int64_t>& batches);

/// The race's reserve from a sweep: the `count` largest ok batches below the smallest candidate
/// (race_candidates), in batch order; empty without candidates.
std::vector<int64_t> race_reserve(const std::vector<Trial>& sweep_points, const std::vector<int64_t>& candidates,
                                  int count = 2);

}  // namespace batchwise

#pragma once
/// The learning rate over a run of known length: the advised warm-up, then a constant, cosine or
/// step-decay shape to the run's last step (what the user's own training does, so that what batchwise
/// trains to compare batches is the run they will do).
#include <cstdint>
#include <string>
#include <vector>

#include "batchwise/choices.h"
#include "batchwise/lr.h"

namespace batchwise {

/// The warm-up a run of `total_steps` trains with: the advice's (LrAdvice::warmup_steps), at most a
/// quarter of the run, so that a short run still spends most of its steps after it.
int64_t run_warmup_steps(const LrAdvice& advice, int64_t total_steps);

/// The optimizer steps of a run of `epochs` over `dataset` samples at `batch`: ceil(epochs x dataset /
/// batch), at least 1, and within rounding of a whole number that number (a run planned as 48 steps
/// is 48, not 49 by a last bit). Tune's advice, the run race's compressed runs and validate's full
/// runs all count a run's steps with it.
int64_t run_steps(double epochs, int64_t dataset, int64_t batch);
/// The samples of that run where its batch changes (a batch-size schedule): ceil(epochs x dataset),
/// at least 1, rounded as run_steps rounds.
int64_t run_samples(double epochs, int64_t dataset);

/// Throws ConfigError where a run of `epochs` over `dataset` samples trains less than one sample
/// (--epochs 1e-300 is positive, but no run): tune and validate refuse it before they train.
void check_run_length(double epochs, int64_t dataset);

/// Throws ConfigError where a batch of `batches` is more samples than a run of `epochs` (0: none)
/// over `dataset` samples trains: its one step would train more than the run, and full runs would
/// not compare (validate refuses it before it trains; tune's validation leaves such a batch out).
void check_batches_within_run(const std::vector<int64_t>& batches, double epochs, int64_t dataset);

/// `advice` at `batch` for the user's run of `epochs` over `dataset` samples under `shape`: its
/// warm-up is run_warmup_steps's (an unmeasured rule's, stated in epochs, counted in this run's steps
/// first), and its sentence says so ("; in your 1-epoch run (938 steps): warm-up over its first 234,
/// then the cosine schedule").
LrAdvice for_the_run(LrAdvice advice, double epochs, int64_t dataset, int64_t batch, LrSchedule shape);

/// The rate at optimizer step `step` (from 0) of a run of `total_steps`: the advice's linear warm-up
/// from its base rate over run_warmup_steps, then `shape` over the remaining steps from the advised
/// rate: constant; cosine, 0.5 (1 + cos(pi p)) at the share p of those steps done (Loshchilov and
/// Hutter 2017), approaching 0 at the end; step, x0.1 from half of them and x0.01 from three quarters
/// (the shape of He et al. 2016's 30/60/90-epoch ImageNet runs).
double scheduled_lr(const LrAdvice& advice, LrSchedule shape, int64_t step, int64_t total_steps);

/// One phase of a batch-size schedule: `batch` from `from_epoch` of the run on (the first phase
/// from 0), at its own advised rate.
struct BatchPhase {
  int64_t batch = 0;
  double from_epoch = 0;
};

/// A batch-size schedule as the flag spells it, "64:0,256:2" (batch 64 from the start, 256 from
/// epoch 2), each batch at least 1, the first phase from epoch 0, each later one from a later
/// epoch; a ConfigError names `what` and the fix. One phase is a fixed batch and is refused too.
std::vector<BatchPhase> parse_batch_schedule(const std::string& text, const std::string& what);

/// Throws ConfigError where a phase of `phases` starts at or past the end of an `epochs`-epoch run
/// (validate() checks it; the CLI before it says what it will train).
void check_schedule_within(const std::vector<BatchPhase>& phases, double epochs);

/// Empty, or which phase of `phases` gets no step in a run of `epochs` over `dataset` samples
/// (validate's steps: each at the batch of the phase its first sample falls in, until the run's
/// samples are trained): its start lies past where the run's last step begins. "the phase of batch
/// 64 from epoch 0.999 gets no step: the run's last step begins at epoch 0.992 (an epoch of 1000
/// samples)". A phase of batch 0 is a ConfigError.
std::string phase_without_a_step(const std::vector<BatchPhase>& phases, double epochs, int64_t dataset);

/// ConfigError, naming --batch-schedule and the fix, where phase_without_a_step names a phase.
void check_schedule_steps(const std::vector<BatchPhase>& phases, double epochs, int64_t dataset);

/// The spelling parse_batch_schedule reads: "64:0,256:2".
std::string schedule_text(const std::vector<BatchPhase>& phases);

/// The phase a run is in after `epochs` of it.
const BatchPhase& phase_at(const std::vector<BatchPhase>& phases, double epochs);

/// The rate of the step of `step_samples` that starts after `samples` of a run of `total_samples`
/// whose batch changes (a schedule): its warm-up over the first `warmup_samples`, linear from
/// `warmup_from_lr` to the current phase's advised `lr` (reached at the step that ends the
/// warm-up), then `shape` from that rate over the rest, as scheduled_lr's but in samples rather than
/// steps (a step is no longer a fixed share of the run).
double phased_lr(double lr, double warmup_from_lr, LrSchedule shape, double samples, double step_samples,
                 double warmup_samples, double total_samples);

}  // namespace batchwise

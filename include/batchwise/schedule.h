#pragma once
/// The learning rate over a run of known length: the advised warm-up, then a constant, cosine or
/// step-decay shape to the run's last step (what the user's own training does, so that what batchwise
/// trains to compare batches is the run they will do).
#include <cstdint>

#include "batchwise/lr.h"
#include "batchwise/choices.h"

namespace batchwise {

/// The warm-up a run of `total_steps` trains with: the advice's (LrAdvice::warmup_steps), at most a
/// quarter of the run, so that a short run still spends most of its steps after it.
int64_t run_warmup_steps(const LrAdvice& advice, int64_t total_steps);

/// The rate at optimizer step `step` (from 0) of a run of `total_steps`: the advice's linear warm-up
/// from its base rate over run_warmup_steps, then `shape` over the remaining steps from the advised
/// rate: constant; cosine, 0.5 (1 + cos(pi p)) at the share p of those steps done (Loshchilov and
/// Hutter 2017), approaching 0 at the end; step, x0.1 from half of them and x0.01 from three quarters
/// (the shape of He et al. 2016's 30/60/90-epoch ImageNet runs).
double scheduled_lr(const LrAdvice& advice, LrSchedule shape, int64_t step, int64_t total_steps);

}  // namespace batchwise

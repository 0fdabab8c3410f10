#pragma once
/// Gradient-accumulation plans that keep the global batch exact: micro-batch x accumulation steps x
/// world size, the epoch's last batch (drop, pad or keep), and what BatchNorm makes of micro-batches.
/// Arithmetic on the request, no torch.
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

}  // namespace batchwise

// Gradient-accumulation plans (batchwise/accumulation.h): the split of a global batch into
// micro-batches, accumulation steps and ranks, and the epoch's last batch. Arithmetic, no torch.
#include "batchwise/accumulation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "batchwise/choices.h"
#include "batchwise/units.h"
#include "check.h"

namespace batchwise {

const char* to_string(LastBatch policy) {
  switch (policy) {
    case LastBatch::Drop:
      return "drop";
    case LastBatch::Pad:
      return "pad";
    case LastBatch::Keep:
      return "keep";
  }
  return "?";
}

LastBatch parse_last_batch(const std::string& text, const std::string& what) {
  if (text == "drop") return LastBatch::Drop;
  if (text == "pad") return LastBatch::Pad;
  if (text == "keep") return LastBatch::Keep;
  BATCHWISE_CHECK(false, ConfigError, "{} '{}': choose drop (drop_last), pad or keep", what, text);
  return LastBatch::Drop;
}

namespace {

struct Split {
  int64_t micro = 0, steps = 0;
};

// The split of `global` with the fewest accumulation steps, if there is one: the largest micro-batch that divides
// the per-device batch, is at most the largest and a multiple of multiple_of. Tried from the largest down, in
// multiples (the steps counted up from the fewest had taken up to the whole per-device batch's count of tries).
std::optional<Split> split(int64_t global, const PlanRequest& r) {
  if (global < 1 || global % r.world_size() != 0) return std::nullopt;
  const int64_t per_device = global / r.world_size(), m = r.multiple_of();
  for (int64_t micro = std::min(r.max_micro_batch(), per_device) / m * m; micro >= m; micro -= m)
    if (per_device % micro == 0) return Split{micro, per_device / micro};
  return std::nullopt;
}

// The fewest accumulation steps any per-device batch of `per_device` could take: at the largest micro-batch.
int64_t fewest_steps(int64_t per_device, const PlanRequest& r) {
  const int64_t largest = r.max_micro_batch() / r.multiple_of() * r.multiple_of();
  return (per_device + largest - 1) / largest;
}

// Whether `global` splits into the fewest steps its per-device batch could take (checked at once, not searched).
bool splits_in_fewest(int64_t global, const PlanRequest& r) {
  if (global < 1 || global % r.world_size() != 0) return false;
  const int64_t per_device = global / r.world_size(), steps = fewest_steps(per_device, r);
  return per_device % steps == 0 && (per_device / steps) % r.multiple_of() == 0;
}

// Where `global` splits exactly but only into micro-batches far below the largest (a prime per-device batch: 1021 = 1
// x 1021 steps where 512 fit), the warning with the nearest global batch that takes the fewest steps: each step then
// runs many times the micro-batches it needs. Empty where the split takes under twice the fewest steps.
std::string few_factors_warning(int64_t global, const Split& s, const PlanRequest& r) {
  const int64_t per_device = global / r.world_size(), fewest = fewest_steps(per_device, r);
  if (s.steps < 2 * fewest || s.steps < 4) return "";
  std::optional<int64_t> nearest;  // the smaller on a tie, as the nearest that splits at all
  const auto most = static_cast<int64_t>(find_option_bound("--global-batch")->high);  // plan takes none above
  for (int64_t d = 1; d <= global / 2 && !nearest; ++d)
    for (const int64_t g : {global - d, global + d})
      if (!nearest && g <= most && splits_in_fewest(g, r)) nearest = g;
  std::string better;
  if (nearest) {
    const int64_t pd = *nearest / r.world_size(), steps = fewest_steps(pd, r);
    better = fmt::format("; {} ({:+d}) is the nearest global batch that takes {}: {} x {} accumulation step{}{}",
                         *nearest, *nearest - global, steps, pd / steps, steps, steps == 1 ? "" : "s",
                         r.world_size() > 1 ? fmt::format(" x {} devices", r.world_size()) : "");
  }
  return fmt::format(
      "{} per device has no factor above {} that is at most {}{}, so each optimizer step runs {} micro-batches of {} "
      "where micro-batches as large as fit would take {}: the same samples in many more, smaller passes{}",
      per_device, s.micro, r.max_micro_batch(),
      r.multiple_of() > 1 ? fmt::format(" and a multiple of {}", r.multiple_of()) : "", s.steps, s.micro, fewest,
      better);
}

void plan_epoch(AccumulationPlan& p, const PlanRequest& r) {
  const int64_t n = p.dataset_size, g = p.global_batch, w = p.world_size;
  if (n <= 0) return;
  const int64_t full = n / g, rest = n % g;
  switch (r.last_batch()) {
    case LastBatch::Drop:
      p.steps_per_epoch = full;
      p.dropped_samples = rest;
      p.last_step_samples = full > 0 ? g : 0;
      p.last_batch_note =
          rest == 0 ? fmt::format("drop_last: {} = {} x {}, every epoch ends on a full step", n, full, g)
                    : fmt::format(
                          "drop_last: {} = {} x {} + {}; the last {} samples are dropped each epoch (different "
                          "ones each epoch when shuffled)",
                          n, full, g, rest, rest);
      if (full == 0)
        p.warnings.push_back(
            fmt::format("the dataset ({} samples) is smaller than one global batch ({}): with "
                        "drop_last no step ever runs; use --last-batch pad or a smaller batch",
                        n, g));
      break;
    case LastBatch::Pad:
      p.steps_per_epoch = full + (rest > 0);
      p.padded_samples = rest > 0 ? g - rest : 0;
      p.last_step_samples = g;
      p.last_batch_note =
          rest == 0 ? fmt::format("pad: {} = {} x {}, nothing to pad", n, full, g)
                    : fmt::format("pad: {} = {} x {} + {}; the last step is topped up with {} repeated samples", n,
                                  full, g, rest, g - rest);
      break;
    case LastBatch::Keep: {
      p.steps_per_epoch = full + (rest > 0);
      p.last_step_samples = rest > 0 ? rest : (full > 0 ? g : 0);
      if (rest == 0) {
        p.last_batch_note = fmt::format("keep: {} = {} x {}, every epoch ends on a full step", n, full, g);
        break;
      }
      const int64_t fewest = rest / w, most = fewest + (rest % w != 0);
      p.last_batch_note =
          fmt::format("keep: {} = {} x {} + {}; the last step trains on {} samples ({} per device)", n, full, g, rest,
                      rest, fewest == most ? std::to_string(fewest) : fmt::format("{} to {}", fewest, most));
      if (fewest == 0)
        p.warnings.push_back(
            fmt::format("the last step's {} samples leave {} of {} devices with an empty batch: a "
                        "rank with no batch stalls the gradient all-reduce; use drop or pad",
                        rest, w - rest, w));
      if (r.batchnorm()) {
        // A device's last micro-batch is what is left after its full micro-batches.
        bool single = false;
        for (int64_t samples : {fewest, most})
          if (p.micro_batch > 1 && samples % p.micro_batch == 1) single = true;
        if (single)
          p.warnings.push_back(
              "BatchNorm sees a single-sample micro-batch in the last step: in training mode its batch variance is "
              "undefined (PyTorch stops with \"Expected more than 1 value per channel\"); use drop or pad");
      }
      break;
    }
  }
}

}  // namespace

AccumulationPlan plan_accumulation(const PlanRequest& r) {
  // Bounds that keep the search (linear in the per-device batch) to milliseconds.
  BATCHWISE_CHECK(r.global_batch() >= 1 && r.global_batch() <= (int64_t{1} << 24), ConfigError,
                  "--global-batch {}: must be between 1 and {}", r.global_batch(), int64_t{1} << 24);
  BATCHWISE_CHECK(r.world_size() >= 1 && r.world_size() <= 65536, ConfigError,
                  "--world-size {}: must be between 1 and 65536", r.world_size());
  BATCHWISE_CHECK(r.multiple_of() >= 1 && r.multiple_of() <= 65536, ConfigError,
                  "--multiple-of {}: must be between 1 and 65536", r.multiple_of());
  BATCHWISE_CHECK(r.max_micro_batch() >= r.multiple_of(), ConfigError,
                  "the largest micro-batch ({}) is below --multiple-of {}: no micro-batch can be formed",
                  r.max_micro_batch(), r.multiple_of());
  BATCHWISE_CHECK(r.dataset_size() >= 0, ConfigError, "dataset size {}: must not be negative", r.dataset_size());
  BATCHWISE_CHECK(r.world_size() <= r.global_batch(), ConfigError,
                  "--world-size {}: more devices than the --global-batch's {} samples, and each device takes at least "
                  "one a step; give a --global-batch of at least {}, or at most {} devices",
                  r.world_size(), r.global_batch(), r.world_size(), r.global_batch());
  AccumulationPlan p;
  p.global_batch_asked = r.global_batch();
  p.world_size = r.world_size();
  p.dataset_size = r.dataset_size();
  p.last_batch = r.last_batch();
  const std::string devices = r.world_size() > 1 ? fmt::format(" x {} devices", r.world_size()) : "";

  std::optional<Split> s = split(r.global_batch(), r);
  if (s) {
    p.exact = true;
    p.global_batch = r.global_batch();
    p.reason = s->steps == 1 ? fmt::format("{} = {}{}: no accumulation needed, {} samples per device fit (at most {})",
                                           p.global_batch, s->micro, devices, s->micro, r.max_micro_batch())
                             : fmt::format(
                                   "{} = {} x {} accumulation steps{}: the fewest steps whose micro-batch fits (at "
                                   "most {}{})",
                                   p.global_batch, s->micro, s->steps, devices, r.max_micro_batch(),
                                   r.multiple_of() > 1 ? fmt::format(", a multiple of {}", r.multiple_of()) : "");
  } else {
    // The nearest global batch that splits; a multiple of world_size x multiple_of always does.
    std::string why =
        r.global_batch() % r.world_size() != 0
            ? fmt::format("{} samples do not divide evenly over {} devices", r.global_batch(), r.world_size())
            : fmt::format("{} per device has no factor that is at most {}{}", r.global_batch() / r.world_size(),
                          r.max_micro_batch(),
                          r.multiple_of() > 1 ? fmt::format(" and a multiple of {}", r.multiple_of()) : "");
    // A global batch splits exactly where it is a multiple of world_size x multiple_of (its micro-batch is a multiple
    // of multiple_of, and multiple_of itself always fits): the nearest such, the smaller on a tie. Every batch on
    // either side had been tried in turn, each by a search as long as it (minutes at 16M over 7 devices in 65,535s).
    const int64_t step = r.world_size() * r.multiple_of(), below = r.global_batch() / step * step;
    p.global_batch = below >= 1 && r.global_batch() - below <= below + step - r.global_batch() ? below : below + step;
    // On a tie, the one with fewer steps (4099 over 2 devices: 4100 = 410 x 5 x 2, not 4098 = 3 x 683 x 2)
    if (below >= 1 && r.global_batch() - below == below + step - r.global_batch()) {
      const std::optional<Split> low = split(below, r), high = split(below + step, r);
      if (low && high && high->steps < low->steps) p.global_batch = below + step;
    }
    const double most = find_option_bound("--global-batch")->high;  // 4,294,967,296 had been planned, 0 steps an epoch
    BATCHWISE_CHECK(static_cast<double>(p.global_batch) <= most, ConfigError,
                    "--global-batch {}: {}; the nearest that can be kept, {} (a multiple of {} devices x --multiple-of "
                    "{}), is past the most plan takes, {:.0f}; lower --multiple-of or --world-size",
                    r.global_batch(), why, p.global_batch, r.world_size(), r.multiple_of(), most);
    s = split(p.global_batch, r);
    BATCHWISE_ASSERT(s.has_value());
    p.reason = fmt::format(
        "{} cannot be kept exactly: {}; the nearest that can is {} = {} x {} accumulation "
        "step{}{} ({:+d} samples per step)",
        r.global_batch(), why, p.global_batch, s->micro, s->steps, s->steps == 1 ? "" : "s", devices,
        p.global_batch - r.global_batch());
  }
  if (std::string w = few_factors_warning(p.global_batch, *s, r); !w.empty()) p.warnings.push_back(std::move(w));
  p.micro_batch = s->micro;
  p.accumulation_steps = s->steps;
  p.per_device_batch = s->micro * s->steps;
  if (r.batchnorm() && p.micro_batch == 1)
    p.warnings.push_back(
        "BatchNorm with 1 sample per micro-batch: its batch variance is undefined in training mode; "
        "a larger micro-batch or GroupNorm is needed");
  else if (r.batchnorm() && p.micro_batch < p.global_batch)
    p.warnings.push_back(fmt::format(
        "BatchNorm normalises each micro-batch of {} samples on its own device, not the global batch of {}: the "
        "accumulated gradient is not exactly a {}-sample step (SyncBatchNorm or GroupNorm make it one)",
        p.micro_batch, p.global_batch, p.global_batch));
  plan_epoch(p, r);
  return p;
}

}  // namespace batchwise

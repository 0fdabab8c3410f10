// What every phase of tune reads: the stage lines it says on TuneOptions::on_stage, and the facts of
// the subject (its own module workload, the training set's size, fp16). Shared by tune.cpp, which
// sequences the phases, and follow_ups.cpp, the phases after the answer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "batchwise/choices.h"
#include "batchwise/tune.h"
#include "batchwise/workload.h"

namespace batchwise::detail {

inline void stage(const TuneOptions& o, std::string what) {
  if (!o.on_stage()) return;
  TuneStage t;
  t.what = std::move(what);
  o.on_stage()(t);
}

// tune's phases, in the order they run. A phase's stage goes out with -(its kind); the wrapper tune
// puts around on_stage numbers it among the phases planned when tune began (numbered_stages).
enum class Phase { Fit = 1, Sweep, Noise, Race, Validate, Precision };

inline void stage(const TuneOptions& o, Phase phase, std::string what, double expected_s = 0) {
  if (!o.on_stage()) return;
  TuneStage t;
  t.what = std::move(what);
  t.phase = -static_cast<int>(phase);
  t.expected_s = expected_s;
  o.on_stage()(t);
}

inline ModuleWorkload* module_of(const TuneSubject& s) { return dynamic_cast<ModuleWorkload*>(s.workload); }

// The training set's size where tune knows it (its own module workload), else no bound; data-parallel, each rank's
// share of it (a batch per device above it repeats samples in the ranks' global batch; the whole set had been compared)
inline int64_t training_samples(const TuneSubject& s) {
  return module_of(s) ? module_of(s)->data().size() / std::max(s.world_size, 1) : std::numeric_limits<int64_t>::max();
}

inline bool fp16(const TuneSubject& s) {
  return s.workload && known_precision(s.workload->info().precision) == Precision::Fp16;
}

}  // namespace batchwise::detail

#pragma once
/// The recommendation: the batch to train with and one sentence why, from whatever ran. All the
/// ways tune decides live here, from the weakest evidence to the strongest: the fit alone, the
/// sweep's throughput knee, goodput at the noise scale, the batch race, and a validation that
/// trained candidates to a target.
#include <cstdint>
#include <optional>
#include <string>

#include "batchwise/convergence.h"
#include "batchwise/fields.h"
#include "batchwise/fit.h"
#include "batchwise/race.h"
#include "batchwise/run_race.h"
#include "batchwise/sweep.h"
#include "batchwise/validate.h"

namespace batchwise {

/// The batch to train with, and one sentence citing the measured figures.
struct Recommendation {
  int64_t batch = 0;
  std::string reason;
};

/// The JSON fields of a Recommendation, in JSON order (fields.h).
template <class V, class T, IfRecord<T, Recommendation> = 0>
void fields(V& v, T& r) {
  v("batch", r.batch);
  v("reason", r.reason);
}

/// From a fit and a sweep: the sweep's knee when a sweep ran (explained with its figures), else the
/// fitted batch; none when neither found a batch.
std::optional<Recommendation> recommend(const std::optional<FitResult>& fit, const std::optional<SweepResult>& sweep);

/// Once the noise scale is known: the goodput-optimal batch (the one that makes the most training
/// progress per second at the noise scale measured), explained with its throughput, statistical
/// efficiency, the knee and the fit. Without a noise scale: recommend(fit, sweep), the knee.
std::optional<Recommendation> recommend(const std::optional<FitResult>& fit, const std::optional<SweepResult>& sweep,
                                        const std::optional<NoiseResult>& noise, const std::optional<Goodput>& goodput);

/// From a batch race: its pick (BatchRace::best_batch), explained with the race's figures, the flat
/// range, the throughput knee and the fit. None when the race has no pick.
std::optional<Recommendation> recommend(const std::optional<FitResult>& fit, const std::optional<SweepResult>& sweep,
                                        const BatchRace& race);

/// From the run race (tune --epochs): its pick, the fastest full run without a worse model, with
/// the race's reason and the batches it judged as good. None when the race has no pick.
std::optional<Recommendation> recommend(const RunRace& race);

/// After a validation: confirmed when the recommended batch reached the target in the least
/// training time, corrected to the batch that did otherwise, and unchanged (saying so) when no
/// candidate reached it. The reason cites the measured times.
Recommendation confirm(const Recommendation& recommendation, const ValidationResult& validation);

}  // namespace batchwise

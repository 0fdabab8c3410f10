#pragma once
/// The recommendation: the batch to train with and one sentence why, from whatever ran. All the
/// ways tune decides live here, from the weakest evidence to the strongest: the fit alone, the
/// sweep's throughput knee, goodput at the noise scale, the batch race, and a validation that
/// trained candidates to a target.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/convergence.h"
#include "batchwise/fields.h"
#include "batchwise/fit.h"
#include "batchwise/race.h"
#include "batchwise/run_race.h"
#include "batchwise/sweep.h"
#include "batchwise/validate.h"

namespace batchwise {

/// How sure an answer is. High: measured and resolved for the run asked about (full runs
/// validated it, or a race resolved it over an epoch or more); medium: measured, but within noise
/// of other batches, or for a shorter run than the user's, or predicted from compressed runs; low:
/// not measured as training progress (throughput alone, a race that could not rank), or resting on
/// noisy figures.
enum class Confidence { High, Medium, Low };
/// "high", "medium", "low" (the JSON spelling).
const char* to_string(Confidence confidence);
constexpr std::array<Confidence, 3> enum_values(Confidence) {
  return {Confidence::High, Confidence::Medium, Confidence::Low};
}

/// The batch to train with, and one sentence citing the measured figures.
struct Recommendation {
  int64_t batch = 0;
  std::string reason;
  /// Set by tune (with_confidence): how sure the answer is, and why, with what would make it surer.
  std::optional<Confidence> confidence;
  std::string confidence_reason;
};

/// The JSON fields of a Recommendation, in JSON order (fields.h).
template <class V, class T, IfRecord<T, Recommendation> = 0>
void fields(V& v, T& r) {
  v("batch", r.batch);
  v("reason", r.reason);
  v("confidence", r.confidence, When{r.confidence.has_value()});
  v("confidence_reason", r.confidence_reason, When{r.confidence.has_value()});
}

/// What a recommendation was decided from, for its confidence; each may be absent.
struct Evidence {
  const SweepResult* sweep = nullptr;
  const BatchRace* race = nullptr;
  const RunRace* run_race = nullptr;
  const ValidationResult* validation = nullptr;
  bool goodput = false;        ///< the noise scale's goodput decided (no race did)
  std::string no_race_reason;  ///< why no race ran, where none did ("--no-race", "a training command", ...)
};

/// `rec` with its confidence and the reason for it, from the strongest evidence present:
/// validation, then the run race or the batch race, then goodput or the knee. A sweep whose
/// repetitions still disagreed (SweepResult::unsettled) makes the knee's answer low; one that shared
/// the CPU (SweepResult::shared_cpu_warning) makes any answer low that was not validated.
Recommendation with_confidence(Recommendation rec, const Evidence& evidence);

/// The fit's answer as the reasons cite it: "the largest batch that fits is 512", or, where the fit
/// stopped at the --max it searched, "batches up to 4096 fit (the --max searched)" (larger ones may).
std::string fit_answer_text(const FitResult& fit);

/// From a fit and a sweep: the sweep's knee when a sweep ran (explained with its figures), else the
/// fitted batch; none when neither found a batch.
std::optional<Recommendation> recommend(const std::optional<FitResult>& fit, const std::optional<SweepResult>& sweep);

/// Once the noise scale is known: the goodput-optimal batch (the one that makes the most training
/// progress per second at the noise scale measured), explained with its throughput, statistical
/// efficiency, the knee and the fit. Without a noise scale: recommend(fit, sweep), the knee.
std::optional<Recommendation> recommend(const std::optional<FitResult>& fit, const std::optional<SweepResult>& sweep,
                                        const std::optional<NoiseResult>& noise, const std::optional<Goodput>& goodput);

/// The knee an answer without a race takes within a training set of `training_samples` (0: not
/// known): the sweep's, or where that is larger than the training set (a step would repeat samples,
/// which no run does), the knee among the swept batches no larger than it; the sweep's where none is.
std::optional<int64_t> knee_within(const SweepResult& sweep, int64_t training_samples);

/// As above, for a training set of `training_samples`: where the sweep's knee is larger than it, only
/// the swept batches no larger than it are weighed (goodput too), the answer is knee_within's or
/// goodput's among them, and the reason says so and names the fastest left out. As above where the
/// knee is within it, or no batch swept is.
std::optional<Recommendation> recommend(const std::optional<FitResult>& fit, const std::optional<SweepResult>& sweep,
                                        const std::optional<NoiseResult>& noise, const std::optional<Goodput>& goodput,
                                        int64_t training_samples);

/// A sweep's own answer (the sweep subcommand, Python's sweep): recommend() with the training set's
/// size, weighing only the batches whose measured peak is within the target of the budget (a batch
/// past it is measured as asked, and is no answer, as fit and tune weigh only batches within it).
struct SweepAnswer {
  std::optional<Recommendation> recommendation;
  /// What was left out, or that no batch swept is within the target (then none is recommended).
  std::vector<std::string> warnings;
  /// Batches trained, and none peaked within the target: no batch fits it (the CLI's exit 6).
  bool none_within_target = false;
};
SweepAnswer recommend_sweep(const SweepResult& sweep, int64_t training_samples, int64_t budget_bytes, double target);

/// From a batch race: its pick (BatchRace::best_batch), explained with the race's figures, the flat
/// range, the throughput knee and the fit. None when the race has no pick. `run_epochs` > 0: the
/// race followed a run race for a run of that many epochs (tune --epochs) whose compressed runs never
/// left the plateau at the start; the reason says the pick answers for the race's horizon, not for
/// that run, and how to check it there.
std::optional<Recommendation> recommend(const std::optional<FitResult>& fit, const std::optional<SweepResult>& sweep,
                                        const BatchRace& race, double run_epochs = 0);

/// From a batch race stuck on the plateau at the start (BatchRace::stuck): no entry's held-out loss
/// left it, so nothing measured ranks the batches. The smallest batch of those the race trained
/// longest: on a plateau the steps move the weights off it, and the smallest batch takes the most
/// in as many samples. The reason says this is not a measured ranking and how to check it
/// (`validate`, a larger --advice-budget); `run_epochs` > 0 names the user's run. None when the race
/// is not stuck or trained no entry.
std::optional<Recommendation> recommend_on_the_plateau(const BatchRace& race, double run_epochs = 0);

/// From the run race (tune --epochs): its pick, the fastest full run without a worse model, with
/// the race's reason and the batches it judged as good. None when the race has no pick.
std::optional<Recommendation> recommend(const RunRace& race);

/// From `validate` alone: the batch that reached the target soonest (target mode), or the fastest
/// full run whose final quality is within the held-out set's noise of the best (full runs), with its
/// measured figures; none when no candidate did. It trained at `fixed_run(validation, batch)->lr`.
std::optional<Recommendation> recommend(const ValidationResult& validation);

/// After a validation: confirmed when the recommended batch reached the target in the least
/// training time, corrected to the batch that did otherwise, and unchanged (saying so) when no
/// candidate reached it. The reason cites the measured times.
Recommendation confirm(const Recommendation& recommendation, const ValidationResult& validation);

}  // namespace batchwise

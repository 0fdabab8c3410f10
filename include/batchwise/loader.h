#pragma once
/// The input-pipeline search (`batchwise loader`, and tune when a batch is input-bound): real trials
/// at one batch over workers x prefetch, and the setting that removes the stall.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/fields.h"
#include "batchwise/trial.h"

namespace batchwise {

class ModuleWorkload;

/// One input-pipeline setting, measured (batchwise loader).
struct LoaderTrial {
  int workers = 0, prefetch = 0;
  Outcome outcome = Outcome::Error;
  double samples_per_s = 0;
  double data_wait_share = 0;
  bool input_bound = false;
  std::string message;
};

/// The JSON fields of a LoaderTrial, in JSON order (fields.h).
template <class V, class T, IfRecord<T, LoaderTrial> = 0>
void fields(V& v, T& t) {
  v("workers", t.workers);
  v("prefetch", t.prefetch);
  v("outcome", t.outcome);
  v("samples_per_s", t.samples_per_s);
  v("data_wait_share", t.data_wait_share);
  v("input_bound", t.input_bound);
  v("message", t.message);
}

/// The input-pipeline search at one batch size.
struct LoaderSearch {
  int64_t batch = 0;
  LoaderTrial before;                ///< the setting the run was given
  std::vector<LoaderTrial> trials;   ///< every setting tried, in order
  std::optional<LoaderTrial> after;  ///< the fewest workers (then prefetch) not input-bound, within 5 % of the best
  /// The pipeline alone at the given setting (batches fetched, no training): what it can deliver,
  /// and the step's own consumption (batch / (step time - data wait)) at that setting.
  double pipeline_samples_per_s = 0;
  double step_consumes_samples_per_s = 0;
  std::string advice;  ///< one sentence: the setting and what it changes
};

/// The JSON fields of a LoaderSearch, in JSON order (fields.h).
template <class V, class T, IfRecord<T, LoaderSearch> = 0>
void fields(V& v, T& s) {
  v("batch", s.batch);
  v("before", s.before);
  v("after", s.after);
  v("advice", s.advice);
  v("pipeline_samples_per_s", s.pipeline_samples_per_s);
  v("step_consumes_samples_per_s", s.step_consumes_samples_per_s);
  v("trials", s.trials);
}

/// Tries input-pipeline settings (workers x prefetch) at `batch` with real trials, starting with the
/// workload's own, and says which removes the stall. The workload's pipeline is put back afterwards.
/// `trial`: each setting's trial (its batch, warm-up, steps, memory limit and timeout); utilisation is
/// not sampled. `workers` empty: 0, 1, 2, 4, 8; `prefetch` empty: 2, 4. `on_trial`, where given, hears
/// each setting as its trial ends (its index from 1, and how many there are).
LoaderSearch search_loader(ModuleWorkload& workload, const TrialOptions& trial, std::vector<int> workers = {},
                           std::vector<int> prefetch = {},
                           const std::function<void(const LoaderTrial&, int index, int planned)>& on_trial = {});
/// The loader search's decision on measured settings, apart from the measuring (search_loader calls it;
/// tests give it known figures): from `search.before` and `search.trials` (in the order tried), sets
/// `search.after` to `before` when that is not input-bound, else to the first Ok trial that is not
/// input-bound and within 5 % of the best Ok samples/s (`before`'s counted), none: nullopt; and
/// `search.advice` (where no setting trained, that it measured nothing).
void decide_loader(LoaderSearch& search);

}  // namespace batchwise

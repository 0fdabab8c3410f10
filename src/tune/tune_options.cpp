// What tune is given: its subject, the race's default budget, and the options it refuses whatever the data.
#include <algorithm>
#include <memory>

#include "batchwise/tune.h"
#include "batchwise/validate.h"
#include "check.h"
#include "tune/race_time.h"

namespace batchwise {

TuneSubject::TuneSubject(Workload& w) : workload(&w), own_runner(std::make_shared<WorkloadRunner>(w)) {
  runner = own_runner.get();
}

TuneSubject::TuneSubject(TrialRunner& r, Workload* w) : runner(&r), workload(w) {}

double default_race_budget_s(double spent_s, int64_t dataset_size, double best_samples_per_s) {
  const double epochs_s = best_samples_per_s > 0 ? 4.0 * static_cast<double>(dataset_size) / best_samples_per_s : 0;
  const double budget = detail::race_ceiling_s(spent_s);
  return epochs_s > 0 ? std::min(epochs_s, budget) : budget;
}

void check_tune_options(const TuneOptions& o) {
  check_targets(o.epochs(), o.target_accuracy(), o.target_loss());
  BATCHWISE_CHECK(o.race() || o.race_budget_s() <= 0, ConfigError,
                  "--no-race and --advice-budget {:g}: the advice budget is the race's time, and --no-race runs "
                  "none; drop one of them",
                  o.race_budget_s());
}

}  // namespace batchwise

// What tune refuses to be asked (a run's length beside a target, two targets, a race's budget with no
// race, a run shorter than a sample, named batches outside the fit's bounds)
// and says of an answer too large for the data or the run: a batch past the training set (no race
// trained it; each step repeats samples) or past the samples an --epochs run trains.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "batchwise/context.h"
#include "batchwise/error.h"
#include "batchwise/schedule.h"
#include "batchwise/sweep.h"
#include "batchwise/tune.h"
#include "batchwise/validate.h"
#include "check.h"
#include "cpu_quota.h"

namespace batchwise::detail {

/// Takes the context's own warning on its threads (threads_warning: more than the cores, or than a CPU quota) out of
/// `context`'s warnings, where the doctor's threads warning, which names the fix, says it: once, not twice.
inline void drop_own_threads_warning(Context& context) {
  const std::optional<std::string> own = threads_warning(context.threads, context.cores, context.cpu_quota);
  if (own)
    context.warnings.erase(std::remove(context.warnings.begin(), context.warnings.end(), *own), context.warnings.end());
}

/// Throws ConfigError where what tune is asked (`o`) cannot be answered as asked: what check_tune_options
/// refuses whatever the data; a run of its epochs
/// over `dataset` samples that trains less than a sample (check_run_length), or a batch the caller named
/// for the sweep outside the bounds the fit keeps every answer in: a multiple of its multiple_of, and at
/// most its max (the fit searched no further; an answer above it had read "batches up to 64 fit"
/// beside a recommended 128).
inline void check_the_ask(const TuneOptions& o, int64_t dataset) {
  check_tune_options(o);
  check_run_length(o.epochs(), dataset);
  // Every batch the fit may try is more samples than the run trains: no answer could take one step of it (tune had
  // answered 4000 for a 1-epoch run of 3000 samples, which validate refuses)
  if (o.epochs() > 0 && dataset > 0)
    BATCHWISE_CHECK(o.fit().min() <= run_samples(o.epochs(), dataset), ConfigError,
                    "--min {}: every batch from it is more samples than your {:g}-epoch run of {} samples trains ({}), "
                    "so no answer could take one step of it; give --min {} or less, or a longer --epochs",
                    o.fit().min(), o.epochs(), dataset, run_samples(o.epochs(), dataset),
                    run_samples(o.epochs(), dataset));
  const int64_t multiple_of = o.fit().multiple_of(), max = o.fit().max();
  for (const int64_t b : o.sweep().batch_sizes()) {
    BATCHWISE_CHECK(multiple_of <= 1 || b % multiple_of == 0, ConfigError,
                    "--batch-sizes {}: not a multiple of --multiple-of {}, which every batch tried and answered "
                    "keeps; give multiples of {}, or leave --multiple-of out",
                    b, multiple_of, multiple_of);
    BATCHWISE_CHECK(b <= max, ConfigError,
                    "--batch-sizes {}: above --max {}, where the fit stops searching, so no answer may pass it; "
                    "give --max {} or more, or batches up to {}",
                    b, max, b, max);
  }
}

/// Where an answer no race judged (`batch`, from the sweep's throughput alone) stands beside sweep trials whose
/// training diverged (their loss stopped being finite after the first step), the warning that says so: its own few
/// steps stayed finite, but a rate where other batches diverge is at the edge (lr 0.5 on mlp: batches 1 to 128 NaN,
/// 256 answered at lr 0.5 with nothing said). Empty where none diverged.
inline std::string diverged_beside_warning(const SweepResult& sweep, int64_t batch) {
  std::vector<int64_t> diverged;
  for (const Trial& p : sweep.points)
    if (p.outcome == Outcome::Error && p.message.find("training diverged") != std::string::npos)
      diverged.push_back(p.batch);
  if (diverged.empty()) return "";
  return fmt::format(
      "the training loss stopped being finite in the sweep at batch{} {} (training diverged at the rate it was given): "
      "batch {}'s few steps stayed finite, and no race judged it, but a rate at which other batches diverge is at the "
      "edge, and a whole run at it may diverge too; lower the learning rate (--lr), or check the answer with "
      "--validate",
      diverged.size() == 1 ? "" : "es", fmt::join(diverged, ", "), batch);
}

/// The warnings for answer `batch` over a training set of `dataset` samples (0: not known, as for a
/// training command), for a run of `epochs` (0: none given), where a race judged its candidates on
/// `held_out` samples (0: none did).
inline std::vector<std::string> answer_size_warnings(int64_t batch, int64_t dataset, double epochs,
                                                     int64_t held_out = 0) {
  std::vector<std::string> out;
  if (held_out > 0 && held_out < kFewHeldOutSamples)
    out.push_back(fmt::format(
        "the race judged its candidates on {} held-out sample{}: a held-out loss or accuracy over so few moves "
        "between batches by chance, by more than the race ranks on; give a held-out set of at least a few hundred",
        held_out, held_out == 1 ? "" : "s"));
  if (dataset > 0 && batch > dataset)
    out.push_back(
        fmt::format("batch {} is larger than the {} training samples: each step repeats samples, and no race "
                    "trained it (the answer rests on the sweep's throughput); a batch up to {} trains each "
                    "sample once an epoch",
                    batch, dataset, dataset));
  // A run shorter than one step of the answer: its one step trains more samples than the run has
  if (epochs > 0 && dataset > 0)
    if (const int64_t run = run_samples(epochs, dataset); batch > run)
      out.push_back(
          fmt::format("batch {} is more samples than your {:g}-epoch run trains ({}): one step of it trains "
                      "{:.3g} times the run; a run this short takes a batch of at most {}",
                      batch, epochs, run, static_cast<double>(batch) / static_cast<double>(run), run));
  return out;
}

/// The largest batch a validation of tune's trains, and what a larger one is: past the training set of `dataset`
/// samples each step would repeat samples, and past the `run` samples a full run of `epochs` trains (0: none) one
/// step would train more than the run (`past_run` says so).
struct ValidationBound {
  int64_t most = 0;
  std::string beyond;
  int64_t run = 0;
  std::string past_run;
};

inline ValidationBound validation_bound(int64_t dataset, double epochs) {
  ValidationBound b;
  b.run = epochs > 0 ? run_samples(epochs, dataset) : 0;
  b.past_run = fmt::format("more samples than the {:g}-epoch run trains ({}): one step would train more than the run",
                           epochs, b.run);
  b.most = b.run > 0 ? std::min(b.run, dataset) : dataset;
  b.beyond = b.most < dataset
                 ? b.past_run
                 : fmt::format("larger than the {} training samples, a step would repeat samples", dataset);
  return b;
}

}  // namespace batchwise::detail

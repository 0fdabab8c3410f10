// The input-pipeline search: the workload's own setting, the pipeline alone, then workers x
// prefetch, each a real trial; and the decision on the figures.
#include "batchwise/loader.h"

#include <algorithm>
#include <chrono>
#include <tuple>
#include <utility>
#include <vector>

#include "batchwise/workload.h"
#include "check.h"

namespace batchwise {
namespace {

// The most warm-up steps a setting's trial takes for its workers' first burst (a batch from each)
constexpr int64_t kMostLoaderWarmup = 1024;
// How long the pipeline alone is timed where the trials have no time-out
constexpr double kPipelineTimingS = 10;

}  // namespace

LoaderSearch search_loader(ModuleWorkload& workload, const TrialOptions& trial, std::vector<int> workers,
                           std::vector<int> prefetch,
                           const std::function<void(const LoaderTrial&, int index, int planned)>& on_trial) {
  const int64_t batch = trial.batch();
  if (workers.empty()) workers = {0, 1, 2, 4, 8};
  if (prefetch.empty()) prefetch = {2, 4};
  // Plain variables, not a structured binding: the lambda below captures two of them, which C++17
  // (and Clang before 16) does not allow for a binding.
  int own_workers = 0, own_prefetch = 0;
  bool augment = false;
  int64_t latency = 0;
  std::tie(own_workers, own_prefetch, augment, latency) = workload.pipeline();
  LoaderSearch search;
  search.batch = batch;
  // The settings to try after the given one: workers x prefetch, no prefetch without workers.
  std::vector<std::pair<int, int>> settings;
  for (int w : workers)
    for (int p : prefetch) {
      if (w == 0 && p != prefetch.front()) continue;                    // no workers: prefetch means nothing
      if (w == own_workers && (w == 0 || p == own_prefetch)) continue;  // the given setting: `before` measures it
      settings.emplace_back(w, p);
    }
  // The workload's own setting back however the search ends: a trial's data error, or an on_trial that throws (a
  // Python progress function that raises), had left it at the setting under trial.
  struct PutBack {
    ModuleWorkload& w;
    std::tuple<int, int, bool, int64_t> given;
    ~PutBack() {
      try {
        std::apply([this](auto... a) { w.set_pipeline(a...); }, given);
      } catch (...) {  // threads that cannot start: the workload keeps the setting under trial, not the process a throw
      }
    }
  } put_back{workload, {own_workers, own_prefetch, augment, latency}};
  const int planned = static_cast<int>(settings.size()) + 1;
  int index = 0;
  auto measure = [&](int w, int p) {
    workload.set_pipeline(w, p, augment, latency);
    // A trial starts its workers anew (saving the state stops them), and their first batches come at once, a burst
    // of w: 8 workers at 2 ms a sample had served a 2 + 5-step trial from their first burst alone, and read "0 %
    // waiting, the stall is gone" where they deliver under a third of what the step takes. So the warm-up takes
    // that burst, and the steps measured are whole bursts (a multiple of w), each with its one wait.
    const int burst = static_cast<int>(std::min<int64_t>(w, kMostLoaderWarmup));
    const int steps = burst > 1 ? (trial.steps() + burst - 1) / burst * burst : trial.steps();
    const Trial t =
        run_trial(workload, TrialOptions(trial).monitor(false).warmup(std::max(trial.warmup(), burst)).steps(steps));
    LoaderTrial l;
    l.workers = w;
    l.prefetch = p;
    l.outcome = t.outcome;
    // With its waits paid in full: workers deliver in bursts (eight batches at once, then a wait), and the median
    // step is one that found its batch ready
    l.samples_per_s = fed_samples_per_s(t);
    l.data_wait_share = t.data_wait_share;
    l.input_bound = t.input_bound;
    l.message = t.message;
    if (on_trial) on_trial(l, ++index, planned);
    return l;
  };
  search.before = measure(own_workers, own_prefetch);
  {
    // The pipeline alone: fetch batches without training (after a warm-up that fills its queue).
    workload.set_pipeline(own_workers, own_prefetch, augment, latency);
    const StateGuard saved(workload);  // the data order as it was, however the fetches end
    // Within the trials' time-out (or 10 s): 64 fetches of a slow input had run on for minutes past it, silently
    const double limit_s = trial.timeout_s() > 0 ? trial.timeout_s() : kPipelineTimingS;
    const auto begun = std::chrono::steady_clock::now();
    const auto since = [](auto from) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
    };
    for (int i = 0; i < own_workers * own_prefetch && since(begun) < limit_s / 2; ++i) (void)workload.next_batch(batch);
    const int most = std::max(64, 4 * own_workers * own_prefetch);
    const auto start = std::chrono::steady_clock::now();
    int fetches = 0;
    do {  // one fetch at least, and none past the limit
      (void)workload.next_batch(batch);
      ++fetches;
    } while (fetches < most && since(begun) < limit_s);
    const double s = since(start);
    search.pipeline_samples_per_s = s > 0 ? fetches * static_cast<double>(batch) / s : 0;
    if (search.before.outcome == Outcome::Ok && search.before.samples_per_s > 0) {
      const double step_s = static_cast<double>(batch) / search.before.samples_per_s;
      const double compute_s = step_s * (1 - search.before.data_wait_share);
      search.step_consumes_samples_per_s = compute_s > 0 ? static_cast<double>(batch) / compute_s : 0;
    }
  }
  for (const auto& [w, p] : settings) search.trials.push_back(measure(w, p));
  decide_loader(search);
  return search;
}

void decide_loader(LoaderSearch& search) {
  double best = search.before.outcome == Outcome::Ok ? search.before.samples_per_s : 0;  // the given one counts
  for (const auto& t : search.trials)
    if (t.outcome == Outcome::Ok) best = std::max(best, t.samples_per_s);
  search.after.reset();
  if (search.before.outcome == Outcome::Ok && !search.before.input_bound) {
    search.after = search.before;  // nothing to remove
  } else {
    for (const auto& t : search.trials)  // in order: fewest workers, then least prefetch
      if (t.outcome == Outcome::Ok && !t.input_bound && t.samples_per_s >= 0.95 * best) {
        search.after = t;
        break;
      }
  }
  const LoaderTrial& b = search.before;
  int ran = b.outcome == Outcome::Ok, oom = b.outcome == Outcome::Oom;
  for (const auto& t : search.trials) ran += t.outcome == Outcome::Ok, oom += t.outcome == Outcome::Oom;
  if (ran == 0) {  // nothing measured: no verdict on the pipeline
    const size_t n = search.trials.size() + 1;
    search.advice = fmt::format(
        "no setting trained at batch {}: {}; nothing was measured", search.batch,
        static_cast<size_t>(oom) == n
            ? fmt::format("every one of its {} trials ran out of memory (lower --batch, or raise --memory-budget)", n)
        : oom == 0 ? fmt::format("every one of its {} trials failed (each row's note says why)", n)
                   : fmt::format("{} of its {} trials ran out of memory, the others failed (each row's note says why)",
                                 oom, n));
  } else if (!search.after) {
    search.advice = fmt::format(
        "no setting tried removes the stall at batch {}: the input pipeline itself is too slow "
        "(a cheaper transform, faster storage, or a GPU-side transform would help)",
        search.batch);
  } else if (search.after->workers == b.workers && search.after->prefetch == b.prefetch) {
    search.advice = fmt::format(
        "the current setting ({} worker{}, prefetch {}) already keeps the step fed at batch {} "
        "({:.0f} % of it waiting for data)",
        b.workers, b.workers == 1 ? "" : "s", b.prefetch, search.batch, 100 * b.data_wait_share);
  } else {
    const LoaderTrial& a = *search.after;
    // No prefetch without workers; and a given setting that did not train is not quoted as a measurement (its 0
    // samples/s and a failed trial's wait share had read as figures)
    const std::string setting =
        a.workers == 0 ? "--workers 0" : fmt::format("--workers {} --prefetch {}", a.workers, a.prefetch);
    const std::string given =
        b.workers == 0 ? "0 workers"
                       : fmt::format("{} worker{} (prefetch {})", b.workers, b.workers == 1 ? "" : "s", b.prefetch);
    search.advice =
        b.outcome == Outcome::Ok
            ? fmt::format(
                  "{}: {:.0f} samples/s with {:.0f} % of the step waiting for data, against {:.0f} samples/s "
                  "and {:.0f} % with {}{}",
                  setting, a.samples_per_s, 100 * a.data_wait_share, b.samples_per_s, 100 * b.data_wait_share, given,
                  b.input_bound ? ": the stall is gone" : "")
            : fmt::format(
                  "{}: {:.0f} samples/s with {:.0f} % of the step waiting for data; the given setting, {}, "
                  "did not train ({})",
                  setting, a.samples_per_s, 100 * a.data_wait_share, given, to_string(b.outcome));
  }
}

}  // namespace batchwise

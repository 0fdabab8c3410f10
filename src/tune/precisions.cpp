#include "tune/precisions.h"

#include <ATen/Context.h>
#include <fmt/format.h>

#include <mutex>
#include <utility>
#include <vector>

#include "batchwise/fit.h"
#include "batchwise/sweep.h"
#include "batchwise/workload.h"

namespace batchwise::detail {

namespace {

// The process's default generators (the CPU's, each accelerator's), as torch::manual_seed reaches them, put back as
// they were: make_workload seeds them to build its model, and tune on the caller's workload had returned with the
// caller's draws reseeded.
class KeepGenerators {
 public:
  KeepGenerators() {
    keep(at::globalContext().defaultGenerator(c10::DeviceType::CPU));
    if (const auto type = at::getAccelerator())
      for (c10::DeviceIndex i = 0; i < at::globalContext().getAcceleratorHooksInterface(type).deviceCount(); ++i)
        keep(at::globalContext().defaultGenerator(c10::Device(*type, i)));
  }
  ~KeepGenerators() {
    for (auto& [generator, state] : kept_) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    }
  }
  KeepGenerators(const KeepGenerators&) = delete;
  KeepGenerators& operator=(const KeepGenerators&) = delete;

 private:
  void keep(at::Generator generator) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    kept_.emplace_back(generator, generator.get_state());
  }
  std::vector<std::pair<at::Generator, at::Tensor>> kept_;
};

}  // namespace

PrecisionPoint measure_precision(Precision precision, const WorkloadOptions& options, const TuneOptions& o,
                                 const PrecisionPoint& own, int64_t budget, std::vector<std::string>& warnings) {
  const KeepGenerators kept;
  WorkloadOptions other_options = options;
  auto other = make_workload(other_options.precision(precision));
  WorkloadRunner runner(*other);
  FitOptions f = o.fit();
  const FitResult other_fit = fit(runner, f.budget_bytes(budget));
  SweepOptions one = o.sweep();
  const SweepResult other_sweep = sweep(runner, one.batch_sizes({own.batch}).budget_bytes(budget));
  // Said of its one batch, from the sweep's figures (its warning speaks of a sweep over many batches).
  // A one-batch sweep's noise warning cannot arise: it neither stops early nor has a knee to move.
  const auto warn = [&](const std::string& what) {
    warnings.push_back(
        fmt::format("precision {} at batch {}: {}; its samples/s, and the verdict on them, rest on "
                    "that reading",
                    to_string(precision), own.batch, what));
  };
  const Trial* point = other_sweep.points.empty() ? nullptr : &other_sweep.points.front();
  if (!other_sweep.shared_cpu_warning.empty() && point && point->cpu_wait_share)
    warn(
        fmt::format("the sweep shared the CPU: its threads waited for a core {:.0f} % of the time they were ready "
                    "to run (Linux's run-queue delay), held by another process, by more of its own threads than "
                    "there are cores, or paused by a CPU quota",
                    100 * *point->cpu_wait_share));
  PrecisionPoint p;
  p.precision = precision;
  p.fit_batch = other_fit.batch;
  p.fit_limited_by_max = other_fit.limited_by_max;
  p.batch = own.batch;
  if (!other_sweep.points.empty() && other_sweep.points.front().outcome == Outcome::Ok) {
    p.samples_per_s = other_sweep.points.front().samples_per_s;
    p.peak_bytes = other_sweep.points.front().peak_bytes;
  }
  p.speed_ratio = own.samples_per_s > 0 ? p.samples_per_s / own.samples_per_s : 0;
  p.memory_ratio = own.peak_bytes > 0 ? static_cast<double>(p.peak_bytes) / static_cast<double>(own.peak_bytes) : 0;
  const bool bigger = p.fit_batch && own.fit_batch && *p.fit_batch > *own.fit_batch;
  if (p.samples_per_s <= 0)
    p.verdict = "did not run at this batch";
  else if (p.speed_ratio >= 1.05)
    p.verdict =
        fmt::format("pays: {:.2f}x the samples/s at {:.0f} % of the memory", p.speed_ratio, 100 * p.memory_ratio);
  else if (bigger)
    p.verdict = fmt::format("slower ({:.2f}x) but fits batch {} against {}: pays only where memory is the limit",
                            p.speed_ratio, *p.fit_batch, *own.fit_batch);
  else
    p.verdict =
        fmt::format("does not pay on this device: {:.2f}x the samples/s{}", p.speed_ratio,
                    p.memory_ratio < 0.95 ? fmt::format(", though {:.0f} % of the memory", 100 * p.memory_ratio) : "");
  return p;
}

}  // namespace batchwise::detail

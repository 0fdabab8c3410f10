#pragma once
/// Fit: the largest batch whose peak memory stays within target x budget, found with real
/// training trials (optimizer step included) and listed trial by trial.
#include <torch/arg.h>

#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/fields.h"
#include "batchwise/trial.h"

namespace batchwise {

/// How fit searches. Power: double until a batch fails, answer the last that fitted (Lightning's
/// "power"). Binsearch: the same doubling, then bisection to the exact maximum. Model: cheap probe
/// trials from 32 x min, each up to 4 times the last and at most half the answer, until two lines
/// that bracket the answer agree (the secant through the two largest fitting batches, and the line
/// through the largest one and the fixed part counted from the tensors: parameters, buffers,
/// optimizer state); then predict the largest batch within the target, verify it with a trial, and
/// refine from measured points (local secant, else bisection) to the same exact maximum: usually
/// the answer and the batch above it are the only trials near the answer.
enum class FitMode { Power, Binsearch, Model };
const char* to_string(FitMode mode);
constexpr std::array<FitMode, 3> enum_values(FitMode) { return {FitMode::Power, FitMode::Binsearch, FitMode::Model}; }
/// "power", "binsearch" or "model"; ConfigError otherwise.
FitMode parse_fit_mode(const std::string& text);

/// The three ends of a fit: a batch, not even the minimum, or an error that stopped it.
enum class FitOutcome { Fits, DoesNotFit, Error };
const char* to_string(FitOutcome outcome);
constexpr std::array<FitOutcome, 3> enum_values(FitOutcome) {
  return {FitOutcome::Fits, FitOutcome::DoesNotFit, FitOutcome::Error};
}

/// Called after every trial with the trial, its 0-based index and the planned count (-1: unknown).
using TrialCallback = std::function<void(const Trial& trial, int index, int planned)>;
/// Called as a trial starts, with its batch, its 0-based index and the planned count (-1: unknown).
using TrialStartCallback = std::function<void(int64_t batch, int index, int planned)>;

/// Options of a fit.
/// Example: `fit(workload, FitOptions().mode(FitMode::Binsearch).target(0.9).max(4096))`.
struct FitOptions {
  TORCH_ARG(FitMode, mode) = FitMode::Model;
  /// Memory the device may use, in bytes; 0: the device's default (CPU: 80 % of available RAM,
  /// CUDA: the device's total). A trial that allocates beyond it is out of memory.
  TORCH_ARG(int64_t, budget_bytes) = 0;
  /// Fraction of the budget a fitting batch's peak may reach. REQUIRES: 0 < target <= 1.
  TORCH_ARG(double, target) = 0.9;
  TORCH_ARG(int64_t, min) = 1;
  /// Largest batch tried. NOTE: a fit that stops here says so (FitResult::limited_by_max).
  TORCH_ARG(int64_t, max) = 65536;
  /// Every batch tried is a multiple of this.
  TORCH_ARG(int64_t, multiple_of) = 1;
  /// Training steps per trial: the first creates gradients and optimizer state, the second runs
  /// with them in place, which is where the steady-state peak is. REQUIRES: >= 1.
  TORCH_ARG(int, steps) = 2;
  /// Extra steps before those; they count towards the peak too (memory has no warm-up to hide).
  TORCH_ARG(int, warmup) = 0;
  TORCH_ARG(double, trial_timeout_s) = 0;
  /// Run the utilisation monitor during each trial (TrialOptions::monitor).
  TORCH_ARG(bool, monitor) = true;
  TORCH_ARG(TrialCallback, on_trial);
  TORCH_ARG(TrialStartCallback, on_trial_start);
};

/// A prediction missing the measured peak by more than this fraction marks a break in the line.
inline constexpr double kLineBreakTolerance = 0.03;

/// fit --mode model probes until the answers of its two bounding lines (the secant through the two
/// largest fitting batches, and the line through the largest one and the counted fixed part) are
/// within this fraction of each other.
inline constexpr double kProbeAgreement = 0.03;

/// The memory model's line goes through the largest batch that ran and the largest below it by at
/// least this fraction of it, where there is one: measured peaks carry noise (on CUDA, several per
/// cent from one batch to the next), which a secant through neighbouring batches turns into any slope.
inline constexpr double kLineSpan = 0.125;

/// peak(B) ~ fixed_bytes + per_sample_bytes x B, a line through the largest batch that ran within
/// its limit and the largest at least kLineSpan below it (local: where the line bends, the points
/// nearest the answer count).
struct MemoryModel {
  double fixed_bytes = 0;
  double per_sample_bytes = 0;
  int64_t batch_a = 0, batch_b = 0;  ///< the measured batches the line goes through
  /// Largest |measured - predicted| peak over the trials at or above batch_a whose peak was
  /// predicted before they ran: the model's observed error near the answer (the probes below were
  /// predicted by the lines that bracketed it). 0 when every such prediction was exact or none was made.
  int64_t residual_bytes = 0;
  /// Where the line breaks (fit --mode model): trials whose measured peak missed the prediction
  /// of a line through two measured batches by more than kLineBreakTolerance (allocator rounding, an algorithm switch,
  /// a workspace jump between the measured points and that batch). The line above is then the local one, through the
  /// two largest batches that fitted, nearest the answer.
  struct Break {
    int64_t batch = 0;
    int64_t predicted_bytes = 0;
    int64_t measured_bytes = 0;
  };
  std::vector<Break> breaks;
  /// Predicted peak at `batch`.
  int64_t predict(int64_t batch) const;
  /// The peak grew with the batch between the line's two batches. Where it did not (a training
  /// command's process memory, sampled, can read lower at the larger batch), the line predicts
  /// nothing, and the reports say so rather than print a negative slope.
  bool grows() const { return per_sample_bytes > 0; }
};

/// The JSON fields of a MemoryModel::Break, in JSON order (fields.h; alphabetical, as reports have
/// always had them).
template <class V, class T, IfRecord<T, MemoryModel::Break> = 0>
void fields(V& v, T& b) {
  v("batch", b.batch);
  v("measured_bytes", b.measured_bytes);
  v("predicted_bytes", b.predicted_bytes);
}

/// The JSON fields of a MemoryModel, in JSON order (fields.h).
template <class V, class T, IfRecord<T, MemoryModel> = 0>
void fields(V& v, T& m) {
  v("fixed_bytes", m.fixed_bytes);
  v("per_sample_bytes", m.per_sample_bytes);
  v.property(
      "from_batches", m,
      [](const auto& model) {
        return std::vector<int64_t>{model.batch_a, model.batch_b};
      },
      [](auto& model, const std::vector<int64_t>& batches) {
        if (batches.size() != 2) return;
        model.batch_a = batches[0];
        model.batch_b = batches[1];
      });
  v("residual_bytes", m.residual_bytes);
  v("breaks", m.breaks);
}

/// Where the memory of the fitted batch goes. Parameters, gradients and optimizer state are
/// counted exactly from their tensors; activations are the memory model's per-sample slope; the
/// rest (workspace, allocator, and minus whatever state is not alive at the peak moment, such as
/// gradients freed by zero_grad) is what remains of the measured peak.
struct MemoryBreakdown {
  int64_t batch = 0;
  int64_t peak_bytes = 0;
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  double activation_bytes_per_sample = 0;
  int64_t rest_bytes = 0;
  /// The activations at `batch`: the per-sample slope times the batch.
  int64_t activation_bytes() const { return std::llround(activation_bytes_per_sample * static_cast<double>(batch)); }
};

/// The JSON fields of a MemoryBreakdown, in JSON order (fields.h).
template <class V, class T, IfRecord<T, MemoryBreakdown> = 0>
void fields(V& v, T& d) {
  v("batch", d.batch);
  v("peak_bytes", d.peak_bytes);
  v("parameter_bytes", d.parameter_bytes);
  v("gradient_bytes", d.gradient_bytes);
  v("optimizer_state_bytes", d.optimizer_state_bytes);
  v("activation_bytes_per_sample", d.activation_bytes_per_sample);
  v.computed("activation_bytes", d.activation_bytes());
  v("rest_bytes", d.rest_bytes);
}

/// The memory line through the two largest ok trials; none with fewer than two distinct batches.
std::optional<MemoryModel> fit_memory_model(const std::vector<Trial>& trials);

/// A device to plan for: its memory, and a name when it came from a preset.
struct PlanDevice {
  std::string name;  ///< "h100" or "24 GiB"
  int64_t bytes = 0;
};

/// The JSON fields of a PlanDevice, in JSON order (fields.h).
template <class V, class T, IfRecord<T, PlanDevice> = 0>
void fields(V& v, T& d) {
  v("name", d.name);
  v("bytes", d.bytes);
}

/// Parses --plan-for: a size ("24GiB": the device's total as CUDA reports it) or a preset: t4, v100,
/// l4, a10, rtx4090, a100-40gb, l40s, a6000, a100-80gb, h100, h200, each with the bytes CUDA reports
/// as that GPU's total (an "80 GB" H100: 85,017,755,648 bytes, 79.2 GiB; fit.cpp lists each figure
/// and its source). ConfigError otherwise.
PlanDevice parse_plan_device(const std::string& text);

/// Where the fit that a plan starts from measured its trials.
/// Example: PlanSource{"cuda", "bf16"}: reserved bytes on a GPU, under bf16 autocast.
struct PlanSource {
  std::string device_type = "cpu";  ///< Context::device_type: "cpu" (counted tensor bytes) or "cuda" (reserved bytes)
  std::string precision = "fp32";   ///< WorkloadInfo::precision: fp32, bf16 or fp16 (anything else: "as measured")
};

/// What a CUDA device adds to the memory a CPU trial counts. Every figure is an assumption, stated
/// in the report beside the prediction; none has been checked against a GPU yet. A trial measured on
/// CUDA holds the workspaces and the allocator's overhead in its reserved bytes (plan_allowance), but
/// not the context: the CUDA context lives outside the caching allocator.
struct CudaAllowance {
  int64_t context_bytes = int64_t{512} << 20;   ///< CUDA context and library handles, outside the allocator
  int64_t workspace_bytes = int64_t{64} << 20;  ///< cuBLAS/cuDNN workspaces
  double overhead_fraction = 0.10;              ///< caching-allocator rounding (2 MiB blocks) and fragmentation
};

/// The JSON fields of a CudaAllowance, in JSON order (fields.h).
template <class V, class T, IfRecord<T, CudaAllowance> = 0>
void fields(V& v, T& a) {
  v("context_bytes", a.context_bytes);
  v("workspace_bytes", a.workspace_bytes);
  v("overhead_fraction", a.overhead_fraction);
}

/// The allowances a plan adds to a fit measured on `source`: all of `defaults` for a CPU fit; for a
/// CUDA fit only the context (workspace_bytes and overhead_fraction 0: ATen takes the cuBLAS and
/// cuDNN workspaces from the caching allocator, and its reserved bytes include its rounding and
/// fragmentation).
CudaAllowance plan_allowance(const PlanSource& source, const CudaAllowance& defaults = {});

/// The largest batch predicted to fit a device of `device.bytes` within `target`:
/// 1 + overhead_fraction times the memory model's peak, plus workspaces, within target x (bytes - context).
struct Plan {
  PlanDevice device;
  CudaAllowance allowance;  ///< the allowances added (plan_allowance), not the defaults
  double target = 0.9;
  std::optional<int64_t> batch;      ///< none when not even one sample is predicted to fit
  int64_t predicted_peak_bytes = 0;  ///< at `batch`, allowance included
  std::vector<std::string> assumptions;
};

/// The JSON fields of a Plan, in JSON order (fields.h).
template <class V, class T, IfRecord<T, Plan> = 0>
void fields(V& v, T& p) {
  v("device", p.device);
  v("target", p.target);
  v("batch", p.batch);
  v("predicted_peak_bytes", p.predicted_peak_bytes);
  v("allowance", p.allowance);
  v("assumptions", p.assumptions);
}

/// What a fit found. `batch` is set only when outcome is Fits.
/// fit --mode model: the batch one multiple above the answer, left untried because the line that
/// predicted the answer's own peak (missing it by less than the margin) puts this batch over the target.
struct UntriedAbove {
  int64_t batch = 0;
  int64_t predicted_bytes = 0;
};

/// The JSON fields of an UntriedAbove, in JSON order (fields.h).
template <class V, class T, IfRecord<T, UntriedAbove> = 0>
void fields(V& v, T& u) {
  v("batch", u.batch);
  v("predicted_bytes", u.predicted_bytes);
}

struct FitResult {
  FitMode mode = FitMode::Model;
  FitOutcome outcome = FitOutcome::Error;
  std::optional<int64_t> batch;
  std::vector<Trial> trials;  ///< in the order they ran
  int64_t budget_bytes = 0;
  double target = 0.9;
  int64_t multiple_of = 1;
  bool limited_by_max = false;  ///< the answer is --max, not the memory limit
  std::string message;  ///< DoesNotFit / Error: why, in one sentence; Fits: a trial that failed with an error, if any
  std::optional<MemoryModel> memory_model;   ///< from the trials (every mode), when two ran ok
  std::optional<MemoryBreakdown> breakdown;  ///< at `batch`, when a memory model exists
  std::optional<UntriedAbove> above;         ///< model mode settled the batch above by the line
};

/// The JSON fields of a FitResult, in JSON order (fields.h); its budget and target are the report's.
template <class V, class T, IfRecord<T, FitResult> = 0>
void fields(V& v, T& f) {
  v("mode", f.mode);
  v("outcome", f.outcome);
  v("batch", f.batch);
  v("multiple_of", f.multiple_of);
  v("limited_by_max", f.limited_by_max);
  v("message", f.message, When{!f.message.empty()});
  v("memory_model", f.memory_model, When{f.memory_model.has_value()});
  v("breakdown", f.breakdown, When{f.breakdown.has_value()});
  v("above", f.above, When{f.above.has_value()});
  v("trials", f.trials);
}

/// Plans for `device` from a fit's memory model, measured on `source`: adds plan_allowance(source,
/// allowance), and says in the assumptions which allowances it added and at what precision the fit
/// ran. REQUIRES: fit.memory_model (else ConfigError).
Plan plan_for(const FitResult& fit, const PlanSource& source, const PlanDevice& device, double target,
              int64_t multiple_of = 1, const CudaAllowance& allowance = {});

/// The default memory budget of a device: 80 % of available RAM on CPU, the total on CUDA.
int64_t default_budget_bytes(Workload& workload);

/// Runs the search. The workload is bit-identical afterwards (every trial restores it).
/// Throws ConfigError for impossible options (min above max, a budget below the model's own size).
FitResult fit(Workload& workload, const FitOptions& options);
/// The same search over trials from any runner (a training command, another engine).
FitResult fit(TrialRunner& runner, const FitOptions& options);

/// A fit that found a batch though nothing shows its trials trained at their batch: every trial that ran was timed by
/// its wall time (a command that printed no step line) and its peak did not grow from the smallest to the largest
/// (within 5 %, over batches 4x apart or more). A command that ignores {batch}, or trains nothing, fits any batch so:
/// the warning says what to check. "" otherwise.
std::string unseen_batch_warning(const FitResult& fit);

}  // namespace batchwise

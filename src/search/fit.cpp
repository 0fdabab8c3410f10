#include "batchwise/fit.h"

#include <algorithm>
#include <cmath>

#include "batchwise/choices.h"
#include "batchwise/memory.h"
#include "batchwise/units.h"
#include "batchwise/workload.h"
#include "check.h"

namespace batchwise {

const char* to_string(FitMode mode) {
  switch (mode) {
    case FitMode::Power:
      return "power";
    case FitMode::Binsearch:
      return "binsearch";
    case FitMode::Model:
      return "model";
  }
  return "model";
}

FitMode parse_fit_mode(const std::string& text) {
  if (text == "power") return FitMode::Power;
  if (text == "binsearch") return FitMode::Binsearch;
  if (text == "model") return FitMode::Model;
  BATCHWISE_CHECK(false, ConfigError, "--mode {}: unknown fit mode; choose model, binsearch or power", text);
  return FitMode::Model;
}

int64_t MemoryModel::predict(int64_t batch) const {
  return static_cast<int64_t>(std::llround(fixed_bytes + per_sample_bytes * static_cast<double>(batch)));
}

std::optional<MemoryModel> fit_memory_model(const std::vector<Trial>& trials) {
  // The largest batch that ran to the end, nearest the answer and past the small batches whose peak
  // is set by the optimizer step rather than by activations; and the largest below it by at least
  // kLineSpan of it (else the nearest below): peaks measured a batch or two apart differ by noise
  // (CUDA's reserved bytes move by several per cent with cuDNN's choice of algorithm per shape), and
  // a secant through them can slope any way.
  const Trial* b = nullptr;
  for (const auto& t : trials)
    if (t.outcome == Outcome::Ok && (!b || t.batch > b->batch)) b = &t;
  if (!b) return std::nullopt;
  const auto span_edge = static_cast<double>(b->batch) * (1 - kLineSpan);
  const Trial* a = nullptr;
  const Trial* nearest = nullptr;
  for (const auto& t : trials) {
    if (t.outcome != Outcome::Ok || t.batch >= b->batch) continue;
    if (!nearest || t.batch > nearest->batch) nearest = &t;
    if (static_cast<double>(t.batch) <= span_edge && (!a || t.batch > a->batch)) a = &t;
  }
  if (!a) a = nearest;
  if (!a || !b) return std::nullopt;
  MemoryModel m;
  m.batch_a = a->batch;
  m.batch_b = b->batch;
  m.per_sample_bytes = static_cast<double>(b->peak_bytes - a->peak_bytes) / static_cast<double>(b->batch - a->batch);
  m.fixed_bytes = static_cast<double>(b->peak_bytes) - m.per_sample_bytes * static_cast<double>(b->batch);
  for (const auto& t : trials) {
    // Near the answer: the probes up to the line's first batch were predicted by the lines that
    // bracketed it while probing (the one-point line among them, a deliberate over-estimate), not by
    // one through the batches near the answer.
    if (t.outcome != Outcome::Ok || !t.predicted_peak_bytes || t.batch <= m.batch_a) continue;
    const int64_t error = std::abs(t.peak_bytes - *t.predicted_peak_bytes);
    m.residual_bytes = std::max(m.residual_bytes, error);
  }
  return m;
}

namespace {

// The line through one ok trial at `batch`, with the fixed part counted from its tensors:
// parameters, buffers and optimizer state (gradients are not alive at the forward pass's peak).
std::optional<MemoryModel> one_point_line(const std::vector<Trial>& trials, int64_t batch) {
  for (const auto& t : trials) {
    if (t.batch != batch || t.outcome != Outcome::Ok) continue;
    const double fixed = static_cast<double>(t.state.parameter_bytes + t.state.optimizer_state_bytes);
    if (fixed <= 0 || static_cast<double>(t.peak_bytes) <= fixed) return std::nullopt;  // nothing counted
    MemoryModel m;
    m.batch_a = m.batch_b = batch;
    m.fixed_bytes = fixed;
    m.per_sample_bytes = (static_cast<double>(t.peak_bytes) - fixed) / static_cast<double>(batch);
    return m;
  }
  return std::nullopt;
}

}  // namespace

const char* to_string(FitOutcome outcome) {
  switch (outcome) {
    case FitOutcome::Fits:
      return "fits";
    case FitOutcome::DoesNotFit:
      return "does_not_fit";
    case FitOutcome::Error:
      return "error";
  }
  return "error";
}

namespace {

// --plan-for's presets: each GPU's memory as CUDA reports it on the device (cudaMemGetInfo's total,
// which is cudaDeviceProp::totalGlobalMem and torch.cuda.get_device_properties().total_memory), in
// bytes: the figure a fit on that device takes as its budget. Not the marketed "80 GB" (decimal, and
// before ECC and the driver's own reservations), nor nvidia-smi's total (NVML counts differently:
// 81,559 MiB on an H100 where CUDA reports 81,079). With ECC as shipped: on for the data-centre cards
// with GDDR (T4, A10, L4, L40S lose 1/16 of their memory to it), off for RTX A6000 and RTX 4090.
// Every figure comes from a public printout of that device's totalGlobalMem (CUDA's deviceQuery, or
// torch), the newest driver found where printouts differ; drivers move it by up to about 0.5 %.
// `observed`: the exact bytes were printed; false: derived from a figure in whole MiB (rounded down).
// docs/cli.md lists the same table; tests/search/fit_test.cpp pins each figure.
struct PlanPreset {
  const char* name;
  int64_t bytes;
  bool observed;
  const char* source;
};
constexpr PlanPreset kPlanPresets[] = {
    {"t4", 15'843'721'216, true, "Tesla T4, deviceQuery with CUDA driver 11.2"},
    {"v100", 16'945'512'448, true, "Tesla V100-SXM2-16GB, deviceQuery with CUDA driver 10.2"},
    {"l4", 23'612'293'120, true, "NVIDIA L4, deviceQuery with CUDA driver 12.0"},
    {"a10", 23'696'375'808, true, "NVIDIA A10, deviceQuery with CUDA driver 12.8"},
    {"rtx4090", 25'250'627'584, true, "GeForce RTX 4090 on Linux, deviceQuery with CUDA driver 13.0"},
    {"a100-40gb", 42'298'834'944, true, "A100-PCIE-40GB, deviceQuery with CUDA driver 12.2"},
    {"l40s", 47'576'711'168, true, "NVIDIA L40S, deviceQuery with CUDA driver 12.4"},
    {"a6000", 51'160'023'040, true, "RTX A6000, deviceQuery with CUDA driver 12.7"},
    {"a100-80gb", 85'100'068'864, true, "A100-SXM4-80GB, deviceQuery with CUDA driver 12.5"},
    {"h100", 85'017'755'648, true, "H100 80GB HBM3 SXM, deviceQuery with CUDA driver 13.0"},
    {"h200", 150'109'945'856, false, "H200, torch's total_memory of 143,156 MiB in whole MiB, exact bytes not found"},
};

const PlanPreset* find_preset(const std::string& name) {
  for (const auto& p : kPlanPresets)
    if (name == p.name) return &p;
  return nullptr;
}

}  // namespace

PlanDevice parse_plan_device(const std::string& text) {
  if (const PlanPreset* p = find_preset(text)) return {p->name, p->bytes};
  if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0]))) {
    const int64_t bytes = parse_bytes(text, "--plan-for");
    return {format_bytes(bytes), bytes};
  }
  std::vector<std::string> names;
  for (const auto& p : kPlanPresets) names.push_back(p.name);
  BATCHWISE_CHECK(false, ConfigError, "--plan-for {}: give a size like 24GiB or one of {}", text,
                  fmt::join(names, ", "));
  return {};
}

CudaAllowance plan_allowance(const PlanSource& source, const CudaAllowance& defaults) {
  CudaAllowance a = defaults;
  // ATen takes its cuBLAS, cuBLASLt and cuDNN workspaces from the caching allocator (kept per handle
  // and stream, or taken per operation: releases differ, and a trial's peak holds them either way),
  // and reserved bytes are the allocator's segments, rounding and fragmentation included. The context
  // and the libraries' own handles are allocated outside it: that allowance stays.
  if (source.device_type == "cuda") {
    a.workspace_bytes = 0;
    a.overhead_fraction = 0;
  }
  return a;
}

namespace {

// The plan's assumptions, in words: what the prediction rests on, and which allowances it added.
std::vector<std::string> plan_assumptions(const MemoryModel& m, const PlanSource& source, const PlanDevice& device,
                                          const CudaAllowance& a) {
  const std::optional<Precision> precision = known_precision(source.precision);
  std::vector<std::string> out;
  out.push_back(fmt::format(
      "the memory per sample measured here ({} per sample over batches {} to {}) holds on the target device, at "
      "the same precision ({}) and input size",
      format_bytes(static_cast<int64_t>(m.per_sample_bytes)), m.batch_a, m.batch_b,
      precision ? source.precision : std::string("as measured here")));
  out.push_back(fmt::format("the line stays straight beyond the largest batch measured here ({})", m.batch_b));
  const PlanPreset* preset = find_preset(device.name);
  out.push_back(preset ? fmt::format("the {} preset's {} bytes ({}) are the device's total as CUDA reports it "
                                     "({}{}); drivers move it by up to about 0.5 %",
                                     device.name, format_grouped(static_cast<double>(device.bytes)),
                                     format_bytes(device.bytes), preset->source,
                                     preset->observed ? "" : "; derived, not observed")
                       : fmt::format("the device has {} as CUDA reports its total (torch.cuda.get_device_properties()"
                                     ".total_memory), not its marketed size in GB",
                                     device.name));
  const bool cuda = source.device_type == "cuda";
  const std::string context = fmt::format(
      "the allowance{} added cover{} what this {} measurement lacks: {} for the CUDA context and library handles "
      "(outside the caching allocator)",
      cuda ? "" : "s", cuda ? "s" : "", cuda ? "CUDA" : "CPU", format_bytes(a.context_bytes));
  out.push_back(cuda ? context +
                           "; nothing is added for cuBLAS/cuDNN workspaces or the allocator's rounding and "
                           "fragmentation, which the reserved bytes measured here already hold (the target's "
                           "libraries may choose other algorithms, with other workspaces)"
                     : context + fmt::format(", {} for cuBLAS/cuDNN workspaces and {:.0f} % for the allocator's "
                                             "rounding and fragmentation",
                                             format_bytes(a.workspace_bytes), a.overhead_fraction * 100));
  out.emplace_back(  // in place: GCC 12 warns (-Warray-bounds) of a moved temporary that cannot overflow
      "these allowances are defaults, not yet checked against a GPU: verify with `batchwise fit` on the "
      "device");
  return out;
}

}  // namespace

Plan plan_for(const FitResult& fit, const PlanSource& source, const PlanDevice& device, double target,
              int64_t multiple_of, const CudaAllowance& defaults) {
  BATCHWISE_CHECK(fit.memory_model.has_value(), ConfigError,
                  "--plan-for {}: needs a memory model, and this fit ran fewer than two trials to the end; raise "
                  "--memory-budget or --max so the fit can measure two batches",
                  device.name);
  const MemoryModel& m = *fit.memory_model;
  const CudaAllowance a = plan_allowance(source, defaults);
  Plan p;
  p.device = device;
  p.allowance = a;
  p.target = target;
  const double usable = target * static_cast<double>(device.bytes - a.context_bytes);
  auto peak = [&](int64_t b) {
    return static_cast<int64_t>((1.0 + a.overhead_fraction) * static_cast<double>(m.predict(b))) + a.workspace_bytes;
  };
  if (m.per_sample_bytes > 0 && usable > 0) {
    const double room = (usable - static_cast<double>(a.workspace_bytes)) / (1.0 + a.overhead_fraction) - m.fixed_bytes;
    const int64_t b = static_cast<int64_t>(std::floor(room / m.per_sample_bytes)) / multiple_of * multiple_of;
    if (b >= 1) {
      p.batch = b;
      p.predicted_peak_bytes = peak(b);
    }
  }
  p.assumptions = plan_assumptions(m, source, device, a);
  return p;
}

int64_t default_budget_bytes(Workload& workload) { return WorkloadRunner(workload).default_budget_bytes(); }

FitResult fit(Workload& workload, const FitOptions& options) {
  WorkloadRunner runner(workload);
  return fit(runner, options);
}

namespace {

// One fit's search: the trials so far, and what they settle. `fits` is the largest batch seen within
// target x budget; `fails` the smallest seen over it (or out of memory, or out of time). No batch at
// or above `fails` is ever tried.
class Search {
 public:
  Search(TrialRunner& runner, const FitOptions& o, FitResult& r, int64_t first, int64_t last, int64_t allowed)
      : runner_(runner), o_(o), r_(r), m_(o.multiple_of()), first_(first), last_(last), allowed_(allowed) {}

  /// --mode power and binsearch: doublings from the first batch until one does not fit, then (binsearch)
  /// bisection between the last that fitted and the first that did not. False: an error stopped it.
  bool doublings() {
    for (int64_t b = first_;;) {
      const Trial& t = try_batch(b, std::nullopt);
      if (stops(t)) return error_out(b, t), false;
      record(t);
      if (!*t.within_target || b == last_) break;
      b = std::min(b * 2, last_);
    }
    if (fits_ && o_.mode() == FitMode::Binsearch) {
      while (fails_ && *fails_ - *fits_ > m_) {
        const int64_t mid = midpoint();
        const Trial& t = try_batch(mid, std::nullopt);
        if (stops(t)) return error_out(mid, t), false;
        record(t);
      }
    }
    return true;
  }

  /// --mode model. Probes first, cheap ones: from 32 times --min, each up to 4 times the last, while
  /// the answer is still uncertain. Peak memory against batch is convex (the largest of lines: the
  /// optimizer step's at small batches, the activations' beyond), so two lines bracket the answer:
  /// the secant through the two largest fitting batches under-predicts the peak beyond them (its
  /// answer is too high or exact), and the line through the largest one and the fixed part counted
  /// from its tensors (parameters, buffers, optimizer state: alive at every peak) over-predicts it
  /// (its answer is too low or exact). When the two agree, the line is straight up to the answer and
  /// the next trial is its prediction; until then the next probe is at most half the low answer, so
  /// probing never costs more than half a trial at the answer. A probe that does not fit hands over
  /// to the minimum, which decides whether anything does. False: an error stopped it.
  bool model() {
    for (int64_t b = std::min((32 * o_.min() + m_ - 1) / m_ * m_, last_);;) {
      const Trial& t = try_batch(b, line_ ? std::optional<int64_t>(line_->predict(b)) : std::nullopt);
      if (stops(t)) return error_out(b, t), false;
      // A line through two measured batches that misses by more than the tolerance has met a break
      // (the one-point line is not held to it: its fixed part is a lower bound).
      if (line_ && line_->batch_a != line_->batch_b && t.outcome == Outcome::Ok &&
          static_cast<double>(std::abs(t.peak_bytes - *t.predicted_peak_bytes)) >
              kLineBreakTolerance * static_cast<double>(*t.predicted_peak_bytes))
        breaks_.push_back({t.batch, *t.predicted_peak_bytes, t.peak_bytes});
      record(t);
      if (!fits_) {
        probing_ = false;
        if (b == first_) break;  // the minimum itself does not fit
        b = first_;
        continue;
      }
      if (*fits_ == last_ || (fails_ && *fails_ - *fits_ <= m_) || below_the_noise() || settled_by_the_line(t)) break;
      b = next_model_batch();
    }
    return true;
  }

  /// The memory model, the outcome, the breakdown at the answer, and a note of a later error.
  void finish() {
    r_.memory_model = fit_memory_model(r_.trials);
    if (r_.memory_model) r_.memory_model->breaks = breaks_;
    if (!fits_) {
      const Trial& t = r_.trials.back();  // the minimum's: every mode ends a fit that found nothing there
      r_.outcome = FitOutcome::DoesNotFit;
      r_.message = t.outcome == Outcome::Ok
                       ? fmt::format("batch {} peaks at {}, above the target of {} ({:.0f} % of {})", first_,
                                     format_bytes(t.peak_bytes), format_bytes(allowed_), o_.target() * 100,
                                     format_bytes(r_.budget_bytes))
                       : fmt::format("batch {} did not complete: {}", first_, t.message);
      return;
    }
    r_.limited_by_max = *fits_ == last_ && !fails_;
    if (r_.memory_model) r_.breakdown = breakdown();
    r_.outcome = FitOutcome::Fits;
    r_.batch = *fits_;
    for (const auto& t : r_.trials) {
      if (t.outcome == Outcome::Error || t.outcome == Outcome::Timeout) {  // not memory: said, not taken for it
        r_.message = fmt::format("batch {} {} ({}); it counts as not fitting", t.batch,
                                 t.outcome == Outcome::Timeout ? "timed out" : "failed with an error", t.message);
        break;
      }
    }
    if (noise_bytes_ > 0) {
      const std::string note = fmt::format(
          "peaks near the answer are not monotone in the batch: a larger batch peaked up to {} lower than a smaller "
          "one (a batch's shapes choose its kernels and workspaces: cuDNN's per shape on CUDA; a command's padded "
          "batches differ in length), more than the {} between batch {} "
          "and {}, which did not fit, so the batches between were not tried: batch {} is the largest measured "
          "within the target",
          format_bytes(noise_bytes_), format_bytes(gap_bytes_), *fits_, *fails_, *fits_);
      r_.message = r_.message.empty() ? note : r_.message + "; " + note;
    }
    // A skipped step makes no optimizer state (Adam's), so the answer's peak may be short of a
    // trained step's. The runner has already run such a trial again from a settled scale where it
    // could; steps still skipped overflowed whatever the scale.
    for (const auto& t : r_.trials) {
      if (t.batch != *fits_ || t.skipped_steps == 0) continue;
      const std::string note = fmt::format(
          "batch {} skipped {} of its {} steps (fp16 gradients overflowed), so its peak may miss the optimizer "
          "state of a trained step: check it in training",
          t.batch, t.skipped_steps, t.steps_run);
      r_.message = r_.message.empty() ? note : r_.message + "; " + note;
    }
  }

 private:
  // One trial, marked within_target when it ran every step and its peak is within target x budget.
  const Trial& try_batch(int64_t batch, std::optional<int64_t> predicted) {
    BATCHWISE_ASSERT(batch >= first_ && batch <= last_ && (!fails_ || batch < *fails_) && (!fits_ || batch > *fits_));
    for (const auto& seen : r_.trials) BATCHWISE_ASSERT(seen.batch != batch);
    if (o_.on_trial_start()) o_.on_trial_start()(batch, static_cast<int>(r_.trials.size()), -1);
    Trial t = runner_.run(TrialOptions(batch)
                              .warmup(o_.warmup())
                              .steps(o_.steps())
                              .limit_bytes(r_.budget_bytes)
                              .timeout_s(o_.trial_timeout_s())
                              .monitor(o_.monitor()));
    t.within_target = t.outcome == Outcome::Ok && t.peak_bytes <= allowed_;
    t.predicted_peak_bytes = predicted;
    r_.trials.push_back(t);
    if (o_.on_trial()) o_.on_trial()(r_.trials.back(), static_cast<int>(r_.trials.size()) - 1, -1);
    return r_.trials.back();
  }

  // An error before any batch fitted stops the fit: nothing is known. A later one (a training
  // command that crashed at a large batch) is a result: that batch counts as not fitting, the trial
  // keeps its message, and the search goes on below it.
  // A timeout likewise: it says nothing of memory (before, a command that hung at every batch read as
  // "no batch fits", exit 6). Only at the minimum: model mode's first probe (32 x the minimum) that
  // failed or ran out of time hands over to the minimum, as one that did not fit does (a step's time,
  // and a command's crash, grow with the batch).
  bool stops(const Trial& t) const {
    return (t.outcome == Outcome::Error || t.outcome == Outcome::Timeout) && !fits_ && t.batch <= first_;
  }
  void error_out(int64_t batch, const Trial& t) {
    r_.outcome = FitOutcome::Error;
    r_.message = fmt::format("batch {} {}, so no batch size is reported: {}", batch,
                             t.outcome == Outcome::Timeout ? "timed out" : "failed with an error", t.message);
  }
  void record(const Trial& t) { (*t.within_target ? fits_ : fails_) = t.batch; }
  int64_t midpoint() const { return *fits_ + (*fails_ - *fits_) / m_ / 2 * m_; }

  std::optional<int64_t> answer_of(const std::optional<MemoryModel>& l) const {
    if (!l || l->per_sample_bytes <= 0) return std::nullopt;
    return static_cast<int64_t>(std::floor((static_cast<double>(allowed_) - l->fixed_bytes) / l->per_sample_bytes)) /
           m_ * m_;
  }

  // The batch one multiple above a fitting trial need not run when the line that predicted this
  // trial's peak (through two measured batches, not the one-point bound) missed it by less than the
  // margin by which it puts that batch over the target: the trial has checked the line where it
  // matters, and the line says the next multiple does not fit by more than the line's error. Where
  // peaks are exact and linear near the answer (a CPU budget) this saves the last trial; a noisy or
  // bending line goes on to try it.
  bool settled_by_the_line(const Trial& t) {
    if (probing_ || !line_ || line_->batch_a == line_->batch_b || !*t.within_target || t.batch != *fits_ ||
        !t.predicted_peak_bytes || t.batch + m_ > last_)
      return false;
    const int64_t error = std::abs(t.peak_bytes - *t.predicted_peak_bytes);
    const int64_t above = line_->predict(t.batch + m_);
    if (above - error <= allowed_) return false;
    r_.above = UntriedAbove{t.batch + m_, above};
    return true;
  }

  // Model mode stops short of the exact maximum when the batches left between the last fit and the
  // first failure differ, by the line, by less than the peaks' own noise near the answer (how much
  // lower a larger batch peaked than a smaller one, among the trials within kLineSpan below the last
  // fit): no trial there can tell them apart. Peaks that rise with the batch (a CPU budget) never stop it.
  bool below_the_noise() {
    const std::optional<MemoryModel> line = fit_memory_model(r_.trials);
    if (!fails_ || !line || line->per_sample_bytes <= 0) return false;
    // Only memory bounds it so: a batch that failed otherwise (an error, a timeout) leaves the batches below it to
    // their trials, whatever the peaks (a crash above 41 had answered 40, 41 untried, on 4 KiB of a command's noise)
    for (const Trial& t : r_.trials)
      if (t.batch == *fails_ && (t.outcome == Outcome::Error || t.outcome == Outcome::Timeout)) return false;
    const auto edge = static_cast<double>(*fits_) * (1 - kLineSpan);
    int64_t noise = 0;
    for (const auto& lo : r_.trials) {
      if (lo.outcome != Outcome::Ok || static_cast<double>(lo.batch) < edge) continue;
      for (const auto& hi : r_.trials)
        if (hi.outcome == Outcome::Ok && hi.batch > lo.batch) noise = std::max(noise, lo.peak_bytes - hi.peak_bytes);
    }
    const auto gap = static_cast<int64_t>(static_cast<double>(*fails_ - *fits_) * line->per_sample_bytes);
    if (noise == 0 || gap > noise) return false;
    noise_bytes_ = noise, gap_bytes_ = gap;
    return true;
  }

  // Model mode's next batch after a fitting one: a further probe while the two lines disagree, then
  // the line's answer (the batch above the last fit when the line puts it there, the midpoint when a
  // failure contradicts it).
  int64_t next_model_batch() {
    const int64_t hi = fails_ ? *fails_ - m_ : last_;  // the largest batch still worth trying
    const int64_t lo = *fits_ + m_;
    const std::optional<MemoryModel> secant = fit_memory_model(r_.trials), bound = one_point_line(r_.trials, *fits_);
    line_ = secant ? secant : bound;
    if (probing_) {
      const std::optional<int64_t> low = answer_of(bound), high = answer_of(secant);
      const bool agree =
          low && high && static_cast<double>(*high) <= static_cast<double>(*low) * (1 + kProbeAgreement) + m_;
      const int64_t next = low ? std::min(*fits_ * 4, *low / 2 / m_ * m_) : 0;
      if (!agree && next >= *fits_ + *fits_ / 2 && next <= hi) return next;
      probing_ = false;
    }
    int64_t candidate = 0;
    if (!line_ || line_->per_sample_bytes <= 0) {
      candidate = fails_ ? midpoint() : std::min(*fits_ * 64, hi);  // no usable line yet
    } else {
      candidate = *answer_of(line_);
      if (candidate <= *fits_) {
        // The line puts the answer at what already fitted: the batch above settles it. When it
        // already did so and that batch fitted too, the peaks are noisier than the line (on CUDA the
        // reserved peak moves with the algorithm cuDNN picks per shape, by several per cent from one
        // batch to the next), and a line through points above the answer never moves: bisect.
        candidate = !nudged_ ? lo : fails_ ? midpoint() : std::min(*fits_ * 2, hi);
        nudged_ = true;
      } else if (fails_ && candidate >= *fails_) {
        candidate = midpoint();  // contradicted by a failure
      }
    }
    return std::clamp(candidate, lo, hi);
  }

  // Where the memory goes at the answer: the state counted from its tensors, the activations from
  // the line's slope, and the rest.
  std::optional<MemoryBreakdown> breakdown() const {
    std::optional<MemoryBreakdown> out;
    for (const auto& t : r_.trials) {
      // A training command's tensors are its own, uncounted (0 bytes): no parts to split its peak into.
      if (t.batch != *fits_ || t.outcome != Outcome::Ok || t.state.parameter_bytes == 0) continue;
      MemoryBreakdown d;
      d.batch = t.batch;
      d.peak_bytes = t.peak_bytes;
      d.parameter_bytes = t.state.parameter_bytes;
      d.gradient_bytes = t.state.gradient_bytes;
      d.optimizer_state_bytes = t.state.optimizer_state_bytes;
      d.activation_bytes_per_sample = r_.memory_model->per_sample_bytes;
      d.rest_bytes = t.peak_bytes - d.parameter_bytes - d.gradient_bytes - d.optimizer_state_bytes -
                     static_cast<int64_t>(std::llround(d.activation_bytes_per_sample * static_cast<double>(t.batch)));
      out = d;
    }
    return out;
  }

  TrialRunner& runner_;
  const FitOptions& o_;
  FitResult& r_;
  const int64_t m_, first_, last_, allowed_;
  std::optional<int64_t> fits_, fails_;
  std::optional<MemoryModel> line_;  // model mode: from the trials so far; predicts the next trial's peak
  bool probing_ = true;
  bool nudged_ = false;                      // model mode tried the batch above a fit because the line said so
  int64_t noise_bytes_ = 0, gap_bytes_ = 0;  // set when model mode stopped at the peaks' noise
  std::vector<MemoryModel::Break> breaks_;
};

}  // namespace

FitResult fit(TrialRunner& runner, const FitOptions& o) {
  const int64_t m = o.multiple_of();
  BATCHWISE_CHECK(m >= 1, ConfigError, "--multiple-of {}: must be at least 1", m);
  BATCHWISE_CHECK(o.min() >= 1, ConfigError, "--min {}: must be at least 1", o.min());
  // --max may not have been given: its default is said to be one (it had read as a --max the user never passed)
  BATCHWISE_CHECK(o.min() <= o.max(), ConfigError, "--min {} is above --max {}{}; {}", o.min(), o.max(),
                  o.max() == FitOptions().max() ? " (its default)" : "",
                  o.max() == FitOptions().max() ? "lower --min, or raise --max" : "swap them or lower --min");
  BATCHWISE_CHECK(o.target() > 0 && o.target() <= 1, ConfigError,
                  "--target {}: must be a fraction of the budget in (0, 1], like 0.9", o.target());
  BATCHWISE_CHECK(o.warmup() >= 0, ConfigError, "--warmup {}: cannot be negative", o.warmup());
  BATCHWISE_CHECK(o.steps() >= 1, ConfigError, "fit steps {}: a trial must run at least one training step", o.steps());
  BATCHWISE_CHECK(o.trial_timeout_s() >= 0, ConfigError,  // NaN too: a limit no trial could be held to
                  "--trial-timeout {}: must be at least 0 seconds (0: no limit)", o.trial_timeout_s());
  const int64_t first = (o.min() + m - 1) / m * m;
  const int64_t last = o.max() / m * m;
  BATCHWISE_CHECK(first <= last, ConfigError,
                  "--min {} --max {} --multiple-of {}: no multiple of {} lies between them; give a --max of at least "
                  "{}, or a smaller --multiple-of",
                  o.min(), o.max(), m, m, first);

  FitResult r;
  r.mode = o.mode();
  r.target = o.target();
  r.multiple_of = m;
  r.budget_bytes = checked_budget_bytes(runner, o.budget_bytes(), o.target());
  const int64_t allowed = static_cast<int64_t>(o.target() * static_cast<double>(r.budget_bytes));
  Search search(runner, o, r, first, last, allowed);
  if (o.mode() == FitMode::Model ? search.model() : search.doublings()) search.finish();
  return r;
}

std::string unseen_batch_warning(const FitResult& fit) {
  if (!fit.batch) return "";
  const Trial *least = nullptr, *most = nullptr;
  for (const Trial& t : fit.trials) {
    if (t.outcome != Outcome::Ok) continue;
    if (!t.wall_timing || t.steps_run > 0) return "";  // a step line, or batchwise's own step: it trained
    if (!least || t.batch < least->batch) least = &t;
    if (!most || t.batch > most->batch) most = &t;
  }
  if (!least || most->batch < 4 * least->batch ||
      static_cast<double>(most->peak_bytes) > 1.05 * static_cast<double>(least->peak_bytes))
    return "";
  return fmt::format(
      "nothing shows that the command trained at the batches tried: it printed no step line, and its peak did not "
      "grow from batch {} to batch {} ({} and {}), so batch {} 'fits' as any batch would for a command that ignores "
      "{{batch}} or trains nothing; check that it passes {{batch}} to its batch size, and print a 'batchwise: step' "
      "line per step (docs/cmd.md)",
      least->batch, most->batch, format_bytes(least->peak_bytes), format_bytes(most->peak_bytes), *fit.batch);
}

}  // namespace batchwise

#pragma once
/// The choices a workload is made of, as types: each enum has its spelling (the CLI flag's value and
/// the JSON's) through to_string, and a parser whose error names the flag and the choices, as
/// FitMode has (fit.h). Comparing these is comparing enums; the spellings live in choices.cpp only.
#include <array>
#include <optional>
#include <string>
#include <vector>

namespace batchwise {

/// What the forward pass and the loss run in.
enum class Precision {
  Fp32,  ///< "fp32"
  Bf16,  ///< "bf16": autocast to bfloat16
  Fp16,  ///< "fp16": autocast to float16 with dynamic loss scaling
};
enum class Optimizer {
  Sgd,    ///< "sgd" (batchwise's: momentum 0.9)
  Adam,   ///< "adam"
  AdamW,  ///< "adamw"
};
enum class Loss {
  CrossEntropy,  ///< "cross-entropy": integer class labels
  Mse,           ///< "mse": regression targets
};
/// The shape of the learning rate over a run of known length, after the advised warm-up.
enum class LrSchedule {
  Constant,  ///< "constant": the advised rate to the end
  Cosine,    ///< "cosine": half a cosine from the advised rate towards 0 at the run's end
  Step,      ///< "step": the advised rate, x0.1 from half the steps after the warm-up, x0.01 from three quarters
};
/// The c10d backend of a data-parallel group.
enum class Backend {
  Auto,  ///< "auto": nccl for a CUDA device where LibTorch has it, gloo otherwise
  Gloo,  ///< "gloo"
  Nccl,  ///< "nccl"
};

const char* to_string(Precision precision);
const char* to_string(Optimizer optimizer);
const char* to_string(Loss loss);
const char* to_string(Backend backend);
const char* to_string(LrSchedule schedule);

/// Every value of each enum, for readers that parse the spelling back (the report reader).
constexpr std::array<Precision, 3> enum_values(Precision) {
  return {Precision::Fp32, Precision::Bf16, Precision::Fp16};
}
constexpr std::array<Optimizer, 3> enum_values(Optimizer) {
  return {Optimizer::Sgd, Optimizer::Adam, Optimizer::AdamW};
}
constexpr std::array<Loss, 2> enum_values(Loss) { return {Loss::CrossEntropy, Loss::Mse}; }
constexpr std::array<Backend, 3> enum_values(Backend) { return {Backend::Auto, Backend::Gloo, Backend::Nccl}; }
constexpr std::array<LrSchedule, 3> enum_values(LrSchedule) {
  return {LrSchedule::Constant, LrSchedule::Cosine, LrSchedule::Step};
}

/// Parsers: ConfigError "--precision fp8: unknown precision; choose one of fp32, bf16, fp16".
Precision parse_precision(const std::string& text);
Optimizer parse_optimizer(const std::string& text);
Loss parse_loss(const std::string& text);
Backend parse_backend(const std::string& text);
LrSchedule parse_lr_schedule(const std::string& text);

/// The built-in optimizer a workload's optimizer name (WorkloadInfo::optimizer) is, if it is one: a
/// Workload of the user's may train with any optimizer, and batchwise advises rates only for these.
std::optional<Optimizer> known_optimizer(const std::string& name);

/// The precision a workload's precision name (WorkloadInfo::precision) is, if it is one (a command's
/// is not known to batchwise).
std::optional<Precision> known_precision(const std::string& name);

/// Adam and AdamW: square-root learning-rate scaling, betas and epsilon.
bool adam_family(Optimizer optimizer);

/// Every spelling, in declaration order (for help texts and documentation).
const std::vector<std::string>& precision_names();
const std::vector<std::string>& optimizer_names();
const std::vector<std::string>& loss_names();
const std::vector<std::string>& lr_schedule_names();

/// What a numeric option accepts, by its CLI flag ("--steps"): the CLI's parser and the Python API
/// (steps=...) check values against the same table, before anything runs. Non-numbers, NaN and
/// infinities are refused too, and the upper bounds keep a typo from asking for 10^12 of anything.
struct OptionBound {
  const char* flag;
  double low;
  bool low_open;  ///< the value must be above `low`, not merely at least it
  double high;
  const char* why = nullptr;  ///< said after the bound
};
/// The table; find_option_bound: a flag's row, or null for a flag without one.
const std::vector<OptionBound>& option_bounds();
const OptionBound* find_option_bound(const std::string& flag);
/// "" where `value` is within `bound`; else why not, after `text` (the value as the user wrote it):
/// "0: must be at least 1", "1.5: must be at most 1 (a fraction of the budget)".
std::string out_of_bound(const OptionBound& bound, double value, const std::string& text);

}  // namespace batchwise

// The spellings of the workload's choices, and their parsers: the one place they are compared as
// strings.
#include "batchwise/choices.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "check.h"

namespace batchwise {

namespace {

template <typename E, size_t N>
E parse(const std::string& text, const char* const (&names)[N], const char* flag, const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (text == names[i]) return static_cast<E>(i);
  BATCHWISE_CHECK(false, ConfigError, "{} {}: unknown {}; choose one of {}", flag, text, what,
                  fmt::join(std::vector<std::string>(names, names + N), ", "));
  return static_cast<E>(0);
}

template <size_t N>
std::vector<std::string> all(const char* const (&names)[N]) {
  return std::vector<std::string>(names, names + N);
}

// In each enum's declaration order.
constexpr const char* kPrecisions[] = {"fp32", "bf16", "fp16"};
constexpr const char* kOptimizers[] = {"sgd", "adam", "adamw"};
constexpr const char* kLosses[] = {"cross-entropy", "mse"};
constexpr const char* kBackends[] = {"auto", "gloo", "nccl"};
constexpr const char* kLrSchedules[] = {"constant", "cosine", "step"};

}  // namespace

const char* to_string(Precision p) { return kPrecisions[static_cast<int>(p)]; }
const char* to_string(Optimizer o) { return kOptimizers[static_cast<int>(o)]; }
const char* to_string(Loss l) { return kLosses[static_cast<int>(l)]; }
const char* to_string(Backend b) { return kBackends[static_cast<int>(b)]; }
const char* to_string(LrSchedule s) { return kLrSchedules[static_cast<int>(s)]; }

Precision parse_precision(const std::string& text) {
  return parse<Precision>(text, kPrecisions, "--precision", "precision");
}
Optimizer parse_optimizer(const std::string& text) {
  return parse<Optimizer>(text, kOptimizers, "--optimizer", "optimizer");
}
Loss parse_loss(const std::string& text) { return parse<Loss>(text, kLosses, "--loss", "loss"); }
Backend parse_backend(const std::string& text) { return parse<Backend>(text, kBackends, "--dist-backend", "backend"); }

LrSchedule parse_lr_schedule(const std::string& text) {
  return parse<LrSchedule>(text, kLrSchedules, "--lr-schedule", "learning-rate schedule");
}

std::optional<Optimizer> known_optimizer(const std::string& name) {
  for (size_t i = 0; i < std::size(kOptimizers); ++i)
    if (name == kOptimizers[i]) return static_cast<Optimizer>(i);
  return std::nullopt;
}

std::optional<Precision> known_precision(const std::string& name) {
  for (size_t i = 0; i < std::size(kPrecisions); ++i)
    if (name == kPrecisions[i]) return static_cast<Precision>(i);
  return std::nullopt;
}

bool adam_family(Optimizer o) { return o == Optimizer::Adam || o == Optimizer::AdamW; }

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = all(kPrecisions);
  return names;
}
const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = all(kOptimizers);
  return names;
}
const std::vector<std::string>& loss_names() {
  static const std::vector<std::string> names = all(kLosses);
  return names;
}
const std::vector<std::string>& lr_schedule_names() {
  static const std::vector<std::string> names = all(kLrSchedules);
  return names;
}

const std::vector<OptionBound>& option_bounds() {
  constexpr double kMaxBatch = 1 << 30, kMaxCount = 1e7, kMaxSeconds = 1e7;
  static const std::vector<OptionBound> bounds = {
      {"--min", 1, false, kMaxBatch},
      {"--max", 1, false, kMaxBatch},
      {"--multiple-of", 1, false, kMaxBatch},
      {"--batch", 1, false, kMaxBatch},
      {"--micro-batch", 1, false, kMaxBatch},
      {"--base-batch", 1, false, kMaxBatch},
      {"--global-batch", 1, false, 1 << 24, "plan's search is linear in it"},
      {"--max-micro-batch", 1, false, kMaxBatch},
      {"--steps", 1, false, kMaxCount},
      {"--fit-steps", 1, false, kMaxCount},
      {"--noise-steps", 2, false, kMaxCount},
      {"--warmup", 0, false, kMaxCount},
      {"--repetitions", 1, false, 1000},
      {"--accumulation-steps", 1, false, 65536},
      {"--limit", 1, false, kMaxCount},
      {"--prefetch", 1, false, 1024},
      {"--workers", 0, false, 256},
      {"--threads", 1, false, 4096, "leave it out for torch's choice"},
      {"--nproc", 1, false, 1024, "the number of local processes"},
      {"--world-size", 1, false, 65536},
      {"--num-classes", 2, false, kMaxCount,
       "a classifier's classes, at least 2; leave it out to use the largest label + 1"},
      {"--synthetic-size", 1, false, 1e9},
      {"--held-out-split", 0, true, 0.9, "a fraction of the samples, such as 0.1"},
      {"--io-latency-us", 0, false, 1e7},
      {"--seed", 0, false, 18446744073709551615.0},
      {"--held-out-samples", 1, false, 1e9},
      {"--eval-every", 1, false, 1e12},
      {"--lr", 0, true, 1e6},
      {"--target", 0, true, 1, "a fraction of the budget"},
      {"--target-accuracy", 0, true, 1},
      {"--target-loss", 0, true, 1e9},
      {"--max-epochs", 0, true, 1e6},
      {"--epochs", 0, true, 1e6,
       "leave it out: tune then answers for its race's horizon, and validate times each batch to a target"},
      {"--max-seconds", 0, false, kMaxSeconds},
      {"--min-time", 0, false, kMaxSeconds},
      {"--trial-timeout", 0, false, kMaxSeconds},
      {"--dist-timeout", 0, true, kMaxSeconds},
      {"--advice-budget", 0, true, kMaxSeconds},
      {"--reuse-max-age", 0, false, 1e7},
      {"--stop-slower-than", 1, false, 1e6},
      {"--extend-below", 0, false, 30, "halvings below the smallest batch; tune --validate sets 2"},
  };
  return bounds;
}

const OptionBound* find_option_bound(const std::string& flag) {
  for (const OptionBound& b : option_bounds())
    if (flag == b.flag) return &b;
  return nullptr;
}

std::string out_of_bound(const OptionBound& b, double v, const std::string& text) {
  if (!std::isfinite(v)) return fmt::format("{}: not a finite number", text);
  const std::string why = b.why ? fmt::format(" ({})", b.why) : "";
  if (b.low_open ? v <= b.low : v < b.low)
    return fmt::format("{}: must be {} {:.15g}{}", text, b.low_open ? "above" : "at least", b.low, why);
  if (v > b.high) return fmt::format("{}: must be at most {:.15g}{}", text, b.high, why);
  return "";
}

}  // namespace batchwise

// The spellings of the workload's choices, and their parsers: the one place they are compared as
// strings.
#include "batchwise/choices.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

}  // namespace batchwise

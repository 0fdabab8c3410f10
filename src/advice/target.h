// A held-out target, shared by validate (train until it is met) and the batch race (record when it is
// met): an accuracy (class labels), a loss, or both, either reached counting; 0 leaves one unset.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>

namespace batchwise {

struct HeldOutTarget {
  double accuracy = 0, loss = 0;

  explicit operator bool() const { return accuracy > 0 || loss > 0; }
  bool met(double held_out_loss, const std::optional<double>& held_out_accuracy) const {
    return (accuracy > 0 && held_out_accuracy && *held_out_accuracy >= accuracy) || (loss > 0 && held_out_loss <= loss);
  }
  /// "test accuracy >= 0.85", "test loss <= 0.4", or both joined by "or"; `set` names what it is
  /// measured on.
  std::string text(const char* set) const {
    const std::string a = fmt::format("{} accuracy >= {:g}", set, accuracy), l = fmt::format("{} loss <= {:g}", set, loss);
    if (accuracy > 0 && loss > 0) return a + " or " + l;
    return accuracy > 0 ? a : l;
  }
};

}  // namespace batchwise

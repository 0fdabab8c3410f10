// A held-out target, shared by validate (train until it is met) and the batch race (record when it is
// met): an accuracy (class labels), a loss, or both, either reached counting; 0 leaves one unset.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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
    const std::string a = fmt::format("{} accuracy >= {:g}", set, accuracy),
                      l = fmt::format("{} loss <= {:g}", set, loss);
    if (accuracy > 0 && loss > 0) return a + " or " + l;
    return accuracy > 0 ? a : l;
  }
};

/// How far below the best final accuracy `best` on `held_out` samples a run may end and still be
/// as good: two standard errors of a proportion over the held-out set, at least half a point
/// (validate's full runs and the run race judge with it). A loss may lie within kLossTolerance of it.
inline double accuracy_tolerance(double best, int64_t held_out) {
  return std::max(0.005, 2 * std::sqrt(best * (1 - best) / static_cast<double>(held_out)));
}
constexpr double kLossTolerance = 0.02;

/// A run has left the start once its held-out loss is 2 % below the loss at the initial weights: until
/// then it sits on the initial plateau, and a comparison would rank noise (the batch race and the run
/// race judge with it alone, on the loss they read along the way; validate's full runs also count a
/// final accuracy above the initial weights' beyond the split's noise; their notes say "2 %").
constexpr double kLeftTheStart = 0.98;
/// Whether a held-out `loss` is below kLeftTheStart x `loss_before`, the initial weights' (at the
/// line it has not).
inline bool off_the_start(double loss, double loss_before) { return loss < kLeftTheStart * loss_before; }

}  // namespace batchwise

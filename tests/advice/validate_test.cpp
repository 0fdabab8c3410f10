// validate's time to a target from the curve so far, on curves given point by point.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "batchwise/validate.h"

namespace batchwise {
namespace {

// validate's "~N s to the target": each measure as a line in the log of training time, through the
// evaluations of the latest half of it, so one noisy evaluation does not swing it.
TEST(Validate, TimeToTargetFollowsTheCurveThroughTheLatestEvaluations) {
  const auto curve = [](std::vector<std::pair<double, double>> loss, std::vector<double> accuracy = {}) {
    std::vector<ValidationPoint> c;
    for (size_t i = 0; i < loss.size(); ++i) {
      ValidationPoint p;
      p.train_s = loss[i].first;
      p.loss = loss[i].second;
      if (i < accuracy.size()) p.accuracy = accuracy[i];
      c.push_back(p);
    }
    return c;
  };
  // loss = 1 - 0.1 log2 t: 0.7 at t = 8, 0.5 at t = 32: 24 s to go. The evaluations before t = 4
  // (half of 8) do not count, the wild one at 0.5 s included.
  EXPECT_NEAR(*time_to_target(curve({{0.5, 9.0}, {1, 1.0}, {2, 0.9}, {4, 0.8}, {8, 0.7}}), 0, 0.5), 24.0, 1e-9);
  // A last evaluation that rose above the one before still leaves a falling line through the latest
  // half (a two-point estimate read it as not improving).
  const auto noisy = time_to_target(curve({{4, 0.8}, {5, 0.76}, {6, 0.72}, {7, 0.70}, {8, 0.72}}), 0, 0.5);
  ASSERT_TRUE(noisy.has_value());
  EXPECT_GT(*noisy, 0);
  // accuracy = 0.5 + 0.1 log2 t: 0.8 at t = 8, 4 s after t = 4; with a loss target as well (loss =
  // 1 - 0.1 log2 t reaches 0.75 at t = 2^2.5) the sooner counts.
  const auto both = curve({{2, 0.9}, {4, 0.8}}, {0.6, 0.7});
  EXPECT_NEAR(*time_to_target(both, 0.8, 0), 4.0, 1e-9);
  EXPECT_NEAR(*time_to_target(both, 0.8, 0.75), std::pow(2.0, 2.5) - 4, 1e-9);
  EXPECT_NEAR(*time_to_target(both, 0.65, 0), 0.0, 1e-9) << "met already: nothing left";
  EXPECT_FALSE(time_to_target(curve({{1, 0.8}, {2, 0.8}}), 0, 0.5).has_value()) << "not improving";
  EXPECT_FALSE(time_to_target(curve({{0, 2.3}, {1, 0.8}}), 0, 0.5).has_value()) << "one evaluation after the start";
  EXPECT_FALSE(time_to_target(curve({{1, 0.8}, {2, 0.7}}), 0.9, 0).has_value()) << "no accuracy to follow";
}

}  // namespace
}  // namespace batchwise

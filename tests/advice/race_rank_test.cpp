// The batch race's ranking on synthetic curves, without training: each rule at its named threshold
// (advice/race_rank.h), with the expected figures worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "advice/race_rank.h"

namespace batchwise {
namespace {

using namespace detail;

// An entry at `batch` whose evaluations lie on loss = intercept + slope t at t = 2, 4, ..., 10, after
// the initial evaluation (t = 0) at `start`, which is off that line; loss_at_horizon at t = 10.
RaceEntry on_line(int64_t batch, double start, double intercept, double slope) {
  RaceEntry e;
  e.batch = batch;
  e.samples_per_s = 1000;
  e.curve.push_back({0, start, std::nullopt});
  for (int t = 2; t <= 10; t += 2) e.curve.push_back({static_cast<double>(t), intercept + slope * t, std::nullopt});
  e.loss_at_horizon = intercept + slope * 10;
  return e;
}

RaceEntry with_ratio(int64_t batch, std::optional<double> ratio, std::optional<double> sd, bool within_noise = false) {
  RaceEntry e;
  e.batch = batch;
  e.loss_at_horizon = 1;
  e.time_ratio = ratio;
  e.time_ratio_sd = sd;
  e.within_noise = within_noise;
  return e;
}

// Left the start: an evaluation after it strictly below 0.98 x the initial loss (the notes say 2 %);
// one exactly at that line has not, and the initial evaluation itself never counts.
TEST(RaceRank, LeftTheStartIsTheNamedDropBelowTheInitialLoss) {
  EXPECT_NEAR(1 - kLeftTheStart, 0.02, 1e-15);
  const double before = 2.5, line = kLeftTheStart * before;
  RaceEntry e;
  e.curve = {{0, 1.0, std::nullopt}, {1, before, std::nullopt}, {2, line, std::nullopt}};
  EXPECT_FALSE(left_the_start(e, before)) << "at the line, and an initial evaluation below it";
  e.curve.push_back({3, std::nextafter(line, 0.0), std::nullopt});
  EXPECT_TRUE(left_the_start(e, before));
}

// Points on an exact line give back its intercept and slope, with no scatter; the initial evaluation
// (off the line) is left out while later ones are there, and used when only one is.
TEST(RaceRank, LateLineThroughPointsOnALineIsThatLine) {
  const RaceEntry e = on_line(64, 10.0, 3.0, -0.25);
  const auto [intercept, slope] = late_line(e.curve, 3);
  EXPECT_NEAR(intercept, 3.0, 1e-12);
  EXPECT_NEAR(slope, -0.25, 1e-12);
  const auto all = late_line(e.curve, 100);  // every evaluation but the initial one
  EXPECT_NEAR(all.first, 3.0, 1e-12);
  EXPECT_NEAR(all.second, -0.25, 1e-12);
  EXPECT_EQ(first_trained(e.curve, 0), 1u);
  const Curve two{{0, 10.0, std::nullopt}, {2, 6.0, std::nullopt}};
  EXPECT_EQ(first_trained(two, 0), 0u);
  const auto through_start = late_line(two, kLineMinPoints);
  EXPECT_NEAR(through_start.first, 10.0, 1e-12);
  EXPECT_NEAR(through_start.second, -2.0, 1e-12);
  const auto scatter = late_scatter(e.curve, 3);  // reads kScatterMinPoints of them
  ASSERT_TRUE(scatter.has_value());
  EXPECT_NEAR(scatter->first, 0.0, 1e-12);
  EXPECT_NEAR(scatter->second, -0.25, 1e-12);
  EXPECT_NEAR(*time_scatter(scatter, 10), 0.0, 1e-12);
  EXPECT_FALSE(late_scatter(two, 4).has_value()) << "fewer than kScatterFewestPoints";
  EXPECT_FALSE(time_scatter(std::make_pair(0.1, 0.0), 10).has_value()) << "a loss not falling";
  // Scattered: 0.1 above and below loss = 3 - 0.25 t in turn, at t = 2, 4, 6, 8. By hand, least squares
  // through them has slope -0.27 and intercept 3.1, residuals 0.04, -0.12, 0.12, -0.04: sd sqrt(0.032 / 2).
  const Curve noisy{{2, 2.6, std::nullopt}, {4, 1.9, std::nullopt}, {6, 1.6, std::nullopt}, {8, 0.9, std::nullopt}};
  const auto n = late_scatter(noisy, 4);
  ASSERT_TRUE(n.has_value());
  EXPECT_NEAR(n->second, -0.27, 1e-12);
  EXPECT_NEAR(n->first, std::sqrt(0.032 / 2), 1e-12);
  EXPECT_NEAR(*time_scatter(n, 10), std::sqrt(0.016) / 0.27 / 10, 1e-12);
}

// A loss at the horizon: the late line's; where that falls below zero through evaluations all above it (a
// convex fall, an MSE once predicted at -0.02 and ranked first), the line through their logarithms. By hand:
// through 1.036, 0.203, 0.109 at t = 1, 2, 3 the line reads -0.107 at 3.2, the logarithms' 0.0736.
TEST(RaceRank, ALossIsNotPredictedBelowZero) {
  const Curve convex{
      {0, 2.3, std::nullopt}, {1, 1.036, std::nullopt}, {2, 0.203, std::nullopt}, {3, 0.109, std::nullopt}};
  const auto [intercept, slope] = late_line(convex, 3);
  EXPECT_NEAR(intercept + slope * 3.2, -0.107, 0.001);
  const double logs = (std::log(1.036) + std::log(0.203) + std::log(0.109)) / 3;
  const double log_slope = (std::log(0.109) - std::log(1.036)) / 2;
  EXPECT_NEAR(loss_at(convex, 3, 3.2), std::exp(logs + log_slope * 1.2), 1e-12);
  EXPECT_NEAR(loss_at(convex, 3, 3.2), 0.0736, 0.001);
  // above zero: the line's, as before
  const RaceEntry e = on_line(64, 10.0, 3.0, -0.25);
  EXPECT_NEAR(loss_at(e.curve, 3, 10), 0.5, 1e-12);
  // a loss of the user's that goes below zero itself: its line, whatever it reads
  const Curve negative{{1, 0.5, std::nullopt}, {2, -0.1, std::nullopt}, {3, -0.4, std::nullopt}};
  EXPECT_NEAR(loss_at(negative, 3, 4), -0.9, 1e-12);  // slope -0.45 through the mean, 0, at t = 2
}

// A rung ranks by loss at the horizon; the others' time ratio is their predicted time to the best's
// loss over the horizon. With a target, by the interpolated crossing, its resolution the crossing
// intervals' uniform spread.
TEST(RaceRank, ARungRanksByLossOrByTheFirstToTheTarget) {
  RaceEntry a = on_line(64, 3.0, 2.2, -0.1);   // 1.2 at the horizon
  RaceEntry b = on_line(128, 3.0, 2.0, -0.1);  // 1.0: the best
  std::vector<RaceEntry*> rung{&a, &b};
  std::vector<size_t> ranked = rank_rung(rung, 10, 4, HeldOutTarget{}, 3.0);
  EXPECT_EQ(ranked, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(*b.time_ratio, 1.0);
  EXPECT_NEAR(*a.time_ratio, (1.0 - 2.2) / -0.1 / 10, 1e-9);  // 12 s to 1.0, over 10 s
  EXPECT_NEAR(*a.time_ratio_sd, 0.0, 1e-9);
  EXPECT_FALSE(a.target_s.has_value());
  const RungLead lead = rung_lead(b, 0, 10, 5000);
  EXPECT_EQ(lead.rung, 1);
  EXPECT_EQ(lead.batch, 128);
  EXPECT_DOUBLE_EQ(lead.epochs, 10 * 1000.0 / 5000);
  EXPECT_NEAR(lead.loss, 1.0, 1e-12);

  // Target loss 1.5: b crosses half-way from t = 4 (1.6) to 6 (1.4), at 5 s; a from 6 to 8, at 7 s.
  ranked = rank_rung(rung, 10, 4, HeldOutTarget{0, 1.5}, 3.0);
  EXPECT_EQ(ranked, (std::vector<size_t>{1, 0}));
  EXPECT_NEAR(*b.target_s, 5.0, 1e-9);
  EXPECT_NEAR(*a.target_s, 7.0, 1e-9);
  EXPECT_NEAR(*a.time_ratio, 7.0 / 5.0, 1e-9);
  EXPECT_NEAR(*a.time_ratio_sd, std::hypot(2.0, 2.0) / std::sqrt(12.0) / 5.0, 1e-9);
  const std::optional<Crossing> c = first_crossing(a.curve, HeldOutTarget{0, 1.5});
  ASSERT_TRUE(c.has_value());
  EXPECT_NEAR(c->interval_s, 2.0, 1e-12);
}

// The flat range: the entries within kFlatRangeRatio + kFlatRangeSd x their resolution of the best
// (the boundary included), or within the noise, and every batch between them, in batch order.
TEST(RaceRank, TheFlatRangeTakesInTheBatchesBetweenTwoWithinIt) {
  const RaceEntry best = with_ratio(32, 1.0, 0.0);
  const RaceEntry slow = with_ratio(64, 1.5, 0.05);                                   // 1.5 > 1.15: out itself
  const RaceEntry edge = with_ratio(128, kFlatRangeRatio + kFlatRangeSd * 0.1, 0.1);  // exactly at the bound
  const RaceEntry far = with_ratio(256, 2.0, 0.1);
  const RaceEntry reserve = with_ratio(16, 3.0, 0.1);  // joined last, out
  EXPECT_EQ(flat_range({&best, &slow, &edge, &far, &reserve}), (std::vector<int64_t>{32, 64, 128}));
  const RaceEntry flat = with_ratio(512, std::nullopt, std::nullopt, /*within_noise=*/true);
  EXPECT_EQ(flat_range({&flat, &best, &slow, &far}), (std::vector<int64_t>{32, 64, 256, 512}));
  const RaceEntry past = with_ratio(512, 1.05 + 2 * 0.1 + 1e-9, 0.1);
  EXPECT_EQ(flat_range({&best, &past}), (std::vector<int64_t>{32}));
  EXPECT_TRUE(flat_range({&far}).empty());
}

// Of two the race cannot tell apart (a time ratio within kTieSd of its resolution of 1), the larger;
// just past that, the lead.
TEST(RaceRank, TheLastRungPicksTheLargerOfTwoItCannotTellApart) {
  RaceEntry lead = with_ratio(256, 1.0, 0.05);
  lead.loss_at_horizon = 0.40;
  RaceEntry tied = with_ratio(512, 1 + kTieSd * 0.2, 0.2);
  tied.loss_at_horizon = 0.41;
  LastRungPick pick = pick_last_rung({&tied, &lead});
  EXPECT_EQ(pick.batch, 512);
  EXPECT_EQ(pick.lead_batch, 256);
  EXPECT_FALSE(pick.reason.empty());
  tied.time_ratio = std::nextafter(1 + kTieSd * 0.2, 2.0);
  pick = pick_last_rung({&tied, &lead});
  EXPECT_EQ(pick.batch, 256);
  EXPECT_TRUE(pick.reason.empty()) << pick.reason;
}

}  // namespace
}  // namespace batchwise

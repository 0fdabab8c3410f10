// The batch race on the closed-form regression (support/regression.h): its pick against the closed
// form, targets, wall-clock limits, divergence, the plateau at the start and its reserve, and its
// candidates from a sweep. Its ranking alone, without training, is in race_rank_test.cpp.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "batchwise/error.h"
#include "batchwise/race.h"
#include "batchwise/recommend.h"
#include "batchwise/workload.h"
#include "support/regression.h"

namespace batchwise {
namespace {

using test::gaussian_regression;
using test::kDim;
using test::kSigma;
using test::mse_workload;
using test::Regression;
using test::stability_limit;

// `o` on a machine that slows while entry `index` of rung `rung` trains (its progress report): a
// clock a microsecond on at each read that jumps 1000 s then (index 0: any entry of the rung; -1:
// its last), past any wall limit the tests give.
BatchRaceOptions slowed_at(BatchRaceOptions o, int rung, int index) {
  const auto now = std::make_shared<double>(0);
  return o.clock([now] { return *now += 1e-6; }).on_progress([now, rung, index](const RaceProgress& p) {
    if (p.rung == rung && (index == 0 || p.index == (index < 0 ? p.count : index))) *now += 1000;
  });
}

// The race ranks by held-out loss at equal training time on the injected samples/s: its winner is
// the batch with the lowest closed-form expected loss at the final horizon (or within 2 % of it),
// and the workload comes back as it was.
TEST(BatchRace, PicksTheClosedFormBestBatch) {
  Regression problem(5.0, 0.1);
  const std::vector<int64_t> batches{4, 16, 64, 256, 1024};
  std::vector<double> rates;  // a step costs 1 ms plus 10 us a sample
  for (int64_t b : batches) rates.push_back(static_cast<double>(b) / (1e-3 + 1e-5 * static_cast<double>(b)));
  const auto before = problem.workload->module().parameters()[0].clone();
  const double lr_before = problem.workload->optimizer().param_groups()[0].options().get_lr();
  const BatchRace race = race_batches(
      *problem.workload, problem.held_out,
      BatchRaceOptions(batches, rates, LrAdviceOptions(32, 0.1).warmup_samples(2048)).budget_s(2).evaluations(4));
  EXPECT_TRUE(at::equal(before, problem.workload->module().parameters()[0]));
  EXPECT_EQ(problem.workload->optimizer().param_groups()[0].options().get_lr(), lr_before);  // the entries set others
  ASSERT_TRUE(race.best_batch.has_value());
  ASSERT_EQ(race.entries.size(), batches.size());
  const double horizon = race.horizons_s.back();
  std::map<int64_t, double> expected;
  for (size_t i = 0; i < batches.size(); ++i) {
    const RaceEntry& e = race.entries[i];
    ASSERT_EQ(e.batch, batches[i]);
    EXPECT_TRUE(e.message.empty()) << e.batch << ": " << e.message;
    const auto steps = static_cast<int64_t>(horizon * rates[i] / static_cast<double>(batches[i]));
    expected[e.batch] = problem.expected_loss(e.lr, e.batch, steps);
    // A rung reads the loss from the entry's own evaluations, never from a line through the
    // initial loss (26 here) that every entry shares: that line would predict far below the noise
    // floor (sigma^2 = 1) and favour whoever fell most in the first interval.
    ASSERT_TRUE(e.loss_at_horizon.has_value()) << e.batch;
    EXPECT_GT(*e.loss_at_horizon, 0.9 * kSigma * kSigma) << e.batch;
  }
  double lowest = 1e300;
  int64_t best = 0;
  for (const auto& [batch, loss] : expected)
    if (loss < lowest) lowest = loss, best = batch;
  std::string table;
  for (const auto& [batch, loss] : expected) table += fmt::format(" {}:{:.4f}", batch, loss);
  EXPECT_LE(expected.at(*race.best_batch), 1.02 * lowest)
      << "the race picked " << *race.best_batch << ", the closed form " << best << " (expected losses" << table << ")";
  // Rungs double: every horizon is the previous one plus twice the previous rung's time.
  ASSERT_GE(race.horizons_s.size(), 2u);
  EXPECT_NEAR(race.horizons_s[1], 3 * race.horizons_s[0], 1e-9);
  // Each rung's lead: the entry with the lowest loss at that rung's horizon, its samples in epochs;
  // the last rung's is the race's lead.
  ASSERT_EQ(race.rung_leads.size(), race.horizons_s.size());
  for (size_t r = 0; r < race.rung_leads.size(); ++r) {
    const RungLead& lead = race.rung_leads[r];
    EXPECT_EQ(lead.rung, static_cast<int>(r) + 1);
    EXPECT_EQ(lead.horizon_s, race.horizons_s[r]);
    const size_t i = std::find(batches.begin(), batches.end(), lead.batch) - batches.begin();
    ASSERT_LT(i, batches.size());
    EXPECT_NEAR(lead.epochs, lead.horizon_s * rates[i] / static_cast<double>(problem.workload->data().size()), 1e-9);
    EXPECT_GE(race.entries[i].rungs, lead.rung) << "a rung's lead goes on to the next rung";
  }
  EXPECT_EQ(race.rung_leads.back().batch, *race.lead_batch);
  EXPECT_EQ(
      race.rung_leads.back().loss,
      *race.entries[std::find(batches.begin(), batches.end(), *race.lead_batch) - batches.begin()].loss_at_horizon);
  // The flat range: the best, and those within 5 % or within two of the race's measured resolution
  // (the scatter of the late evaluations), and nothing that the race told apart.
  ASSERT_FALSE(race.within_5_percent.empty());
  EXPECT_NE(std::find(race.within_5_percent.begin(), race.within_5_percent.end(), *race.best_batch),
            race.within_5_percent.end());
  for (const RaceEntry& e : race.entries) {
    const bool listed =
        std::find(race.within_5_percent.begin(), race.within_5_percent.end(), e.batch) != race.within_5_percent.end();
    if (e.time_ratio_sd) EXPECT_GE(*e.time_ratio_sd, 0) << e.batch;
    const bool close = e.time_ratio && *e.time_ratio <= 1.05 + 2 * e.time_ratio_sd.value_or(0);
    if (close) EXPECT_TRUE(listed) << e.batch;
    if (listed && !close) {  // only between two that are close
      EXPECT_GT(e.batch, race.within_5_percent.front());
      EXPECT_LT(e.batch, race.within_5_percent.back());
    }
  }
}

// With the user's target within the race's reach, the race measures the time to it instead of
// predicting from its horizon: the rung in which an entry first gets there is the last (every other
// entry of that rung trained past that time without), the first there is the pick with no tie rule
// (the run ends at the target), each crossing is interpolated between the evaluations around it, and
// the race trains less than it would without the target.
TEST(BatchRace, ATargetWithinReachIsMeasuredAndEndsTheRace) {
  Regression problem(5.0, 0.1);
  const std::vector<int64_t> batches{4, 16, 64, 256, 1024};
  std::vector<double> rates;  // as above: a step costs 1 ms plus 10 us a sample
  for (int64_t b : batches) rates.push_back(static_cast<double>(b) / (1e-3 + 1e-5 * static_cast<double>(b)));
  const auto options =
      BatchRaceOptions(batches, rates, LrAdviceOptions(32, 0.1).warmup_samples(2048)).budget_s(2).evaluations(4);
  const BatchRace plain = race_batches(*problem.workload, problem.held_out, options);
  const double target = 1.5;  // the loss starts at 26, the noise floor is 1
  const BatchRace race =
      race_batches(*problem.workload, problem.held_out, BatchRaceOptions(options).target_loss(target));
  EXPECT_TRUE(plain.target.empty());
  EXPECT_EQ(race.target, "held-out loss <= 1.5");
  ASSERT_TRUE(race.best_batch.has_value());
  ASSERT_LT(race.horizons_s.size(), plain.horizons_s.size()) << "the race ends at the rung where the target is reached";
  const auto rungs = static_cast<int>(race.horizons_s.size());
  EXPECT_NE(race.notes.back().find(fmt::format("the race ended after rung {} of {}: batch {} reached the target", rungs,
                                               plain.horizons_s.size(), *race.best_batch)),
            std::string::npos)
      << race.notes.back();
  const RaceEntry* first = nullptr;
  for (const RaceEntry& e : race.entries) {
    if (e.rungs < rungs) {
      EXPECT_FALSE(e.target_s) << e.batch << ": a dropped entry had not reached the target";
      continue;
    }
    if (!e.target_s) {  // it trained to the horizon without getting there
      for (const auto& p : e.curve) EXPECT_GT(p.loss, target) << e.batch;
      continue;
    }
    size_t i = 1;
    while (e.curve[i].loss > target) ++i;
    const RaceEntry::Point &a = e.curve[i - 1], &b = e.curve[i];
    EXPECT_NEAR(*e.target_s, a.train_s + (a.loss - target) / (a.loss - b.loss) * (b.train_s - a.train_s), 1e-9)
        << e.batch;
    if (!first || *e.target_s < *first->target_s) first = &e;
  }
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(*race.best_batch, first->batch);
  EXPECT_EQ(*race.lead_batch, first->batch);
  EXPECT_TRUE(race.pick_reason.empty()) << race.pick_reason;
  EXPECT_EQ(*first->time_ratio, 1.0);
  for (const RaceEntry& e : race.entries)
    if (e.rungs == rungs && e.target_s) EXPECT_DOUBLE_EQ(*e.time_ratio, *e.target_s / *first->target_s) << e.batch;
  const std::optional<Recommendation> rec = recommend(std::nullopt, std::nullopt, race);
  ASSERT_TRUE(rec.has_value());
  EXPECT_NE(rec->reason.find(fmt::format("batch {} reached the target (held-out loss <= 1.5) first, after {:.1f} s",
                                         first->batch, *first->target_s)),
            std::string::npos)
      << rec->reason;

  // A target the initial weights meet says nothing about batches: the race runs as without one.
  const BatchRace met = race_batches(*problem.workload, problem.held_out, BatchRaceOptions(options).target_loss(30));
  EXPECT_TRUE(met.target.empty());
  EXPECT_EQ(met.horizons_s.size(), plain.horizons_s.size());
  ASSERT_FALSE(met.notes.empty());
  EXPECT_NE(met.notes.front().find("the target (held-out loss <= 30) is met by the initial weights already"),
            std::string::npos)
      << met.notes.front();
  // An accuracy needs class labels.
  try {
    race_batches(*problem.workload, problem.held_out, BatchRaceOptions(options).target_accuracy(0.9));
    FAIL() << "an accuracy target on regression targets";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gaussian-regression: a target accuracy needs class labels"),
              std::string::npos)
        << e.what();
  }
}

// A machine that slowed within a rung after the first (the clock jumps past the limit while the
// rung's first entry trains) stops the race before the rung's next entry: the best of the last
// finished rung wins, as where the limit passes between rungs, and the notes say where it stopped.
TEST(BatchRace, AWallClockLimitPassedWithinARungEndsItBeforeItsNextEntry) {
  Regression problem(5.0, 0.1);
  const BatchRaceOptions options =
      BatchRaceOptions({16, 64, 256}, {1e4, 2e4, 3e4}, LrAdviceOptions(32, 0.1)).budget_s(1).max_wall_s(100);
  const BatchRace race = race_batches(*problem.workload, problem.held_out, slowed_at(options, 2, 0));
  EXPECT_EQ(race.horizons_s.size(), 1u);
  ASSERT_TRUE(race.best_batch.has_value());
  EXPECT_TRUE(race.stopped_at_wall_limit);
  ASSERT_EQ(race.notes.size(), 1u);
  EXPECT_EQ(race.notes[0].find("the race stopped during rung 2 of 2: it had taken"), 0u) << race.notes[0];
  EXPECT_NE(race.notes[0].find("; the best of rung 1 wins, and every entry keeps its figures from there"),
            std::string::npos)
      << race.notes[0];
  // The same race stopped before rung 2: the same pick, and every entry's figures the same (rung 2's
  // first entry trained, and keeps rung 1's).
  const BatchRace between = race_batches(*problem.workload, problem.held_out, slowed_at(options, 1, -1));
  ASSERT_TRUE(between.best_batch.has_value());
  EXPECT_EQ(*race.best_batch, *between.best_batch);
  ASSERT_EQ(race.entries.size(), between.entries.size());
  for (size_t i = 0; i < race.entries.size(); ++i) {
    EXPECT_EQ(race.entries[i].batch, between.entries[i].batch);
    EXPECT_EQ(race.entries[i].rungs, 1) << race.entries[i].batch;  // none from the rung that did not finish
    EXPECT_EQ(race.entries[i].steps, between.entries[i].steps) << race.entries[i].batch;
    EXPECT_EQ(race.entries[i].loss_at_horizon, between.entries[i].loss_at_horizon) << race.entries[i].batch;
  }
  // Without the jump, rung 2 finishes.
  const BatchRace quiet = race_batches(*problem.workload, problem.held_out, options);
  EXPECT_EQ(quiet.horizons_s.size(), 2u);
  EXPECT_FALSE(quiet.stopped_at_wall_limit);
  for (const std::string& note : quiet.notes) EXPECT_EQ(note.find("the race stopped"), std::string::npos) << note;
}

// A machine that slowed within the first rung (the clock jumps while its second entry trains): the
// entries after the first two that trained do not race, leave the race without an entry, and the
// rung ranks the two; the race says so, and its answer is at low confidence. Before, a slowed first
// rung ran to its end.
TEST(BatchRace, AWallClockLimitPassedInTheFirstRungRanksTheEntriesThatTrained) {
  Regression problem(5.0, 0.1);
  const BatchRaceOptions options =
      BatchRaceOptions({16, 32, 64, 128}, {1e4, 2e4, 3e4, 4e4}, LrAdviceOptions(32, 0.1)).budget_s(1).max_wall_s(100);
  const BatchRace race = race_batches(*problem.workload, problem.held_out, slowed_at(options, 1, 2));
  EXPECT_TRUE(race.stopped_at_wall_limit);
  EXPECT_EQ(race.left_out, (std::vector<int64_t>{64, 128}));
  ASSERT_EQ(race.entries.size(), 2u);
  EXPECT_EQ(race.entries[0].batch, 16);
  EXPECT_EQ(race.entries[1].batch, 32);
  EXPECT_EQ(race.horizons_s.size(), 1u);
  ASSERT_TRUE(race.best_batch.has_value());
  EXPECT_TRUE(*race.best_batch == 16 || *race.best_batch == 32) << *race.best_batch;
  const std::string notes = fmt::format("{}", fmt::join(race.notes, "\n"));
  EXPECT_NE(notes.find("the race passed its wall limit during its first rung: it had taken"), std::string::npos)
      << notes;
  EXPECT_NE(notes.find("so batches 64, 128 did not race; the rung ranks those that trained"), std::string::npos)
      << notes;
  const std::optional<Recommendation> said = recommend(std::nullopt, std::nullopt, race);
  ASSERT_TRUE(said.has_value());
  EXPECT_NE(said->reason.find("racing 2 candidates"), std::string::npos) << said->reason;
  EXPECT_NE(said->reason.find("; left out, not raced: 64, 128)"), std::string::npos) << said->reason;
  Evidence evidence;
  evidence.race = &race;
  const Recommendation answer = with_confidence(Recommendation{*race.best_batch, "the race"}, evidence);
  EXPECT_EQ(answer.confidence, Confidence::Low);
  EXPECT_NE(answer.confidence_reason.find("the race stopped at its wall limit"), std::string::npos)
      << answer.confidence_reason;
  EXPECT_NE(answer.confidence_reason.find("left out: batches 64, 128 (its notes say why)"), std::string::npos)
      << answer.confidence_reason;
  // Without the jump every candidate races.
  const BatchRace quiet = race_batches(*problem.workload, problem.held_out, options);
  EXPECT_FALSE(quiet.stopped_at_wall_limit);
  EXPECT_EQ(quiet.entries.size(), 4u);
  EXPECT_TRUE(quiet.left_out.empty());
}

// The budget is training time at the sweep's speed; a machine that became slower stops the race at
// its wall-clock limit after the first rung, with the best of that rung and a note saying why.
TEST(BatchRace, AWallClockLimitEndsTheRaceAfterARung) {
  Regression problem(5.0, 0.1);
  const BatchRace race = race_batches(
      *problem.workload, problem.held_out,
      slowed_at(BatchRaceOptions({16, 64, 256}, {1e4, 2e4, 3e4}, LrAdviceOptions(32, 0.1)).budget_s(1).max_wall_s(100),
                1, -1));  // while the first rung's last entry trains
  EXPECT_EQ(race.horizons_s.size(), 1u);
  ASSERT_TRUE(race.best_batch.has_value());
  EXPECT_TRUE(race.stopped_at_wall_limit);
  ASSERT_EQ(race.notes.size(), 1u);
  EXPECT_NE(race.notes[0].find("the race stopped after rung 1 of 2"), std::string::npos) << race.notes[0];
  double best_loss = 0;
  for (const auto& e : race.entries)
    if (e.batch == *race.best_batch) best_loss = *e.loss_at_horizon;
  for (const auto& e : race.entries) {
    EXPECT_EQ(e.rungs, 1);
    EXPECT_GE(*e.loss_at_horizon, best_loss);
  }
}

// The first rung is shared, so who races is decided by the share their number leaves: 64, short of 8
// steps beside 128 (an eighth of the budget each: 7 steps), has 8 in the share three entries leave (a
// seventh), and races; 128 would have 3 beside them, and is left out with a note saying so.
TEST(BatchRace, ACandidateThatFitsTheShareLeftByThoseLeftOutRaces) {
  const BatchRaceOptions options =
      BatchRaceOptions({16, 32, 64, 128}, {1e4, 1e4, 3700, 3700}, LrAdviceOptions(32, 0.1)).budget_s(1);
  EXPECT_EQ(first_rung_batches(options), (std::vector<int64_t>{16, 32, 64}));
  Regression problem(5.0, 0.1);
  const BatchRace race = race_batches(*problem.workload, problem.held_out, options);
  EXPECT_EQ(race.left_out, (std::vector<int64_t>{128}));
  ASSERT_EQ(race.entries.size(), 3u);
  EXPECT_EQ(race.entries[2].batch, 64);
  const std::string notes = fmt::format("{}", fmt::join(race.notes, "\n"));
  EXPECT_NE(notes.find("batch 128 left out: raced beside the 3 kept, 3 steps would fit its share of the first rung "
                       "(0.12 s), below the 8 a comparison needs"),
            std::string::npos)
      << notes;
  // Where none fits the share even alone, none races.
  const BatchRaceOptions starved = BatchRaceOptions({256, 512}, {1000, 1000}, LrAdviceOptions(256, 0.1)).budget_s(1);
  EXPECT_TRUE(first_rung_batches(starved).empty());
}

// A race past its planned wall time shortens the rungs left to fit it, down to the steps a comparison
// needs, says so, and still runs them: the plan is kept without cutting the race short. Its answer,
// ranked after less than half the training planned, is low in confidence.
TEST(BatchRace, ARaceBehindItsWallTimeShortensTheRungsLeft) {
  Regression problem(5.0, 0.1);
  const BatchRaceOptions o = BatchRaceOptions({16, 64, 256}, {1e4, 2e4, 3e4}, LrAdviceOptions(32, 0.1)).budget_s(3);
  const BatchRace planned = race_batches(*problem.workload, problem.held_out, o);
  const BatchRace late = race_batches(*problem.workload, problem.held_out, BatchRaceOptions(o).wall_budget_s(1e-6));
  ASSERT_EQ(planned.horizons_s.size(), 2u);
  ASSERT_EQ(late.horizons_s.size(), 2u);
  EXPECT_DOUBLE_EQ(late.horizons_s[0], planned.horizons_s[0]);  // the first rung as planned
  const double rung2 = late.horizons_s[1] - late.horizons_s[0];
  EXPECT_LT(rung2, 0.5 * (planned.horizons_s[1] - planned.horizons_s[0]));
  // Never below 8 steps (min_steps) for the slowest-stepping finalist: 256 at 3e4 samples/s.
  EXPECT_GE(rung2, 8 * 256 / 3e4 * 0.999);
  ASSERT_FALSE(late.notes.empty());
  EXPECT_NE(late.notes[0].find("rung 2 trained"), std::string::npos) << late.notes[0];
  EXPECT_NE(late.notes[0].find("fitted to the rest"), std::string::npos) << late.notes[0];
  ASSERT_TRUE(late.best_batch.has_value());
  // The plan: the first rung's slice, doubling; the race on time kept to it.
  EXPECT_EQ(planned.planned_horizons_s, planned.horizons_s);
  EXPECT_DOUBLE_EQ(planned.planned_horizons_s[1], 3 * planned.planned_horizons_s[0]);
  EXPECT_EQ(late.planned_horizons_s, planned.planned_horizons_s);
  EXPECT_LT(late.horizons_s[1], 0.4 * late.planned_horizons_s[1]);  // rung 2 at its floor of 8 steps
  Evidence on_time, behind;
  on_time.race = &planned;
  behind.race = &late;
  const Recommendation kept = with_confidence(Recommendation{*planned.best_batch, "the race"}, on_time);
  EXPECT_EQ(kept.confidence_reason.find("fell behind"), std::string::npos) << kept.confidence_reason;
  const Recommendation answer = with_confidence(Recommendation{*late.best_batch, "the race"}, behind);
  EXPECT_EQ(answer.confidence, Confidence::Low);
  EXPECT_NE(answer.confidence_reason.find(fmt::format(
                "the race fell behind its planned wall time and fitted its later rungs to what was left, so batch {} "
                "leads after {:.3g} s of training per candidate, not the {:.3g} s planned",
                *late.best_batch, late.horizons_s[1], planned.horizons_s[1])),
            std::string::npos)
      << answer.confidence_reason;
}

// A candidate that diverges is a result of the race, not an error, and the others go on.
TEST(BatchRace, ADivergingCandidateEndsAloneWithItsReason) {
  // The base setting itself (batch 64, rate 1.5) is past the limit (0.79); batch 8's rule, 0.19, is not.
  Regression problem(1.0, 1.5);
  const BatchRace race =
      race_batches(*problem.workload, problem.held_out,
                   BatchRaceOptions({8, 64}, {1e4, 5e4}, LrAdviceOptions(64, 1.5).warmup_samples(512)).budget_s(0.3));
  ASSERT_EQ(race.entries.size(), 2u);
  EXPECT_TRUE(race.entries[0].message.empty()) << race.entries[0].message;
  EXPECT_NE(race.entries[1].message.find("diverged"), std::string::npos) << race.entries[1].message;
  EXPECT_EQ(race.best_batch, 8);
  EXPECT_THROW(
      race_batches(*problem.workload, problem.held_out, BatchRaceOptions({8, 64}, {1e4}, LrAdviceOptions(64, 0.1))),
      ConfigError);
}

// Started at the optimum (|w - w*| = 0), every step at these rates adds its gradient noise to the weights: each
// candidate ends with a held-out loss well above where all began. No answer (a race had crowned such a batch at 4.41
// against 2.31 before it), not the plateau's, and the note says why.
TEST(BatchRace, EveryCandidateEndingWorseThanTheStartIsNoAnswer) {
  Regression problem(0.0, 0.6);
  const BatchRace race = race_batches(*problem.workload, problem.held_out,
                                      BatchRaceOptions({8, 32}, {1e4, 2e4}, LrAdviceOptions(32, 0.6)).budget_s(0.3));
  std::string notes;
  for (const auto& n : race.notes) notes += n + "\n";
  for (const RaceEntry& e : race.entries)
    ASSERT_FALSE(e.curve.empty() || e.curve.back().loss <= 1.25 * race.loss_before)
        << "batch " << e.batch << " did not end worse: " << notes;
  EXPECT_FALSE(race.best_batch.has_value());
  EXPECT_FALSE(race.stuck) << "not the plateau's answer";
  EXPECT_TRUE(race.ended_worse);
  EXPECT_NE(notes.find("every candidate ended the race with a held-out loss above where all began"), std::string::npos)
      << notes;
}

// The premise of the last rung's tie rule, in closed form: the batch that reaches a loss soonest
// grows as the loss to reach falls. For the regression (support/regression.h), each batch at its
// advised rate (the linear rule from 0.1 at 32, capped at a third of the stability limit, as
// advise_lr caps it), on a step costing 1 ms plus 10 us a sample: the time-optimal batch for each
// target, from far above the noise floor down to near it, never moves to a smaller batch.
TEST(BatchRace, TheFastestBatchToALossGrowsAsTheLossFalls) {
  const std::vector<int64_t> batches{4, 16, 64, 256, 1024};
  auto time_to = [&](int64_t batch, double target) {
    const double b = static_cast<double>(batch);
    const double lr = std::min(0.1 * b / 32, stability_limit(batch) / kLrSafety);
    double x = 25.0;  // |w - w*|^2 at the start
    for (int64_t k = 1; k <= 2000000; ++k) {
      x = (1 - 4 * lr + 4 * lr * lr * (1 + (kDim + 1) / b)) * x + 4 * lr * lr * kDim * kSigma * kSigma / b;
      if (x + kSigma * kSigma <= target) return static_cast<double>(k) * (1e-3 + 1e-5 * b);
    }
    return std::numeric_limits<double>::infinity();
  };
  int64_t previous = 0;
  for (double target : {10.0, 3.0, 1.5, 1.2, 1.1, 1.05, 1.02, 1.01}) {
    int64_t best = 0;
    double fastest = INFINITY;
    for (int64_t b : batches)
      if (const double t = time_to(b, target); t < fastest) fastest = t, best = b;
    ASSERT_GT(best, 0) << "no batch reaches " << target;
    EXPECT_GE(best, previous) << "target loss " << target;
    previous = best;
  }
  EXPECT_GT(previous, 16) << "near the noise floor a larger batch is fastest";
}

// The last rung decides between batches the race can resolve by their loss, and otherwise for the
// larger: it is at least as fast over a run longer than the race (the critical batch grows).
TEST(BatchRace, TheLastRungPicksTheLargerOfBatchesItCannotTellApart) {
  auto entry = [](int64_t batch, double loss, std::optional<double> ratio, std::optional<double> sd) {
    RaceEntry e;
    e.batch = batch;
    e.loss_at_horizon = loss;
    e.time_ratio = ratio;
    e.time_ratio_sd = sd;
    return e;
  };
  const RaceEntry lead = entry(256, 0.400, 1.0, 0.05);
  // 512 needs 1.08x the time to 256's loss, and the race resolves +/- 0.19: a tie.
  const RaceEntry tied = entry(512, 0.409, 1.08, 0.19);
  LastRungPick pick = pick_last_rung({&lead, &tied});
  EXPECT_EQ(pick.batch, 512);
  EXPECT_EQ(pick.lead_batch, 256);
  EXPECT_NE(pick.reason.find("batch 512 finished the last rung at 1.08x the time batch 256 took"), std::string::npos)
      << pick.reason;
  EXPECT_NE(pick.reason.find("McCandlish"), std::string::npos) << pick.reason;
  // Told apart: 1.30x against a resolution of 0.10.
  const RaceEntry slower = entry(512, 0.450, 1.30, 0.10);
  pick = pick_last_rung({&slower, &lead});
  EXPECT_EQ(pick.batch, 256);
  EXPECT_TRUE(pick.reason.empty());
  // A smaller batch within the resolution does not move the pick down, and a loss that is not falling
  // (no time ratio) cannot tie.
  const RaceEntry smaller = entry(128, 0.401, 1.01, 0.2);
  const RaceEntry flat = entry(1024, 0.402, std::nullopt, std::nullopt);
  pick = pick_last_rung({&smaller, &lead, &flat});
  EXPECT_EQ(pick.batch, 256);
  // Of several ties, the largest.
  const RaceEntry tied_too = entry(1024, 0.41, 1.1, 0.12);
  EXPECT_EQ(pick_last_rung({&lead, &tied, &tied_too}).batch, 1024);
  EXPECT_EQ(pick_last_rung({}).batch, 0);
  // The first to the user's target wins, whatever the losses at the horizon: the race measured the
  // time to where the run ends, and a longer run is not the question.
  RaceEntry first = entry(256, 0.400, 1.0, 0.05), second = entry(512, 0.390, 1.02, 0.2);
  first.target_s = 3.0;
  second.target_s = 3.1;
  pick = pick_last_rung({&second, &first, &tied_too});
  EXPECT_EQ(pick.batch, 256);
  EXPECT_EQ(pick.lead_batch, 256);
  EXPECT_TRUE(pick.reason.empty()) << pick.reason;
}

// Where training cannot lower the held-out loss (the weights start at the optimum, and the loss is
// the noise), no entry ever leaves the start: the race does not rank noise. Its first rung trains
// on, doubling, until the extension's budget (one more race budget) is spent, and it recommends none,
// saying why.
TEST(BatchRace, OnAPlateauItTrainsOnAndRanksNoNoise) {
  Regression problem(0.0, 0.1);
  const std::vector<int64_t> batches{16, 64, 256};
  const std::vector<double> rates{1e4, 2e4, 3e4};
  const double budget = 0.7;
  const BatchRace race = race_batches(*problem.workload, problem.held_out,
                                      BatchRaceOptions(batches, rates, LrAdviceOptions(32, 0.1)).budget_s(budget));
  EXPECT_FALSE(race.best_batch.has_value());
  EXPECT_TRUE(race.stuck);
  EXPECT_TRUE(race.within_5_percent.empty());
  EXPECT_TRUE(race.rung_leads.empty()) << "a rung ranked on the plateau has no lead";
  const double first = budget / (3 + 2 * 2);  // rungs of 3 and 2 entries, the second twice as long
  ASSERT_FALSE(race.horizons_s.empty());
  // Doubled once (0.1 s more each), then the rest of the extension's budget: 0.7 s over 3 entries.
  EXPECT_NEAR(race.horizons_s[0], first + budget / 3, 1e-9) << "the first rung was not extended";
  double trained = 0;
  for (const RaceEntry& e : race.entries) trained += e.train_s;
  EXPECT_LE(trained, 2 * budget * 1.01) << "the extension spends at most one more budget";
  std::string notes;
  for (const auto& n : race.notes) notes += n + "\n";
  EXPECT_NE(notes.find("rung 1 trained"), std::string::npos) << notes;
  EXPECT_NE(notes.find("none had when the extension's budget ran out"), std::string::npos) << notes;
  EXPECT_NE(notes.find("cannot rank them and recommends none"), std::string::npos) << notes;
  EXPECT_FALSE(race.stopped_at_wall_limit);
  // Past its wall limit (a clock that jumps once the first rung has begun), the first rung trains no
  // further than planned, nor does the reserve join, and the race says it stopped there: two
  // candidates, one rung, so no check between rungs sees it.
  const auto now = std::make_shared<double>(0);
  const BatchRace cut = race_batches(*problem.workload, problem.held_out,
                                     BatchRaceOptions({16, 64}, {1e4, 2e4}, LrAdviceOptions(32, 0.1))
                                         .budget_s(budget)
                                         .max_wall_s(100)
                                         .reserve({4, 8})
                                         .reserve_samples_per_s({3e3, 6e3})
                                         .clock([now] { return *now += 1e-6; })
                                         .on_progress([now](const RaceProgress&) { *now += 1000; }));
  EXPECT_TRUE(cut.stuck);
  EXPECT_TRUE(cut.stopped_at_wall_limit);
  ASSERT_FALSE(cut.horizons_s.empty());
  EXPECT_EQ(cut.horizons_s.size(), 1u);
  EXPECT_NEAR(cut.horizons_s[0], budget / 2, 1e-9) << "the rung was extended past the wall limit";
  std::string cut_notes;
  for (const auto& n : cut.notes) cut_notes += n + "\n";
  EXPECT_NE(cut_notes.find("the reserve 4, 8 did not join: the race had taken"), std::string::npos) << cut_notes;
  for (const RaceEntry& e : cut.entries) EXPECT_NE(e.batch, 4) << "the reserve joined past the wall limit";
}

// f(x) = u (v . x): a linear model as the product of two layers, with a saddle at zero.
struct SaddleImpl : torch::nn::Module {
  torch::nn::Linear v{torch::nn::LinearOptions(kDim, 1).bias(false)};
  torch::nn::Linear u{torch::nn::LinearOptions(1, 1).bias(false)};
  SaddleImpl() {
    register_module("v", v);
    register_module("u", u);
  }
  at::Tensor forward(const at::Tensor& x) { return u(v(x)); }
};
TORCH_MODULE(Saddle);

// A plateau that ends: a product of two scalars' worth of weights, f(x) = u (v . x), started near
// zero, sits at the loss of predicting nothing until u and v grow out of the saddle (a few dozen
// steps here), then falls. The first rung ends on the plateau; the race trains on until an entry
// has left it, and recommends one that has.
TEST(BatchRace, APlateauAtTheStartLengthensTheFirstRungUntilOneLeavesIt) {
  at::manual_seed(5);
  const at::Tensor w_star = at::randn({kDim});
  const Dataset train = gaussian_regression(w_star, 100000, 0.1);
  const Dataset held_out = gaussian_regression(w_star, 2048, 0.1);
  Saddle net;
  {
    at::NoGradGuard no_grad;
    net->v->weight.copy_((1e-4 * w_star / w_star.norm()).unsqueeze(0));
    net->u->weight.fill_(1e-4);
  }
  const std::unique_ptr<ModuleWorkload> w = mse_workload("saddle", net, 0.01, train);
  // u and s = v . w*/|w*| grow by (1 + 2 lr |w*|) a step: at rate 0.01 (batch 32) the loss is 2 %
  // down after about 100 steps, at 0.02 (batch 64, the linear rule) after about 50; the first rung
  // (0.075 s) gives each 47 steps, its extension 94.
  const BatchRace race = race_batches(
      *w, held_out, BatchRaceOptions({32, 64}, {2e4, 4e4}, LrAdviceOptions(32, 0.01).warmup_samples(1)).budget_s(0.15));
  std::string notes;
  for (const auto& n : race.notes) notes += n + "\n";
  EXPECT_NE(notes.find("rung 1 trained"), std::string::npos) << notes;
  EXPECT_NE(notes.find("then one did"), std::string::npos) << notes;
  ASSERT_TRUE(race.best_batch.has_value()) << notes;
  EXPECT_FALSE(race.stuck);
  for (const RaceEntry& e : race.entries)
    if (e.batch == *race.best_batch) {
      ASSERT_TRUE(e.loss_at_horizon.has_value());
      EXPECT_LT(e.curve.back().loss, 0.98 * race.loss_before) << e.batch;
    }
}

// At the noise floor a finalist's loss can stop falling (a line through its last evaluations rises)
// while it sits within the evaluations' noise of the best: it has no time_ratio, and the race cannot
// tell it from the best, so it is in the flat range (RaceEntry::within_noise). The regression starts
// 2 from the optimum and every candidate reaches the floor (sigma^2 = 1) in its first rung.
TEST(BatchRace, AFinalistAtTheNoiseFloorIsInTheFlatRange) {
  Regression problem(2.0, 0.1);
  const std::vector<int64_t> batches{8, 16, 32, 64};
  const std::vector<double> rates{2e4, 4e4, 8e4, 1.6e5};
  const BatchRace race = race_batches(*problem.workload, problem.held_out,
                                      BatchRaceOptions(batches, rates, LrAdviceOptions(32, 0.05)).budget_s(1.0));
  std::string table;
  for (const RaceEntry& e : race.entries)
    table += fmt::format("{}: rungs {} loss {:.4f} ratio {} within_noise {}\n", e.batch, e.rungs,
                         e.loss_at_horizon.value_or(-1), e.time_ratio ? fmt::format("{:.3f}", *e.time_ratio) : "-",
                         e.within_noise);
  table += fmt::format("range {}\n", race.within_5_percent);
  ASSERT_TRUE(race.best_batch.has_value()) << table;
  const int last = race.entries.empty()
                       ? 0
                       : std::max_element(race.entries.begin(), race.entries.end(), [](const auto& a, const auto& b) {
                           return a.rungs < b.rungs;
                         })->rungs;
  double best_loss = 0;
  for (const RaceEntry& e : race.entries)
    if (e.batch == race.lead_batch) best_loss = *e.loss_at_horizon;
  int flat_finalists = 0;
  for (const RaceEntry& e : race.entries) {
    const bool in_range = std::count(race.within_5_percent.begin(), race.within_5_percent.end(), e.batch) > 0;
    if (e.within_noise) {
      EXPECT_FALSE(e.time_ratio.has_value()) << e.batch << "\n" << table;
      EXPECT_TRUE(in_range) << e.batch << "\n" << table;
      if (e.rungs != last) continue;  // an earlier rung had its own best, at a shorter horizon
      EXPECT_GE(*e.loss_at_horizon, best_loss) << e.batch << "\n" << table;
      ++flat_finalists;
    }
    if (e.time_ratio) EXPECT_FALSE(e.within_noise) << e.batch << ": its loss was falling\n" << table;
  }
  EXPECT_GE(flat_finalists, 1) << "no finalist at the floor without a time ratio: the case is not exercised\n" << table;
}

// A plateau that only steps get off: the saddle of the test above trained by Adam, whose steps move
// each weight by about its rate whatever the gradient's size. Square-root scaling from a base batch
// of 1024 gives batch B the rate 0.0025 sqrt(B / 1024), so at equal samples/s a training second
// moves a batch-16 entry sqrt(64) = 8 times as far as batch 1024 and sqrt(32) times as far as 512.
// The candidates 512 and 1024 stay on the plateau through the first rung and its extension; the
// reserve, 16, joins that rung and leaves it; 8 takes too few steps to join. With a longer budget the
// candidates leave the plateau and the reserve stays out.
TEST(BatchRace, AReserveOfSmallerBatchesJoinsWhenNoCandidateLeavesTheStart) {
  at::manual_seed(5);
  const at::Tensor w_star = at::randn({kDim});
  const Dataset train = gaussian_regression(w_star, 100000, 0.1);
  const Dataset held_out = gaussian_regression(w_star, 2048, 0.1);
  const auto race_with = [&](double budget) {
    Saddle net;
    {
      at::NoGradGuard no_grad;
      net->v->weight.copy_((1e-4 * w_star / w_star.norm()).unsqueeze(0));
      net->u->weight.fill_(1e-4);
    }
    const std::unique_ptr<ModuleWorkload> w = mse_workload("saddle", net, 0.0025, train, /*adam=*/true);
    return race_batches(*w, held_out,
                        BatchRaceOptions({512, 1024}, {1e5, 1e5}, LrAdviceOptions(1024, 0.0025))
                            .budget_s(budget)
                            .reserve({8, 16})
                            .reserve_samples_per_s({100, 1e5}));
  };
  const BatchRace stuck = race_with(0.17);
  std::string notes;
  for (const auto& n : stuck.notes) notes += n + "\n";
  for (const RaceEntry& e : stuck.entries) {
    notes += fmt::format("{}:", e.batch);
    for (const auto& p : e.curve) notes += fmt::format(" ({:.3f} s, {:.3f})", p.train_s, p.loss);
    notes += "\n";
  }
  EXPECT_NE(notes.find("none had when the extension's budget ran out"), std::string::npos) << notes;
  EXPECT_NE(notes.find("so the reserve 16 (smaller batches, more steps in the same training time) joined rung 1 and "
                       "trained as long from the same weights: one of them left it"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("reserve batch 8 left out: 2 steps fit"), std::string::npos) << notes;
  EXPECT_EQ(stuck.left_out, (std::vector<int64_t>{8})) << notes;
  ASSERT_EQ(stuck.entries.size(), 3u) << notes;
  EXPECT_EQ(stuck.entries[0].batch, 16) << "entries stay in batch order";
  EXPECT_EQ(stuck.entries[1].batch, 512);
  EXPECT_NEAR(stuck.entries[0].train_s, stuck.entries[1].train_s, 0.05 * stuck.entries[1].train_s)
      << "the reserve trains as long as the candidates did";
  for (const RaceEntry& e : stuck.entries)
    if (e.batch != 16)
      for (const auto& p : e.curve) EXPECT_GE(p.loss, 0.98 * stuck.loss_before) << e.batch << "\n" << notes;
  ASSERT_TRUE(stuck.best_batch.has_value()) << notes;
  EXPECT_EQ(*stuck.best_batch, 16) << notes;
  for (const RaceEntry& e : stuck.entries)  // still on the plateau: not as good as 16, however flat
    if (e.batch != 16) EXPECT_FALSE(e.within_noise) << e.batch;
  EXPECT_EQ(stuck.within_5_percent, (std::vector<int64_t>{16})) << notes;

  const BatchRace moving = race_with(0.7);
  ASSERT_EQ(moving.entries.size(), 2u) << "the reserve joins only a race stuck on the plateau";
  EXPECT_TRUE(moving.left_out.empty());
  EXPECT_TRUE(moving.best_batch.has_value());
}

// Candidates from a sweep: the fast ones, at most `count`, dropping the slower end.
TEST(BatchRace, CandidatesAreTheSweepsFastBatches) {
  std::vector<Trial> points;
  const double speeds[] = {100, 400, 900, 1000, 980, 700, 450};
  for (int i = 0; i < 7; ++i) {
    Trial t;
    t.batch = int64_t{1} << (i + 2);
    t.outcome = Outcome::Ok;
    t.samples_per_s = speeds[i];
    points.push_back(t);
  }
  points[5].outcome = Outcome::Oom;
  // 4 is below 40 % of the best; 256 is slower than 32 (dominated); 64 is within 5 % of 32.
  EXPECT_EQ(race_candidates(points, 6), (std::vector<int64_t>{8, 16, 32, 64}));
  EXPECT_EQ(race_candidates(points, 2), (std::vector<int64_t>{32, 64}));
  // The reserve: the largest ok batches below the smallest candidate.
  EXPECT_EQ(race_reserve(points, {32, 64}), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(race_reserve(points, {8, 16, 32, 64}), (std::vector<int64_t>{4}));
  EXPECT_EQ(race_reserve(points, {32, 64}, 3), (std::vector<int64_t>{4, 8, 16}));
  EXPECT_TRUE(race_reserve(points, {}).empty());
  // Their figures, in the order asked; none for a batch that did not run.
  EXPECT_EQ(race_rates(points, {32, 8}), (std::vector<double>{1000, 400}));
  EXPECT_TRUE(race_rates(points, {128}).empty());
}

}  // namespace
}  // namespace batchwise

// The recommendation from a fit and a sweep, and its confirmation by a validation run.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "batchwise/advice.h"
#include "batchwise/fit.h"
#include "batchwise/recommend.h"
#include "batchwise/sweep.h"
#include "batchwise/validate.h"

namespace batchwise {
namespace {

// A fit reused from the history has its answer but no trials; a sweep after it in which no batch trained
// leaves no answer (it had been the fit's batch, with the rate that diverged there), and no internal assertion.
// Without a sweep, the fit's answer stands, said so.
TEST(Recommend, AReusedFitAndASweepThatTrainedNothingAnswerNothing) {
  FitResult reused;
  reused.outcome = FitOutcome::Fits;
  reused.batch = 256;
  reused.budget_bytes = 1 << 30;
  SweepResult failed;
  Trial t;
  t.batch = 256;
  t.outcome = Outcome::Error;
  failed.points = {t};
  EXPECT_FALSE(recommend(reused, failed).has_value());
  const auto rec = recommend(reused, std::nullopt);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->batch, 256);
  EXPECT_NE(rec->reason.find("the fit's answer alone"), std::string::npos) << rec->reason;
}

// A sweep's own answer weighs only the batches that peaked within the target of the budget: a faster
// batch past it is measured, said (in the warnings and the answer's reason), and not the answer; where none is
// within it, nothing is.
TEST(Recommend, ASweepAnswersWithinTheTargetOfTheBudget) {
  SweepResult sweep;
  sweep.knee_tolerance = 0.05;
  sweep.budget_bytes = 12 << 20;
  for (const auto& [batch, rate, peak] :
       {std::tuple{16, 1000.0, 4 << 20}, {64, 2000.0, 5 << 20}, {256, 3000.0, 7 << 20}}) {
    Trial t;
    t.batch = batch;
    t.samples_per_s = rate;
    t.peak_bytes = peak;
    t.outcome = Outcome::Ok;
    sweep.points.push_back(t);
  }
  sweep.knee_batch = knee_batch(sweep.points, sweep.knee_tolerance);
  ASSERT_EQ(sweep.knee_batch, 256);
  const SweepAnswer within = recommend_sweep(sweep, 0, 12 << 20, 0.5);  // 6 MiB: 16 and 64
  ASSERT_TRUE(within.recommendation.has_value());
  EXPECT_EQ(within.recommendation->batch, 64);
  EXPECT_FALSE(within.none_within_target);
  EXPECT_EQ(
      within.warnings,
      std::vector<std::string>{"batch 256 at 7.00 MiB peaked past the 50.0 % target of the 12.0 MiB budget (6.00 MiB): "
                               "measured as asked, and not weighed for the answer; raise --target or --memory-budget "
                               "to weigh it"});
  // The reason says the answer is the fastest within the target, and names the faster batch past it (the report's
  // knee_batch): it had read "the fastest measured" beside a batch measured 1.5x faster
  EXPECT_EQ(within.recommendation->reason,
            "batch 64 is the fastest measured within the memory target at 2000 samples/s, peaking at 5.00 MiB (41.7 % "
            "of the budget); batch 256 ran faster (3000 samples/s) but peaked at 7.00 MiB, past the 50.0 % target of "
            "the 12.0 MiB budget (6.00 MiB), and was not weighed");

  const SweepAnswer none = recommend_sweep(sweep, 0, 12 << 20, 0.25);  // 3 MiB: none
  EXPECT_FALSE(none.recommendation.has_value());
  EXPECT_TRUE(none.none_within_target);
  ASSERT_EQ(none.warnings.size(), 1u);
  EXPECT_NE(none.warnings[0].find("no batch swept peaks within the 25.0 % target of the 12.0 MiB budget (3.00 MiB): "
                                  "the least, batch 16, peaked at 4.00 MiB; nothing is recommended"),
            std::string::npos)
      << none.warnings[0];

  const SweepAnswer all = recommend_sweep(sweep, 0, 12 << 20, 0.9);  // all within: the sweep's answer, nothing said
  EXPECT_EQ(all.recommendation->batch, 256);
  EXPECT_TRUE(all.warnings.empty());
}

// A fit whose next batch ran past the trial timeout, or failed, was not ended by memory: the reason
// says what ended it; one ended by a batch out of memory keeps the memory wording.
TEST(Recommend, AFitEndedByATimeoutSaysSoNotMemory) {
  const auto fit_ended_by = [](Outcome outcome) {
    FitResult fit;
    fit.outcome = FitOutcome::Fits;
    fit.batch = 17182;
    fit.budget_bytes = int64_t{1} << 30;
    Trial ok, above, beyond;
    ok.batch = 17182;
    ok.outcome = Outcome::Ok;
    ok.peak_bytes = 157 << 20;
    above.batch = 17183;
    above.outcome = outcome;
    above.message = "0.3 s exceeds the 0.3 s trial timeout";
    beyond.batch = 32768;
    beyond.outcome = Outcome::Oom;
    fit.trials = {beyond, ok, above};
    return recommend(fit, std::nullopt)->reason;
  };
  const std::string timed_out = fit_ended_by(Outcome::Timeout);
  EXPECT_NE(timed_out.find("batch 17182 is the largest that trained: batch 17183, the next tried, ran past the "
                           "--trial-timeout (0.3 s exceeds the 0.3 s trial timeout), so memory did not decide it"),
            std::string::npos)
      << timed_out;
  EXPECT_NE(fit_ended_by(Outcome::Error).find("failed with an error"), std::string::npos);
  EXPECT_NE(fit_ended_by(Outcome::Oom).find("is the largest whose peak memory (157 MiB) stays within"),
            std::string::npos);
}

// A race whose lead grew between rungs says so, with each rung's lead and horizon: the pick is for a
// run as long as the race, and the user learns which batch led at the shorter horizons.
TEST(Recommend, ARaceWhoseLeadGrewSaysWhichBatchLedWhen) {
  BatchRace race;
  race.loss_before = 2.3;
  race.horizons_s = {10, 30};
  for (int64_t batch : {32, 64}) {
    RaceEntry e;
    e.batch = batch;
    e.samples_per_s = 1000;
    e.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, batch);
    e.rungs = 2;
    e.curve = {{0, 2.3, std::nullopt}, {30, batch == 64 ? 0.5 : 0.55, std::nullopt}};
    e.loss_at_horizon = batch == 64 ? 0.5 : 0.55;
    race.entries.push_back(e);
  }
  race.best_batch = race.lead_batch = 64;
  race.rung_leads = {{1, 10, 10.0 * 1000 / 60000, 32, 0.9, std::nullopt}, {2, 30, 0.5, 64, 0.5, std::nullopt}};
  auto rec = recommend(std::nullopt, std::nullopt, race);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->batch, 64);
  EXPECT_NE(rec->reason.find("the lead grew as training went on (32 at 10.0 s (0.17 epochs), 64 at 30.0 s (0.5 "
                             "epochs))"),
            std::string::npos)
      << rec->reason;
  // A lead that did not change adds nothing.
  race.rung_leads[0].batch = 64;
  rec = recommend(std::nullopt, std::nullopt, race);
  EXPECT_EQ(rec->reason.find("the lead"), std::string::npos) << rec->reason;
}

// The batch race's horizon is the run it answers for; after tune --epochs whose run race never left
// the plateau, the sentence says the pick is not for the user's run and how to check it there,
// instead of pointing at the --epochs the user already gave.
TEST(Recommend, ABatchRaceAfterARunRaceStuckOnThePlateauSaysItDoesNotAnswerForTheRun) {
  BatchRace race;
  race.loss_before = 2.3;
  race.horizons_s = {10};
  RaceEntry e;
  e.batch = 256;
  e.samples_per_s = 1000;
  e.lr = unmeasured_lr(Optimizer::AdamW, 32, 0.001, 256);
  e.rungs = 1;
  e.curve = {{0, 2.3, std::nullopt}, {10, 1.5, std::nullopt}};
  e.loss_at_horizon = 1.5;
  race.entries.push_back(e);
  race.best_batch = race.lead_batch = 256;
  race.rung_leads = {{1, 10, 2.3, 256, 1.5, std::nullopt}};
  auto rec = recommend(std::nullopt, std::nullopt, race);
  ASSERT_TRUE(rec.has_value());
  EXPECT_NE(rec->reason.find("this answers for about 2.3 epochs of training (the race's last horizon at batch 256): "
                             "for your run's length, `tune --epochs N --lr-schedule cosine` answers for it"),
            std::string::npos)
      << rec->reason;
  rec = recommend(std::nullopt, std::nullopt, race, 3);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->batch, 256);
  EXPECT_NE(rec->reason.find("this answers for about 2.3 epochs of training (the race's last horizon at batch 256), "
                             "not for your 3-epoch run, whose compressed runs never left the plateau at the start: "
                             "`validate --epochs 3` compares full runs"),
            std::string::npos)
      << rec->reason;
  EXPECT_EQ(rec->reason.find("tune --epochs N"), std::string::npos) << rec->reason;
}

// A batch race in which no entry left the plateau at the start ranks nothing. The answer is not the
// noise scale's goodput at the initial weights (which says nothing about leaving a plateau, and once
// named a batch that trained to chance) but the smallest batch the race trained longest: steps move
// the weights off a plateau. The reason and the confidence say it is not a measured ranking, and how
// to check it. The entries are a mobilenet AdamW tune's (seed 1), whose grid's best batch was 16.
TEST(Recommend, ARaceStuckOnThePlateauAnswersTheSmallestBatchItTrainedLongest) {
  BatchRace race;
  race.loss_before = 2.3026;
  race.horizons_s = {12, 18, 30};
  const std::vector<std::tuple<int64_t, int, double>> entries{
      {8, 1, 2.3043}, {16, 3, 2.2979}, {32, 1, 2.3062}, {64, 2, 2.3065}, {128, 3, 2.3118}};
  for (const auto& [batch, rungs, loss] : entries) {
    RaceEntry e;
    e.batch = batch;
    e.samples_per_s = 100.0 * static_cast<double>(batch);
    e.lr = unmeasured_lr(Optimizer::AdamW, 32, 0.001, batch);
    e.rungs = rungs;
    e.train_s = race.horizons_s[rungs - 1];
    e.loss_at_horizon = loss;
    race.entries.push_back(e);
  }
  EXPECT_FALSE(recommend_on_the_plateau(race).has_value()) << "a race that is not stuck has its own answer";
  race.stuck = true;
  auto rec = recommend_on_the_plateau(race, 2);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->batch, 16);
  EXPECT_NE(rec->reason.find("batch 16 is the smallest batch the race trained longest (as long as batch 128), 30.0 s "
                             "of training: no batch's held-out loss fell 2 % below where all began (2.303; batch "
                             "16's 2.2979, the lowest of them), so nothing measured ranks them. This is the "
                             "plateau's answer, not a measured one"),
            std::string::npos)
      << rec->reason;
  EXPECT_NE(rec->reason.find("neither race saw your 2-epoch run leave the plateau: `batchwise validate --epochs 2 "
                             "--batch-sizes 8,16,32` compares full runs"),
            std::string::npos)
      << rec->reason;
  // The lowest loss is named where it is another batch's; without a run, --validate is the check.
  race.entries[1].loss_at_horizon = 2.3120;
  rec = recommend_on_the_plateau(race);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->batch, 16) << "a lower loss inside the plateau's 2 % is noise, not a ranking";
  EXPECT_NE(rec->reason.find("batch 16's 2.3120, batch 128's 2.3118 the lowest of them"), std::string::npos)
      << rec->reason;
  EXPECT_NE(rec->reason.find("; --validate trains the batches around it"), std::string::npos) << rec->reason;
  // Entries that failed (no loss) are not answers; with none trained there is no answer.
  for (auto& e : race.entries) e.loss_at_horizon.reset();
  EXPECT_FALSE(recommend_on_the_plateau(race).has_value());
  // Its confidence is low, and says why and what to do.
  Evidence e;
  e.race = &race;
  e.goodput = true;  // measured, but not what decided
  const Recommendation r = with_confidence(Recommendation{16, "the reason"}, e);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("no race saw a batch leave the plateau at the start, so batch 16 is the "
                                     "plateau's answer"),
            std::string::npos)
      << r.confidence_reason;
  EXPECT_EQ(r.confidence_reason.find("goodput"), std::string::npos) << r.confidence_reason;
}

// A run race's pick of 64 for a 2-epoch run, from compressed runs of up to 0.4 epochs: medium.
RunRace run_race_pick_of_64() {
  RunRace race;
  race.epochs = 2;
  race.lengths_epochs = {0.1, 0.2, 0.4};
  race.best_batch = 64;
  return race;
}

// Confidence: green (high) only where the answer was measured and resolved; a race that could not
// rank its candidates, or that trained them for a sliver of an epoch, is low, and says what to do.
// A run race that shared the CPU: the --advice-budget it suggests is from the time it would have taken alone, its
// threads having waited for a core 60 % of it (from the whole time, a race slowed 9x had asked 4.6x its figure).
TEST(Confidence, ABudgetFromARaceThatSharedTheCpuIsFromItsTimeAlone) {
  Recommendation rec;
  rec.batch = 64;
  RunRace run_race = run_race_pick_of_64();
  run_race.epochs = 15;
  run_race.wall_s = 75;
  run_race.cpu_wait_share = 0.6;
  Evidence predicted;
  predicted.run_race = &run_race;
  Recommendation r = with_confidence(rec, predicted);
  EXPECT_NE(r.confidence_reason.find("; --advice-budget 220 (about 7.03x this race's 30 s on its own: it took 75 s "
                                     "sharing the CPU) sees an eighth of it"),
            std::string::npos)
      << r.confidence_reason;
  run_race.cpu_wait_share = 0.05;  // a quiet machine's share: the whole time
  r = with_confidence(rec, predicted);
  EXPECT_NE(r.confidence_reason.find("; --advice-budget 530 (about 7.03x this race's 75 s) sees"), std::string::npos)
      << r.confidence_reason;
}

TEST(Confidence, FollowsTheStrongestEvidenceAndNeverTrustsAnUnresolvedRace) {
  const Recommendation rec{64, "the reason"};
  BatchRace race;
  race.rung_leads = {{1, 10, 0.08, 8, 0.9, std::nullopt}};
  race.best_batch = 8;  // the mobilenet: a pick after 0.08 epochs
  Evidence e;
  e.race = &race;
  Recommendation r = with_confidence(rec, e);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("for 0.08 epochs, the first minutes of a run"), std::string::npos)
      << r.confidence_reason;
  EXPECT_NE(r.confidence_reason.find("a larger --advice-budget trains them for 0.1 epochs, or --epochs N answers"),
            std::string::npos)
      << r.confidence_reason;
  race.wall_s = 40;  // the budget that would: at most 0.1 / 0.08 times the race's 40 s, up to 10 s
  r = with_confidence(rec, e);
  EXPECT_NE(r.confidence_reason.find("; --advice-budget 50 (about 1.25x this race's 40 s) trains them for 0.1 epochs"),
            std::string::npos)
      << r.confidence_reason;

  race.rung_leads = {{3, 60, 1.5, 64, 0.4, std::nullopt}};
  race.best_batch = 64;
  race.within_5_percent = {32, 64};
  r = with_confidence(rec, e);
  EXPECT_EQ(r.confidence, Confidence::Medium);
  EXPECT_NE(r.confidence_reason.find("within the race's noise of batches 32, 64"), std::string::npos)
      << r.confidence_reason;
  race.within_5_percent = {64};
  EXPECT_EQ(with_confidence(rec, e).confidence, Confidence::High);

  // --epochs, where no reference of the run race left the start: the batch race's pick that followed
  // is low, whatever the race resolved, since nothing judged it on the run's final model.
  RunRace stuck;
  stuck.reference_stuck = true;
  Evidence after_run_race = e;
  after_run_race.run_race = &stuck;
  r = with_confidence(rec, after_run_race);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("never left the plateau at the start, so batch 64 is the batch race's"),
            std::string::npos)
      << r.confidence_reason;
  EXPECT_NE(r.confidence_reason.find("check it with --validate"), std::string::npos) << r.confidence_reason;

  // A run race's pick is a prediction: medium where its compressed runs saw an eighth of the run or
  // more, low where each gap was carried over more than three doublings.
  RunRace run_race = run_race_pick_of_64();
  Evidence predicted;
  predicted.run_race = &run_race;
  EXPECT_EQ(with_confidence(rec, predicted).confidence, Confidence::Medium);
  run_race.epochs = 15;
  r = with_confidence(rec, predicted);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("compressed runs of at most 0.4 epochs (2.7 % of it): each batch's gap was "
                                     "carried over 5.2 doublings"),
            std::string::npos)
      << r.confidence_reason;
  // What would see an eighth of the run (1.875 epochs): runs 4.7 times longer, and half as much again
  // for the grid of steps the runs snap to: about 7 times the race's wall time
  run_race.wall_s = 30;
  r = with_confidence(rec, predicted);
  EXPECT_NE(r.confidence_reason.find("; --advice-budget 220 (about 7.03x this race's 30 s) sees an eighth of it, and "
                                     "--validate trains the full runs"),
            std::string::npos)
      << r.confidence_reason;

  // A run short enough that the longest compressed run was the whole run: measured, not predicted,
  // one run a batch (it said "not trained in full" of a 0.1-epoch run every batch had trained).
  run_race.epochs = 0.4;
  run_race.lr_schedule = "cosine";
  run_race.entries = {RunRaceEntry{}, RunRaceEntry{}};
  run_race.entries[0].batch = 32, run_race.entries[0].good = true;
  run_race.entries[1].batch = 64, run_race.entries[1].good = true;
  r = with_confidence(rec, predicted);
  EXPECT_EQ(r.confidence, Confidence::Medium);
  EXPECT_EQ(r.confidence_reason,
            "measured, not predicted: each batch trained your whole 0.4-epoch run once from your weights (2 batches "
            "judged no worse: 32, 64), so one seed's spread is not in it; `batchwise validate --epochs 0.4 "
            "--lr-schedule cosine "
            "--batch-sizes 32,64 --seed S` with another seed trains them again from other weights");

  race.best_batch.reset();  // the race recommended none: the knee answered
  r = with_confidence(rec, e);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("could not rank its candidates"), std::string::npos) << r.confidence_reason;

  Evidence knee_only;
  knee_only.no_race_reason = "--no-race";
  r = with_confidence(rec, knee_only);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("throughput alone: no training progress was compared (--no-race)"),
            std::string::npos)
      << r.confidence_reason;

  // A knee that rests on noise says so; a race's pick, which trained, does not rest on the knee.
  SweepResult noisy;
  noisy.unsettled = {32};
  knee_only.sweep = &noisy;
  r = with_confidence(rec, knee_only);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("the sweep's figures at 32 are noise's"), std::string::npos)
      << r.confidence_reason;
  race.best_batch = 64;
  e.sweep = &noisy;
  r = with_confidence(rec, e);
  EXPECT_EQ(r.confidence, Confidence::High);
  EXPECT_EQ(r.confidence_reason.find("noise's"), std::string::npos) << r.confidence_reason;
}

// A command that printed no step line was timed by its whole run: an answer on such batches is low and says so,
// naming them (a script that only slept had been answered "batch 64", its reason silent on it)
TEST(Confidence, BatchesTimedByTheirWholeRunMakeAnAnswerLowAndSaySo) {
  SweepResult sweep;
  for (const int64_t b : {8, 16, 32}) {
    Trial t;
    t.batch = b, t.outcome = Outcome::Ok, t.wall_timing = true;
    sweep.points.push_back(t);
  }
  Evidence e;
  e.sweep = &sweep;
  e.no_race_reason = "a training command";
  Recommendation r = with_confidence(Recommendation{32, "the reason"}, e);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("; and no batch of the sweep printed a step line, so each was timed by its whole "
                                     "run (start-up and imports in it) and nothing says it trained"),
            std::string::npos)
      << r.confidence_reason;
  sweep.points[1].wall_timing = sweep.points[2].wall_timing = false;
  r = with_confidence(Recommendation{32, "the reason"}, e);
  EXPECT_NE(r.confidence_reason.find("; and batch 8 printed no step line, so it was timed by its whole run"),
            std::string::npos)
      << r.confidence_reason;
  sweep.points[0].wall_timing = false;
  r = with_confidence(Recommendation{32, "the reason"}, e);
  EXPECT_EQ(r.confidence_reason.find("step line"), std::string::npos) << r.confidence_reason;
}

// A sweep that shared the CPU read the larger batches slower than they are and moved the candidates
// down (a lenet SGD tune beside other work picked 64 where its full runs put 256 1.4x faster): every
// answer resting on its figures is low and says so; a validation's full runs are not its figures.
TEST(Confidence, AnAnswerFromASweepThatSharedTheCpuIsLowAndSaysWhy) {
  const Recommendation rec{64, "the reason"};
  SweepResult shared;
  for (const double share : {0.04, 0.12, 0.14, 0.17}) {
    Trial t;
    t.outcome = Outcome::Ok;
    t.cpu_wait_share = share;
    shared.points.push_back(t);
  }
  Trial failed;  // a batch that ran out of memory does not count
  failed.outcome = Outcome::Oom;
  failed.cpu_wait_share = 0.9;
  shared.points.push_back(failed);
  EXPECT_DOUBLE_EQ(cpu_wait_share(shared), 0.13);
  EXPECT_EQ(cpu_wait_share(SweepResult{}), 0);

  // The run race's prediction, medium until the sweep's warning (the sweep's rule, not the share,
  // decides), then low with the reason's end saying why and what to do.
  RunRace run_race = run_race_pick_of_64();
  Evidence e;
  e.run_race = &run_race;
  e.sweep = &shared;
  EXPECT_EQ(with_confidence(rec, e).confidence, Confidence::Medium);
  shared.shared_cpu_warning = "the sweep shared the CPU";
  Recommendation r = with_confidence(rec, e);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("predicted for your 2-epoch run from compressed runs"), std::string::npos)
      << r.confidence_reason;
  EXPECT_NE(r.confidence_reason.find("; and the sweep shared the CPU (its threads waited for a core 13 % of the time "
                                     "they were ready to run), which skews its figures (on a CPU the larger batches "
                                     "read slower than they are) and with them the knee and the candidates: tune "
                                     "again on a quiet machine"),
            std::string::npos)
      << r.confidence_reason;

  // A batch race resolved over an epoch, high on a quiet machine, is low too.
  BatchRace race;
  race.rung_leads = {{3, 60, 1.5, 64, 0.4, std::nullopt}};
  race.best_batch = 64;
  race.within_5_percent = {64};
  Evidence raced;
  raced.race = &race;
  EXPECT_EQ(with_confidence(rec, raced).confidence, Confidence::High);
  raced.sweep = &shared;
  EXPECT_EQ(with_confidence(rec, raced).confidence, Confidence::Low);

  // The knee on noisy figures already says to run on a quiet machine: said once.
  shared.unsettled = {32};
  Evidence knee;
  knee.no_race_reason = "--no-race";
  knee.sweep = &shared;
  r = with_confidence(rec, knee);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("are noise's (its repetitions disagreed): run on a quiet machine; and the sweep "
                                     "shared the CPU"),
            std::string::npos)
      << r.confidence_reason;
  EXPECT_EQ(r.confidence_reason.find("tune again on a quiet machine"), std::string::npos) << r.confidence_reason;

  ValidationResult validated;
  validated.epochs = 2;
  validated.fastest_batch = 64;
  validated.best_batch = 64;
  e.validation = &validated;
  r = with_confidence(rec, e);
  EXPECT_EQ(r.confidence, Confidence::High);
  EXPECT_EQ(r.confidence_reason.find("shared the CPU"), std::string::npos) << r.confidence_reason;

  // A validation whose own runs shared the CPU: their times chose the fastest good batch. Low, and
  // said, above validate's warning's share (0.1) only.
  for (const auto& [batch, share] : std::vector<std::pair<int64_t, double>>{{32, 0.08}, {64, 0.02}}) {
    ValidationRun run;
    run.batch = batch;
    run.cpu_wait_share = share;
    validated.runs.push_back(run);
  }
  EXPECT_EQ(with_confidence(rec, e).confidence, Confidence::High);
  validated.runs[0].cpu_wait_share = 0.46;
  r = with_confidence(rec, e);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("; but the validation shared the CPU (a run's threads waited for a core 46 % of "
                                     "the time they were ready to run), which skews the times that chose the fastest "
                                     "good batch: validate again on a quiet machine"),
            std::string::npos)
      << r.confidence_reason;
}

// A race that fell behind its planned wall time fitted its later rungs to what was left: where its
// last rung ends before half its planned horizon, the lead is not the one the plan meant to measure.
TEST(Confidence, ARaceRankedAfterLessThanHalfItsPlannedTrainingIsLow) {
  BatchRace race;
  race.rung_leads = {{1, 2, 0.5, 64, 0.6, std::nullopt}, {2, 2.9, 1.5, 64, 0.5, std::nullopt}};
  race.best_batch = 64;
  race.within_5_percent = {64};
  race.horizons_s = {2, 2.9};
  race.planned_horizons_s = {2, 6};
  Evidence e;
  e.race = &race;
  Recommendation r = with_confidence({64, "the race"}, e);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_NE(r.confidence_reason.find("the race fell behind its planned wall time and fitted its later rungs to what "
                                     "was left, so batch 64 leads after 2.9 s of training per candidate, not the 6 s "
                                     "planned (its notes say where); tune again on a quiet machine, or give the race "
                                     "a larger --advice-budget"),
            std::string::npos)
      << r.confidence_reason;
  race.horizons_s = {2, 3};  // half the plan: the race's own judgement stands
  EXPECT_EQ(with_confidence({64, "the race"}, e).confidence, Confidence::High);
  race.horizons_s = {2, 2.9};
  race.planned_horizons_s.clear();  // a report from before the field: no plan to compare
  EXPECT_EQ(with_confidence({64, "the race"}, e).confidence, Confidence::High);
}

// A race whose pick is the largest batch it trained, larger candidates having been left out before its first rung,
// compared no larger batch: not high (a race of 16 and 32 had picked 32 as "resolved", where the same tune with 64
// raced picked 64). A pick below a larger batch that raced and lost keeps the race's own judgement.
TEST(Confidence, ARacesLargestBatchWithLargerOnesLeftOutIsNotHigh) {
  BatchRace race;
  race.rung_leads = {{1, 2, 0.8, 32, 0.6, std::nullopt}, {2, 6, 1.6, 32, 0.5, std::nullopt}};
  race.best_batch = 32;
  race.within_5_percent = {32};
  race.left_out = {64, 128};
  for (const int64_t b : {16, 32}) {
    RaceEntry entry;
    entry.batch = b;
    entry.rungs = 2;
    race.entries.push_back(entry);
  }
  Evidence e;
  e.race = &race;
  Recommendation r = with_confidence({32, "the race"}, e);
  EXPECT_EQ(r.confidence, Confidence::Medium);
  EXPECT_NE(r.confidence_reason.find("measured among the batches the race trained, but batch 32 is the largest of "
                                     "them: batches 64, 128 were left out before its first rung (too few steps fitted "
                                     "it; its notes say why), so no larger batch was compared; a larger "
                                     "--advice-budget races them too"),
            std::string::npos)
      << r.confidence_reason;
  race.entries.back().batch = 48;  // a larger batch raced and lost: the race compared upward
  EXPECT_EQ(with_confidence({32, "the race"}, e).confidence, Confidence::High);
  race.entries.back().batch = 32;
  race.left_out = {8};  // only smaller ones left out
  EXPECT_EQ(with_confidence({32, "the race"}, e).confidence, Confidence::High);
}

// A race in which every candidate ended above the loss all began at (the rates diverged after a dip) ranked the
// least worse: low, saying so, where it had read "measured and resolved" (the hunt's lr 0.36 for the mlp: 5.47 and
// 7.03 against 2.31 at the start).
TEST(Confidence, ARaceWhoseCandidatesAllEndedWorseThanTheStartIsLow) {
  BatchRace race;
  race.loss_before = 2.306;
  race.rung_leads = {{1, 2, 0.8, 256, 2.1, std::nullopt}, {2, 6, 1.6, 256, 5.47, std::nullopt}};
  race.best_batch = 256;
  race.within_5_percent = {256};
  Evidence e;
  e.race = &race;
  const Recommendation r = with_confidence({256, "the race"}, e);
  EXPECT_EQ(r.confidence, Confidence::Low);
  EXPECT_EQ(r.confidence_reason.rfind("every candidate's held-out loss ended above the 2.306 all began at (the lead's "
                                      "5.47): their models got worse over the race",
                                      0),
            0u)
      << r.confidence_reason;
  race.rung_leads.back().loss = 1.9;
  EXPECT_EQ(with_confidence({256, "the race"}, e).confidence, Confidence::High);
}

ValidationRun run_at(int64_t batch, bool reached, double seconds) {
  ValidationRun r;
  r.batch = batch;
  r.reached = reached;
  r.train_s = seconds;
  r.steps = 100;
  r.epochs = 0.5;
  r.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, batch);
  r.message = reached ? "" : "not reached within --max-epochs 1";
  return r;
}

// Full runs confirm an answer with high confidence only where a smaller batch than the best was
// trained too: a best at the grid's lower edge (an H200's transformer: 2,048 best of 2,048 to 16,384,
// and 256 four points above it) says a smaller batch may be better still.
TEST(Confidence, ValidatedFullRunsWhoseBestIsTheSmallestBatchAreNotHigh) {
  ValidationResult v;
  v.epochs = 4;
  v.lr_schedule = "cosine";
  v.runs = {run_at(1024, true, 1.0), run_at(2048, true, 1.1), run_at(4096, true, 0.8)};
  v.runs[0].final_accuracy = 0.8482;
  v.runs[1].final_accuracy = 0.8263;
  v.runs[2].final_accuracy = 0.7817;
  v.best_batch = 1024;
  v.fastest_batch = 1024;
  Evidence e;
  e.validation = &v;
  Recommendation r = with_confidence({1024, "the reason"}, e);
  EXPECT_EQ(r.confidence, Confidence::Medium);
  EXPECT_NE(r.confidence_reason.find(
                "the best final quality was at batch 1024, the smallest trained: a smaller batch "
                "may end better still (`batchwise validate --batch-sizes 256,512,1024 --epochs 4 --lr-schedule cosine "
                "--extend-below 2` says)"),
            std::string::npos)
      << r.confidence_reason;

  ValidationRun smaller = run_at(512, true, 1.9);
  smaller.final_accuracy = 0.8470;  // within noise of 1024, and slower: 1024 stands
  v.runs.insert(v.runs.begin(), smaller);
  r = with_confidence({1024, "the reason"}, e);
  EXPECT_EQ(r.confidence, Confidence::High) << r.confidence_reason;
}

TEST(Validation, ConfirmsCorrectsOrSaysItCouldNot) {
  const Recommendation rec{128, "batch 128 makes the most training progress per second"};
  ValidationResult v;
  v.target = "test accuracy >= 0.85";
  v.runs = {run_at(64, true, 5.0), run_at(128, true, 4.0), run_at(256, false, 9.0)};
  v.fastest_batch = 128;
  Recommendation out = confirm(rec, v);
  EXPECT_EQ(out.batch, 128);
  EXPECT_NE(out.reason.find("validated: it reached test accuracy >= 0.85 soonest, in 4 s of training"),
            std::string::npos)
      << out.reason;
  v.runs[0].train_s = 3.0;
  v.fastest_batch = 64;
  out = confirm(rec, v);
  EXPECT_EQ(out.batch, 64);
  EXPECT_NE(out.reason.find("batch 64 reached test accuracy >= 0.85 soonest, in 3 s"), std::string::npos) << out.reason;
  EXPECT_NE(out.reason.find("the predicted batch 128 took 4 s"), std::string::npos) << out.reason;
  v.fastest_batch.reset();
  for (auto& r : v.runs) r.reached = false;
  out = confirm(rec, v);
  EXPECT_EQ(out.batch, 128);
  EXPECT_NE(out.reason.find("not validated: no candidate reached"), std::string::npos) << out.reason;
}

// validate alone (the CLI's, and Python's in process): the run that reached the target soonest, or
// the fastest full run among the good ones, with the rate it trained at; a schedule's run is never the
// answer; none when no candidate did.
TEST(Validation, AloneRecommendsTheFastestGoodRunWithItsRate) {
  ValidationResult v;
  v.target = "test accuracy >= 0.85";
  v.runs = {run_at(64, true, 5.0), run_at(128, true, 4.0)};
  v.fastest_batch = 128;
  std::optional<Recommendation> rec = recommend(v);
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->batch, 128);
  EXPECT_NE(rec->reason.find("batch 128 reached test accuracy >= 0.85 soonest: 4 s of training"), std::string::npos)
      << rec->reason;
  EXPECT_EQ(fixed_run(v, 128)->lr.lr, v.runs[1].lr.lr);

  v.epochs = 5;
  v.lr_schedule = "cosine";
  v.runs[0].final_accuracy = 0.9010;  // the best, and slower
  v.runs[1].final_accuracy = 0.8990;  // within noise of it, and faster
  ValidationRun schedule = run_at(128, true, 3.0);
  schedule.schedule = "128:0,512:2";
  v.runs.push_back(schedule);
  v.best_batch = 64;
  v.good_batches = {64, 128};
  rec = recommend(v);
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->batch, 128);
  EXPECT_EQ(fixed_run(v, 128), &v.runs[1]);  // the fixed batch's run, not the schedule's
  EXPECT_NE(rec->reason.find("batch 128 trained 5 epochs (cosine rate, lr"), std::string::npos) << rec->reason;
  EXPECT_NE(rec->reason.find("in the least time, 4 s, to test accuracy 0.8990, within the test set's noise of the "
                             "best, batch 64's test accuracy 0.9010"),
            std::string::npos)
      << rec->reason;
  // A faster run that ended worse beyond noise: the least time is the good runs'.
  ValidationRun worse = run_at(512, true, 2.0);
  worse.final_loss = 0.6;
  worse.final_accuracy = 0.8500;
  v.runs.push_back(worse);
  rec = recommend(v);
  ASSERT_TRUE(rec);
  EXPECT_NE(rec->reason.find("in the least time of the runs within noise of the best, 4 s, to test accuracy 0.8990"),
            std::string::npos)
      << rec->reason;

  v.fastest_batch.reset();
  EXPECT_FALSE(recommend(v));
  EXPECT_EQ(fixed_run(v, 256), nullptr);
}

}  // namespace
}  // namespace batchwise

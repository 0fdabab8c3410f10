// tune() in the library: a fit followed by a sweep and the recommendation.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "batchwise/error.h"
#include "batchwise/fit.h"
#include "batchwise/race.h"
#include "batchwise/report.h"
#include "batchwise/run_race.h"
#include "batchwise/sweep.h"
#include "batchwise/trial.h"
#include "batchwise/tune.h"
#include "support/workloads.h"
#include "tune/answer_checks.h"
#include "tune/precisions.h"
#include "tune/race_entries.h"
#include "tune/race_time.h"
#include "tune/retime.h"

namespace batchwise {
namespace {

using namespace test;

TEST(Tune, FitsSweepsAndRecommends) {
  auto w = small();
  // The fit and sweep alone (no doctor, noise scale or race: those have tests of their own).
  const Report r =
      tune(TuneSubject(*w), TuneOptions()
                                .fit(FitOptions().budget_bytes(64 << 20).max(64))
                                // every doubling: stopping where samples/s flattens is a
                                // decision on this machine's speed, not on the code
                                .sweep(SweepOptions().warmup(1).steps(2).repetitions(1).stop_after_flat(-1))
                                .doctor(false)
                                .noise(false)
                                .race(false));
  ASSERT_EQ(r.fit->outcome, FitOutcome::Fits);
  ASSERT_TRUE(r.sweep.has_value());
  EXPECT_EQ(r.sweep->points.size(), 7u);  // 1, 2, 4, ..., 64
  ASSERT_TRUE(r.recommendation.has_value());
  EXPECT_EQ(r.recommendation->batch, *r.sweep->knee_batch);
  EXPECT_NE(r.recommendation->reason.find("samples/s"), std::string::npos);
}

// The precision comparison builds another precision's workload, which seeds the process's generators to build its
// model: the caller's draws go on as they were (tune on the caller's workload had returned them reseeded to the
// options' seed).
TEST(Tune, AnotherPrecisionsWorkloadLeavesTheCallersGeneratorsAsTheyWere) {
  CpuMemoryTracker::install();
  const WorkloadOptions options =
      WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(256).device("cpu").seed(7);
  torch::manual_seed(1234);
  (void)torch::rand({3});
  const at::Tensor before = at::detail::getDefaultCPUGenerator().get_state();
  PrecisionPoint own;
  own.precision = Precision::Fp32;
  own.batch = 8;
  std::vector<std::string> warnings;
  const PrecisionPoint bf16 = detail::measure_precision(
      Precision::Bf16, options,
      TuneOptions().fit(FitOptions().max(16)).sweep(SweepOptions().warmup(1).steps(2).repetitions(1)), own, 256 << 20,
      warnings);
  EXPECT_EQ(bf16.batch, 8);
  EXPECT_TRUE(at::equal(before, at::detail::getDefaultCPUGenerator().get_state()));
  EXPECT_EQ(at::detail::getDefaultCPUGenerator().current_seed(), 1234u);
}

// Batches the caller names are held to the fit's bounds, as tune's own doublings are: a batch that is no
// multiple of --multiple-of, or above --max, had been swept and recommended ("batches up to 64 fit" beside an
// answer of 128).
TEST(Tune, NamedBatchesOutsideTheFitsBoundsAreRefused) {
  auto w = small();
  const auto refusal = [&](std::vector<int64_t> batches, int64_t multiple_of) {
    try {
      (void)tune(TuneSubject(*w), TuneOptions()
                                      .fit(FitOptions().budget_bytes(64 << 20).max(64).multiple_of(multiple_of))
                                      .sweep(SweepOptions().batch_sizes(std::move(batches)).warmup(0).steps(1))
                                      .doctor(false)
                                      .noise(false)
                                      .race(false));
      return std::string();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(refusal({8, 12}, 8),
            "--batch-sizes 12: not a multiple of --multiple-of 8, which every batch tried and answered keeps; give "
            "multiples of 8, or leave --multiple-of out");
  EXPECT_EQ(refusal({8, 128}, 1),
            "--batch-sizes 128: above --max 64, where the fit stops searching, so no answer may pass it; give --max "
            "128 or more, or batches up to 64");
  EXPECT_EQ(refusal({8, 64}, 8), "");
}

TEST(Tune, SweepsOnlyMultiplesOf) {
  auto w = small();
  const Report r = tune(TuneSubject(*w), TuneOptions()
                                             .fit(FitOptions().budget_bytes(64 << 20).max(100).multiple_of(12))
                                             .sweep(SweepOptions().warmup(0).steps(1).repetitions(1))
                                             .doctor(false)
                                             .noise(false)
                                             .race(false));
  ASSERT_EQ(r.fit->outcome, FitOutcome::Fits);
  EXPECT_EQ(*r.fit->batch, 96);
  std::vector<int64_t> swept;
  for (const auto& p : r.sweep->points) swept.push_back(p.batch);
  EXPECT_EQ(swept, (std::vector<int64_t>{12, 24, 48, 96}));
}

// The batch race's entries: the reserve is held back, except after a run race stuck on the plateau,
// which has measured it already; then it races from the first rung.
TEST(Tune, TheReserveRacesFromTheFirstRungAfterARunRaceStuckOnThePlateau) {
  std::vector<Trial> points;
  const double speeds[] = {100, 200, 300, 600, 900, 1000};  // 4 to 128: 32, 64 and 128 the fast ones
  for (int i = 0; i < 6; ++i) {
    Trial t;
    t.batch = int64_t{4} << i;
    t.outcome = Outcome::Ok;
    t.samples_per_s = speeds[i];
    points.push_back(t);
  }
  const detail::RaceEntries held = detail::race_entries(points, false);
  EXPECT_EQ(held.candidates, (std::vector<int64_t>{32, 64, 128}));
  EXPECT_EQ(held.reserve, (std::vector<int64_t>{8, 16}));
  const detail::RaceEntries joined = detail::race_entries(points, true);
  EXPECT_EQ(joined.candidates, (std::vector<int64_t>{8, 16, 32, 64, 128}));
  EXPECT_TRUE(joined.reserve.empty());
  EXPECT_EQ(joined.early, (std::vector<int64_t>{8, 16}));  // the race's notes name them
  EXPECT_TRUE(held.early.empty());
  // No race without two candidates, and nothing to join: the rule adds no entries then.
  EXPECT_EQ(detail::race_entries({points.back()}, true).candidates, (std::vector<int64_t>{128}));
}

// The real trials (training, memory), each step timed at 1,000 samples/s whatever the batch: the
// sweep's rates, which choose the race's candidates, are injected, so that tune's races run here
// however busy the machine is (the CLI tests of the same wiring read the machine's rates, and are
// skipped where a loaded machine's leave one candidate). Below what mlp trains at here, so that the
// races' steps, planned from these rates, take less than the budgets say.
// `step_s(batch)` injects another step time; `exact`: the trials run their steps, however short (as
// data-parallel ranks and a training command do).
class InjectedRates final : public TrialRunner {
 public:
  explicit InjectedRates(
      Workload& w,
      std::function<double(int64_t)> step_s = [](int64_t batch) { return static_cast<double>(batch) / 1000; },
      bool exact = false)
      : real_(w), step_s_(std::move(step_s)), exact_(exact) {}
  WorkloadInfo info() const override { return real_.info(); }
  bool runs_steps_exactly() const override { return exact_; }
  Trial run(const TrialOptions& o) override {
    Trial t = real_.run(exact_ ? TrialOptions(o).min_time_s(0) : o);
    if (t.outcome != Outcome::Ok) return t;
    t.step_times_s.assign(t.step_times_s.size(), step_s_(o.batch()));
    t.wall_s = static_cast<double>(t.steps_run) * step_s_(o.batch());  // what the retiming's budget counts
    t.cpu_wait_share.reset();  // the steps' times are injected: another process's work is not in them
    summarize_steps(t);
    return t;
  }
  int64_t held_bytes() override { return real_.held_bytes(); }
  int64_t default_budget_bytes() override { return real_.default_budget_bytes(); }
  int64_t device_total_bytes() override { return real_.device_total_bytes(); }

 private:
  WorkloadRunner real_;
  std::function<double(int64_t)> step_s_;
  bool exact_ = false;
};

// tune's plan counts a sweep trial's steps as its runner runs them: through one that runs its steps
// exactly, warm-up and steps; through ours, at least --min-time of them (the plan of a data-parallel
// tune had counted --min-time for ranks that run --steps, and stated the sweep several times too long).
TEST(Tune, ThePlanCountsTheStepsTheRunnerRuns) {
  auto w = small();
  const auto sweep_expected_s = [&](bool exact) {
    InjectedRates runner(
        *w, [](int64_t) { return 1e-3; }, exact);
    const TuneOptions o =
        TuneOptions()
            .fit(FitOptions().budget_bytes(64 << 20).max(16))
            .sweep(SweepOptions().batch_sizes({8, 16}).warmup(1).steps(2).repetitions(1).min_time_s(0.05))
            .doctor(false)
            .noise(false)
            .race(false)
            .loader_search(false);
    const Report r = tune(TuneSubject(runner, w.get()), o);
    EXPECT_TRUE(r.timing.has_value());
    for (const PhaseTime& p : r.timing ? r.timing->phases : std::vector<PhaseTime>{})
      if (p.phase == "sweep") return p.expected_s;
    ADD_FAILURE() << "no sweep in the timing";
    return 0.0;
  };
  // Two batches, each one warm-up step and two steps of 1 ms; at least 0.05 s of steps: 50 of them
  EXPECT_NEAR(sweep_expected_s(true), 2 * 3 * 1e-3, 1e-9);
  EXPECT_NEAR(sweep_expected_s(false), 2 * 51 * 1e-3, 1e-9);
}

// What tune's library refuses, before anything trains (the CLI and Python refuse it through it): a run's length
// beside a target, two targets, a race's budget with no race; each naming both and the fix.
TEST(Tune, RefusesWhatItCannotAnswerAsAskedBeforeTraining) {
  auto w = small();
  const auto refusal = [&](TuneOptions o) {
    try {
      (void)tune(TuneSubject(*w), o.fit(FitOptions().budget_bytes(64 << 20).max(16)).doctor(false));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no refusal)");
  };
  EXPECT_EQ(refusal(TuneOptions().epochs(2).target_accuracy(0.8)),
            "--epochs 2 and --target-accuracy 0.8: --epochs trains full runs and compares their final quality, a "
            "target stops each run when it is met; give one of them");
  EXPECT_EQ(refusal(TuneOptions().target_accuracy(0.8).target_loss(0.3)),
            "--target-accuracy 0.8 and --target-loss 0.3: one target at a time; give one of them");
  EXPECT_EQ(refusal(TuneOptions().race(false).race_budget_s(5)),
            "--no-race and --advice-budget 5: the advice budget is the race's time, and --no-race runs none; drop "
            "one of them");
}

TuneOptions raced_tune() {
  return TuneOptions()
      .fit(FitOptions().budget_bytes(64 << 20).max(16))
      .sweep(SweepOptions().batch_sizes({8, 16}).warmup(1).steps(2).repetitions(1))
      .doctor(false)
      .noise(false)
      .loader_search(false)
      .race_budget_s(2);
}

// Two candidates at the same rate both race: the batch race without --epochs, the run race with
// them, and the answer is the race's where it names one.
TEST(Tune, BothCandidatesOfAnInjectedSweepRace) {
  // One thread: two, on cores shared with another test, wait at every barrier (docs/reliability.md,
  // "The suite on busy cores"), and the races' steps are planned from the injected rate.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const std::shared_ptr<void> put_back(nullptr,
                                       [threads](void*) { at::set_num_threads(threads); });  // past an ASSERT too
  auto w = small();
  InjectedRates runner(*w);
  const auto batches = [](const auto& entries) {
    std::vector<int64_t> out;
    for (const auto& e : entries) out.push_back(e.batch);
    return out;
  };
  const Report batch = tune(TuneSubject(runner, w.get()), raced_tune());
  ASSERT_TRUE(batch.sweep.has_value());
  EXPECT_EQ(race_candidates(batch.sweep->points), (std::vector<int64_t>{8, 16}));
  ASSERT_TRUE(batch.race.has_value());
  EXPECT_FALSE(batch.run_race.has_value());
  EXPECT_EQ(batches(batch.race->entries), (std::vector<int64_t>{8, 16}));
  ASSERT_TRUE(batch.recommendation.has_value());
  if (batch.race->best_batch) EXPECT_EQ(batch.recommendation->batch, *batch.race->best_batch);
  // No test split (the subject names no dataset): the race judged training samples, and says so.
  EXPECT_TRUE(batch.race->on_training_data) << batch.race->held_out;
  EXPECT_TRUE(std::any_of(batch.context.warnings.begin(), batch.context.warnings.end(), [](const std::string& w) {
    return w.find("the batch race judged on a sample of the training data") == 0;
  }));

  // Trials of the steps alone (no least time), so that the retiming's least rounds fit its budget.
  const Report run =
      tune(TuneSubject(runner, w.get()),
           raced_tune()
               .sweep(SweepOptions().batch_sizes({8, 16}).warmup(1).steps(2).repetitions(1).min_time_s(0))
               .epochs(0.5)
               .lr_schedule(LrSchedule::Cosine));
  ASSERT_TRUE(run.run_race.has_value());
  EXPECT_EQ(batches(run.run_race->entries), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(run.run_race->epochs, 0.5);
  // The two candidates, at the same rate, are close: timed again before the race, within its budget,
  // until each round read them alike (the least rounds) unless the budget ended it sooner.
  EXPECT_EQ(run.sweep->retimed, (std::vector<int64_t>{8, 16})) << run.sweep->retime_note;
  EXPECT_GE(run.sweep->retime_rounds, 1);
  EXPECT_LE(run.sweep->retime_rounds, 3);
  for (const Trial& p : run.sweep->points) EXPECT_EQ(p.repetitions, 1 + run.sweep->retime_rounds);
  EXPECT_FALSE(batch.sweep->retime_rounds) << "the batch race is not preceded by it";
  ASSERT_TRUE(run.recommendation.has_value());
  if (run.run_race->best_batch) EXPECT_EQ(run.recommendation->batch, *run.run_race->best_batch);
  for (const std::string& w : run.context.warnings) EXPECT_EQ(w.find("--epochs was not used"), std::string::npos) << w;

  // No race: --epochs chooses no batch, and says so, but the rate's warm-up still fits the run (it was
  // an epoch's, the whole of a 1-epoch run): at most a quarter of its steps, and the sentence says so.
  const Report plain = tune(TuneSubject(runner, w.get()),
                            raced_tune().race(false).race_budget_s(0).epochs(1).lr_schedule(LrSchedule::Cosine));
  ASSERT_TRUE(plain.lr.has_value() && plain.recommendation.has_value());
  EXPECT_FALSE(plain.run_race.has_value());
  const int64_t samples = plain.workload.dataset_size, picked = plain.recommendation->batch;
  const int64_t steps = (samples + picked - 1) / picked;
  EXPECT_LE(plain.lr->warmup_steps, steps / 4) << plain.lr->advice;
  EXPECT_NE(plain.lr->advice.find("in your 1-epoch run (" + std::to_string(steps) + " steps): "), std::string::npos)
      << plain.lr->advice;
  EXPECT_TRUE(std::any_of(plain.context.warnings.begin(), plain.context.warnings.end(), [](const std::string& w) {
    return w.find("--epochs was not used to choose the batch") == 0;
  }));
}

// The run plan's "within 5 %" rows: the good batches the race that answered could not order against
// its pick, at the rates they trained at; the run race's too (they were the batch race's alone), and
// none of a run race whose pick a validation replaced.
TEST(Tune, ThePlanListsTheBatchesTheAnsweringRaceCouldNotOrder) {
  const auto entry = [](int64_t batch, double lr) {
    RunRaceEntry e;
    e.batch = batch;
    e.lr.lr = lr;
    e.lr.scaled.batch = batch;
    return e;
  };
  Report report;
  report.run_race = RunRace();
  report.run_race->entries = {entry(32, 0.01), entry(64, 0.02), entry(128, 0.04), entry(256, 0)};
  report.run_race->within_5_percent = {32, 64, 128, 256};  // 256 failed its range test: no rate
  report.run_race->best_batch = 64;
  std::vector<int64_t> rows;
  for (const LrAdvice& a : detail::flat_range_rates(report, 64, 32)) rows.push_back(a.scaled.batch);
  EXPECT_EQ(rows, (std::vector<int64_t>{128}));  // the pick and the base batch have rows of their own
  EXPECT_DOUBLE_EQ(detail::flat_range_rates(report, 64, 16).front().lr, 0.01);
  EXPECT_TRUE(detail::flat_range_rates(report, 512, 32).empty());  // validated: 512 is the answer, not the race's pick
  // The batch race's rows, for a run of known length (tune --epochs, a batch race answering after a stuck run race):
  // fitted to the run as the recommendation is, a warm-up of a quarter of it at most (an epoch's had been kept: 15
  // of a 2-epoch run's 32 steps at batch 128)
  Report batch_race;
  batch_race.workload.dataset_size = 2048;
  batch_race.race = BatchRace();
  RaceEntry flat;
  flat.batch = 128;
  flat.rungs = 1;
  flat.lr.lr = 0.04;
  flat.lr.scaled.batch = 128;
  flat.lr.warmup_steps = 15;
  batch_race.race->entries = {flat};
  batch_race.race->within_5_percent = {64, 128};
  const std::vector<LrAdvice> fitted = detail::flat_range_rates(batch_race, 64, 32, 2, LrSchedule::Cosine);
  ASSERT_EQ(fitted.size(), 1u);
  EXPECT_EQ(fitted.front().warmup_steps, 8);  // a quarter of its 32 steps
  EXPECT_NE(fitted.front().advice.find("in your 2-epoch run (32 steps)"), std::string::npos) << fitted.front().advice;
  EXPECT_EQ(detail::flat_range_rates(batch_race, 64, 32).front().warmup_steps, 15);  // no run named: as it trained
}

// A batch larger than the training set repeats samples within a step, which no run does: neither race
// trains it (the fit and the sweep still measure it), and each race's notes say so.
TEST(Tune, ABatchLargerThanTheTrainingSetIsNotRaced) {
  std::vector<Trial> points(3);
  for (size_t i = 0; i < points.size(); ++i) points[i].batch = int64_t{256} << (2 * i);  // 256, 1024, 4096
  std::vector<int64_t> larger{7};
  const std::vector<Trial> kept = within_dataset(points, 1024, larger);
  ASSERT_EQ(kept.size(), 2u);  // the whole set in one step is a batch: 1,024 of 1,024 stays
  EXPECT_EQ(kept.back().batch, 1024);
  EXPECT_EQ(larger, (std::vector<int64_t>{4096}));
  EXPECT_EQ(larger_than_dataset_note(larger, 1024),
            "batch 4096 not raced: larger than the 1024 training samples, a step would repeat samples (the fit and "
            "the sweep measured it)");
  EXPECT_EQ(larger_than_dataset_note({}, 1024), "");

  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const std::shared_ptr<void> put_back(nullptr,
                                       [threads](void*) { at::set_num_threads(threads); });  // past an ASSERT too
  auto w = small();                                                                          // 1,024 samples
  InjectedRates runner(*w);
  const auto options = [] {
    return raced_tune()
        .fit(FitOptions().budget_bytes(64 << 20).max(2048))
        .sweep(SweepOptions().batch_sizes({8, 16, 2048}).warmup(1).steps(2).repetitions(1).stop_after_flat(-1));
  };
  const auto has_note = [](const std::vector<std::string>& notes) {
    return std::count(notes.begin(), notes.end(), larger_than_dataset_note({2048}, 1024)) == 1;
  };
  for (const Report& r : {tune(TuneSubject(runner, w.get()), options()),
                          tune(TuneSubject(runner, w.get()), options().epochs(0.5).lr_schedule(LrSchedule::Cosine))}) {
    ASSERT_TRUE(r.sweep.has_value());
    ASSERT_EQ(r.sweep->points.size(), 3u);                                             // swept: 2,048 was measured
    EXPECT_EQ(race_candidates(r.sweep->points), (std::vector<int64_t>{8, 16, 2048}));  // as fast per sample
    if (r.run_race) {
      for (const RunRaceEntry& e : r.run_race->entries) EXPECT_LE(e.batch, 16);
      EXPECT_TRUE(has_note(r.run_race->notes));
    } else {
      ASSERT_TRUE(r.race.has_value());
      for (const RaceEntry& e : r.race->entries) EXPECT_LE(e.batch, 16);
      EXPECT_TRUE(has_note(r.race->notes));
    }
    ASSERT_TRUE(r.recommendation.has_value());
    EXPECT_LE(r.recommendation->batch, 1024);
  }
}

// An answer no race trained (the knee, here with no race) keeps to the batches a run can train: one
// larger than the training set repeats samples within a step. Where the sweep ran none within it, the
// answer rests on what ran and says so.
TEST(Tune, AnAnswerWithoutARaceKeepsToTheTrainingSet) {
  auto w = small();                                         // 1,024 samples
  InjectedRates runner(*w, [](int64_t) { return 0.001; });  // 1 ms a step: the knee is the largest batch
  std::vector<std::string> stages;
  const auto tuned = [&](std::vector<int64_t> batches) {
    stages.clear();
    return tune(TuneSubject(runner, w.get()),
                TuneOptions()
                    .fit(FitOptions().budget_bytes(64 << 20).max(2048))
                    .sweep(SweepOptions().batch_sizes(std::move(batches)).warmup(0).steps(1).repetitions(1))
                    .doctor(false)
                    .noise(false)
                    .race(false)
                    .loader_search(false)
                    .on_stage([&](const TuneStage& t) { stages.push_back(t.what); }));
  };
  const Report r = tuned({16, 512, 2048});
  ASSERT_TRUE(r.recommendation.has_value());
  EXPECT_EQ(r.recommendation->batch, 512);
  EXPECT_EQ(r.sweep->knee_batch, 2048);  // the sweep's own knee is as measured
  EXPECT_NE(r.recommendation->reason.find("; batches above the 1024 training samples were not weighed, a step would "
                                          "repeat samples (the fastest of them, batch 2048, at 2048000 samples/s)"),
            std::string::npos)
      << r.recommendation->reason;
  EXPECT_NE(to_summary(r).find("knee: batch 512 at 512,000 samples/s among the batches up to the 1024 training "
                               "samples; batch 2048 at 2,048,000 samples/s over all"),
            std::string::npos)
      << to_summary(r);
  for (const std::string& warning : r.context.warnings)
    EXPECT_EQ(warning.find("is larger than the"), std::string::npos);

  // Tune's own doublings stop at the training set.
  const Report doubled = tuned({});
  ASSERT_TRUE(doubled.sweep.has_value());
  EXPECT_EQ(doubled.sweep->points.back().batch, 1024);
  ASSERT_TRUE(doubled.recommendation.has_value());
  EXPECT_EQ(doubled.recommendation->batch, 1024);
  EXPECT_EQ(std::count_if(stages.begin(), stages.end(),
                          [](const std::string& s) {
                            return s.find("from 1 to 1024 (none above the 1024 training samples)") != std::string::npos;
                          }),
            1)
      << ::testing::PrintToString(stages);

  const Report above = tuned({2048});
  ASSERT_TRUE(above.recommendation.has_value());
  ASSERT_EQ(above.recommendation->batch, 2048);
  EXPECT_EQ(std::count(above.context.warnings.begin(), above.context.warnings.end(),
                       "batch 2048 is larger than the 1024 training samples: each step repeats samples, and no race "
                       "trained it (the answer rests on the sweep's throughput); a batch up to 1024 trains each sample "
                       "once an epoch"),
            1);
}

// A tune of the 512-sample mlp that sweeps 16, 256 and 1,024 (to a fit of 2,048), races nothing and validates
// full runs of `epochs`.
TuneOptions validated_after_a_sweep(double epochs) {
  return TuneOptions()
      .fit(FitOptions().budget_bytes(64 << 20).max(2048))
      .sweep(SweepOptions().batch_sizes({16, 256, 1024}).warmup(0).steps(1).repetitions(1))
      .doctor(false)
      .race(false)
      .loader_search(false)
      .validate(ValidateOptions({}).epochs(epochs).measure_lr(false));
}

// The noise scale's batch and tune --validate's candidates keep to the training set too: a larger
// batch's gradient is not one of B independent samples, and no run the user does repeats them in a
// step; nor do the answer and the knee it validates (within it: 256, where the sweep's is 1,024).
TEST(Tune, TheNoiseScaleAndTheValidationKeepToTheTrainingSet) {
  auto w = tiny("mlp");                                     // 512 samples
  InjectedRates runner(*w, [](int64_t) { return 0.001; });  // 1 ms a step: the knee is the largest batch
  const Report r = tune(TuneSubject(runner, w.get()), validated_after_a_sweep(1).noise_steps(4));
  ASSERT_TRUE(r.noise.has_value());
  EXPECT_EQ(r.noise->batch, 256);  // the largest swept within 512 (1,024 would be, up to 1,024)
  ASSERT_TRUE(r.validation.has_value());
  std::vector<int64_t> trained;
  for (const ValidationRun& run : r.validation->runs) trained.push_back(run.batch);
  ASSERT_TRUE(r.recommendation.has_value());
  EXPECT_LE(r.recommendation->batch, 512);
  // Half the answer, the answer, twice it and the knee within the training set (and halvings below,
  // where the best run is the smallest): none above it, and so nothing to leave out.
  EXPECT_EQ(std::count(trained.begin(), trained.end(), 256), 1);
  for (const int64_t b : trained) EXPECT_LE(b, 512);
  for (const std::string& warning : r.context.warnings)
    EXPECT_EQ(warning.find("the validation trains no"), std::string::npos) << warning;
  if (r.goodput)  // goodput weighs the batches a run can train (none where the noise scale's band is unbounded)
    for (const GoodputPoint& p : r.goodput->points) EXPECT_LE(p.batch, 512);
}

// A validation of full runs shorter than one step of the answer trains none: each step of it would train more
// than the run (0.05 epochs of 512 samples are 26; the answer is 256), and tune says so.
TEST(Tune, AValidationOfRunsShorterThanTheAnswersStepDoesNotRun) {
  auto w = tiny("mlp");                                     // 512 samples
  InjectedRates runner(*w, [](int64_t) { return 0.001; });  // 1 ms a step: the knee is the largest batch
  const Report r = tune(TuneSubject(runner, w.get()), validated_after_a_sweep(0.05).noise(false));
  ASSERT_TRUE(r.recommendation.has_value());
  ASSERT_GT(r.recommendation->batch, 26);
  EXPECT_FALSE(r.validation.has_value());
  const std::string said = fmt::format(
      "the validation did not run: batch {} is more samples than the 0.05-epoch run "
      "trains (26): one step would train more than the run",
      r.recommendation->batch);
  EXPECT_NE(std::find(r.context.warnings.begin(), r.context.warnings.end(), said), r.context.warnings.end())
      << fmt::format("{}", fmt::join(r.context.warnings, "\n"));
  // The bound: the run's samples where fewer than the training set's, else the training set's; an answer past the
  // run itself (a 1-epoch run of 300 samples, answer 512) has no comparable run, past the training set alone it has
  const detail::ValidationBound short_run = detail::validation_bound(512, 0.05), one = detail::validation_bound(300, 1),
                                two = detail::validation_bound(300, 2), target = detail::validation_bound(300, 0);
  EXPECT_EQ(short_run.most, 26);
  EXPECT_EQ(short_run.beyond, short_run.past_run);
  EXPECT_EQ(one.most, 300);
  EXPECT_EQ(one.run, 300);
  EXPECT_EQ(one.beyond, "larger than the 300 training samples, a step would repeat samples");
  EXPECT_EQ(two.run, 600);
  EXPECT_EQ(target.run, 0);
  EXPECT_EQ(target.most, 300);
}

// A race judged on a handful of held-out samples ranked noise (a Python tune given held_out of one sample
// answered on it unwarned): tune says so; a hundred or more, or no race, says nothing.
TEST(Tune, ARaceJudgedOnAFewHeldOutSamplesIsWarnedOf) {
  const std::vector<std::string> one = detail::answer_size_warnings(16, 512, 0, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(
      one[0],
      "the race judged its candidates on 1 held-out sample: a held-out loss or accuracy over so few moves between "
      "batches by chance, by more than the race ranks on; give a held-out set of at least a few hundred");
  EXPECT_NE(detail::answer_size_warnings(16, 512, 0, 99).at(0).find("on 99 held-out samples:"), std::string::npos);
  EXPECT_TRUE(detail::answer_size_warnings(16, 512, 0, 100).empty());
  EXPECT_TRUE(detail::answer_size_warnings(16, 512, 0, 0).empty());
}

// An answer from throughput alone beside sweep trials that diverged at their rates is warned of (mlp at lr 0.5: batches
// 1 to 128 NaN, 256 answered with nothing said); a failure that is no divergence, or none, says nothing.
TEST(Tune, AnAnswerBesideBatchesThatDivergedIsWarnedOf) {
  SweepResult sweep;
  for (const int64_t b : {64, 128, 256}) sweep.points.push_back(Trial{}), sweep.points.back().batch = b;
  sweep.points[2].outcome = Outcome::Ok;
  sweep.points[0].outcome = sweep.points[1].outcome = Outcome::Error;
  sweep.points[0].message = "the training loss became NaN at step 3 (it was 2.3 at the first): training diverged; x";
  sweep.points[1].message = "the training loss became NaN at step 2 (it was 2.3 at the first): training diverged; x";
  EXPECT_EQ(detail::diverged_beside_warning(sweep, 256),
            "the training loss stopped being finite in the sweep at batches 64, 128 (training diverged at the rate it "
            "was given): batch 256's few steps stayed finite, and no race judged it, but a rate at which other batches "
            "diverge is at the edge, and a whole run at it may diverge too; lower the learning rate (--lr), or check "
            "the answer with --validate");
  sweep.points[0].message = sweep.points[1].message = "failed: a step raised";
  EXPECT_EQ(detail::diverged_beside_warning(sweep, 256), "");
}

// A tune whose race stopped at its wall limit, or that took longer than the most it stated, ran on a
// machine slower than its sweep measured: its time is not the next such tune's to expect.
TEST(Tune, ATuneSlowedPastItsPlanIsKnownByItsReport) {
  Report r;
  EXPECT_FALSE(slowed_past_its_plan(r));  // nothing timed
  r.timing = TuneTiming{};
  r.timing->phases = {{"doctor", 0.2, 0}, {"fit", 5, 0},         {"sweep", 20, 18},
                      {"profile", 3, 0},  {"noise scale", 4, 3}, {"run race", 50.8, 40}};
  r.timing->total_s = 83;
  r.timing->at_most_s = 87;
  r.race = BatchRace{};
  r.run_race = RunRace{};
  EXPECT_FALSE(slowed_past_its_plan(r));
  r.timing->at_most_s = 0;  // not stated: nothing to be past
  EXPECT_FALSE(slowed_past_its_plan(r));
  // A short tune's fixed costs: past the most it stated, by less than 30 s more (the 80 s it counts; the
  // profile's 3 s, which has no figure of its own, come on top)
  r.timing->at_most_s = 25;
  EXPECT_FALSE(slowed_past_its_plan(r));
  r.timing->at_most_s = 24.9;  // past twice the most and 30 s
  EXPECT_TRUE(slowed_past_its_plan(r));
  r.timing->at_most_s = 87;
  // The validation comes on top of the most stated: a --validate tune that trained its full runs for
  // ten minutes was not slowed.
  r.timing->phases.push_back({"validation", 600, 0});
  r.timing->total_s = 683;
  EXPECT_FALSE(slowed_past_its_plan(r));
  r.run_race->stopped_at_wall_limit = true;
  EXPECT_TRUE(slowed_past_its_plan(r));
  r.run_race->stopped_at_wall_limit = false;
  r.race->stopped_at_wall_limit = true;
  EXPECT_TRUE(slowed_past_its_plan(r));
}

// Before its race, tune states its plan again where what is left is far off what it stated, and
// says where the time went. A transformer tune here stated "about 5 min more" after its fit: its fit's
// three trials put the sweep at 56 s (to batch 1,024) and the race, whose budget follows the time
// spent, at 3 min; the sweep stopped at 128 after 7 s, and the race took 56 s.
TEST(Tune, ThePlanIsStatedAgainWhereTheRestIsFarOffIt) {
  using detail::restated_plan;
  using detail::unplanned_race_plan;
  const std::vector<PhaseTime> sooner = {{"sweep", 7, 56}, {"noise scale", 2.8, 2.1}};
  EXPECT_EQ(restated_plan(281 - 10, 57, 118, sooner, 180, false),
            "expected now: about 57 s more, at most 2 min (the sweep took 7 s, not the 56 s stated; the race about "
            "57 s, not 3 min)");  // the noise scale's 0.7 s: not what moved it
  // A slowed sweep moved the end, the race's figure did not move; --validate comes on top, as stated
  const std::vector<PhaseTime> slowed = {{"sweep", 150, 50}};
  EXPECT_EQ(restated_plan(-20, 60, 100, slowed, 60, true),
            "expected now: about 60 s more, at most 2 min (the sweep took 2 min, not the 50 s stated; the validation "
            "and the precision comparison come on top)");
  // Within 15 s or 30 % of the larger figure, the plan holds: no line
  EXPECT_EQ(restated_plan(60, 74, 120, sooner, 60, false), "");
  EXPECT_EQ(restated_plan(10, 24, 40, sooner, 10, false), "");
  EXPECT_EQ(restated_plan(100, 70, 140, sooner, 100, false), "");
  EXPECT_NE(restated_plan(100, 69, 140, sooner, 100, false), "");
  // The transformer again: stated 71 s more (the sweep 9 s, the race 59 s); the sweep took 16 s and the
  // race is now 82 s: both moved the end, the race the more
  EXPECT_EQ(restated_plan(71 - 16 - 5, 82, 180, {{"sweep", 16, 9}, {"noise scale", 5, 3}}, 59, false),
            "expected now: about 82 s more, at most 3 min (the sweep took 16 s, not the 9 s stated; the race about "
            "82 s, not 59 s)");  // the noise scale's 2 s: under a fifth of the 32 s move
  // No race figure stated (the plan counted none): nothing to state again
  EXPECT_EQ(restated_plan(200, 57, 118, sooner, 0, false), "");
  // A batch race after a run race stuck on the plateau, which the plan (the run race's) did not count:
  // stated whatever the plan said
  EXPECT_EQ(unplanned_race_plan(40, 110, true),
            "expected now: about 40 s more, at most 2 min (the run race found no answer: its reference did not "
            "leave the plateau at the start; a batch race follows, which the plan did not count; the validation "
            "and the precision comparison come on top)");
}

// The batches the run race turns on: the fastest candidate, the batches below it that read slower
// than a smaller one, and the candidates within 15 % of it, four at most; none where only one.
TEST(Tune, TheCloseCandidatesAreThoseWithinAShareOfTheFastest) {
  const auto points = [](std::vector<std::pair<int64_t, double>> rates) {
    std::vector<Trial> out;
    for (const auto& [batch, rate] : rates) {
      Trial t;
      t.batch = batch;
      t.outcome = Outcome::Ok;
      t.samples_per_s = rate;
      out.push_back(t);
    }
    return out;
  };
  EXPECT_EQ(detail::close_batches(
                points({{64, 500}, {128, 870}, {256, 860}, {512, 930}, {1024, 1000}, {2048, 970}, {4096, 900}})),
            (std::vector<int64_t>{256, 512, 1024, 2048}))
      << "the fastest, 256 (a dip below 128), then the nearest: 128 the slowest of them; 4096 is no candidate";
  EXPECT_EQ(detail::close_batches(points({{64, 500}, {128, 900}, {256, 700}, {512, 1000}})),
            (std::vector<int64_t>{128, 256, 512}))
      << "256, no candidate (22 % slower than 128), dips";
  EXPECT_EQ(detail::close_batches(points({{64, 500}, {128, 700}, {256, 1000}})), (std::vector<int64_t>{}));
  EXPECT_EQ(detail::close_batches(points({{64, 500}, {128, 900}, {256, 1000}})), (std::vector<int64_t>{128, 256}));
}

// Trials of a second each, at samples/s flat from 256 on: the least rounds of the close batches
// (three of 256, 512 and 1,024) must fit the retiming's budget; the batch that counts least is left
// out until they do, and where two do not fit, none is timed and the line says so.
class SecondTrials final : public TrialRunner {
 public:
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t;
    t.batch = o.batch();
    t.outcome = o.batch() >= fails_from ? Outcome::Oom : Outcome::Ok;
    t.step_times_s.assign(3, static_cast<double>(o.batch()) / (o.batch() >= 256 ? 1000.0 : 800.0));
    t.steps_run = 3;
    t.wall_s = 1;
    summarize_steps(t);
    return t;
  }
  int64_t held_bytes() override { return 0; }
  int64_t default_budget_bytes() override { return 1 << 30; }
  int64_t device_total_bytes() override { return 1 << 30; }
  int64_t fails_from = std::numeric_limits<int64_t>::max();
};

// A sweep of 16, 32 and 64 under `budget_bytes`, then the noise scale (3 steps), nothing else.
TuneOptions noise_after_a_sweep(int64_t budget_bytes) {
  return TuneOptions()
      .fit(FitOptions().budget_bytes(budget_bytes).max(64))
      .sweep(SweepOptions().batch_sizes({16, 32, 64}).min_time_s(0))
      .doctor(false)
      .noise(true)
      .noise_steps(3)
      .race(false)
      .loader_search(false);
}

// tune's noise scale is held to the budget, as its trials are (it ran unlimited): past it, a warning and
// no goodput, not an error.
TEST(Tune, TheNoiseScaleIsHeldToTheBudget) {
  auto w = small();
  SecondTrials runner;  // trials that peak at no bytes: a budget they fit, which the real noise scale does not
  const Report r = tune(TuneSubject(runner, w.get()), noise_after_a_sweep(64 << 10));
  EXPECT_FALSE(r.noise.has_value());
  EXPECT_FALSE(r.goodput.has_value());
  EXPECT_TRUE(std::any_of(r.context.warnings.begin(), r.context.warnings.end(), [](const std::string& w) {
    return w.find("no noise scale or goodput: batch ") == 0 &&
           w.find("does not fit the 64.0 KiB budget") != std::string::npos;
  })) << fmt::format("{}", fmt::join(r.context.warnings, "\n"));
  ASSERT_TRUE(r.recommendation.has_value());  // the knee's
}

// A pass tune could not undo (the noise scale's training, here) is in the report's warnings, the answer standing.
TEST(Tune, APassWhoseTrainingCouldNotBeUndoneIsWarnedOf) {
  Unrestorable w(small());
  SecondTrials runner;
  const Report r = tune(TuneSubject(runner, &w), noise_after_a_sweep(64 << 20));
  EXPECT_TRUE(std::any_of(r.context.warnings.begin(), r.context.warnings.end(), [](const std::string& s) {
    return s.find("could not be put back as they were before a pass that trained them") != std::string::npos;
  })) << fmt::format("{}", fmt::join(r.context.warnings, "\n"));
  EXPECT_TRUE(w.take_restore_failures().empty()) << "taken into the report";
  EXPECT_TRUE(r.recommendation.has_value());
}

TEST(Tune, TheRetimingLeavesOutWhatItsLeastRoundsCannotAfford) {
  SecondTrials runner;
  const SweepOptions s = SweepOptions().batch_sizes({128, 256, 512, 1024}).repetitions(1).min_time_s(0);
  std::vector<std::string> lines;
  const auto say = [&](const std::string& l) { lines.push_back(l); };
  SweepResult roomy = sweep(runner, s);
  detail::retime_close(runner, s, roomy, 100000, 20, say);
  EXPECT_EQ(roomy.retimed, (std::vector<int64_t>{256, 512, 1024})) << "128 is 20 % slower; 9 s of least rounds fit";

  SweepResult tight = sweep(runner, s);
  lines.clear();
  detail::retime_close(runner, s, tight, 100000, 7, say);
  EXPECT_EQ(tight.retimed.size(), 2u) << "three rounds of two batches: 6 s";
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].find("run race: before it, batches "), 0u) << lines[0];

  SweepResult none = sweep(runner, s);
  lines.clear();
  detail::retime_close(runner, s, none, 100000, 5, say);
  EXPECT_TRUE(none.retimed.empty());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("not timed again: 3 rounds of their trials would take about 6 s, past the 5 s"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(none.retime_note.find("not timed again"), std::string::npos) << "the JSON says why too";

  // A trial that fails in the retiming (the memory moved since the sweep): the report warns that the
  // batch, and every larger one, no longer races.
  SweepResult failed = sweep(runner, s);
  runner.fails_from = 512;
  EXPECT_EQ(detail::retime_close(runner, s, failed, 100000, 20, say),
            "the run race's retiming: a trial at batch 512 failed (oom), and the timing stopped there; batch 512 no "
            "longer races (oom), nor any larger batch");
  EXPECT_EQ(failed.points.back().outcome, Outcome::Oom);
}

}  // namespace
}  // namespace batchwise

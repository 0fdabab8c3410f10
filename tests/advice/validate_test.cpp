// validate's time to a target from the curve so far, on curves given point by point; and its full
// runs: every candidate trains the same epochs under the schedule and is judged on its final
// held-out quality, then its time.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "batchwise/error.h"
#include "batchwise/html.h"
#include "batchwise/lr.h"
#include "batchwise/memory.h"
#include "batchwise/race.h"
#include "batchwise/recommend.h"
#include "batchwise/report.h"
#include "batchwise/run_race.h"
#include "batchwise/schedule.h"
#include "batchwise/trial.h"
#include "batchwise/utilisation.h"
#include "batchwise/validate.h"
#include "batchwise/workload.h"

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

std::unique_ptr<Workload> mlp(int64_t samples) {
  CpuMemoryTracker::install();
  return make_workload(
      WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(samples).device("cpu").seed(3));
}

// Full runs: each batch trains exactly the epochs asked (its last batch may run past the data's
// end), is evaluated after its last step on the whole held-out set, and the answer is the fastest
// of those within the held-out set's noise of the best; the workload comes back as it was.
TEST(Validate, FullRunsTrainTheEpochsAndCompareFinalQuality) {
  auto w = mlp(1000);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  const auto before = dynamic_cast<ModuleWorkload&>(*w).module().parameters()[0].clone();
  const ValidationResult v = validate(
      *w, held_out,
      ValidateOptions({16, 100}).epochs(2).lr_schedule(LrSchedule::Cosine).measure_lr(false).held_out_samples(200));
  EXPECT_TRUE(at::equal(before, dynamic_cast<ModuleWorkload&>(*w).module().parameters()[0]));
  EXPECT_EQ(v.epochs, 2);
  EXPECT_EQ(v.lr_schedule, "cosine");
  // the curves read the first 200, the final quality all 1000: the header says both (it had named the 200 alone)
  EXPECT_NE(v.held_out.find("its first 200 of 1000 samples along each run, all 1000 at its end"), std::string::npos)
      << v.held_out;
  ASSERT_EQ(v.runs.size(), 2u);
  EXPECT_EQ(v.runs[0].steps, 125);  // ceil(2 x 1000 / 16)
  EXPECT_EQ(v.runs[1].steps, 20);
  for (const ValidationRun& r : v.runs) {
    ASSERT_TRUE(r.final_loss.has_value()) << r.batch << ": " << r.message;
    ASSERT_TRUE(r.final_accuracy.has_value());
    EXPECT_TRUE(std::isfinite(*r.final_loss));
    EXPECT_LE(r.warmup_steps, r.steps / 4);
    EXPECT_FALSE(r.reached);
    EXPECT_EQ(r.curve.back().samples, r.steps * r.batch);  // the last evaluation after the last step
    EXPECT_EQ(r.curve.size(), 10u);
    if (scheduler_times()) {  // /proc/self/task/*/schedstat, where the kernel keeps it
      ASSERT_TRUE(r.cpu_wait_share.has_value());
      EXPECT_GE(*r.cpu_wait_share, 0.0);
      EXPECT_LE(*r.cpu_wait_share, 1.0);
    }
  }
  ASSERT_TRUE(v.best_batch.has_value());
  ASSERT_TRUE(v.fastest_batch.has_value());
  EXPECT_NE(std::find(v.good_batches.begin(), v.good_batches.end(), *v.best_batch), v.good_batches.end());
  EXPECT_NE(std::find(v.good_batches.begin(), v.good_batches.end(), *v.fastest_batch), v.good_batches.end());
  double fastest_s = 1e300;
  for (const ValidationRun& r : v.runs)
    if (r.good) fastest_s = std::min(fastest_s, r.train_s);
  for (const ValidationRun& r : v.runs)
    if (r.batch == *v.fastest_batch) EXPECT_EQ(r.train_s, fastest_s);
  // Every run left the start (here by its loss, 2 % below the initial weights', on the same set).
  ASSERT_TRUE(v.loss_before.has_value());
  for (const ValidationRun& r : v.runs) {
    EXPECT_LE(*r.final_loss, 0.98 * *v.loss_before) << r.batch;
    EXPECT_EQ(r.message, "") << r.batch;
  }
  // The JSON carries the full runs' fields.
  Report report;
  report.validation = v;
  const std::string json = to_json(report);
  for (const char* field : {"\"final_loss\"", "\"final_accuracy\"", "\"good_batches\"", "\"best_batch\"",
                            "\"lr_schedule\": \"cosine\"", "\"loss_before\""})
    EXPECT_NE(json.find(field), std::string::npos) << field;
}

// A run at a high rate can learn to classify while its held-out loss rises above the initial weights'
// (overconfident on what it gets wrong): it left the start by its accuracy, and is judged.
TEST(Validate, ARunWhoseAccuracyRoseLeftTheStartThoughItsLossRose) {
  auto w = mlp(1024);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  const ValidationResult v = validate(*w, held_out, ValidateOptions({16}).epochs(2).measure_lr(false).base_lr(0.2));
  ASSERT_EQ(v.runs.size(), 1u);
  const ValidationRun& r = v.runs[0];
  ASSERT_TRUE(r.final_loss && r.final_accuracy && v.loss_before && v.accuracy_before) << r.message;
  EXPECT_GT(*r.final_accuracy, *v.accuracy_before + 0.05);
  // The setting's loss rose on the development machine; where another BLAS's numbers do not, the run
  // left the start by its loss, and this test has nothing to show.
  if (*r.final_loss < 0.98 * *v.loss_before) GTEST_SKIP() << "the loss fell here: " << *r.final_loss;
  EXPECT_EQ(r.message, "");
  EXPECT_EQ(v.best_batch, 16);
  EXPECT_EQ(v.fastest_batch, 16);
}

// Full runs too short to leave the start (one step each at a rate that moves nothing) end at chance:
// none is best, good or recommended, each says why, and the closing line says what to do. Before,
// 0.001 epochs of lenet answered "batch 64, the best of the runs" at 0.0558 accuracy.
// A batch more samples than a full run trains is refused: its one step would train more than the run
// (0.1 epochs of 1,000 samples, batch 500: 5 times it), and the runs would not compare.
TEST(Validate, ABatchLargerThanTheRunIsRefused) {
  auto w = mlp(1000);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  try {
    validate(*w, held_out, ValidateOptions({100, 500}).epochs(0.1).measure_lr(false));
    FAIL() << "batch 500 trained in a run of 100 samples";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--batch-sizes: batch 500 is more samples than a 0.1-epoch run of 1000 "
                                          "samples trains (100): its one step would train 5 times the run",
                                          0),
              0u)
        << e.what();
  }
  // 10 epochs of it are 10,000 samples: a batch past the training set, but not past the run, trains
  EXPECT_NO_THROW(check_batches_within_run({2000}, 10, 1000));
  // A batch of none is named as the candidate it is (the rate rule's check had named itself), and an empty
  // held-out set built by hand has no empty name before its message
  try {
    validate(*w, held_out, ValidateOptions({0, 100}).epochs(1).measure_lr(false));
    FAIL() << "batch 0 trained";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--batch-sizes: batch 0 must be at least 1");
  }
  try {
    validate(*w, Dataset(), ValidateOptions({100}).epochs(1).measure_lr(false));
    FAIL() << "no held-out set";
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(), "the held-out set is empty");
  }
}

// Held-out data the model cannot take (16 features beside the mlp's 784) is a DataError naming the set before
// anything trains, in validate and both races; it was torch's "mat1 and mat2 shapes cannot be multiplied".
TEST(Validate, HeldOutDataTheModelCannotTakeIsRefusedByName) {
  auto w = mlp(1000);
  Dataset odd;
  odd.name = "my test set";
  odd.inputs = torch::randn({64, 16});
  odd.targets = torch::randint(0, 10, {64}, torch::kLong);
  odd.num_classes = 10;
  const std::string said = "my test set: the model cannot evaluate its first samples (";
  const auto refused = [&](const std::function<void()>& call) {
    try {
      call();
      ADD_FAILURE() << "trained on held-out data of 16 features";
    } catch (const DataError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(said, 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find("give held-out data of the kind the training data is"), std::string::npos);
    }
  };
  auto& m = dynamic_cast<ModuleWorkload&>(*w);
  refused([&] { validate(*w, odd, ValidateOptions({16}).epochs(0.1).measure_lr(false)); });
  refused([&] { race_batches(m, odd, BatchRaceOptions({16, 32}, {1000, 1000}, LrAdviceOptions(32, 0.1))); });
  refused([&] { race_runs(m, odd, RunRaceOptions({16, 32}, {1000, 1000}, LrAdviceOptions(32, 0.1)).epochs(1)); });
}

TEST(Validate, FullRunsThatNeverLeftTheStartAnswerNothing) {
  auto w = mlp(1000);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  const ValidationResult v =
      validate(*w, held_out, ValidateOptions({50, 100}).epochs(0.1).measure_lr(false).base_lr(1e-9));
  ASSERT_EQ(v.runs.size(), 2u);
  ASSERT_TRUE(v.loss_before.has_value());
  for (const ValidationRun& r : v.runs) {
    EXPECT_EQ(r.steps, 100 / r.batch) << r.batch;      // the run's 100 samples
    ASSERT_TRUE(r.final_loss.has_value()) << r.batch;  // it finished: its figures stay in the report
    EXPECT_FALSE(r.good) << r.batch;
    EXPECT_EQ(r.message.rfind("did not leave the start in 0.1 epochs: held-out loss ", 0), 0u) << r.message;
    EXPECT_NE(r.message.find("not 2 % below the initial weights' "), std::string::npos) << r.message;
  }
  EXPECT_FALSE(v.best_batch.has_value());
  EXPECT_FALSE(v.fastest_batch.has_value());
  EXPECT_TRUE(v.good_batches.empty());
  Report report;
  report.validation = v;
  EXPECT_FALSE(recommend(v).has_value());
  EXPECT_EQ(closing_line(report),
            "answer: none: no fixed batch's run left the start in 0.1 epochs (each run's note says so): a longer "
            "--epochs trains past it");
  EXPECT_NE(to_table(report).find(closing_line(report)), std::string::npos);
  // The target mode's answer line names the target no batch reached.
  ValidationResult unreached;
  unreached.target = "test accuracy >= 0.99";
  unreached.runs.push_back(ValidationRun{});
  Report target_report;
  target_report.validation = unreached;
  EXPECT_EQ(closing_line(target_report),
            "answer: none: no batch reached test accuracy >= 0.99 (each run's note says why)");
  // tune --validate: nothing checked the answer, and both its reason and its confidence say why.
  const Recommendation predicted{100, "the reason"};
  EXPECT_EQ(
      confirm(predicted, v).reason,
      "the reason; not validated: no full run of 0.1 epochs left the start at a fixed batch (each run's note says "
      "so)");
  Evidence e;
  e.validation = &v;
  const Recommendation checked = with_confidence(predicted, e);
  EXPECT_EQ(checked.confidence, Confidence::Low);
  EXPECT_EQ(checked.confidence_reason,
            "the validation's full runs of 0.1 epochs left the plateau at the start at none of its fixed batches, so "
            "nothing checked the answer; a longer --epochs trains past it");
}

// What full runs may add below the smallest batch, as validate() trains it and the stage lines name it.
TEST(Validate, HalvingsBelowTheSmallestBatch) {
  EXPECT_EQ(halvings_below({64, 16, 32}, 3), (std::vector<int64_t>{8, 4, 2}));
  EXPECT_EQ(halvings_below({3}, 5), (std::vector<int64_t>{1}));
  EXPECT_TRUE(halvings_below({1, 8}, 2).empty());
  EXPECT_TRUE(halvings_below({16}, 0).empty());
  EXPECT_TRUE(halvings_below({}, 2).empty());
  EXPECT_EQ(halvings_below_text({32, 16}, 2), " (8 too where 16 ends best, then 4 where 8 does)");
  EXPECT_EQ(halvings_below_text({3}, 5), " (1 too where 3 ends best)");
  EXPECT_EQ(halvings_below_text({64, 16}, 3), " (8 too where 16 ends best, then 4 where 8 does, then 2 where 4 does)");
  EXPECT_EQ(halvings_below_text({16}, 0), "");
}

// Full runs whose best is the smallest batch given train half of it too, in batch order beside the
// rest; the runs already trained are not trained again, and the best and the good set are judged
// over all of them.
TEST(Validate, ABestAtTheGridsLowerEdgeTrainsABatchBelowIt) {
  auto w = mlp(1000);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  const auto options = [] {
    return ValidateOptions({200, 100})
        .epochs(2)
        .lr_schedule(LrSchedule::Cosine)
        .measure_lr(false)
        .held_out_samples(200);
  };
  const ValidationResult given = validate(*w, held_out, options());
  ASSERT_EQ(given.runs.size(), 2u);
  ASSERT_EQ(given.best_batch, 100) << "twice the steps at the rule's rate on 1,000 samples";
  const ValidationResult v = validate(*w, held_out, options().extend_below(1));
  ASSERT_EQ(v.runs.size(), 3u);
  EXPECT_EQ(v.runs[0].batch, 50);
  EXPECT_EQ(v.runs[1].batch, 100);
  EXPECT_EQ(v.runs[2].batch, 200);
  ASSERT_TRUE(v.runs[0].final_loss.has_value()) << v.runs[0].message;
  EXPECT_EQ(*v.runs[1].final_loss, *given.runs[1].final_loss);  // the same run, from the same weights
  for (const auto& r : v.runs) ASSERT_TRUE(r.final_accuracy.has_value());
  const auto best = std::max_element(
      v.runs.begin(), v.runs.end(), [](const auto& a, const auto& b) { return *a.final_accuracy < *b.final_accuracy; });
  EXPECT_EQ(v.best_batch, best->batch);
  EXPECT_EQ(std::count(v.good_batches.begin(), v.good_batches.end(), 50), v.runs[0].good ? 1 : 0);
  // In batch order, the halving trained last included ("batches 100 to 50 about as good", before).
  EXPECT_TRUE(std::is_sorted(v.good_batches.begin(), v.good_batches.end()));
}

// A run whose threads waited for a core (another process on it) took longer than the batch costs,
// and the fastest good batch is read off train_s: the validation says so, naming the runs (QA: three
// runs of one batch took 1.8, 46 and 50 s with nothing said).
TEST(Validate, RunsThatSharedTheCpuAreNamedInAWarning) {
  ValidationResult v;
  for (const auto& [batch, share] : std::vector<std::pair<int64_t, double>>{{16, 0.35}, {64, 0.02}, {128, 0.12}}) {
    ValidationRun r;
    r.batch = batch;
    r.cpu_wait_share = share;
    v.runs.push_back(r);
  }
  EXPECT_EQ(shared_cpu_warning(v),
            "validation shared the CPU: the runs of 16, 128 waited for a core up to 35 % of the time their threads "
            "were ready to run (Linux's run-queue delay), held by another process or by more threads than cores; "
            "their train_s, and with it which good batch is fastest, carries that: validate again on a quiet machine "
            "(top shows what else runs)");
  v.runs[0].cpu_wait_share = 0.05;
  v.runs[2].cpu_wait_share.reset();  // not read (not a CPU)
  EXPECT_EQ(shared_cpu_warning(v), "");
}

// A target judged on a handful of held-out samples can be reached by chance (the standard error of an
// accuracy over 40 samples is up to 8 points): the report says so; full runs' good set is as wide as that noise.
TEST(Validate, ATargetOnAHandfulOfHeldOutSamplesIsWarnedOf) {
  ValidationResult v;
  v.held_out_samples = 40;
  ASSERT_EQ(validation_warnings(v).size(), 1u);
  EXPECT_EQ(validation_warnings(v)[0].rfind("validation judged the target on 40 held-out samples: ", 0), 0u)
      << validation_warnings(v)[0];
  v.held_out_samples = kFewHeldOutSamples;
  EXPECT_TRUE(validation_warnings(v).empty());
  v.held_out_samples = 40;
  v.epochs = 2;
  EXPECT_TRUE(validation_warnings(v).empty()) << "full runs";
  v.epochs = 0;
  v.held_out_samples = 0;  // a report older than the field
  EXPECT_TRUE(validation_warnings(v).empty());
  // through validate(): the samples it evaluated on are recorded
  auto w = mlp(256);
  const Dataset held_out = head(dynamic_cast<ModuleWorkload&>(*w).data(), 30);
  const ValidationResult run =
      validate(*w, held_out, ValidateOptions({64}).target_accuracy(0.99).max_epochs(0.25).measure_lr(false));
  EXPECT_EQ(run.held_out_samples, 30);
  const std::vector<std::string> said = validation_warnings(run);  // a busy machine's shared-CPU one may come too
  EXPECT_TRUE(std::any_of(said.begin(), said.end(), [](const std::string& w) {
    return w.rfind("validation judged the target on 30 held-out samples: ", 0) == 0;
  })) << fmt::format("{}", fmt::join(said, "\n"));
}

// A run to a target gives up at --max-epochs in whole steps, never past it: batch 64 of 40 samples trains one step
// (1.6 epochs) at --max-epochs 2, where it had trained two (3.2), and batch 4 exactly 2 epochs.
TEST(Validate, ARunToATargetStopsAtMaxEpochsNotAStepPast) {
  auto w = mlp(40);
  const Dataset held_out = head(dynamic_cast<ModuleWorkload&>(*w).data(), 20);
  const ValidationResult v =
      validate(*w, held_out, ValidateOptions({4, 64}).target_loss(1e-9).max_epochs(2).measure_lr(false));
  ASSERT_EQ(v.runs.size(), 2u);
  EXPECT_EQ(v.runs[0].steps, 20);
  EXPECT_DOUBLE_EQ(v.runs[0].epochs, 2.0);
  EXPECT_EQ(v.runs[1].steps, 1);
  EXPECT_DOUBLE_EQ(v.runs[1].epochs, 1.6);
  for (const ValidationRun& r : v.runs) EXPECT_EQ(r.message, "not reached within --max-epochs 2") << r.batch;
}

// To a target, an evaluation interval at or past --max-epochs judges each run once, at its end, where every batch
// "reaches" it: refused, naming the whole length and the default interval; one below it trains.
TEST(Validate, AnIntervalPastMaxEpochsToATargetIsRefused) {
  auto w = mlp(40);
  const Dataset held_out = head(dynamic_cast<ModuleWorkload&>(*w).data(), 20);
  try {
    (void)validate(*w, held_out,
                   ValidateOptions({4, 8}).target_loss(1e-9).max_epochs(2).eval_every_samples(80).measure_lr(false));
    ADD_FAILURE() << "validated";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--eval-every 80: at or past the end of batch 4's run to the target (80 samples, its whole steps "
                 "within --max-epochs 2 of 40 samples), so it is judged once, at its end, where any batch \"reaches\" "
                 "the target and the soonest is the fastest by samples/s; give an interval well below it (the default "
                 "is a twentieth of an epoch, 2 samples)");
  }
  // batch 24's run ends at 72 samples (3 whole steps of 80): 75 judges it once
  EXPECT_THROW(check_eval_interval(ValidateOptions({4, 24}).target_loss(1e-9).max_epochs(2).eval_every_samples(75), 40),
               ConfigError);
  EXPECT_NO_THROW(
      check_eval_interval(ValidateOptions({4, 24}).target_loss(1e-9).max_epochs(2).eval_every_samples(71), 40));
  EXPECT_NO_THROW(check_eval_interval(ValidateOptions({4}).epochs(2).eval_every_samples(1000), 40));  // full runs
  EXPECT_NO_THROW((void)validate(
      *w, held_out, ValidateOptions({4, 8}).target_loss(1e-9).max_epochs(2).eval_every_samples(40).measure_lr(false)));
}

// The budget holds for validate's runs as for a trial: a batch whose training needs more fails as
// out of memory, and the others train as without it (their evaluations, at batchwise's own batch,
// are not held to it). Before, --memory-budget was not applied to validate at all.
TEST(Validate, ARunPastTheMemoryLimitFailsAsOutOfMemoryAndTheOthersTrain) {
  CpuMemoryTracker& tracker = CpuMemoryTracker::install();
  auto w = mlp(1000);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  const auto options = [] {
    return ValidateOptions({16, 1000})
        .epochs(1)
        .lr_schedule(LrSchedule::Cosine)
        .measure_lr(false)
        .held_out_samples(1000);
  };
  const int64_t small = run_trial(*w, TrialOptions(16).warmup(1).steps(2)).peak_bytes;  // the training's own
  const int64_t large = run_trial(*w, TrialOptions(1000).warmup(1).steps(2)).peak_bytes;
  ASSERT_GT(large, 2 * small);
  const ValidationResult free = validate(*w, held_out, options());
  const ValidationResult held_to = validate(*w, held_out, options().limit_bytes((small + large) / 2));
  ASSERT_EQ(held_to.runs.size(), 2u);
  // the same training; its evaluation held to the budget too, in halves of the 1,000 samples where it cannot hold
  // them at once (the sum in two parts, to the float's rounding)
  ASSERT_TRUE(held_to.runs[0].final_loss.has_value()) << held_to.runs[0].message;
  EXPECT_NEAR(*held_to.runs[0].final_loss, *free.runs[0].final_loss, 1e-5 * std::abs(*free.runs[0].final_loss));
  EXPECT_FALSE(held_to.runs[1].final_loss.has_value());
  EXPECT_NE(held_to.runs[1].message.find("memory budget exceeded"), std::string::npos) << held_to.runs[1].message;
  EXPECT_TRUE(free.runs[1].final_loss.has_value()) << free.runs[1].message;
  EXPECT_EQ(tracker.limit_bytes(), 0) << "lifted after the runs";
}

// A batch-size schedule trains beside the grid as one more full run: each phase at its batch from its
// epoch on, at that batch's rate; it is judged against the best fixed batch, never counted as one.
TEST(Validate, ABatchScheduleTrainsEachPhaseAtItsBatch) {
  auto w = mlp(1000);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  const auto before = dynamic_cast<ModuleWorkload&>(*w).module().parameters()[0].clone();
  const ValidationResult v = validate(*w, held_out,
                                      ValidateOptions({16, 100})
                                          .epochs(2)
                                          .lr_schedule(LrSchedule::Cosine)
                                          .measure_lr(false)
                                          .held_out_samples(200)
                                          .batch_schedule({{16, 0}, {100, 1}}));
  EXPECT_TRUE(at::equal(before, dynamic_cast<ModuleWorkload&>(*w).module().parameters()[0]));
  ASSERT_EQ(v.runs.size(), 3u);
  const ValidationRun& s = v.runs[2];
  ASSERT_TRUE(s.final_loss.has_value()) << s.message;
  EXPECT_EQ(s.schedule, "16:0,100:1");
  EXPECT_EQ(s.batch, 16);
  EXPECT_EQ(s.steps, 63 + 10);  // ceil(1000 / 16) steps of 16 (1,008 samples), then 10 of 100 to 2,008
  EXPECT_EQ(s.curve.back().samples, 63 * 16 + 10 * 100);
  ASSERT_EQ(s.phase_lrs.size(), 2u);
  EXPECT_EQ(s.phase_lrs[0], v.runs[0].lr.lr);  // each phase at its batch's rate
  EXPECT_EQ(s.phase_lrs[1], v.runs[1].lr.lr);
  EXPECT_GT(s.phase_lrs[1], s.phase_lrs[0]);
  EXPECT_EQ(v.schedule_saving.has_value(), s.good);
  EXPECT_TRUE(v.runs[0].schedule.empty());
  ASSERT_TRUE(v.best_batch.has_value());
  if (v.schedule_saving) {
    double fastest_s = 0;
    for (const ValidationRun& r : v.runs)
      if (r.schedule.empty() && v.fastest_batch && r.batch == *v.fastest_batch) fastest_s = r.train_s;
    EXPECT_NEAR(*v.schedule_saving, 1 - s.train_s / fastest_s, 1e-12);
  }
  Report report;
  report.validation = v;
  const std::string json = to_json(report);
  for (const char* field : {"\"schedule\": \"16:0,100:1\"", "\"phase_lrs\""})
    EXPECT_NE(json.find(field), std::string::npos) << field;
  // A schedule needs the run's length, and its phases must start within it.
  EXPECT_THROW(validate(*w, held_out, ValidateOptions({16}).target_accuracy(0.5).batch_schedule({{16, 0}, {100, 1}})),
               ConfigError);
  try {
    validate(*w, held_out, ValidateOptions({16}).epochs(2).batch_schedule({{16, 0}, {100, 2}}));
    FAIL() << "a phase after the run's end was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not within the 2-epoch run"), std::string::npos) << e.what();
  }
}

// A schedule's warm-up is its first phase's and ends where the second phase starts at the latest: batch 100's
// 5-step warm-up (a quarter of its 2-epoch run) is 2 steps where batch 200 starts at 250 samples (it had ramped
// on towards batch 200's rate, jumping at the change, and reported 5 steps).
TEST(Validate, AScheduleWarmsUpWithinItsFirstPhase) {
  auto w = mlp(1000);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  const ValidationResult v = validate(*w, held_out,
                                      ValidateOptions({100, 200})
                                          .epochs(2)
                                          .lr_schedule(LrSchedule::Cosine)
                                          .measure_lr(false)
                                          .held_out_samples(200)
                                          .batch_schedule({{100, 0}, {200, 0.25}}));
  ASSERT_EQ(v.runs.size(), 3u);
  EXPECT_EQ(v.runs[0].warmup_steps, 5);  // batch 100's own run: a quarter of its 20 steps
  EXPECT_EQ(v.runs[2].warmup_steps, 2);
  EXPECT_DOUBLE_EQ(v.runs[2].warmup_epochs, 0.2);
}

// Stopped mid-grid (the CLI's first Ctrl-C): the runs that finished are kept and judged among
// themselves, the one under way is dropped, no later candidate trains, and the weights are as they
// were. The stop comes at the Nth question: batch 16's run asks 126 times (before it, once its rate is
// set, after each of its 125 steps but the last: a run whose last step is done finishes), so the
// 131st is three steps into batch 100's run.
TEST(Validate, AStoppedValidationKeepsTheRunsThatFinishedAndNamesTheRest) {
  auto w = mlp(1000);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  const auto before = dynamic_cast<ModuleWorkload&>(*w).module().parameters()[0].clone();
  for (const int stop_at : {1, 127, 131}) {  // 127: asked during batch 16's last step
    int asked = 0;
    const ValidationResult v = validate(*w, held_out,
                                        ValidateOptions({16, 100, 200})
                                            .epochs(2)
                                            .lr_schedule(LrSchedule::Cosine)
                                            .measure_lr(false)
                                            .held_out_samples(200)
                                            .batch_schedule({{16, 0}, {100, 1}})
                                            .extend_below(2)
                                            .should_stop([&] { return ++asked >= stop_at; }));
    SCOPED_TRACE(stop_at);
    EXPECT_TRUE(at::equal(before, dynamic_cast<ModuleWorkload&>(*w).module().parameters()[0]));
    EXPECT_TRUE(v.interrupted);
    EXPECT_TRUE(v.schedule_not_trained);
    if (stop_at == 1) {  // before the first candidate: nothing trained, nothing judged
      EXPECT_TRUE(v.runs.empty());
      EXPECT_EQ(v.not_trained, (std::vector<int64_t>{16, 100, 200}));
      EXPECT_FALSE(v.best_batch.has_value());
      EXPECT_FALSE(v.fastest_batch.has_value());
      Report nothing;
      nothing.validation = v;  // a table of no row says why
      EXPECT_NE(to_table(nothing).find("  stopped before any run ended: not trained: 16, 100, 200, the schedule"),
                std::string::npos)
          << to_table(nothing);
      continue;
    }
    ASSERT_EQ(v.runs.size(), 1u);  // batch 100's run, 3 steps in, is not among them
    EXPECT_EQ(v.runs[0].batch, 16);
    EXPECT_EQ(v.runs[0].steps, 125);
    ASSERT_TRUE(v.runs[0].final_loss.has_value()) << v.runs[0].message;
    EXPECT_EQ(v.not_trained, (std::vector<int64_t>{100, 200}));
    EXPECT_EQ(v.best_batch, std::optional<int64_t>(16));  // among the finished; no batch below it trained
    Report report;
    report.validation = v;
    const nlohmann::json j = nlohmann::json::parse(to_json(report)).at("validation");
    EXPECT_EQ(j.at("interrupted"), true);
    EXPECT_EQ(j.at("not_trained"), nlohmann::json::parse("[100, 200]"));
    EXPECT_EQ(j.at("schedule_not_trained"), true);
    EXPECT_EQ(j.at("untrained_schedule"), "16:0,100:1");
    EXPECT_NE(closing_line(report).find("interrupted before batches 100, 200 and the schedule trained"),
              std::string::npos)
        << closing_line(report);
    EXPECT_NE(to_table(report).find("  stopped: not trained: 100, 200, the schedule"), std::string::npos)
        << to_table(report);
    EXPECT_NE(to_html(to_json(report), "t").find("stopped: not trained: 100, 200, the schedule</td>"),
              std::string::npos);
  }
  // Not stopped: the fields are not written.
  Report report;
  report.validation = validate(*w, held_out, ValidateOptions({100}).epochs(1).measure_lr(false).held_out_samples(200));
  EXPECT_EQ(to_json(report).find("interrupted"), std::string::npos);
}

// Python's Ctrl-C raises in the model's own code, so the step under way throws: a run whose step threw
// while should_stop says true is the stop's (dropped and named not trained), not a failed run; one
// that threw with no stop asked is a failed run, as before.
TEST(Validate, ARunWhoseStepThrewOnceAStopWasAskedIsTheStops) {
  for (const bool asked : {true, false}) {
    SCOPED_TRACE(asked);
    CpuMemoryTracker::install();
    at::manual_seed(2);
    Dataset data;
    data.name = "rows";
    data.inputs = at::randn({256, 8});
    data.targets = data.inputs.sum(1, /*keepdim=*/true);
    torch::nn::Linear linear(8, 1);
    WorkloadInfo info;
    info.model = "linear";
    info.optimizer = "sgd";
    info.lr = 0.01;
    int losses = 0;  // the 40th loss, in batch 32's first steps (batch 16's run took 16 and its evaluations)
    bool stop = false;
    ModuleWorkload w(
        info, torch::nn::AnyModule(linear),
        std::make_unique<torch::optim::SGD>(linear->parameters(), torch::optim::SGDOptions(0.01)), data,
        [&](const at::Tensor& out, const at::Tensor& y) {
          if (++losses == 40) {
            stop = asked;
            throw std::runtime_error("KeyboardInterrupt");
          }
          return (out - y).pow(2).mean();
        },
        c10::Device(c10::kCPU), 0);
    const ValidationResult v = validate(
        w, data,
        ValidateOptions({16, 32, 64}).epochs(1).lr_schedule(LrSchedule::Cosine).measure_lr(false).should_stop([&] {
          return stop;
        }));
    ASSERT_GE(v.runs.size(), 1u);
    EXPECT_EQ(v.runs[0].batch, 16);
    EXPECT_TRUE(v.runs[0].final_loss.has_value()) << v.runs[0].message;
    if (asked) {
      EXPECT_TRUE(v.interrupted);
      EXPECT_EQ(v.runs.size(), 1u);
      EXPECT_EQ(v.not_trained, (std::vector<int64_t>{32, 64}));
    } else {
      EXPECT_FALSE(v.interrupted);
      ASSERT_EQ(v.runs.size(), 3u);
      EXPECT_EQ(v.runs[1].message, "failed: KeyboardInterrupt");
      EXPECT_TRUE(v.runs[2].final_loss.has_value()) << v.runs[2].message;
    }
  }
}

// A decaying rate needs the run's length, and a full run is not stopped at a target.
TEST(Validate, FullRunsAndTargetsAreRefusedTogetherAndASchedulesNeedsEpochs) {
  auto w = mlp(200);
  const Dataset held_out = dynamic_cast<ModuleWorkload&>(*w).data();
  try {
    validate(*w, held_out, ValidateOptions({16}).lr_schedule(LrSchedule::Cosine).target_accuracy(0.5));
    FAIL() << "a schedule without epochs was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("give --epochs N"), std::string::npos) << e.what();
  }
  try {
    validate(*w, held_out, ValidateOptions({16}).epochs(1).target_accuracy(0.5));
    FAIL() << "a target beside --epochs was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("give one of them"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace batchwise

// Golden tests pin both reporters for a fixed Report; a contract test checks the fields that
// ../shared/REPORT_CONTRACT.md promises other programs. Regenerate the golden files with
// BATCHWISE_UPDATE_GOLDEN=1 after an intended change, and review the diff.
#include "batchwise/report.h"

#include "batchwise/compare.h"
#include "batchwise/fit.h"
#include "batchwise/html.h"
#include "batchwise/loader.h"
#include "batchwise/lr.h"
#include "batchwise/plan.h"
#include "batchwise/recommend.h"
#include "batchwise/run_race.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "report/console.h"
#include "support/reports.h"

namespace batchwise {
namespace {

TEST(Report, JsonMatchesGolden) {
  const std::string json = to_json(fixed_report());
  EXPECT_EQ(json, golden("report.json", json));
}

TEST(Report, TableMatchesGolden) {
  const std::string table = to_table(fixed_report());
  EXPECT_EQ(table, golden("report.txt", table));
}

// A noise report's short view answers the critical batch (it had ended "answer: none: no batch trained"), or
// why it was not measured, or that its band has no upper end.
// A share of the budget under 0.05 % reads "< 0.1 %" in the console's fit table as in the HTML (it had read "0.0 %")
TEST(Report, ATinyShareOfTheBudgetIsNotZero) {
  Report r = fixed_report();
  r.budget_bytes = int64_t{1} << 40;
  r.fit->budget_bytes = r.budget_bytes;
  const std::string table = to_table(r);
  EXPECT_NE(table.find("< 0.1 %"), std::string::npos) << table;
  EXPECT_EQ(table.find(" 0.0 %"), std::string::npos) << table;
}

TEST(Report, ANoiseReportsSummaryAnswersTheCriticalBatch) {
  Report r;
  r.context = fixed_report().context;
  r.workload = fixed_report().workload;
  r.budget_bytes = fixed_report().budget_bytes;
  r.noise = fixed_report().noise;
  const std::string measured = to_summary(r);
  EXPECT_NE(measured.find("answer: the critical batch (gradient noise scale B_simple) is 1250, band 1050 to 1450, "
                          "from 4 steps at batch 128"),
            std::string::npos)
      << measured;
  // A band with no upper end states no critical batch, as the table and the HTML do not (it had read "is 1250")
  r.noise->b_simple_high = std::numeric_limits<double>::infinity();
  const std::string unbounded = to_summary(r);
  EXPECT_NE(unbounded.find("answer: none: no critical batch: the band has no upper end"), std::string::npos)
      << unbounded;
  r.noise->b_simple.reset();
  r.noise->message = "|G|^2 came out -0.0168";
  const std::string unmeasured = to_summary(r);
  EXPECT_NE(unmeasured.find("answer: none: the noise scale was not measured (|G|^2 came out -0.0168)"),
            std::string::npos)
      << unmeasured;
}

// The time line at the end puts what tune took beside what it stated after the fit and, where it
// stated its plan again before the race, beside that; the JSON keeps both.
TEST(Report, TheTimeLineSaysWhatTuneStatedAgainBeforeTheRace) {
  TuneTiming t;
  t.phases = {{"fit", 1.2, 0}, {"sweep", 37, 7}, {"race", 20, 19}, {"precisions", 0.0, 1e-9}};
  t.total_s = 60;
  t.expected_s = 28;
  t.at_most_s = 90;
  EXPECT_EQ(detail::timing_line(t),
            "time: 60 s in all (28 s expected, at most 90 s: 2.14x and 0.67x): fit 1.2 s, sweep 37.0 s (~7), race "
            "20.0 s (~19), precisions 0.0 s");  // not "(~1e-09)"
  t.restated_s = 45;
  EXPECT_EQ(detail::timing_line(t),
            "time: 60 s in all (28 s expected, at most 90 s: 2.14x and 0.67x; 45 s as stated again before the race: "
            "1.33x): fit 1.2 s, sweep 37.0 s (~7), race 20.0 s (~19), precisions 0.0 s");
  Report r = fixed_report();
  r.timing = t;
  const Report back = report_from_json(to_json(r), "the report");
  ASSERT_TRUE(back.timing.has_value());
  EXPECT_EQ(back.timing->restated_s, 45);
  r.timing->restated_s = 0;  // not stated again: no field
  EXPECT_EQ(to_json(r).find("restated_s"), std::string::npos);
  t.restated_s = 0;  // past the most stated (a machine that slowed): said, not left to the ratio
  t.total_s = 120;
  EXPECT_EQ(detail::timing_line(t),
            "time: 120 s in all (28 s expected, at most 90 s: 4.29x and 1.33x; past the most stated, which holds while "
            "the machine trains as fast as the fit's steps measured): fit 1.2 s, sweep 37.0 s (~7), race 20.0 s (~19), "
            "precisions 0.0 s");
}

TEST(Report, KneeAndRecommendationFromTheFigures) {
  const Report r = fixed_report();
  EXPECT_EQ(*r.sweep->knee_batch, 128);  // 7,877 samples/s against 6,244 at 64
  ASSERT_TRUE(r.recommendation.has_value());
  EXPECT_EQ(r.recommendation->batch, 128);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// tune's short answer (without --verbose): the header, the tables a flag asked for, at most five
// lines of why, and the closing line with the answer last.
// A knee at the largest batch that trained in the sweep was measured against no larger one: the line
// says so, and where the training set stopped the sweep (tune on 2 samples had read "a larger batch
// adds under 5 %", with none swept), or that it is itself past the training set (--min 8 --max 8 on 7 samples had
// read "none above the 7 training samples").
TEST(Report, AKneeAtTheLargestBatchSweptSaysSo) {
  Report r = fixed_report();
  r.workload.dataset_size = 128;
  r.sweep->points.pop_back();  // 256, which ran out of memory: 128 is the largest swept
  const std::string summary = to_summary(r);
  EXPECT_NE(summary.find("knee: batch 128 at 7,877 samples/s, the largest batch that trained in the sweep (none above "
                         "the 128 training samples)"),
            std::string::npos)
      << summary;
  r.workload.dataset_size = 100;  // the knee itself larger than the training set: not "none above" it
  const std::string larger = to_summary(r);
  EXPECT_NE(larger.find("the largest batch that trained in the sweep (itself larger than the 100 training samples: a "
                        "step repeats some of them)"),
            std::string::npos)
      << larger;
}

TEST(Report, SummaryIsShortAndClosesWithTheAnswer) {
  Report r = fixed_report();
  r.validation.reset();  // goodput decides
  r.race.reset();
  r.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, 128);
  Evidence e;
  e.goodput = true;
  r.recommendation = with_confidence(*r.recommendation, e);
  const std::string summary = to_summary(r);
  EXPECT_EQ(summary, golden("report.summary.txt", summary));
  const std::vector<std::string> lines = lines_of(summary);
  EXPECT_LE(lines.size(), 30u) << summary;
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), closing_line(r));
  const std::string rate = fmt::format("lr {:.4g}, warm-up {}", r.lr->lr, warmup_text(*r.lr, (60000 + 127) / 128));
  EXPECT_EQ(closing_line(r), "answer: batch 128 | " + rate + " | confidence medium") << closing_line(r);
  // Data-parallel, 2 ranks of 128: a step takes the global 256 the rate is for (the warm-up's steps had been
  // counted at 128, twice the plan table's)
  Report ranks = r;
  ranks.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, 256);
  EXPECT_EQ(closing_line(ranks), fmt::format("answer: batch 128 | lr {:.4g}, warm-up {} | confidence medium",
                                             ranks.lr->lr, warmup_text(*ranks.lr, (60000 + 255) / 256)));
  const auto why = std::find(lines.begin(), lines.end(), "why:");
  ASSERT_NE(why, lines.end()) << summary;
  int reasons = 0;
  for (auto l = why + 1; l != lines.end() && l->rfind("  ", 0) == 0; ++l) ++reasons;
  EXPECT_GE(reasons, 3);
  EXPECT_LE(reasons, 5);
  EXPECT_NE(summary.find("  goodput: batch 128 makes the most progress per second at B_simple 1250"), std::string::npos)
      << summary;
  EXPECT_EQ(summary.find("sweep ("), std::string::npos) << "the sweep's table is --verbose's";
  // Every part is optional but the batch; without an answer, why there is none.
  Report bare = fixed_report();
  bare.recommendation->confidence.reset();
  bare.lr.reset();
  EXPECT_EQ(closing_line(bare), "answer: batch 128");
  bare.recommendation.reset();
  bare.fit->batch.reset();
  bare.fit->message = "batch 1 peaks at 80 MiB";
  EXPECT_EQ(closing_line(bare), "answer: none: no batch fits (batch 1 peaks at 80 MiB)");
  // An error that is not memory's is no batch that did not fit (a model whose loss is NaN had read so)
  bare.fit->outcome = FitOutcome::Error;
  bare.fit->message = "batch 8 failed with an error: the training loss is NaN";
  EXPECT_EQ(closing_line(bare),
            "answer: none: no batch trained (batch 8 failed with an error: the training loss is NaN)");
}

// A race that could not rank its candidates leaves a low-confidence answer, and all three outputs
// say so: the console's recommendation line, the JSON, and the HTML box (not green).
TEST(Report, AnUnresolvedRaceIsLowConfidenceInEveryOutput) {
  Report r = fixed_report();
  BatchRace race;  // recommended none: no candidate left the start
  Evidence e;
  e.race = &race;
  r.recommendation = with_confidence(*r.recommendation, e);
  const std::string table = to_table(r);
  EXPECT_NE(table.find("recommendation: batch 128 (confidence low)"), std::string::npos) << table;
  EXPECT_NE(table.find("confidence low: the batch race could not rank its candidates"), std::string::npos) << table;
  const auto j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j.at("recommendation").at("confidence"), "low");
  EXPECT_NE(j.at("recommendation").at("confidence_reason").get<std::string>().find("--advice-budget"),
            std::string::npos);
  const std::string html = to_html(to_json(r), "report.json");
  EXPECT_NE(html.find("<section id=\"recommendation\" class=\"answer low\">"), std::string::npos);
  EXPECT_NE(html.find("<b>Confidence: low</b>"), std::string::npos);
  // Read back, the confidence is the same.
  EXPECT_EQ(report_from_json(to_json(r), "report.json").recommendation->confidence, Confidence::Low);
}

// A race stuck on the plateau answers the smallest batch it trained longest: the console's why says
// it is the plateau's answer with no "about as good" range and no goodput line, the HTML box says
// so, and the JSON keeps race.stuck through a read back.
TEST(Report, ARaceStuckOnThePlateauSaysItsAnswerIsNotMeasuredInEveryOutput) {
  Report r = fixed_report();
  r.validation.reset();
  BatchRace race;
  race.loss_before = 2.3026;
  race.horizons_s = {12, 30};
  for (int64_t batch : {16, 128}) {
    RaceEntry e;
    e.batch = batch;
    e.samples_per_s = 100.0 * static_cast<double>(batch);
    e.lr = unmeasured_lr(Optimizer::AdamW, 32, 0.001, batch);
    e.rungs = 2;
    e.train_s = 30;
    e.loss_at_horizon = batch == 16 ? 2.2979 : 2.3118;
    race.entries.push_back(e);
  }
  race.stuck = true;
  r.race = race;
  Evidence e;
  e.race = &*r.race;
  e.goodput = true;
  r.recommendation = with_confidence(*recommend_on_the_plateau(race), e);
  ASSERT_EQ(r.recommendation->batch, 16);
  const std::string summary = to_summary(r);
  EXPECT_NE(summary.find("  race: no batch left the plateau at the start in 30.0 s of training; batch 16, the "
                         "smallest trained longest, is the plateau's answer, not a measured one"),
            std::string::npos)
      << summary;
  EXPECT_EQ(summary.find("  goodput:"), std::string::npos) << summary;
  EXPECT_EQ(closing_line(r).find("about as good"), std::string::npos) << closing_line(r);
  EXPECT_NE(closing_line(r).find("confidence low"), std::string::npos) << closing_line(r);
  const std::string json = to_json(r);
  EXPECT_TRUE(nlohmann::json::parse(json).at("race").at("stuck").get<bool>());
  EXPECT_TRUE(report_from_json(json, "report.json").race->stuck);
  const std::string html = to_html(json, "report.json");
  EXPECT_NE(html.find("No batch left the plateau at the start in the race"), std::string::npos);
  EXPECT_NE(html.find("<section id=\"recommendation\" class=\"answer low\">"), std::string::npos);
}

// A race on training samples (no test split) says what it measured in the summary, and keeps it in the
// JSON read back.
TEST(Report, ARaceOnTrainingSamplesIsNotCalledHeldOut) {
  Report r = fixed_report();
  r.validation.reset();
  ASSERT_TRUE(r.race && r.race->best_batch);
  EXPECT_NE(to_summary(r).find("reached the lowest held-out loss"), std::string::npos) << to_summary(r);
  r.race->on_training_data = true;
  EXPECT_NE(to_summary(r).find("reached the lowest loss on training samples"), std::string::npos) << to_summary(r);
  EXPECT_TRUE(report_from_json(to_json(r), "report.json").race->on_training_data);
}

// Beside a validation to a target, the answer's "about as good" are the runs that reached it within 5 % of the
// soonest's time (the race's range had been said beside a validation in which some of it never reached it).
TEST(Report, TheAnswersRangeBesideATargetValidationIsItsRunsNearTheSoonest) {
  Report r = fixed_report();
  ASSERT_TRUE(r.validation && r.validation->epochs <= 0 && r.validation->fastest_batch == 128);
  r.race->within_5_percent = {64, 128};
  r.validation->runs[0].reached = false;  // batch 64
  EXPECT_EQ(to_summary(r).find("about as good"), std::string::npos) << to_summary(r);
  r.validation->runs[0].reached = true;
  r.validation->runs[0].train_s = 3.1;  // within 5 % of 128's 3 s
  EXPECT_NE(to_summary(r).find("batches 64 to 128 about as good"), std::string::npos) << to_summary(r);
}

// The range is "a to b" only over doublings one after another; good batches with a gap between them are each named
// ("batches 8 to 64" had said 16 and 32 were as good, where the race left them out or judged them worse).
TEST(Report, AnAnswersRangeWithAGapNamesEachBatch) {
  Report r = fixed_report();
  r.validation.reset();
  r.race->within_5_percent = {64, 256};
  EXPECT_NE(closing_line(r).find("batches 64, 256 about as good"), std::string::npos) << closing_line(r);
  r.race->within_5_percent = {256, 64, 128};
  EXPECT_NE(closing_line(r).find("batches 64 to 256 about as good"), std::string::npos) << closing_line(r);
  // Not doublings, but nothing the race judged lies between: a range; a batch it judged between that is left out:
  // each named
  r.race->entries.clear();
  for (const int64_t b : {48, 96, 200}) r.race->entries.push_back(RaceEntry{}), r.race->entries.back().batch = b;
  r.race->within_5_percent = {48, 96};
  EXPECT_NE(closing_line(r).find("batches 48 to 96 about as good"), std::string::npos) << closing_line(r);
  r.race->entries.push_back(RaceEntry{}), r.race->entries.back().batch = 64;
  EXPECT_NE(closing_line(r).find("batches 48, 96 about as good"), std::string::npos) << closing_line(r);
}

// A validation run stopped before its first evaluation (a --max-seconds shorter than one evaluation interval) has no
// loss: null in the JSON, "-" in the table, not the 0.0 of no evaluation, read as a perfect loss.
TEST(Report, AValidationRunWithNoEvaluationHasNoLoss) {
  Report r = fixed_report();
  ASSERT_TRUE(r.validation && r.validation->runs.size() >= 2);
  ValidationRun& run = r.validation->runs[0];
  run.reached = false;
  run.curve.clear();
  run.last = ValidationPoint{};
  run.message = "not reached within --max-seconds 3";
  const nlohmann::json j = nlohmann::json::parse(to_json(r));
  EXPECT_TRUE(j.at("validation").at("runs").at(0).at("loss").is_null()) << j.at("validation").at("runs").at(0);
  EXPECT_NEAR(j.at("validation").at("runs").at(1).at("loss").get<double>(), 0.45, 1e-12);  // an evaluated run's
  const std::string table = to_table(r);
  EXPECT_NE(table.find("-        -  not reached within --max-seconds 3"), std::string::npos) << table;
  EXPECT_EQ(to_json(report_from_json(to_json(r), "report.json")), to_json(r));  // read back as written
}

// The summary's race line says what the lead did, and why the pick is another batch where it is: a race
// to a target by who reached it first, a pick the race could not tell from the lead as the larger (it had
// said the pick "reached the lowest held-out loss" of a loss the lead was below, or of a race to a target).
TEST(Report, TheSummarysRaceLineSaysWhatTheLeadDid) {
  Report r = fixed_report();
  r.validation.reset();
  ASSERT_TRUE(r.race && r.race->best_batch && r.race->entries.size() >= 2);
  RaceEntry& pick = *std::find_if(r.race->entries.begin(), r.race->entries.end(),
                                  [&](const RaceEntry& e) { return e.batch == *r.race->best_batch; });
  RaceEntry& other = &pick == &r.race->entries.front() ? r.race->entries.back() : r.race->entries.front();
  other.loss_at_horizon = 0.25;
  pick.loss_at_horizon = 0.26;
  r.race->lead_batch = other.batch;
  EXPECT_NE(to_summary(r).find(fmt::format("race: batch {} reached the lowest held-out loss (0.2500)", other.batch)),
            std::string::npos)
      << to_summary(r);
  EXPECT_NE(
      to_summary(r).find(fmt::format("; batch {}, which the race could not tell from it, is the larger", pick.batch)),
      std::string::npos)
      << to_summary(r);
  r.race->lead_batch = pick.batch;
  r.race->target = "held-out loss <= 0.3";
  pick.target_s = 1.5;
  EXPECT_NE(to_summary(r).find(fmt::format("race: batch {} reached the target (held-out loss <= 0.3) first, after "
                                           "1.5 s of training",
                                           pick.batch)),
            std::string::npos)
      << to_summary(r);
}

// The data a workload read: null where it read none, its path in the JSON and the HTML's context
// where it did, and read back.
TEST(Report, TheDataReadIsInTheJsonAndTheHtml) {
  Report r = fixed_report();
  const auto before = nlohmann::json::parse(to_json(r)).at("workload");
  EXPECT_TRUE(before.at("data_path").is_null() && before.at("labels_path").is_null());
  EXPECT_EQ(to_html(to_json(r), "report.json").find("<tr><td>data</td>"), std::string::npos);
  r.workload.data_path = "/data/x.npy";
  r.workload.labels_path = "/data/y.npy";
  const std::string json = to_json(r);
  EXPECT_EQ(nlohmann::json::parse(json).at("workload").at("data_path"), "/data/x.npy");
  EXPECT_NE(to_html(json, "report.json").find("<tr><td>data</td><td>/data/x.npy (labels /data/y.npy)</td></tr>"),
            std::string::npos);
  EXPECT_EQ(report_from_json(json, "report.json").workload.labels_path, "/data/y.npy");
}

// The fields ../shared/REPORT_CONTRACT.md fixes, with their types.
TEST(Report, JsonKeepsTheContract) {
  const auto j = nlohmann::json::parse(to_json(fixed_report()));
  EXPECT_EQ(j.at("schema_version"), "1");
  const auto& c = j.at("context");
  for (const char* key : {"batchwise_version", "build_commit", "torch_version", "blas"})
    EXPECT_TRUE(c.at(key).is_string()) << key;
  EXPECT_TRUE(c.at("threads").is_number_integer());
  EXPECT_TRUE(c.at("device").at("type") == "cpu" || c.at("device").at("type") == "cuda");
  EXPECT_TRUE(c.at("device").at("name").is_string());
  const auto& w = j.at("workload");
  for (const char* key : {"model", "dataset", "optimizer", "precision"}) EXPECT_TRUE(w.at(key).is_string()) << key;
  EXPECT_TRUE(w.at("lr").is_number());
  EXPECT_TRUE(j.at("budget_bytes").is_number_integer());
  EXPECT_TRUE(j.at("target").is_number());
  const auto& fit = j.at("fit");
  EXPECT_EQ(fit.at("mode"), "binsearch");
  EXPECT_EQ(fit.at("outcome"), "fits");
  EXPECT_EQ(fit.at("batch"), 192);
  ASSERT_EQ(fit.at("trials").size(), 3u);
  auto check_trial = [](const nlohmann::json& t) {
    EXPECT_TRUE(t.at("batch").is_number_integer());
    const std::string outcome = t.at("outcome");
    EXPECT_TRUE(outcome == "ok" || outcome == "oom" || outcome == "error" || outcome == "timeout");
    EXPECT_TRUE(t.at("peak_bytes").is_number_integer());
    EXPECT_TRUE(t.at("step_times_s").is_array());
    if (outcome == "ok") {
      EXPECT_TRUE(t.at("samples_per_s").is_number());
    } else {
      EXPECT_TRUE(t.at("samples_per_s").is_null());
      EXPECT_TRUE(t.at("message").is_string());
    }
  };
  for (const auto& t : fit.at("trials")) check_trial(t);
  for (const auto& t : j.at("sweep").at("points")) check_trial(t);
  EXPECT_EQ(j.at("sweep").at("knee_batch"), 128);
  EXPECT_EQ(j.at("sweep").at("points").at(2).at("outcome"), "oom");
  EXPECT_EQ(j.at("recommendation").at("batch"), 128);
  EXPECT_TRUE(j.at("recommendation").at("reason").is_string());
}

// fp16 steps skipped for overflow: in the JSON only where there were some, and flagged in the
// tables' notes (such a trial's times and peak understate a trained step's).
TEST(Report, SkippedStepsAreWrittenAndFlaggedWhereThereWereSome) {
  Report r = fixed_report();
  r.fit->trials[0].skipped_steps = 2;
  r.sweep->points[0].skipped_steps = 1;
  const auto j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j.at("fit").at("trials").at(0).at("skipped_steps"), 2);
  EXPECT_FALSE(j.at("fit").at("trials").at(2).contains("skipped_steps"));
  EXPECT_EQ(j.at("sweep").at("points").at(0).at("skipped_steps"), 1);
  const std::string table = to_table(r);
  EXPECT_NE(table.find("within  2 of 4 steps skipped (fp16 overflow)\n"), std::string::npos) << table;
  EXPECT_NE(table.find("1 of 6 steps skipped (fp16 overflow)"), std::string::npos) << table;
  EXPECT_EQ(to_table(fixed_report()).find("skipped"), std::string::npos);
}

// A trial that failed or timed out measured no peak to hold to the target: its target column reads
// "-", not "over" beside a peak of a few KiB, in the console and the HTML alike; out of memory is over.
TEST(Report, AFailedFitTrialIsNeitherWithinNorOverTheTarget) {
  for (const Outcome outcome : {Outcome::Error, Outcome::Timeout, Outcome::Oom}) {
    Report r = fixed_report();
    Trial& t = r.fit->trials[0];
    t.outcome = outcome;
    t.within_target = false;
    t.message = "what went wrong";
    const char* expected = outcome == Outcome::Oom ? "over" : "-";
    EXPECT_STREQ(target_text(t), expected) << to_string(outcome);
    const std::string table = to_table(r);
    const size_t row = table.find("\n" + fmt::format("{:>8}  {:<8}", t.batch, to_string(outcome)));
    ASSERT_NE(row, std::string::npos) << table;
    const std::string line = table.substr(row + 1, table.find('\n', row + 1) - row - 1);
    EXPECT_NE(line.find(fmt::format("  {:>6}  what went wrong", expected)), std::string::npos) << line;
    const std::string html = to_html(to_json(r), "report.json");
    EXPECT_NE(html.find(fmt::format("<td>{}</td><td>what went wrong</td>", expected)), std::string::npos)
        << to_string(outcome);
  }
}

// A training command (--cmd) whose process memory, sampled, reads no higher at the larger batch,
// and whose tensors batchwise cannot count: the fit makes no breakdown, the console says no line
// predicts (not "+ -1.00 KiB x batch"), and the HTML draws none and names the command's own model,
// data and rate (not "0 samples", "lr 0", "0 parameters").
class CommandMemory final : public TrialRunner {
 public:
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t;
    t.batch = o.batch();
    t.outcome = Outcome::Ok;
    t.peak_bytes = (20 << 20) - o.batch() * 16;  // no state counted: a process's memory, sampled
    return t;
  }
  int64_t held_bytes() override { return 0; }
  int64_t default_budget_bytes() override { return 1 << 30; }
  int64_t device_total_bytes() override { return 1 << 30; }
};

TEST(Report, ACommandsFitNamesWhatItCannotKnow) {
  CommandMemory runner;
  Report r = fixed_report();
  r.fit = fit(runner, FitOptions().budget_bytes(1 << 30).max(256).mode(FitMode::Binsearch));
  r.workload = WorkloadInfo{};
  r.workload.model = "python3 train.py {batch} {steps}";
  r.workload.dataset = r.workload.loss = r.workload.optimizer = r.workload.precision = "(the command's)";
  ASSERT_EQ(r.fit->outcome, FitOutcome::Fits);
  ASSERT_TRUE(r.fit->memory_model.has_value());
  EXPECT_FALSE(r.fit->memory_model->grows());
  EXPECT_FALSE(r.fit->breakdown.has_value());
  const std::string table = to_table(r);
  EXPECT_NE(table.find("memory model: none: the peak did not grow from batch 128 to batch 256 (20.0 MiB and 20.0 "
                       "MiB), so no line predicts a larger batch's peak"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("x batch"), std::string::npos) << table;
  const std::string html = to_html(to_json(r), "report.json");
  EXPECT_NE(html.find("<tr><td>command</td><td>python3 train.py {batch} {steps}</td></tr>"), std::string::npos);
  for (const char* row : {"optimizer", "parameters", "input shape", "dataset"})
    EXPECT_NE(html.find(fmt::format("<tr><td>{}</td><td>(the command&#39;s)</td></tr>", row)), std::string::npos)
        << row;
  for (const char* absent : {"s, lr 0<", "(0 samples)", "Where the memory goes", "The memory model:"})
    EXPECT_EQ(html.find(absent), std::string::npos) << absent;
}

// What trained nothing, the one count the CLI's exit code and the Python API's warnings read: a
// sweep, a loader search or a validation with nothing that ran to the end; all out of memory or not;
// a stopped validation is not among them.
TEST(Report, NothingTrainedNamesThePartAndWhetherMemoryEndedIt) {
  using Part = NothingTrained::Part;
  Report r = fixed_report();
  EXPECT_TRUE(nothing_trained(r).empty());
  for (Trial& t : r.sweep->points) t.outcome = Outcome::Oom;
  r.validation = fixed_validation();
  r.validation->runs[0].outcome = Outcome::Oom;
  r.validation->runs[1].outcome = Outcome::Error;
  r.loader = LoaderSearch{};
  r.loader->before.outcome = Outcome::Oom;
  r.loader->trials.resize(2);
  for (LoaderTrial& t : r.loader->trials) t.outcome = Outcome::Oom;
  std::vector<NothingTrained> none = nothing_trained(r);
  ASSERT_EQ(none.size(), 3u);
  EXPECT_EQ(none[0].part, Part::Sweep);
  EXPECT_TRUE(none[0].out_of_memory);
  EXPECT_EQ(none[0].warning,
            "no batch trained: 0 of 3 swept batches ended in an error or a timeout, 3 ran out of memory; nothing was "
            "measured (each batch's message says why)");
  EXPECT_EQ(none[1].part, Part::Loader);
  EXPECT_TRUE(none[1].out_of_memory);
  EXPECT_EQ(none[1].warning, "");
  EXPECT_EQ(none[2].part, Part::Validation);
  EXPECT_FALSE(none[2].out_of_memory);
  EXPECT_EQ(none[2].warning,
            "no run trained: 1 of 2 validation runs ended in an error or a loss that was not finite, 1 ran out of "
            "memory; nothing was validated (each run's message says why)");
  r.validation->interrupted = true;  // a stopped validate ends by its signal
  r.loader->trials[1].outcome = Outcome::Ok;
  none = nothing_trained(r);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].part, Part::Sweep);
}

// A run race whose reference diverged leaves no answer (tune then recommends nothing): the exit code's part and
// the answer line name the rate and its fix, not "no batch trained" where the sweep trained.
TEST(Report, ARunRaceWhoseReferenceDivergedIsNoAnswerAndNamesTheRate) {
  Report r = fixed_report();
  r.recommendation.reset();
  r.lr.reset();
  r.validation.reset();
  r.run_race = RunRace{};
  r.run_race->epochs = 2;
  r.run_race->entries.resize(2);
  r.run_race->entries[0].batch = 128;
  r.run_race->entries[0].lr.lr = 0.5;
  EXPECT_TRUE(nothing_trained(r).empty());  // a race that answered none for another reason: the fallback's
  r.run_race->reference_diverged = true;
  const std::vector<NothingTrained> none = nothing_trained(r);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].part, NothingTrained::Part::RunRace);
  EXPECT_FALSE(none[0].out_of_memory);
  EXPECT_EQ(none[0].warning,
            "no answer: the run race's reference, batch 128, diverged at lr 0.5 (its loss stopped being finite in a "
            "compressed run of the 2-epoch run): no candidate was judged, and an answer would hand out a rate no run "
            "showed to train; lower the learning rate (--lr) and tune again");
  EXPECT_NE(to_summary(r).find("answer: none: the learning rate diverged at batch 128 (lr 0.5): lower --lr"),
            std::string::npos)
      << to_summary(r);
}

// A batch race in which no rung ended (no candidate entered it) says so, not "rungs end at  s".
TEST(Report, ABatchRaceWithNoRungSaysSo) {
  Report r = fixed_report();
  r.race->horizons_s.clear();
  const std::string table = to_table(r);
  EXPECT_NE(table.find("at its own learning rate; no rung ended (its notes say why)"), std::string::npos) << table;
  EXPECT_EQ(table.find("rungs end at  s"), std::string::npos) << table;
}

// A fit that stopped at its --max says so in compare, as tune's console does: "512" beside a larger budget's 5983
// had read as if the larger budget fitted less.
TEST(Compare, AFitStoppedAtItsMaxSaysSo) {
  namespace fs = std::filesystem;
  Report a = fixed_report(), b = fixed_report();
  ASSERT_TRUE(a.fit && a.fit->batch);
  b.fit->limited_by_max = true;
  const fs::path dir = fs::temp_directory_path() / ("batchwise-fit-max-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.json") << to_json(a);
  std::ofstream(dir / "b.json") << to_json(b);
  const Comparison c = compare_reports((dir / "a.json").string(), (dir / "b.json").string());
  EXPECT_FALSE(c.fit_limited_a);
  EXPECT_TRUE(c.fit_limited_b);
  EXPECT_NE(to_table(c).find(
                fmt::format("A {}  |  B {} (the --max: no larger batch was tried)", *a.fit->batch, *b.fit->batch)),
            std::string::npos)
      << to_table(c);
  const auto j = nlohmann::json::parse(to_json(c));
  EXPECT_EQ(j.at("fit_limited_by_max").at("b"), true);
  EXPECT_EQ(j.at("fit_limited_by_max").at("a"), false);
  // A report's file name that is not UTF-8 (a Latin-1 "café"): the JSON names it with U+FFFD, where the write had
  // failed whole on "invalid UTF-8 byte" and left no file
  const std::string latin1 = (dir / "caf\xe9.json").string();
  std::ofstream(latin1) << to_json(a);
  const std::string text = to_json(compare_reports(latin1, (dir / "b.json").string()));
  EXPECT_NE(text.find("caf\ufffd.json"), std::string::npos) << text;
  fs::remove_all(dir);
}

// A batch a sweep did not run (past one out of memory) is "not run" with no peak, where "oom" and 0 B had read as
// measured; a sweep that shared the CPU is a warning naming its side (a geomean of 0.11x had stood without a word).
TEST(Compare, ABatchNotRunAndASweepThatSharedTheCpuAreSaid) {
  namespace fs = std::filesystem;
  Report a = fixed_report(), b = fixed_report();
  ASSERT_TRUE(a.sweep && !a.sweep->points.empty());
  Trial never;
  never.batch = 1 << 20;
  never.outcome = Outcome::Oom;
  never.steps_run = 0;
  never.peak_bytes = 0;
  never.message = "not run: batch 4096 already ran out of memory";
  b.sweep->points.push_back(never);
  b.sweep->shared_cpu_warning = "the sweep shared the CPU: its threads waited for a core 52 % of the time";
  const fs::path dir = fs::temp_directory_path() / ("batchwise-not-run-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.json") << to_json(a);
  std::ofstream(dir / "b.json") << to_json(b);
  const Comparison c = compare_reports((dir / "a.json").string(), (dir / "b.json").string());
  const ComparedPoint& p = c.points.back();
  ASSERT_EQ(p.batch, 1 << 20);
  EXPECT_EQ(p.outcome_b, "not run");
  EXPECT_FALSE(p.peak_bytes_b.has_value());
  std::string warnings;
  for (const std::string& w : c.warnings) warnings += w + "\n";
  EXPECT_NE(warnings.find("B: the sweep shared the CPU: its threads waited for a core 52 % of the time; its ratios "
                          "are the load's as much as the change's"),
            std::string::npos)
      << warnings;
  EXPECT_EQ(warnings.find("A: "), std::string::npos) << warnings;
  fs::remove_all(dir);
}

// The page says which batches the sweep left unswept and why, as the console does (a page had shown "batch 512 fits"
// beside a sweep that stopped at 128, and no word why).
TEST(Html, TheBatchesASweepLeftUnsweptAreSaid) {
  Report r = fixed_report();
  ASSERT_TRUE(r.sweep);
  r.sweep->not_run = {1024, 2048};
  r.sweep->not_run_reason = "not swept: in the sweep's first pass, samples/s did not rise 5 % above its best so far";
  const std::string html = to_html(to_json(r), "report.json");
  EXPECT_NE(html.find("<p>batches 1024, 2048: not swept: in the sweep&#39;s first pass, samples/s did not rise 5 % "
                      "above its best so far</p>"),
            std::string::npos)
      << html.substr(html.find("sweep-points"), 3000);
}

// Two noise reports, or two loader searches, have no sweep to set side by side: compare shows their answers (it had
// said "only their workloads and answers are compared" and shown no answer, and "same context and workload" over
// noise scales measured at different batches).
TEST(Compare, NoiseAndLoaderReportsShowTheirAnswers) {
  namespace fs = std::filesystem;
  Report a = fixed_report(), b = fixed_report();
  ASSERT_TRUE(a.noise.has_value());
  b.noise->batch = 256;
  b.noise->b_simple_high = std::numeric_limits<double>::infinity();
  b.loader = LoaderSearch{};
  b.loader->batch = 64;
  b.loader->after = LoaderTrial{};
  b.loader->after->workers = 2;
  b.loader->after->prefetch = 4;
  const fs::path dir = fs::temp_directory_path() / ("batchwise-answers-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.json") << to_json(a);
  std::ofstream(dir / "b.json") << to_json(b);
  const Comparison c = compare_reports((dir / "a.json").string(), (dir / "b.json").string());
  const std::string table = to_table(c);
  EXPECT_NE(table.find("A B_simple 1250 (band 1050 to 1450) at batch 128  |  B none at batch 256 (B_simple 1250, its "
                       "band with no upper end: no critical batch)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("A -  |  B 2 workers, prefetch 4 at batch 64"), std::string::npos) << table;
  const auto j = nlohmann::json::parse(to_json(c));
  EXPECT_EQ(j.at("loader").at("a"), "-");
  EXPECT_EQ(j.at("noise_scale").at("b"),
            "none at batch 256 (B_simple 1250, its band with no upper end: no critical "
            "batch)");
  b.loader->after.reset();  // none chosen: its advice says why
  b.loader->advice = "every setting tried was input-bound";
  std::ofstream(dir / "b.json") << to_json(b);
  EXPECT_NE(to_table(compare_reports((dir / "a.json").string(), (dir / "b.json").string()))
                .find("B none chosen at batch 64: every setting tried was input-bound"),
            std::string::npos);
  fs::remove_all(dir);
}

// Whether a ratio is noise does not depend on which report is A: 30x faster and 30x slower are both a difference,
// however wide a spread; 1.1x either way within a 12 % spread is noise both ways.
TEST(Compare, ARatioIsNoiseTheSameWayRoundEitherWay) {
  ComparedPoint p;
  p.samples_per_s_a = 9165, p.samples_per_s_b = 297, p.spread_a = 1.2, p.spread_b = 0.05;
  EXPECT_FALSE(p.within_noise());
  std::swap(p.samples_per_s_a, p.samples_per_s_b);
  EXPECT_FALSE(p.within_noise());
  p.samples_per_s_a = 100, p.samples_per_s_b = 110, p.spread_a = 0.12, p.spread_b = 0.02;
  EXPECT_TRUE(p.within_noise());
  std::swap(p.samples_per_s_a, p.samples_per_s_b);
  EXPECT_TRUE(p.within_noise());
  p.spread_a = 0.05;  // 1.1x apart, beyond both spreads
  EXPECT_FALSE(p.within_noise());
}

// A run race of a cosine run of `epochs` judged on accuracy, its reference the first of `batches`, which it raced
// to `lengths` (entries with nothing judged yet).
RunRace accuracy_run_race(double epochs, std::vector<double> lengths, const std::vector<int64_t>& batches) {
  RunRace race;
  race.epochs = epochs;
  race.lr_schedule = "cosine";
  race.measure = "accuracy";
  race.lengths_epochs = std::move(lengths);
  race.reference_batch = batches.front();
  for (const int64_t batch : batches) {
    RunRaceEntry e;
    e.batch = batch;
    race.entries.push_back(e);
  }
  return race;
}

// A run race that ended before it judged (its reference gave no learning curve) calls its other batches
// not judged, not worse, and states no tolerance it never applied; a sweep's batch that did not run has
// no peak ("-", not "0 B").
TEST(Report, ARunRaceThatJudgedNothingSaysSoAndAnUnrunBatchHasNoPeak) {
  Report r = fixed_report();
  RunRace race = accuracy_run_race(1, {0.25, 0.5, 1}, {8, 16, 32});
  race.entries.front().message = "its longest compressed run (1 epoch) did not leave the start";
  r.run_race = race;
  Trial skipped;
  skipped.batch = 4096;
  skipped.outcome = Outcome::Oom;
  skipped.message = "not run: batch 2048 already ran out of memory";
  r.sweep->points.push_back(skipped);
  const std::string table = to_table(r);
  for (const char* batch : {"      16", "      32"}) {
    const size_t row = table.find(std::string("\n") + batch + "  ");
    ASSERT_NE(row, std::string::npos) << table;
    const std::string line = table.substr(row + 1, table.find('\n', row + 1) - row - 1);
    EXPECT_NE(line.find("not judged"), std::string::npos) << line;
    EXPECT_EQ(line.find("worse"), std::string::npos) << line;
  }
  EXPECT_EQ(table.find("is within the held-out noise"), std::string::npos) << table;
  const size_t row = table.find("\n    4096  oom");
  ASSERT_NE(row, std::string::npos) << table;
  EXPECT_EQ(table.substr(row, table.find('\n', row + 1) - row).find("0 B"), std::string::npos) << table;
}

// A longer round's table says the first round's batches trained shorter runs, whose gaps it leaves out (its header
// had said every other batch trained the round's last two lengths).
TEST(Report, ALongerRoundsTableSaysTheFirstRoundsBatchesTrainedShorterRuns) {
  Report r = fixed_report();
  RunRace race = accuracy_run_race(20, {0.205, 0.41, 0.819}, {32, 64, 512});
  for (RunRaceEntry& e : race.entries) e.predicted_gap = 0.002, e.good = true;
  race.entries[1].earlier_round = true;
  race.entries[1].shorter_run = CompressedRun{};
  race.entries[1].shorter_run->epochs = 0.205;
  race.entries[1].run = CompressedRun{};
  race.entries[1].run->epochs = 0.41;
  r.run_race = race;
  const std::string table = to_table(r);
  EXPECT_NE(table.find("batch 32 trained it compressed to 0.205, 0.41, 0.819 epochs, the others to the last two (the "
                       "first round's to 0.205 and 0.41: their gaps not shown); final accuracy"),
            std::string::npos)
      << table;
  const std::string html = to_html(to_json(r), "report.json");
  EXPECT_NE(html.find("every other batch to the last two (the first round's to 0.205 and 0.41: their gaps not shown)"),
            std::string::npos);
  r.run_race->entries[1].earlier_round = false;
  EXPECT_EQ(to_table(r).find("first round's to"), std::string::npos);
}

// The run plan's SGD note speaks of momentum only where there is some (a Python optimizer at 0).
TEST(Report, TheRunPlansMomentumNoteNeedsMomentum) {
  const auto notes = [](double momentum) {
    OptimizerSettings sgd = optimizer_settings(Optimizer::Sgd);
    sgd.momentum = momentum;
    const RunPlan plan = plan_run(sgd, 60000, {{"base", unmeasured_lr(Optimizer::Sgd, 32, 0.01, 32)}});
    return fmt::format("{}", fmt::join(plan.notes, "\n"));
  };
  EXPECT_NE(notes(0.9).find("SGD keeps its momentum"), std::string::npos) << notes(0.9);
  EXPECT_EQ(notes(0).find("momentum"), std::string::npos) << notes(0);
}

TEST(Report, NoFitMeansANullBatch) {
  Report r = fixed_report();
  r.fit->outcome = FitOutcome::DoesNotFit;
  r.fit->batch.reset();
  r.sweep.reset();
  r.recommendation = recommend(r.fit, r.sweep);
  EXPECT_FALSE(r.recommendation.has_value());
  const auto j = nlohmann::json::parse(to_json(r));
  EXPECT_TRUE(j.at("fit").at("batch").is_null());
  EXPECT_EQ(j.at("fit").at("outcome"), "does_not_fit");
  EXPECT_FALSE(j.contains("recommendation"));
}

// A report from before a field (none: "-") validated no other run for lacking it: compare had warned
// "validated different runs (trainable parameters - | 61706)".
TEST(Report, CompareTakesAFieldAnOlderReportLacksForNoOtherRun) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("batchwise-compare-older-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ValidationResult v;
  v.target = "full runs of 8 epochs, cosine rate";
  v.epochs = 8;
  v.lr_schedule = "cosine";
  ValidationRun run;
  run.batch = 32, run.train_s = 60, run.final_accuracy = 0.9, run.final_loss = 0.1, run.good = true;
  v.runs = {run};
  v.best_batch = v.fastest_batch = 32;
  Report before = fixed_report(), now = fixed_report();
  before.workload.trainable_parameter_count.reset();
  before.validation = now.validation = v;
  std::ofstream(dir / "before.json") << to_json(before);
  std::ofstream(dir / "now.json") << to_json(now);
  const std::string older = to_table(compare_reports((dir / "before.json").string(), (dir / "now.json").string()));
  EXPECT_EQ(older.find("validated different runs"), std::string::npos) << older;
  EXPECT_EQ(older.find("train different workloads"), std::string::npos) << older;
  EXPECT_NE(older.find("trainable parameters A -  |  B 61706"), std::string::npos) << older;
  fs::remove_all(dir);
}

// A validation run whose loss diverged: "not finite" in the table, the HTML and compare, never 0 (the JSON writes it
// null, which had read back as 0.0000), and a huge one in four significant digits, not 26 digits past its column.
TEST(Report, ALossThatIsNotFiniteReadsSoEverywhere) {
  namespace fs = std::filesystem;
  Report r = fixed_report();
  ASSERT_TRUE(r.validation && r.validation->runs.size() >= 2);
  r.validation->runs[0].last.loss = std::numeric_limits<double>::infinity();
  r.validation->runs[0].last.accuracy.reset();
  r.validation->runs[1].last.loss = 1.515e19;
  const Report back = report_from_json(to_json(r), "report.json");
  EXPECT_TRUE(std::isnan(back.validation->runs[0].last.loss));
  EXPECT_NE(to_table(back).find("not finite"), std::string::npos) << to_table(back);
  EXPECT_NE(to_table(back).find("1.515e+19"), std::string::npos) << to_table(back);
  EXPECT_NE(to_html(to_json(r), "report.json").find("loss not finite"), std::string::npos);
  const fs::path file = fs::temp_directory_path() / ("batchwise-diverged-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << to_json(r);
  const Comparison c = compare_reports(file.string(), file.string());
  fs::remove(file);
  for (const ComparedRun& run : c.runs)
    if (run.batch == r.validation->runs[0].batch) EXPECT_FALSE(run.final_loss_a.has_value());
}

// A run that did not leave the start is neither best, good nor worse (two validations in which none left it had read
// "worse" for every run).
TEST(Report, CompareCallsARunThatDidNotLeaveTheStartSo) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("batchwise-plateau-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ValidationResult a;
  a.target = "full runs of 8 epochs, cosine rate";
  a.epochs = 8;
  a.lr_schedule = "cosine";
  for (const int64_t batch : {32, 64}) {
    ValidationRun r;
    r.batch = batch;
    r.train_s = 10;
    r.final_accuracy = 0.12;
    r.final_loss = 2.299;
    r.message = "did not leave the start in 8 epochs: held-out loss 2.2990, not 2 % below the initial weights' 2.3045";
    a.runs.push_back(r);
  }
  Report report = fixed_report();
  report.validation = a;
  std::ofstream(dir / "p.json") << to_json(report);
  const Comparison stuck = compare_reports((dir / "p.json").string(), (dir / "p.json").string());
  ASSERT_EQ(stuck.runs.size(), 2u);
  for (const ComparedRun& r : stuck.runs) EXPECT_EQ(r.verdict_a, "at the start") << r.batch;
  fs::remove_all(dir);
}

// Two validations side by side: each batch's full run in A and B, the time ratio (above 1: B
// faster), the final accuracy and each side's verdict; a batch one side did not train is empty
// there, one a stop left out says so; one run's time is not read as a difference unwarned, and
// validations of other runs are not one run measured twice.
TEST(Report, CompareSetsTwoValidationsRunsSideBySide) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("batchwise-compare-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto run = [](int64_t batch, double train_s, double accuracy, bool good) {
    ValidationRun r;
    r.batch = batch;
    r.train_s = train_s;
    r.final_accuracy = accuracy;
    r.final_loss = 1 - accuracy;
    r.good = good;
    return r;
  };
  const auto written = [&](const std::string& name, const ValidationResult& v) {
    Report r = fixed_report();
    r.validation = v;
    std::ofstream(dir / name) << to_json(r);
    return (dir / name).string();
  };
  ValidationResult a;
  a.target = "full runs of 8 epochs, cosine rate";
  a.epochs = 8;
  a.lr_schedule = "cosine";
  a.runs = {run(32, 60, 0.90, true), run(64, 40, 0.899, true), run(128, 30, 0.88, false)};
  a.best_batch = 32;
  a.fastest_batch = 64;
  ValidationResult b = a;
  b.runs = {run(32, 30, 0.901, true)};
  b.fastest_batch = 32;
  b.interrupted = true;
  b.not_trained = {64, 128};
  const Comparison c = compare_reports(written("a.json", a), written("b.json", b));
  ASSERT_EQ(c.runs.size(), 3u) << to_table(c);
  EXPECT_EQ(c.runs[0].batch, 32);
  EXPECT_DOUBLE_EQ(*c.runs[0].speed_ratio(), 2.0);
  EXPECT_EQ(c.runs[0].verdict_a, "best");
  EXPECT_EQ(c.runs[1].verdict_a, "good");
  EXPECT_EQ(c.runs[2].verdict_a, "worse");
  EXPECT_EQ(c.runs[1].verdict_b, "not trained");
  EXPECT_FALSE(c.runs[1].speed_ratio().has_value());
  EXPECT_EQ(c.validated_a, std::optional<int64_t>(64));
  EXPECT_FALSE(c.validated_b.has_value());  // the fastest of the runs that ended validated nothing
  // A run whose loss stopped being finite: diverged, read back from its outcome (not "not finished")
  ValidationResult d = a;
  d.runs[1].final_loss.reset(), d.runs[1].final_accuracy.reset();
  d.runs[1].message = "the training loss became NaN after 4 steps: this learning rate (1.6) diverges";
  d.runs[1].outcome = Outcome::Error;
  d.runs[2].final_loss.reset(), d.runs[2].final_accuracy.reset();
  d.runs[2].message = "failed: CPU memory budget exceeded: tried to allocate 1.53 MiB";
  d.runs[2].outcome = Outcome::Oom;
  const Comparison diverged = compare_reports(written("a.json", a), written("d.json", d));
  ASSERT_EQ(diverged.runs.size(), 3u);
  EXPECT_EQ(diverged.runs[1].verdict_b, "diverged");
  EXPECT_EQ(diverged.runs[2].verdict_b, "failed");
  const std::string table = to_table(c);
  EXPECT_NE(table.find("validated      A 64  |  B -"), std::string::npos) << table;
  EXPECT_NE(table.find("2.00x      0.9000      0.9010  best          best"), std::string::npos) << table;
  EXPECT_NE(table.find("warning: each validation time is one run's"), std::string::npos) << table;
  const nlohmann::json j = nlohmann::json::parse(to_json(c));
  EXPECT_EQ(j.at("validation_runs").size(), 3u);
  EXPECT_DOUBLE_EQ(j.at("validation_runs")[0].at("speed_ratio").get<double>(), 2.0);
  EXPECT_EQ(j.at("validation_runs")[2].at("verdict").at("b"), "not trained");
  EXPECT_EQ(j.at("validated_batch").at("a"), 64);
  // A schedule a stop left untrained has a row that says so.
  b.schedule_not_trained = true;
  const Comparison scheduled = compare_reports(written("a.json", a), written("b.json", b));
  ASSERT_EQ(scheduled.runs.size(), 4u) << to_table(scheduled);
  EXPECT_EQ(scheduled.runs.back().schedule, "schedule");
  EXPECT_EQ(scheduled.runs.back().verdict_b, "not trained");
  // Beside the same schedule the other trained, its row, whichever report is A; beside another schedule
  // (it had joined any), a row of its own.
  ValidationResult trained = a;
  ValidationRun phases = run(32, 50, 0.9, true);
  phases.schedule = "32:0,64:4";
  trained.runs.push_back(phases);
  b.untrained_schedule = "32:0,64:4";
  for (const bool stopped_first : {true, false}) {
    const Comparison both = stopped_first ? compare_reports(written("b.json", b), written("t.json", trained))
                                          : compare_reports(written("t.json", trained), written("b.json", b));
    ASSERT_EQ(both.runs.size(), 4u) << to_table(both);
    EXPECT_EQ(both.runs.back().schedule, "32:0,64:4");
    EXPECT_EQ(stopped_first ? both.runs.back().verdict_a : both.runs.back().verdict_b, "not trained");
  }
  b.untrained_schedule = "32:0,128:2";
  const Comparison two = compare_reports(written("t.json", trained), written("b.json", b));
  ASSERT_EQ(two.runs.size(), 5u) << to_table(two);
  EXPECT_EQ(two.runs[3].schedule, "32:0,64:4");
  EXPECT_EQ(two.runs[3].verdict_b, "");
  EXPECT_EQ(two.runs[4].schedule, "32:0,128:2");
  EXPECT_EQ(two.runs[4].verdict_b, "not trained");
  b.untrained_schedule.clear();
  // Another run's validation, or another rate: not one run measured twice.
  b.target = "full runs of 20 epochs, cosine rate";
  b.epochs = 20;
  const std::string other = to_table(compare_reports(written("a.json", a), written("c.json", b)));
  EXPECT_NE(other.find("warning: A and B validated different runs (validation full runs of 8 epochs, cosine rate | "
                       "full runs of 20 epochs, cosine rate)"),
            std::string::npos)
      << other;
  Report faster = fixed_report();
  faster.validation = a;
  faster.workload.lr *= 4;
  std::ofstream(dir / "lr.json") << to_json(faster);
  const std::string rate = to_table(compare_reports(written("a.json", a), (dir / "lr.json").string()));
  EXPECT_NE(rate.find("warning: A and B validated different runs (lr "), std::string::npos) << rate;
  EXPECT_EQ(rate.find("each validation time is one run's"), std::string::npos) << rate;
  // Without a validation on either side: no runs, no such lines.
  Report plain = fixed_report();
  plain.validation.reset();
  std::ofstream(dir / "plain.json") << to_json(plain);
  const Comparison none = compare_reports((dir / "plain.json").string(), (dir / "plain.json").string());
  EXPECT_TRUE(none.runs.empty());
  EXPECT_EQ(to_table(none).find("validated"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(to_json(none)).contains("validation_runs"));
  fs::remove_all(dir);
}

// A fit that found no batch is not a report without a fit; a report without a sweep is said to have none, and a
// batch it did not run has a null outcome, not ""; two reports of no points say there is nothing to compare.
TEST(Report, CompareSaysWhatAReportLacks) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("batchwise-lacks-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Report plain = fixed_report();
  plain.validation.reset();
  std::ofstream(dir / "plain.json") << to_json(plain);
  Report unfit = fixed_report();
  unfit.fit->batch.reset();
  unfit.fit->outcome = FitOutcome::DoesNotFit;
  unfit.sweep.reset();
  unfit.validation.reset();
  std::ofstream(dir / "unfit.json") << to_json(unfit);
  const Comparison half = compare_reports((dir / "unfit.json").string(), (dir / "plain.json").string());
  EXPECT_NE(to_table(half).find("fit            A none fits  |  B 192"), std::string::npos) << to_table(half);
  EXPECT_NE(to_table(half).find("warning: A has no sweep: its column is empty"), std::string::npos) << to_table(half);
  EXPECT_TRUE(nlohmann::json::parse(to_json(half)).at("points").at(0).at("outcome").at("a").is_null());
  // two sweeps with no batch size in common: no ratio, said (the geometric mean's line had gone without a word)
  Report other = fixed_report();
  other.validation.reset();
  for (Trial& p : other.sweep->points) p.batch *= 1024;
  std::ofstream(dir / "other.json") << to_json(other);
  const std::string apart = to_table(compare_reports((dir / "plain.json").string(), (dir / "other.json").string()));
  EXPECT_NE(apart.find("warning: no batch size ran ok in both sweeps (each row's outcome says which ran): no batch has "
                       "a ratio"),
            std::string::npos)
      << apart;
  EXPECT_EQ(apart.find("geometric mean over"), std::string::npos) << apart;
  unfit.fit->outcome = FitOutcome::Error;  // a fit whose every trial failed: no batch trained, none found not to fit
  std::ofstream(dir / "failed.json") << to_json(unfit);
  const std::string failed = to_table(compare_reports((dir / "failed.json").string(), (dir / "plain.json").string()));
  EXPECT_NE(failed.find("fit            A no batch trained  |  B 192"), std::string::npos) << failed;
  Report command = plain;  // a --cmd run's (as CommandRunner::info makes it): its rate, input shape and samples
  command.workload.dataset = "(the command's)";  // are the command's own
  command.workload.lr = 0;
  command.workload.input_shape.clear();
  command.workload.dataset_size = 0;
  command.workload.parameter_count = 0;
  std::ofstream(dir / "command.json") << to_json(command);
  const std::string own = to_table(compare_reports((dir / "command.json").string(), (dir / "plain.json").string()));
  for (const char* field : {"lr ", "input shape ", "samples "}) {  // in a column as wide as its longest label
    const size_t at = own.find(std::string("\n") + field);
    ASSERT_NE(at, std::string::npos) << field << own;
    const size_t value = own.find_first_not_of(' ', at + 1 + std::string(field).size());
    EXPECT_EQ(own.compare(value, 17, "A (the command's)"), 0) << field << own;
  }
  const Comparison nothing = compare_reports((dir / "unfit.json").string(), (dir / "unfit.json").string());
  EXPECT_NE(to_table(nothing).find("warning: neither report has a sweep's points or a validation's runs"),
            std::string::npos)
      << to_table(nothing);
  fs::remove_all(dir);
}

// Two answers for runs of other lengths are not one answer measured twice: compare lists the run
// each report answered for where they differ (QA: a 2-epoch and a 1e-300-epoch tune differed only
// in their budget, as compare showed them).
TEST(Report, CompareNamesTheRunEachAnsweredFor) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("batchwise-report-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto written = [&](const std::string& name, double epochs) {
    Report r = fixed_report();
    ValidationResult v;
    v.epochs = epochs;
    v.lr_schedule = "cosine";
    r.validation = v;
    std::ofstream(dir / name) << to_json(r);
    return (dir / name).string();
  };
  const Comparison c = compare_reports(written("a.json", 2), written("b.json", 5));
  const auto run =
      std::find_if(c.differences.begin(), c.differences.end(), [](const ComparedField& d) { return d.name == "run"; });
  ASSERT_NE(run, c.differences.end()) << to_table(c);
  EXPECT_EQ(run->a, "2 epochs, cosine rate");
  EXPECT_EQ(run->b, "5 epochs, cosine rate");
  std::ofstream(dir / "plain.json") << to_json(fixed_report());  // answered for no run of its own
  const Comparison none = compare_reports(written("one.json", 1), (dir / "plain.json").string());
  const auto plain = std::find_if(none.differences.begin(), none.differences.end(),
                                  [](const ComparedField& d) { return d.name == "run"; });
  ASSERT_NE(plain, none.differences.end()) << to_table(none);
  EXPECT_EQ(plain->a, "1 epoch, cosine rate");
  EXPECT_EQ(plain->b, "-");
  // Without a sweep on either side the table still warns of other workloads (it returned before its
  // warnings where there were no points).
  Report lenet = fixed_report();
  lenet.sweep.reset();
  lenet.workload.model = "lenet";
  std::ofstream(dir / "lenet.json") << to_json(lenet);
  Report mlp = lenet;
  mlp.workload.model = "mlp";
  std::ofstream(dir / "mlp.json") << to_json(mlp);
  const std::string table = to_table(compare_reports((dir / "lenet.json").string(), (dir / "mlp.json").string()));
  EXPECT_NE(table.find("warning: A and B train different workloads (model lenet | mlp)"), std::string::npos) << table;
  // tune --epochs N --validate stopped in its validation: its run race names the run, and the stop is said
  // as validate's is (the history and compare had shown "6 epochs, cosine rate" alone).
  Report stopped = fixed_report();
  stopped.run_race = RunRace{};
  stopped.run_race->epochs = 6;
  stopped.run_race->lr_schedule = "cosine";
  ASSERT_TRUE(stopped.validation.has_value());
  EXPECT_EQ(answered_run(stopped), "6 epochs, cosine rate");
  stopped.validation->interrupted = true;
  EXPECT_EQ(answered_run(stopped), "6 epochs, cosine rate, interrupted");
  const Comparison same = compare_reports(written("c.json", 2), written("d.json", 2));
  EXPECT_TRUE(std::none_of(same.differences.begin(), same.differences.end(),
                           [](const ComparedField& d) { return d.name == "run"; }));
  // Another loss is another workload (its final losses are not comparable); and no memory ratio
  // against a trial that ran out of memory (its peak is where it failed).
  Report mse = fixed_report();
  mse.workload.loss = "mse";
  std::ofstream(dir / "mse.json") << to_json(mse);
  std::ofstream(dir / "ce.json") << to_json(fixed_report());
  const std::string losses = to_table(compare_reports((dir / "ce.json").string(), (dir / "mse.json").string()));
  EXPECT_NE(losses.find("warning: A and B train different workloads (loss cross-entropy | mse)"), std::string::npos)
      << losses;
  // Another model file at the same path (its parameters differ) is another workload too: compare had said
  // "same context and workload" for 7,850 and 20 million parameters.
  Report replaced = fixed_report();
  replaced.workload.parameter_count = 20037642;
  std::ofstream(dir / "replaced.json") << to_json(replaced);
  const std::string models = to_table(compare_reports((dir / "ce.json").string(), (dir / "replaced.json").string()));
  EXPECT_NE(models.find("warning: A and B train different workloads (parameters 61706 | 20037642)"), std::string::npos)
      << models;
  Report frozen = fixed_report();  // the same model with a layer frozen: its gradients and optimizer state are less
  frozen.workload.trainable_parameter_count = 61000;
  std::ofstream(dir / "frozen.json") << to_json(frozen);
  const std::string trainable = to_table(compare_reports((dir / "ce.json").string(), (dir / "frozen.json").string()));
  EXPECT_NE(trainable.find("warning: A and B train different workloads (trainable parameters 61706 | 61000)"),
            std::string::npos)
      << trainable;
  // the labels' column as wide as its longest label, every row's A and B in line
  EXPECT_NE(trainable.find("\ntrainable parameters A 61706  |  B 61000\nfit                  A "), std::string::npos)
      << trainable;
  Report narrow = fixed_report(), wider = fixed_report();  // the same model built in float64: another workload too
  narrow.workload.parameter_dtype = "float32";
  wider.workload.parameter_dtype = "float64";
  std::ofstream(dir / "narrow.json") << to_json(narrow);
  std::ofstream(dir / "wider.json") << to_json(wider);
  const std::string dtypes = to_table(compare_reports((dir / "narrow.json").string(), (dir / "wider.json").string()));
  EXPECT_NE(dtypes.find("warning: A and B train different workloads (parameter dtype float32 | float64)"),
            std::string::npos)
      << dtypes;
  // A report from before the field (none: "-") is no other workload for it, only a listed difference.
  const Comparison older = compare_reports((dir / "ce.json").string(), (dir / "narrow.json").string());
  EXPECT_EQ(to_table(older).find("train different workloads"), std::string::npos) << to_table(older);
  EXPECT_TRUE(std::any_of(older.differences.begin(), older.differences.end(),
                          [](const ComparedField& d) { return d.name == "parameter dtype"; }));
  // Another batchwise, a Debug build, another machine's cores and memory: listed (compare had said "same context and
  // workload" of a Debug build beside a Release one, where every speed ratio misleads)
  Report debug = fixed_report();
  debug.context.batchwise_version = "0.2.0";
  debug.context.build_type = "Debug";
  debug.context.cores = 64;
  debug.context.device_type = "cuda";  // a GPU's memory is the device's; a CPU's moves with what is free
  std::ofstream(dir / "debug.json") << to_json(debug);
  const Comparison builds = compare_reports((dir / "ce.json").string(), (dir / "debug.json").string());
  for (const char* field : {"batchwise", "build type", "cores", "device type", "device memory"})
    EXPECT_TRUE(std::any_of(builds.differences.begin(), builds.differences.end(),
                            [&](const ComparedField& d) { return d.name == field; }))
        << field << "\n"
        << to_table(builds);
  // A throughput of 0 on either side (a hand-edited report) gives no ratio, whichever side it is on: B's had made
  // the geometric mean 0x
  ComparedPoint zero;
  zero.samples_per_s_a = 100;
  zero.samples_per_s_b = 0;
  EXPECT_FALSE(zero.speed_ratio().has_value());
  std::swap(zero.samples_per_s_a, zero.samples_per_s_b);
  EXPECT_FALSE(zero.speed_ratio().has_value());
  const size_t oom_row = losses.find("\n     256  ");
  ASSERT_NE(oom_row, std::string::npos) << losses;
  const std::string row = losses.substr(oom_row + 1, losses.find('\n', oom_row + 1) - oom_row - 1);
  EXPECT_EQ(row.back(), '-') << row;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace batchwise

// report_from_json (schema.cpp) reads every field to_json writes back, lenient about missing fields and
// strict about types, with a DataError naming the report and the field.
#include "batchwise/error.h"
#include "batchwise/html.h"
#include "batchwise/report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "support/reports.h"

namespace batchwise {
namespace {

// Every record with every optional part set, so each field list is walked both ways.
Report full_report() {
  Report r = fixed_report();
  r.workload.seq_len_range = {8, 32};
  r.context.warnings = {"debug build"};
  r.distributed = DistributedRun{2, Backend::Gloo, {64ll << 20, 60ll << 20}, 120};
  Trial& point = r.sweep->points[0];
  point.accumulation_steps = 4;
  point.skipped_steps = 3;
  point.distributed = DistributedTrial{
      2,      Backend::Nccl, 128, {0.01, 0.011}, {20ll << 20, 21ll << 20}, {Outcome::Ok, Outcome::Ok}, 0.25,
      6000.0, 0.9,           ""};
  UtilisationSample gpu;
  gpu.t_s = 0.4;
  gpu.gpu_sm_percent = 75;
  gpu.gpu_memory_percent = 30;
  gpu.gpu_memory_used_bytes = 3ll << 30;
  gpu.gpu_power_w = 250;
  gpu.gpu_sm_clock_mhz = 1800;
  gpu.gpu_temperature_c = 60;
  r.sweep->points[1].utilisation->timeline.push_back(gpu);
  r.sweep->points[1].utilisation->gpu_sm_percent = UtilisationStat{75, 70, 80};
  r.sweep->points[1].utilisation->gpu_memory_used_bytes_max = 3ll << 30;
  r.sweep->not_run = {512, 1024};
  r.sweep->not_run_reason = "samples/s stopped rising";
  r.sweep->points[1].cpu_wait_share = 0.42;
  r.sweep->shared_cpu_warning = "the sweep shared the CPU";
  r.sweep->cpu_retried = {128, 128};
  r.sweep->cpu_retries_kept = 1;
  r.fit->message = "batch 320 failed with an error";
  r.fit->memory_model->breaks = {{256, 60ll << 20, 63ll << 20}};
  r.precisions[1].fit_batch.reset();
  r.plan = plan_for(*r.fit, PlanSource{}, parse_plan_device("h100"), 0.9);
  LrRange range;
  range.batch = 128;
  range.lr_low = 0.01;
  range.lr_high = 0.32;
  range.points = {{0, 0.01, 2.3, 2.3}, {1, 0.04, 2.0, 2.1}, {2, 0.32, 9.0, 5.0}};
  range.min_loss_lr = 0.04;
  range.diverged_lr = 0.32;
  range.stable_lr = 0.04;
  r.lr->range = range;
  r.lr->cap_lr = 0.04 / kLrSafety;
  r.accumulation = plan_accumulation(PlanRequest(100, 16).world_size(3).dataset_size(1000).last_batch(LastBatch::Pad));
  LoaderSearch loader;
  loader.batch = 64;
  loader.before = LoaderTrial{0, 2, Outcome::Ok, 3000, 0.5, true, ""};
  loader.trials = {loader.before, LoaderTrial{2, 2, Outcome::Ok, 6000, 0.05, false, ""},
                   LoaderTrial{8, 4, Outcome::Error, 0, 0, false, "worker died"}};
  loader.after = loader.trials[1];
  loader.pipeline_samples_per_s = 3100;
  loader.step_consumes_samples_per_s = 6400;
  loader.advice = "use 2 workers";
  r.loader = loader;
  // The run race with a batch-size schedule, and full runs with the schedule's own run.
  RunRace race;
  race.epochs = 4;
  race.lr_schedule = "cosine";
  race.reference_batch = 64;
  race.lengths_epochs = {0.1, 0.2, 0.4};
  race.measure = "accuracy";
  race.tolerance = 0.006;
  RunRaceEntry entry;
  entry.batch = 64;
  entry.samples_per_s = 5000;
  entry.predicted_gap = 0;
  entry.good = true;
  race.runs = {CompressedRun{0.1, 10, 0, 0.2, 0.6, 0.78, 500.0}, CompressedRun{0.2, 20, 0, 0.4, 0.5, 0.82, 900.0},
               CompressedRun{0.4, 40, 0, 0.8, 0.45, 0.85, std::nullopt}};
  RunRaceEntry behind = entry;  // judged worse, and a larger batch whose own carried gap was smaller
  behind.batch = 128;
  behind.shorter_run = CompressedRun{0.2, 10, 0, 0.2, 0.6, 0.79, std::nullopt};
  behind.run = CompressedRun{0.4, 20, 0, 0.4, 0.5, 0.83, std::nullopt};
  behind.predicted_gap = 0.012;
  behind.good = false;
  RunRaceEntry larger = behind;
  larger.batch = 256;
  larger.gap_as = 128;
  RunRaceEntry first_round = behind;  // a longer round's race keeps the first round's verdict on it
  first_round.batch = 512;
  first_round.gap_as = 128;
  first_round.shorter_run = CompressedRun{0.1, 5, 0, 0.25, 0.7, 0.7, std::nullopt};
  first_round.run = CompressedRun{0.2, 10, 0, 0.5, 0.4, 0.8, std::nullopt};
  first_round.earlier_round = true;
  race.entries = {entry, behind, larger, first_round};
  race.best_batch = 64;
  race.batch_at_start = 64;
  race.batch_at_end = 256;
  ScheduleAdvice schedule;
  schedule.phases = {{64, 0}, {256, 2.5}};
  schedule.text = "64:0,256:2.5";
  schedule.lrs = {0.02, 0.08};
  schedule.saving = 0.12;
  race.schedule = schedule;
  race.schedule_reason = "a batch-size schedule saves 12 %";
  race.stopped_at_wall_limit = true;  // fields false by default read back only if written
  race.entries.back().past_wall_limit = true;
  r.run_race = race;
  ValidationResult full;
  full.epochs = 4;
  full.lr_schedule = "cosine";
  ValidationRun fixed;
  fixed.batch = 64;
  fixed.final_loss = 0.3;
  fixed.final_accuracy = 0.9;
  fixed.good = true;
  fixed.cpu_wait_share = 0.3;
  ValidationRun phased = fixed;
  phased.schedule = "64:0,256:2.5";
  phased.phase_lrs = {0.02, 0.08};
  full.runs = {fixed, phased};
  full.best_batch = full.fastest_batch = 64;
  full.good_batches = {64};
  full.schedule_saving = 0.1;
  r.validation = full;
  return r;
}

TEST(Report, JsonReadsBackToTheSameJson) {
  const std::string json = to_json(fixed_report());
  EXPECT_EQ(to_json(report_from_json(json, "golden")), json);
  const std::string full = to_json(full_report());
  EXPECT_EQ(to_json(report_from_json(full, "full")), full);
  const Report back = report_from_json(full, "full");  // a schedule's phases are read back from its text
  ASSERT_TRUE(back.run_race && back.run_race->schedule);
  ASSERT_EQ(back.run_race->schedule->phases.size(), 2u);
  EXPECT_EQ(back.run_race->schedule->phases[1].batch, 256);
  EXPECT_EQ(back.run_race->schedule->phases[1].from_epoch, 2.5);
  for (const char* section : {"\"run_race\"", "\"schedule_saving\"", "\"phase_lrs\"", "\"distributed\"", "\"plan\"",
                              "\"range_test\"", "\"accumulation_plan\"", "\"stopped_at_wall_limit\": true",
                              "\"past_wall_limit\": true", "\"epoch\"", "\"loader\"", "\"accumulation_steps\"",
                              "\"skipped_steps\"", "\"gpu_temperature_c\"", "\"breaks\"", "\"not_run\""})
    EXPECT_NE(full.find(section), std::string::npos) << section;
  EXPECT_EQ(back.sweep->points.at(1).cpu_wait_share, 0.42);
  EXPECT_EQ(back.validation->runs.at(0).cpu_wait_share, 0.3);
  EXPECT_FALSE(back.sweep->points.at(0).cpu_wait_share);
  EXPECT_EQ(back.sweep->shared_cpu_warning, "the sweep shared the CPU");
  EXPECT_EQ(back.sweep->cpu_retried, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(back.sweep->cpu_retries_kept, 1);
  EXPECT_NE(to_table(back).find("a trial that shared the CPU ran again at the sweep's end"), std::string::npos);
  // A larger batch's gap taken from a smaller one's is kept, and the table says so beside it.
  EXPECT_EQ(back.run_race->entries.at(2).gap_as, 128);
  EXPECT_FALSE(back.run_race->entries.at(1).gap_as);
  EXPECT_NE(to_table(back).find("worse (as batch 128's at the end: a larger batch is not predicted nearer)"),
            std::string::npos);
  // A first round's verdict is kept as one, its gaps (at half the race's lengths) not in its columns.
  EXPECT_TRUE(back.run_race->entries.at(3).earlier_round);
  EXPECT_FALSE(back.run_race->entries.at(2).earlier_round);
  const std::string table = to_table(back);
  const size_t row = table.find("     512  ");
  ASSERT_NE(row, std::string::npos) << table;
  const std::string line = table.substr(row, table.find('\n', row) - row);
  EXPECT_NE(line.find("worse (as batch 128's at the end in the first round: a larger batch is not predicted nearer) "
                      "(the first round's, after 0.2 epochs: not raced again)"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("         -           -  "), std::string::npos) << line;
  // A row raced at the race's lengths shows its gaps there: 128 behind 64 by 3 and 2 points.
  const size_t raced = table.find("     128  ", table.find("run race ("));
  ASSERT_NE(raced, std::string::npos) << table;
  EXPECT_NE(table.substr(raced, table.find('\n', raced) - raced).find("   3.00 pt     2.00 pt"), std::string::npos)
      << table;
  const std::string page = to_html(full);
  EXPECT_NE(page.find("<td class=\"n\">512</td><td class=\"n\">5,000</td><td class=\"n\">0</td><td "
                      "class=\"n\">0</td><td class=\"n\">-</td><td class=\"n\">-</td>"),
            std::string::npos);
  EXPECT_NE(page.find("first round&#39;s, after 0.2 epochs: not raced again"), std::string::npos);
  // The memory model's breaks have always been written with their keys in alphabetical order.
  const auto breaks = nlohmann::ordered_json::parse(full).at("fit").at("memory_model").at("breaks").at(0);
  std::vector<std::string> keys;
  for (const auto& [key, value] : breaks.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"batch", "measured_bytes", "predicted_bytes"}));
  // What the table shows from a report read back is what it shows from the record (the fit's budget
  // and target, which the JSON keeps once, at the top, included).
  EXPECT_EQ(to_table(report_from_json(json, "golden")), to_table(fixed_report()));
}

// A noise scale whose band is missing (hand-edited; fuzzing found it) takes its band from its error, and reads back
// to itself once written: its [0, 0] had been written, and read back as unbounded.
TEST(Report, ANoiseScaleWithoutItsBandTakesItFromItsError) {
  Report r = fixed_report();
  r.noise = NoiseResult{};
  r.noise->b_simple = 1250;
  r.noise->b_simple_stderr = 100;
  auto j = nlohmann::json::parse(to_json(r));
  j["noise_scale"].erase("b_simple_band");
  const Report read = report_from_json(j.dump(), "no-band.json");
  ASSERT_TRUE(read.noise.has_value());
  EXPECT_DOUBLE_EQ(read.noise->b_simple_low, 1050);
  EXPECT_DOUBLE_EQ(read.noise->b_simple_high, 1450);
  const std::string written = to_json(read);
  EXPECT_EQ(to_json(report_from_json(written, "written")), written);
}

// A noise scale whose band reaches infinity is written with a null high end (JSON has no infinity) and
// read back infinite: a summary of the report read back says "(0 to inf)", as the record's does.
TEST(Report, AnUnboundedNoiseBandReadsBackUnbounded) {
  Report r = fixed_report();
  r.noise = NoiseResult{};
  r.noise->b_simple = 3436922;
  r.noise->b_simple_stderr = std::numeric_limits<double>::infinity();
  r.noise->b_simple_high = std::numeric_limits<double>::infinity();
  const std::string json = to_json(r);
  const Report back = report_from_json(json, "unbounded");
  ASSERT_TRUE(back.noise.has_value());
  EXPECT_TRUE(std::isinf(back.noise->b_simple_high));
  EXPECT_TRUE(std::isinf(back.noise->b_simple_stderr));
  EXPECT_EQ(to_summary(back), to_summary(r));
  // and no critical batch is stated from it, in the table or the summary: why not, and the fix
  for (const std::string& text : {to_table(r), to_summary(r)}) {
    EXPECT_EQ(text.find("critical batch ~"), std::string::npos) << text;
    EXPECT_NE(text.find("the band has no upper end: |G|^2 is within two standard errors of 0"), std::string::npos)
        << text;
    EXPECT_NE(text.find("measure more steps (--noise-steps) or a larger --micro-batch"), std::string::npos) << text;
  }
}

// A utilisation monitor that took no sample (a trial shorter than its interval) has no CPU figure or
// resident size: null, not 0 % and 0 B.
TEST(Report, AUtilisationWithoutSamplesHasNoFigures) {
  Report r = fixed_report();
  ASSERT_TRUE(r.sweep.has_value());
  UtilisationSummary none;
  r.sweep->points.front().utilisation = none;
  const auto j = nlohmann::json::parse(to_json(r));
  const auto& u = j.at("sweep").at("points").at(0).at("utilisation");
  EXPECT_EQ(u.at("samples"), 0);
  EXPECT_TRUE(u.at("cpu_percent").is_null()) << u.dump();
  EXPECT_TRUE(u.at("rss_bytes_max").is_null()) << u.dump();
}

TEST(Report, ReadingIsLenientAboutMissingFieldsAndStrictAboutTypes) {
  const Report sparse = report_from_json(R"({"schema_version": "1", "context": {}, "fit": {"batch": 64},
                                            "a_field_of_a_later_version": [1, 2]})",
                                         "old.json");
  ASSERT_TRUE(sparse.fit.has_value());
  EXPECT_EQ(sparse.fit->batch, 64);
  EXPECT_EQ(sparse.fit->outcome, FitOutcome::Error);  // the default: absent fields keep theirs
  EXPECT_DOUBLE_EQ(sparse.target, 0.9);
  EXPECT_FALSE(sparse.sweep.has_value());

  auto expect_data_error = [](const std::string& text, const std::string& message) {
    try {
      report_from_json(text, "x.json");
      ADD_FAILURE() << "no error for " << text;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  auto j = nlohmann::json::parse(to_json(fixed_report()));
  j["fit"]["trials"][2]["batch"] = "sixty-four";
  expect_data_error(j.dump(), "x.json: fit.trials[2].batch: expected an integer, found \"sixty-four\"");
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["sweep"]["points"][0]["outcome"] = "exploded";
  expect_data_error(j.dump(), "x.json: sweep.points[0].outcome: expected one of ok, oom, error, timeout");
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["context"]["device"] = "cpu";
  expect_data_error(j.dump(), "x.json: context.device: expected an object");
  j["context"] = {{"threads", 1e12}};
  expect_data_error(j.dump(), "x.json: context.threads: expected an integer");
  // what no run writes: a batch below 1, a peak or a throughput below 0 (they were drawn, and compared)
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["sweep"]["points"][1]["batch"] = 0;
  expect_data_error(j.dump(), "x.json: sweep.points[1].batch: expected a batch of 1 or more, found 0");
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["sweep"]["points"][1].erase("batch");  // absent: its default, 0, would not read back (fuzzing found it)
  expect_data_error(j.dump(), "x.json: sweep.points[1].batch: expected a batch of 1 or more, found none");
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["sweep"]["knee_batch"] = -16;
  expect_data_error(j.dump(), "x.json: sweep.knee_batch: expected 0 or more, found -16");
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["fit"]["trials"][0]["peak_bytes"] = -100;
  expect_data_error(j.dump(), "x.json: fit.trials[0].peak_bytes: expected 0 or more, found -100");
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["sweep"]["points"][0]["samples_per_s"] = -5.5;
  expect_data_error(j.dump(), "x.json: sweep.points[0].samples_per_s: expected 0 or more, found -5.5");
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["recommendation"]["batch"] = 0;  // had been shown as "recommended B 0"
  expect_data_error(j.dump(), "x.json: recommendation.batch: expected a batch of 1 or more, found 0");
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["race"]["best_batch"] = 0;
  expect_data_error(j.dump(), "x.json: race.best_batch: expected a batch of 1 or more, found 0");
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["validation"]["runs"][0]["train_s"] = -1;
  expect_data_error(j.dump(), "x.json: validation.runs[0].train_s: expected 0 or more, found -1");
  j = nlohmann::json::parse(to_json(fixed_report()));
  j["context"]["threads"] = -3;
  expect_data_error(j.dump(), "x.json: context.threads: expected 0 or more, found -3");
  expect_data_error("{not json", "x.json: not JSON");
  // The parser's words without its exception's tag, and bytes that are not printable ASCII as '?', not to the
  // terminal raw
  expect_data_error("{\"a\": 1", "x.json: not JSON (parse error at line 1, column 8: syntax error");
  try {
    report_from_json("\xff\xfe{", "x.json");
    ADD_FAILURE() << "parsed";
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("[json.exception"), std::string::npos) << what;
    EXPECT_TRUE(std::all_of(what.begin(), what.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) << what;
  }
  expect_data_error("[1, 2, 3]", "x.json: not a batchwise report (no schema_version and context)");
  expect_data_error(R"({"torch_version": "2.15.0", "cpu": {}, "findings": []})",
                    "x.json: a doctor's findings (`batchwise doctor --json`), not a run's report");
  expect_data_error(R"({"schema_version": "2"})", "x.json: not a batchwise report (no context)");
  expect_data_error(R"({"schema_version": "2", "context": {}})",
                    "x.json: report schema \"2\" is not one this batchwise reads");
}

}  // namespace
}  // namespace batchwise

// Golden tests pin both reporters for a fixed Report; a contract test checks the fields that
// ../shared/REPORT_CONTRACT.md promises other programs. Regenerate the golden files with
// BATCHWISE_UPDATE_GOLDEN=1 after an intended change, and review the diff.
#include "batchwise/report.h"
#include "batchwise/error.h"
#include "batchwise/html.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <stdexcept>
#include <set>

namespace batchwise {
namespace {

Trial trial(int64_t batch, Outcome outcome, int64_t peak, std::vector<double> steps, std::string message = "") {
  Trial t;
  t.batch = batch;
  t.outcome = outcome;
  t.peak_bytes = peak;
  t.peak_allocated_bytes = peak;
  t.step_times_s = std::move(steps);
  t.warmup_steps = 2;
  t.steps = static_cast<int>(t.step_times_s.size());
  t.steps_run = outcome == Outcome::Ok ? t.steps + 2 : 1;
  t.loss_first = 2.5;
  t.loss_last = 2.25;
  t.wall_s = 0.5;
  t.message = std::move(message);
  summarize_steps(t);
  return t;
}

Report fixed_report() {
  Report r;
  r.context.batchwise_version = "0.1.0";
  r.context.build_commit = "abc1234";
  r.context.build_type = "Release";
  r.context.torch_version = "2.15.0";
  r.context.device_type = "cpu";
  r.context.device_name = "Test CPU <8 cores> & \"quotes\"";
  r.context.device_total_bytes = 8ll << 30;
  r.context.host = "testhost";
  r.context.date = "2026-11-21T12:00:00Z";
  r.context.threads = 2;
  r.context.cores = 2;
  r.context.blas = "mkl";
  r.workload.model = "lenet";
  r.workload.dataset = "fashion-mnist";
  r.workload.optimizer = "sgd";
  r.workload.lr = 0.01;
  r.workload.input_shape = {1, 28, 28};
  r.workload.num_classes = 10;
  r.workload.dataset_size = 60000;
  r.workload.parameter_count = 61706;
  r.workload.parameter_bytes = 246824;
  r.budget_bytes = 64ll << 20;
  r.target = 0.9;

  FitResult fit;
  fit.mode = FitMode::Binsearch;
  fit.outcome = FitOutcome::Fits;
  fit.batch = 192;
  fit.budget_bytes = r.budget_bytes;
  fit.trials = {trial(128, Outcome::Ok, 40ll << 20, {0.02, 0.021}),
                trial(256, Outcome::Oom, 63ll << 20, {}, "CPU memory budget exceeded"),
                trial(192, Outcome::Ok, 57ll << 20, {0.03, 0.031})};
  fit.trials[0].within_target = true;
  fit.trials[1].within_target = false;
  fit.trials[2].within_target = true;
  fit.trials[2].predicted_peak_bytes = 58ll << 20;
  for (auto& t : fit.trials) t.state = StateBytes{246824, 246824, 246824};
  fit.memory_model = fit_memory_model(fit.trials);
  fit.breakdown = MemoryBreakdown{192, 57ll << 20, 246824, 246824, 246824, 262144.0, 7651352};
  r.fit = fit;

  SweepResult sweep;
  sweep.repetitions = 2;
  sweep.budget_bytes = r.budget_bytes;
  sweep.points = {trial(64, Outcome::Ok, 20ll << 20, {0.01, 0.0125, 0.01, 0.0105}),
                  trial(128, Outcome::Ok, 40ll << 20, {0.016, 0.016, 0.017, 0.0165}),
                  trial(256, Outcome::Oom, 63ll << 20, {}, "not run: batch 256 already ran out of memory")};
  sweep.knee_batch = knee_batch(sweep.points, 0.05);
  UtilisationSummary u;
  u.interval_s = 0.1;
  for (int i = 1; i <= 3; ++i) {
    UtilisationSample x;
    x.t_s = 0.1 * i;
    x.core_percent = {90.0 + i, 80.0 + i};
    x.cpu_percent = 85.0 + i;
    x.rss_bytes = (300ll + i) << 20;
    u.timeline.push_back(x);
  }
  u.samples = 3;
  u.samples_between_steps = 2;
  u.cpu_percent = UtilisationStat{87, 86, 88};
  u.core_percent_mean = {92, 82};
  u.rss_bytes_max = 303ll << 20;
  u.overhead_percent = 0.25;
  sweep.points[1].utilisation = u;  // batch 128, the recommendation
  r.sweep = sweep;

  NoiseResult noise;
  noise.batch = 128;
  noise.micro_batch = 16;
  noise.steps = 4;
  for (int i = 1; i <= 4; ++i) {
    NoiseStep s;
    s.step = i;
    s.loss = 2.5 - 0.1 * i;
    s.g2_small = 3.0;
    s.g2_big = 1.0 + 0.5 * i;
    s.g2 = 0.25;
    s.trace = 250 + 25 * i;
    if (i > 1) s.b_simple_smoothed = 1000.0 + 100 * i;
    noise.timeline.push_back(s);
  }
  noise.g2 = 0.25;
  noise.trace = 312.5;
  noise.b_simple = 1250;
  noise.b_simple_stderr = 100;
  noise.b_simple_low = 1050;
  noise.b_simple_high = 1450;
  noise.drift = 1.25;
  noise.wall_s = 0.75;
  r.noise = noise;
  r.goodput = goodput(r.sweep->points, *noise.b_simple);
  r.recommendation = recommend(r.fit, r.sweep, r.noise, r.goodput);

  ValidationResult v;
  v.target = "test accuracy >= 0.85";
  v.held_out = "fashion-mnist test split, 10000 samples";
  for (int64_t batch : {64, 128}) {
    ValidationRun run;
    run.batch = batch;
    run.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, batch);
    run.warmup_epochs = 0.75;
    for (int i = 1; i <= 3; ++i) {
      run.curve.push_back({3000 * i, 3000 * i / batch, (batch == 64 ? 1.5 : 1.0) * i, 0.6 - 0.05 * i, 0.75 + 0.035 * i});
    }
    run.reached = true;
    run.last = run.curve.back();
    run.train_s = run.last.train_s;
    run.steps = run.last.steps;
    run.epochs = 0.15;
    run.eval_s = 0.9;
    v.runs.push_back(run);
  }
  v.fastest_batch = 128;
  r.validation = v;
  r.recommendation = confirm(*r.recommendation, v);
  r.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, r.recommendation->batch);
  r.precisions = {PrecisionPoint{Precision::Fp32, 192, false, 128, 7877, 40ll << 20, 1.0, 1.0, "the run's own precision"},
                  PrecisionPoint{Precision::Bf16, 320, false, 128, 6500, 26ll << 20, 6500.0 / 7877, 0.65,
                                 "slower (0.83x) but fits batch 320 against 192: pays only where memory is the limit"}};
  for (int64_t batch : {64, 128}) {
    StepProfile p;
    p.batch = batch;
    p.steps = 3;
    const double k = batch / 64.0;
    p.mean = StepPhases{0.0005 * k, 0.0003 * k, 0.004 * k, 0.005 * k, 0.0007, 0.0106 * k};
    p.coverage = (p.mean.data_s + p.mean.h2d_s + p.mean.forward_s + p.mean.backward_s + p.mean.optimizer_s) / p.mean.total_s;
    r.step_profile.push_back(p);
  }
  // A race of two candidates: 128 wins the second rung; 64 is dropped after the first.
  BatchRace race;
  race.loss_before = 2.3;
  race.accuracy_before = 0.1;
  race.horizons_s = {2.0, 6.0};
  race.held_out = "2048 samples of fashion-mnist test";
  for (int64_t batch : {64, 128}) {
    RaceEntry e;
    e.batch = batch;
    e.samples_per_s = batch == 64 ? 7000 : 7877;
    e.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, batch);
    e.rungs = batch == 64 ? 1 : 2;
    e.train_s = race.horizons_s[e.rungs - 1];
    e.samples = static_cast<int64_t>(e.train_s * e.samples_per_s);
    e.steps = e.samples / batch;
    e.curve = {{0, 2.3, 0.1}, {e.train_s / 2, 1.0, 0.62}, {e.train_s, batch == 64 ? 0.8 : 0.6, 0.7}};
    e.loss_at_horizon = batch == 64 ? 0.8 : 0.6;
    e.time_ratio = batch == 64 ? 1.25 : 1.0;
    race.entries.push_back(e);
  }
  race.left_out = {256};
  race.notes = {"batch 256 left out: 6 steps fit the first rung's 1.00 s, below the 8 a comparison needs"};
  race.best_batch = 128;
  race.lead_batch = 128;
  race.within_5_percent = {128};
  race.wall_s = 9.5;
  r.race = race;
  r.run_plan = plan_run(optimizer_settings(Optimizer::Sgd), 60000,
                        {{"base", unmeasured_lr(Optimizer::Sgd, 32, 0.01, 32)}, {"recommended", r.race->entries[1].lr}});
  return r;
}

std::string golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(BATCHWISE_TEST_GOLDEN_DIR) + "/" + name;
  if (std::getenv("BATCHWISE_UPDATE_GOLDEN")) std::ofstream(path, std::ios::binary) << actual;
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Report, JsonMatchesGolden) {
  const std::string json = to_json(fixed_report());
  EXPECT_EQ(json, golden("report.json", json));
}

TEST(Report, TableMatchesGolden) {
  const std::string table = to_table(fixed_report());
  EXPECT_EQ(table, golden("report.txt", table));
}

TEST(Report, KneeAndRecommendationFromTheFigures) {
  const Report r = fixed_report();
  EXPECT_EQ(*r.sweep->knee_batch, 128);  // 7,877 samples/s against 6,244 at 64
  ASSERT_TRUE(r.recommendation.has_value());
  EXPECT_EQ(r.recommendation->batch, 128);
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

// ---- reading a report back ----------------------------------------------------------------------

// Every record with every optional part set, so each field list is walked both ways.
Report full_report() {
  Report r = fixed_report();
  r.workload.seq_len_range = {8, 32};
  r.context.warnings = {"debug build"};
  r.distributed = DistributedRun{2, Backend::Gloo, {64ll << 20, 60ll << 20}, 120};
  Trial& point = r.sweep->points[0];
  point.accumulation_steps = 4;
  point.distributed = DistributedTrial{2, Backend::Nccl, 128, {0.01, 0.011}, {20ll << 20, 21ll << 20},
                                       {Outcome::Ok, Outcome::Ok}, 0.25, 6000.0, 0.9, ""};
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
  r.fit->message = "batch 320 failed with an error";
  r.fit->memory_model->breaks = {{256, 60ll << 20, 63ll << 20}};
  r.precisions[1].fit_batch.reset();
  r.plan = plan_for(*r.fit, parse_plan_device("h100"), 0.9);
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
  return r;
}

TEST(Report, JsonReadsBackToTheSameJson) {
  const std::string json = to_json(fixed_report());
  EXPECT_EQ(to_json(report_from_json(json, "golden")), json);
  const std::string full = to_json(full_report());
  EXPECT_EQ(to_json(report_from_json(full, "full")), full);
  for (const char* section : {"\"distributed\"", "\"plan\"", "\"range_test\"", "\"accumulation_plan\"", "\"epoch\"",
                              "\"loader\"", "\"accumulation_steps\"", "\"gpu_temperature_c\"", "\"breaks\"", "\"not_run\""})
    EXPECT_NE(full.find(section), std::string::npos) << section;
  // The memory model's breaks have always been written with their keys in alphabetical order.
  const auto breaks = nlohmann::ordered_json::parse(full).at("fit").at("memory_model").at("breaks").at(0);
  std::vector<std::string> keys;
  for (const auto& [key, value] : breaks.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"batch", "measured_bytes", "predicted_bytes"}));
  // What the table shows from a report read back is what it shows from the record (the fit's budget
  // and target, which the JSON keeps once, at the top, included).
  EXPECT_EQ(to_table(report_from_json(json, "golden")), to_table(fixed_report()));
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
  expect_data_error("{not json", "x.json: not JSON");
  expect_data_error("[1, 2, 3]", "x.json: not a batchwise report");
  expect_data_error(R"({"schema_version": "2", "context": {}})", "x.json: report schema \"2\" is not one this batchwise reads");
}

// ---- the HTML report ----------------------------------------------------------------------------

// The charts' configurations, by chart id, as the page hands them to Chart.js.
std::map<std::string, nlohmann::json> chart_configs(const std::string& html) {
  static const std::regex block(R"re(<script type="application/json" class="chart-config" data-chart="([a-z-]+)">([^<]*)</script>)re");
  std::map<std::string, nlohmann::json> charts;
  for (std::sregex_iterator it(html.begin(), html.end(), block), end; it != end; ++it)
    charts[(*it)[1]] = nlohmann::json::parse((*it)[2].str());
  return charts;
}

// The page's skeleton: its sections and headings, and each chart's datasets with their point counts.
std::string outline(const std::string& html) {
  std::string out;
  static const std::regex tag(R"re(<section id="([a-z-]+)"|<h[12]>([^<]*)</h[12]>|data-chart="([a-z-]+)">)re");
  const auto charts = chart_configs(html);
  for (std::sregex_iterator it(html.begin(), html.end(), tag), end; it != end; ++it) {
    if ((*it)[1].matched) out += "section " + (*it)[1].str() + "\n";
    if ((*it)[2].matched) out += "  heading " + (*it)[2].str() + "\n";
    if ((*it)[3].matched) {
      const auto& config = charts.at((*it)[3].str());
      out += "  chart " + (*it)[3].str() + " (" + config.at("type").get<std::string>() + ")\n";
      for (const auto& d : config.at("data").at("datasets"))
        out += "    " + d.at("label").get<std::string>() + ": " + std::to_string(d.at("data").size()) + " points\n";
    }
  }
  return out;
}

std::vector<std::pair<int64_t, double>> xy(const nlohmann::json& dataset) {
  std::vector<std::pair<int64_t, double>> points;
  for (const auto& p : dataset.at("data")) points.emplace_back(p.at("x").get<int64_t>(), p.at("y").get<double>());
  return points;
}

const nlohmann::json& dataset_labelled(const nlohmann::json& config, const std::string& start) {
  for (const auto& d : config.at("data").at("datasets"))
    if (d.at("label").get<std::string>().rfind(start, 0) == 0) return d;
  throw std::runtime_error("no dataset labelled " + start);
}

TEST(Html, StructureMatchesGoldenAndChartsCarryEveryTrial) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  const std::string json = to_json(fixed_report());
  const std::string html = to_html(json);
  EXPECT_EQ(outline(html), golden("report.html.outline", outline(html)));

  const auto j = nlohmann::json::parse(json);
  const auto charts = chart_configs(html);
  ASSERT_EQ(charts.size(), 10u);
  // The race: one loss curve per entry, the initial weights' evaluation first.
  for (const auto& e : j.at("race").at("entries"))
    EXPECT_EQ(dataset_labelled(charts.at("race"), "batch " + std::to_string(e.at("batch").get<int>())).at("data").size(),
              e.at("curve").size());
  EXPECT_EQ(dataset_labelled(charts.at("utilisation"), "CPU busy").at("data").size(), 3u);
  EXPECT_EQ(charts.at("precision").at("data").at("datasets").at(0).at("data").size(), 2u);
  // Step profile: one bar per profiled batch in every phase.
  for (const auto& d : charts.at("profile").at("data").at("datasets"))
    EXPECT_EQ(d.at("data").size(), j.at("step_profile").size()) << d.at("label");
  // Throughput: one point per sweep batch that ran, at its measured median samples/s.
  std::vector<std::pair<int64_t, double>> ran;
  for (const auto& p : j.at("sweep").at("points"))
    if (p.at("outcome") == "ok") ran.emplace_back(p.at("batch"), p.at("samples_per_s"));
  EXPECT_EQ(xy(dataset_labelled(charts.at("throughput"), "samples/s")), ran);
  EXPECT_EQ(xy(dataset_labelled(charts.at("throughput"), "knee")).at(0).first, j.at("sweep").at("knee_batch"));
  // Memory: one point per fit trial that ran, at its peak in MiB; the budget and target lines.
  std::vector<std::pair<int64_t, double>> fitted;
  for (const auto& t : j.at("fit").at("trials"))
    if (t.at("outcome") == "ok") fitted.emplace_back(t.at("batch"), t.at("peak_bytes").get<double>() / (1 << 20));
  EXPECT_EQ(xy(dataset_labelled(charts.at("memory"), "fit trials")), fitted);
  EXPECT_EQ(xy(dataset_labelled(charts.at("memory"), "out of memory")).at(0).first, 256);
  EXPECT_DOUBLE_EQ(xy(dataset_labelled(charts.at("memory"), "budget")).at(0).second, 64.0);
  EXPECT_DOUBLE_EQ(xy(dataset_labelled(charts.at("memory"), "target")).at(0).second, 57.6);
  // Goodput: one point per goodput point; the noise scale: one per step with a smoothed estimate.
  std::vector<std::pair<int64_t, double>> good;
  for (const auto& p : j.at("goodput").at("points")) good.emplace_back(p.at("batch"), p.at("goodput"));
  EXPECT_EQ(xy(dataset_labelled(charts.at("goodput"), "goodput")), good);
  EXPECT_EQ(xy(dataset_labelled(charts.at("noise"), "B_simple")).size(), 3u);
  // Validation: one line per candidate, one point per evaluation.
  for (const auto& run : j.at("validation").at("runs"))
    EXPECT_EQ(dataset_labelled(charts.at("validation"), "batch " + std::to_string(run.at("batch").get<int>()) + " ")
                  .at("data").size(), run.at("curve").size());
  // The recommendation opens the page, with its reason.
  EXPECT_LT(html.find("id=\"recommendation\""), html.find("id=\"throughput\""));
  EXPECT_NE(html.find("<b id=\"recommended-batch\">128</b>"), std::string::npos);
  EXPECT_NE(html.find("Chart.js " + chartjs_version() + " (MIT licence"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://cdn"));  // no CDN: nothing is fetched
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
}

TEST(Html, SectionsAppearOnlyWithTheirData) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  Report r = fixed_report();
  r.sweep.reset();
  r.fit->breakdown.reset();
  r.noise.reset();
  r.goodput.reset();
  r.validation.reset();
  r.step_profile.clear();
  r.precisions.clear();
  r.race.reset();
  r.run_plan.reset();
  r.recommendation = recommend(r.fit, r.sweep);
  const std::string html = to_html(to_json(r));
  EXPECT_EQ(html.find("id=\"race\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"run-plan\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"throughput\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"sweep-points\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"breakdown\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"goodput\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"noise\""), std::string::npos);
  EXPECT_NE(html.find("id=\"memory\""), std::string::npos);
  EXPECT_EQ(chart_configs(html).size(), 1u);
  EXPECT_EQ(html.find("id=\"distributed\""), std::string::npos);
  // The context's warnings are listed (they were once read through a dangling reference).
  r.context.warnings = {"doctor: the reference BLAS is in use"};
  EXPECT_NE(to_html(to_json(r)).find("<li>doctor: the reference BLAS is in use</li>"), std::string::npos);
  // Nothing fits: the top of the page says so.
  r.fit->outcome = FitOutcome::DoesNotFit;
  r.fit->batch.reset();
  r.fit->message = "batch 1 peaks at 70 MiB, over the target";
  r.recommendation.reset();
  const std::string none = to_html(to_json(r));
  EXPECT_NE(none.find("No batch fits within the target"), std::string::npos);
  EXPECT_NE(none.find("batch 1 peaks at 70 MiB, over the target"), std::string::npos);
}

// User-supplied strings (a model name, a device name, a failure message) cannot inject markup or
// script: in text they are entities, in the charts' JSON they are \u escapes.
TEST(Html, UserStringsAreEscaped) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  Report r = fixed_report();
  r.workload.model = "<script>alert('model')</script>";
  r.context.device_name = "</script><script>alert(1)</script>";
  r.fit->trials[1].message = "<img src=x onerror=alert(2)>";
  r.sweep->points[2].message = "</script><!--";
  const std::string html = to_html(to_json(r));
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;model&#39;)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;img src=x onerror=alert(2)&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  // Every <script in the page is one of ours: a chart configuration, Chart.js, or the drawing code.
  size_t scripts = 0;
  for (size_t at = html.find("<script"); at != std::string::npos; at = html.find("<script", at + 1)) ++scripts;
  EXPECT_EQ(scripts, chart_configs(html).size() + 2);
  EXPECT_NE(html.find("\\u003c/script\\u003e\\u003c!--"), std::string::npos);  // the message, inside a tooltip note
}

TEST(Html, NotAReportIsADataErrorNamingIt) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  EXPECT_THROW(
      {
        try {
          to_html(R"({"hello": 1})", "x.json");
        } catch (const DataError& e) {
          EXPECT_NE(std::string(e.what()).find("x.json: not a batchwise report"), std::string::npos) << e.what();
          throw;
        }
      },
      DataError);
  EXPECT_THROW(to_html("{not json", "x.json"), DataError);
  auto j = nlohmann::json::parse(to_json(fixed_report()));
  j["sweep"]["points"][0]["batch"] = "sixty-four";  // a field of the wrong type: an error, not a crash
  EXPECT_THROW(to_html(j.dump(), "x.json"), DataError);
  EXPECT_THROW(html_from_file("/nonexistent/report.json"), DataError);
}

}  // namespace
}  // namespace batchwise

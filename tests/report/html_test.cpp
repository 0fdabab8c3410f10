// The HTML report (html.cpp): its outline against a golden file, each chart carrying every trial,
// sections only with their data, user strings escaped.
#include "batchwise/html.h"
#include "batchwise/accumulation.h"
#include "batchwise/error.h"
#include "batchwise/loader.h"
#include "batchwise/recommend.h"
#include "batchwise/report.h"

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/reports.h"

namespace batchwise {
namespace {

// The charts' configurations, by chart id, as the page hands them to Chart.js.
std::map<std::string, nlohmann::json> chart_configs(const std::string& html) {
  static const std::regex block(
      R"re(<script type="application/json" class="chart-config" data-chart="([a-z-]+)">([^<]*)</script>)re");
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
  ASSERT_EQ(charts.size(), 9u);  // no utilisation chart: 3 samples are too few (UtilisationIsChartedOverTheSweep...)
  // The race: one loss curve per entry, the initial weights' evaluation first.
  for (const auto& e : j.at("race").at("entries"))
    EXPECT_EQ(
        dataset_labelled(charts.at("race"), "batch " + std::to_string(e.at("batch").get<int>())).at("data").size(),
        e.at("curve").size());
  EXPECT_NE(html.find("Only 3 sample(s) were taken during the first repetition of each sweep batch, too few to chart"),
            std::string::npos);
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
  EXPECT_EQ(xy(dataset_labelled(charts.at("throughput"), "recommended: batch 128")).at(0).first, 128);
  // The spread band: samples/s at the slower and the faster quartile step (numpy's linear quantiles of
  // batch 64's steps 0.01, 0.01, 0.0105, 0.0125: 0.01 and 0.011).
  const auto slow = xy(dataset_labelled(charts.at("throughput"), "spread: slower")),
             fast = xy(dataset_labelled(charts.at("throughput"), "spread: middle half"));
  ASSERT_EQ(slow.size(), 2u);
  EXPECT_NEAR(slow[0].second, 64 / 0.011, 1e-6);
  EXPECT_NEAR(fast[0].second, 64 / 0.01, 1e-6);
  EXPECT_EQ(dataset_labelled(charts.at("throughput"), "spread: middle half").at("fill"), "-1");
  // Ticks at the batches measured, on a log axis.
  EXPECT_EQ(charts.at("throughput").at("options").at("scales").at("x").at("batchTicks"),
            nlohmann::json::array({64, 128, 256}));
  // Memory: one point per fit trial that ran, at its peak in MiB; the budget and target lines.
  std::vector<std::pair<int64_t, double>> fitted;
  for (const auto& t : j.at("fit").at("trials"))
    if (t.at("outcome") == "ok") fitted.emplace_back(t.at("batch"), t.at("peak_bytes").get<double>() / (1 << 20));
  EXPECT_EQ(xy(dataset_labelled(charts.at("memory"), "fit trials")), fitted);
  EXPECT_EQ(xy(dataset_labelled(charts.at("memory"), "out of memory")).at(0).first, 256);
  EXPECT_DOUBLE_EQ(xy(dataset_labelled(charts.at("memory"), "budget")).at(0).second, 64.0);
  EXPECT_DOUBLE_EQ(xy(dataset_labelled(charts.at("memory"), "target")).at(0).second, 57.6);
  // On a log scale that reaches past the budget and below the smallest peak (20 MiB).
  const auto& memory_y = charts.at("memory").at("options").at("scales").at("y");
  EXPECT_EQ(memory_y.at("type"), "logarithmic");
  EXPECT_GT(memory_y.at("max").get<double>(), 64.0);
  EXPECT_LT(memory_y.at("min").get<double>(), 20.0);
  // Goodput: one point per goodput point; the noise scale: one per step with a smoothed estimate.
  std::vector<std::pair<int64_t, double>> good;
  for (const auto& p : j.at("goodput").at("points")) good.emplace_back(p.at("batch"), p.at("goodput"));
  EXPECT_EQ(xy(dataset_labelled(charts.at("goodput"), "goodput")), good);
  EXPECT_EQ(xy(dataset_labelled(charts.at("noise"), "B_simple")).size(), 3u);
  // Validation: one line per candidate, one point per evaluation.
  for (const auto& run : j.at("validation").at("runs"))
    EXPECT_EQ(dataset_labelled(charts.at("validation"), "batch " + std::to_string(run.at("batch").get<int>()) + " ")
                  .at("data")
                  .size(),
              run.at("curve").size());
  // The recommendation opens the page, with its reason.
  EXPECT_LT(html.find("id=\"recommendation\""), html.find("id=\"throughput\""));
  EXPECT_NE(html.find("<b id=\"recommended-batch\">128</b>"), std::string::npos);
  // Three bullets, each linking to its evidence; the whole reason folded away below them.
  for (const char* bullet :
       {"<li>Reached test accuracy &gt;= 0.85 in the least training time of 2 candidates. <a href=\"#validation\">",
        "<li>7,877 samples/s, the fastest batch measured; its steps spread 4 %. <a href=\"#throughput\">",
        "<li>Peak memory 40.0 MiB, 62.5 % of the 64.0 MiB budget; the largest batch that fits is 192. <a "
        "href=\"#memory\">"})
    EXPECT_NE(html.find(bullet), std::string::npos) << bullet;
  EXPECT_NE(html.find("<details><summary>The whole reasoning</summary><p class=\"reason\">"), std::string::npos);
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

// Where tune's time went: each phase's time beside what tune stated at its start, and the whole run
// beside what tune expected, stated again before the race, and gave as the most.
// Peaks of a few bytes are drawn where they are (they had been rounded to 0 MiB, on a log axis whose minimum that
// then was); a fit in which nothing fit draws its out-of-memory trials (it had drawn no chart); a validation stopped
// before any run was evaluated draws no empty chart
TEST(Html, SmallPeaksFailedFitsAndStoppedValidationsAreDrawnAsTheyAre) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  Report r = fixed_report();
  r.budget_bytes = 64 << 20;
  r.fit->trials = {trial(1, Outcome::Ok, 60, {0.01}), trial(2, Outcome::Ok, 96, {0.01}),
                   trial(4, Outcome::Ok, 168, {0.01})};
  for (Trial& t : r.fit->trials) t.within_target = true;
  r.fit->memory_model.reset();
  r.sweep.reset();
  auto charts = chart_configs(to_html(to_json(r)));
  const auto peaks = xy(dataset_labelled(charts.at("memory"), "fit trials"));
  ASSERT_EQ(peaks.size(), 3u);
  EXPECT_NEAR(peaks[0].second * (1 << 20), 60, 0.01);
  EXPECT_NEAR(peaks[2].second * (1 << 20), 168, 0.1);
  const double min = charts.at("memory").at("options").at("scales").at("y").at("min").get<double>();
  EXPECT_GT(min, 0);
  EXPECT_LT(min, peaks[0].second);

  r.fit->trials = {trial(1, Outcome::Oom, 576 << 10, {}), trial(2, Outcome::Oom, 429 << 10, {})};
  r.fit->outcome = FitOutcome::DoesNotFit;
  r.fit->batch.reset();
  r.validation->runs.clear();
  r.validation->interrupted = true;
  r.validation->not_trained = {32, 64};
  const std::string html = to_html(to_json(r));
  charts = chart_configs(html);
  EXPECT_EQ(xy(dataset_labelled(charts.at("memory"), "out of memory")).size(), 2u);
  EXPECT_EQ(charts.count("validation"), 0u);
  EXPECT_NE(html.find("id=\"validation\""), std::string::npos);  // its table says what the stop left
}

TEST(Html, TheTimingSectionPutsWhatTuneTookBesideWhatItStated) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  Report r = fixed_report();
  EXPECT_EQ(to_html(to_json(r)).find("id=\"timing\""), std::string::npos);  // a fit or a sweep: none
  TuneTiming t;
  t.phases = {{"fit", 1.2, 0}, {"sweep", 37, 7}, {"race", 20, 19}};
  t.total_s = 60;
  t.expected_s = 28;
  t.at_most_s = 90;
  t.restated_s = 45;
  r.timing = t;
  const std::string html = to_html(to_json(r));
  EXPECT_NE(
      html.find("<section id=\"timing\">\n<h2>Where the time went</h2>\n<p>60 s in all; 28 s (2.14x) expected once "
                "the fit had timed the steps; 45 s (1.33x) as stated again before the race; at most 90 s "
                "(0.67x).</p>"),
      std::string::npos)
      << html.substr(std::min(html.find("id=\"timing\""), html.size()), 400);
  EXPECT_NE(html.find("<tr><td>sweep</td><td class=\"n\">37.0 s</td><td class=\"n\">7.0 s</td></tr>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr><td>fit</td><td class=\"n\">1.2 s</td><td class=\"n\">-</td></tr>"), std::string::npos);
  r.timing->total_s = 120;  // past the most stated: said, as in the text
  EXPECT_NE(to_html(to_json(r))
                .find("at most 90 s (1.33x); past the most stated, which holds while the machine trains "
                      "as fast as the fit's steps measured.</p>"),
            std::string::npos);
}

// A GPU trial's utilisation caption gives the trial's own SM figure, or, when it has none, the note
// saying why (through the JSON, so the note's field is read back).
TEST(Html, UtilisationCaptionGivesTheGpuFigureOrWhyThereIsNone) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  Report r = fixed_report();
  UtilisationSummary& u = *r.sweep->points[1].utilisation;
  u.gpu_sm_percent = UtilisationStat{62, 40, 90};
  EXPECT_NE(to_html(to_json(r)).find("GPU SM busy 62 % over the trial (min 40, max 90)."), std::string::npos);
  u.gpu_sm_percent.reset();
  u.gpu_percent_note = "no NVML SM and memory utilisation sample inside the trial";
  const std::string html = to_html(to_json(r));
  EXPECT_NE(html.find("GPU: no NVML SM and memory utilisation sample inside the trial."), std::string::npos);
  EXPECT_EQ(html.find("GPU SM busy"), std::string::npos);
  // A trial with no sample (shorter than a clock tick) has no CPU figure, not 0 %; another's are drawn.
  r.sweep->points[0].utilisation = u;
  u.timeline.clear();
  u.samples = 0;
  u.cpu_percent = UtilisationStat{0, 0, 0};
  const std::string empty = to_html(to_json(r));
  EXPECT_NE(empty.find("At batch 128: no CPU sample (the trial was shorter than the monitor could resolve)."),
            std::string::npos);
  EXPECT_EQ(empty.find("CPU busy 0 %"), std::string::npos);
}

// Utilisation is drawn over every monitored sweep trial, each sample at its batch and each trial's mean
// as a line; with fewer than 5 samples in all, a sentence says why there is no chart.
TEST(Html, UtilisationIsChartedOverTheSweepOrLeftOutSayingWhy) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  Report r = fixed_report();
  UtilisationSummary u = *r.sweep->points[1].utilisation;
  u.timeline.resize(2);
  u.cpu_percent = UtilisationStat{40, 30, 50};
  r.sweep->points[0].utilisation = u;  // batch 64: 2 samples, batch 128: 3
  auto charts = chart_configs(to_html(to_json(r)));
  ASSERT_EQ(charts.count("utilisation"), 1u);
  const auto& config = charts.at("utilisation");
  const auto samples = xy(dataset_labelled(config, "CPU busy % (each sample)"));
  ASSERT_EQ(samples.size(), 5u);
  EXPECT_EQ(samples[0].first, 64);
  EXPECT_EQ(samples[4], (std::pair<int64_t, double>{128, 88.0}));
  EXPECT_EQ(xy(dataset_labelled(config, "CPU busy % (trial mean)")),
            (std::vector<std::pair<int64_t, double>>{{64, 40.0}, {128, 87.0}}));
  EXPECT_EQ(config.at("options").at("scales").at("x").at("batchTicks"), nlohmann::json::array({64, 128}));
  // One sample fewer: no chart, and the section says why.
  r.sweep->points[0].utilisation->timeline.resize(1);
  const std::string html = to_html(to_json(r));
  EXPECT_EQ(chart_configs(html).count("utilisation"), 0u);
  EXPECT_NE(html.find("Only 4 sample(s) were taken during the first repetition of each sweep batch, too few to "
                      "chart: the monitor samples every 0.1 s and these trials were shorter."),
            std::string::npos);
  // Without a sweep, the fit's trials are drawn.
  r.sweep.reset();
  r.fit->trials[0].utilisation = u;
  r.fit->trials[2].utilisation = u;
  r.fit->trials[2].utilisation->timeline.push_back(u.timeline[0]);
  EXPECT_EQ(xy(dataset_labelled(chart_configs(to_html(to_json(r))).at("utilisation"), "CPU busy % (each")).size(), 5u);
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
  r.fit->trials[0].peak_bytes = 1;  // "< 0.1 %" of the budget: our own text is escaped too
  const std::string html = to_html(to_json(r));
  EXPECT_NE(html.find("<td class=\"n\">&lt; 0.1 %</td>"), std::string::npos);
  EXPECT_EQ(html.find("< 0.1"), std::string::npos);
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

// noise, loader and plan recommend no batch: their pages lead with what they answer (before, "No batch
// was recommended: no batch trained" over a loader search that trained nine settings), and a loader
// page shows its settings, a failed one's message with it.
TEST(Html, ANoiseLoaderOrPlanPageLeadsWithItsOwnAnswer) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  Report base = fixed_report();
  base.fit.reset();
  base.sweep.reset();
  base.noise.reset();
  base.goodput.reset();
  base.validation.reset();
  base.race.reset();
  base.run_plan.reset();
  base.recommendation.reset();
  base.lr.reset();
  Report loader = base;
  loader.loader = LoaderSearch{};
  loader.loader->batch = 64;
  loader.loader->before = {0, 2, Outcome::Ok, 51000, 0.02, false, ""};
  loader.loader->trials = {{2, 2, Outcome::Timeout, 0, 0, false, "stopped after 1 of 7 steps"}};
  loader.loader->advice = "the given setting keeps the step fed";
  const std::string l = to_html(to_json(loader));
  EXPECT_EQ(l.find("No batch was recommended"), std::string::npos);
  EXPECT_NE(l.find("<p class=\"big\">Input pipeline at batch 64</p>"), std::string::npos);
  EXPECT_NE(l.find("id=\"loader\""), std::string::npos);
  // its advice once, in the top box (the section had said it again, heading and all)
  const auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = l.find(what); at != std::string::npos; at = l.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("the given setting keeps the step fed"), 1u);
  EXPECT_EQ(count("Input pipeline at batch 64"), 1u);
  EXPECT_NE(l.find("<h2>The settings tried at batch 64</h2>"), std::string::npos);
  EXPECT_NE(l.find("<td>stopped after 1 of 7 steps</td>"), std::string::npos);
  EXPECT_NE(l.find("<td class=\"n\">51,000</td><td class=\"n\">2.0 %</td><td>given</td>"), std::string::npos);
  const std::string table = to_table(loader);  // the console's rows say why too, and no wait for one that failed
  EXPECT_NE(table.find("timeout          -  stopped after 1 of 7 steps"), std::string::npos) << table;
  Report noise = base;
  noise.noise = fixed_noise();
  const std::string n = to_html(to_json(noise));
  EXPECT_EQ(n.find("No batch was recommended"), std::string::npos);
  EXPECT_NE(n.find("Critical batch (gradient noise scale B_simple): <b>"), std::string::npos);
  Report plan = base;
  plan.accumulation = AccumulationPlan{};
  plan.accumulation->global_batch = 512;
  plan.accumulation->micro_batch = 64;
  plan.accumulation->accumulation_steps = 8;
  plan.fit = fixed_report().fit;  // plan's fit, capped at a device's share: the plan leads, not the fit
  plan.fit->limited_by_max = true;
  const std::string p = to_html(to_json(plan));
  EXPECT_NE(p.find("Global batch 512: micro-batch 64 x 8 accumulation steps</p>"), std::string::npos);
  EXPECT_EQ(p.find("x 1 devices"), std::string::npos);
  EXPECT_EQ(p.find("No batch was recommended"), std::string::npos);
  EXPECT_EQ(p.find("Largest batch that fits"), std::string::npos);
  plan.accumulation.reset();  // a fit alone at the --max searched
  EXPECT_NE(to_html(to_json(plan)).find("Fits up to the --max searched: <b id=\"fit-batch\">192</b>"),
            std::string::npos);
}

// A fit that stopped at the --max it searched is not "the largest batch that fits".
TEST(Html, AFitAtTheMaxSearchedIsNotCalledTheLargestThatFits) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  Report r = fixed_report();
  r.fit->limited_by_max = true;
  r.recommendation = recommend(r.fit, r.sweep);
  EXPECT_NE(r.recommendation->reason.find("batches up to 192 fit (the --max searched)"), std::string::npos)
      << r.recommendation->reason;
  const std::string html = to_html(to_json(r));
  EXPECT_EQ(html.find("largest batch that fits"), std::string::npos);
  EXPECT_NE(html.find("batches up to 192 fit (the --max searched)"), std::string::npos);
}

// A fit reused from the history (tune --reuse) ran no trials: the page says where it came from, as the console
// does, and draws no empty table (it had shown "0 trials, in the order they ran" above one, and never "reused").
TEST(Html, AReusedFitSaysSoAndDrawsNoEmptyTable) {
  if (chartjs_version().empty()) GTEST_SKIP() << "built without Chart.js (apt-get install libjs-chart.js)";
  Report r = fixed_report();
  r.fit->trials.clear();
  r.fit->message = "reused from run 1 of 2026-12-07T13:00:00Z in /h/history.sqlite (--reuse): no fit trials ran";
  const std::string html = to_html(to_json(r));
  const size_t at = html.find("<section id=\"fit-trials\">");
  ASSERT_NE(at, std::string::npos);
  const std::string section = html.substr(at, html.find("</section>", at) - at);
  EXPECT_NE(section.find(std::string("batch 192 fits (") + to_string(r.fit->mode) +
                         " mode, 0 trials): reused from run 1 of 2026-12-07T13:00:00Z in /h/history.sqlite (--reuse): "
                         "no fit trials ran.</p>"),
            std::string::npos)
      << section;
  EXPECT_EQ(section.find("<table>"), std::string::npos) << section;
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

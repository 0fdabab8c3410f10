// The fixed Report the reporters' golden files pin, and the golden files themselves: shared by the
// tests of report.cpp (the writers), schema.cpp (the reader) and html.cpp.
#pragma once

#include "batchwise/report.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace batchwise {

inline Trial trial(int64_t batch, Outcome outcome, int64_t peak, std::vector<double> steps, std::string message = "") {
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

// The parts of fixed_report, each as it would have measured it.
inline FitResult fixed_fit(int64_t budget_bytes) {
  FitResult fit;
  fit.mode = FitMode::Binsearch;
  fit.outcome = FitOutcome::Fits;
  fit.batch = 192;
  fit.budget_bytes = budget_bytes;
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

  return fit;
}

inline SweepResult fixed_sweep(int64_t budget_bytes) {
  SweepResult sweep;
  sweep.repetitions = 2;
  sweep.budget_bytes = budget_bytes;
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

  return sweep;
}

inline NoiseResult fixed_noise() {
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
  return noise;
}

inline ValidationResult fixed_validation() {
  ValidationResult v;
  v.target = "test accuracy >= 0.85";
  v.held_out = "fashion-mnist test split, 10000 samples";
  for (int64_t batch : {64, 128}) {
    ValidationRun run;
    run.batch = batch;
    run.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, batch);
    run.warmup_epochs = 0.75;
    for (int i = 1; i <= 3; ++i) {
      run.curve.push_back(
          {3000 * i, 3000 * i / batch, (batch == 64 ? 1.5 : 1.0) * i, 0.6 - 0.05 * i, 0.75 + 0.035 * i});
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
  return v;
}

inline std::vector<StepProfile> fixed_step_profile() {
  std::vector<StepProfile> profile;
  for (int64_t batch : {64, 128}) {
    StepProfile p;
    p.batch = batch;
    p.steps = 3;
    const double k = batch / 64.0;
    p.mean = StepPhases{0.0005 * k, 0.0003 * k, 0.004 * k, 0.005 * k, 0.0007, 0.0106 * k};
    p.coverage =
        (p.mean.data_s + p.mean.h2d_s + p.mean.forward_s + p.mean.backward_s + p.mean.optimizer_s) / p.mean.total_s;
    profile.push_back(p);
  }
  return profile;
}

inline BatchRace fixed_race() {
  // A race of two candidates: 128 wins the second rung; 64 is dropped after the first.
  BatchRace race;
  race.loss_before = 2.3;
  race.accuracy_before = 0.1;
  race.horizons_s = {2.0, 6.0};
  race.planned_horizons_s = {2.0, 6.0};
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
  race.rung_leads = {{1, 2.0, 2.0 * 7877 / 60000, 128, 0.9, 0.65}, {2, 6.0, 6.0 * 7877 / 60000, 128, 0.6, 0.7}};
  race.left_out = {256};
  race.notes = {"batch 256 left out: 6 steps fit the first rung's 1.00 s, below the 8 a comparison needs"};
  race.best_batch = 128;
  race.lead_batch = 128;
  race.within_5_percent = {128};
  race.wall_s = 9.5;
  return race;
}

inline Report fixed_report() {
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
  r.workload.trainable_parameter_count = 61706;
  r.workload.parameter_bytes = 246824;
  r.budget_bytes = 64ll << 20;
  r.target = 0.9;

  r.fit = fixed_fit(r.budget_bytes);
  r.sweep = fixed_sweep(r.budget_bytes);
  r.noise = fixed_noise();
  r.goodput = goodput(r.sweep->points, *r.noise->b_simple);
  r.recommendation = recommend(r.fit, r.sweep, r.noise, r.goodput);
  r.validation = fixed_validation();
  r.recommendation = confirm(*r.recommendation, *r.validation);
  r.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, r.recommendation->batch);
  r.precisions = {
      PrecisionPoint{Precision::Fp32, 192, false, 128, 7877, 40ll << 20, 1.0, 1.0, "the run's own precision"},
      PrecisionPoint{Precision::Bf16, 320, false, 128, 6500, 26ll << 20, 6500.0 / 7877, 0.65,
                     "slower (0.83x) but fits batch 320 against 192: pays only where memory is the limit"}};
  r.step_profile = fixed_step_profile();
  r.race = fixed_race();
  r.run_plan =
      plan_run(optimizer_settings(Optimizer::Sgd), 60000,
               {{"base", unmeasured_lr(Optimizer::Sgd, 32, 0.01, 32)}, {"recommended", r.race->entries[1].lr}});
  return r;
}

inline std::string golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(BATCHWISE_TEST_GOLDEN_DIR) + "/" + name;
  if (std::getenv("BATCHWISE_UPDATE_GOLDEN")) std::ofstream(path, std::ios::binary) << actual;
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace batchwise

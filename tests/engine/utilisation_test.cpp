// The utilisation monitor: every in-process trial is sampled, and on the CPU the samples are taken
// between steps.
#include <gtest/gtest.h>

#include <sched.h>

#include <chrono>
#include <thread>

#include "batchwise/trial.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"
#include "support/workloads.h"

namespace batchwise {
namespace {

using namespace test;

// The utilisation monitor samples during every in-process trial: CPU per core, resident memory,
// its own cost.
TEST(Utilisation, EveryTrialIsMonitored) {
  auto w = tiny("lenet");
  const Trial t = run_trial(*w, TrialOptions(512).warmup(1).steps(6));
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  ASSERT_TRUE(t.utilisation.has_value());
  const UtilisationSummary& u = *t.utilisation;
  EXPECT_GE(u.samples, 1);
  EXPECT_EQ(static_cast<size_t>(u.samples), u.timeline.size());
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  EXPECT_EQ(u.core_percent_mean.size(), static_cast<size_t>(CPU_COUNT(&mask)));
  EXPECT_GT(u.cpu_percent.max, 0);  // training kept a CPU busy
  EXPECT_LE(u.cpu_percent.max, 100);
  EXPECT_LE(u.cpu_percent.min, u.cpu_percent.mean);
  EXPECT_GT(u.rss_bytes_max, 0);
  EXPECT_GE(u.overhead_percent, 0);
  // Timestamped, in order, and covering the trial: the last sample comes after every measured step.
  for (size_t i = 1; i < u.timeline.size(); ++i) EXPECT_GT(u.timeline[i].t_s, u.timeline[i - 1].t_s);
  double steps_s = 0;
  for (double s : t.step_times_s) steps_s += s;
  EXPECT_GE(u.timeline.back().t_s, steps_s);
  EXPECT_FALSE(u.gpu_sm_percent.has_value());  // a CPU trial has no GPU fields
  EXPECT_FALSE(run_trial(*w, TrialOptions(64).warmup(0).steps(1).monitor(false)).utilisation.has_value());
}

TEST(Utilisation, OnCpuTheSamplesAreTakenBetweenSteps) {
  // Step boundaries every 5 ms for 1.2 s: the due samples (about 12) are taken there, by the
  // caller, not by a background thread waking inside a step. On a loaded machine a sleep can
  // overshoot past 1.5 intervals, and the background thread then takes that one: at least two
  // thirds must still be taken between steps (the last sample, taken by finish(), is the
  // background thread's and not counted).
  UtilisationMonitor between(0.1, -1);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1200)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    between.step_boundary();
  }
  const UtilisationSummary a = between.finish();
  EXPECT_GE(a.samples_between_steps, 4);
  EXPECT_GE(a.samples_between_steps, 2 * (a.samples - 1 - a.samples_between_steps));
  EXPECT_GT(a.overhead_percent, 0);
  // A step longer than 1.5 intervals: the background thread samples during it.
  UtilisationMonitor long_step(0.05, -1);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const UtilisationSummary b = long_step.finish();
  EXPECT_EQ(b.samples_between_steps, 0);
  EXPECT_GE(b.samples, 4);
  for (size_t i = 1; i < b.timeline.size(); ++i) EXPECT_GT(b.timeline[i].t_s, b.timeline[i - 1].t_s);
}

}  // namespace
}  // namespace batchwise

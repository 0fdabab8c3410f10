// The utilisation monitor: every in-process trial is sampled, and on the CPU the samples are taken
// between steps.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <system_error>
#include <thread>
#include <vector>

#include "batchwise/trial.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"
#include "engine/utilisation_detail.h"
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
  EXPECT_TRUE(u.gpu_percent_note.empty());
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

// A process that cannot start a thread (a limit on its address space, ulimit -v, that leaves no room for the thread's
// stack; ulimit -u): the monitor samples between the steps alone, and the trial goes on, where std::thread's
// "Resource temporarily unavailable" had ended the run. In a child process, whose limit ends with it.
TEST(Utilisation, WithoutAThreadToBeHadTheStepsAreSampledAlone) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    long pages = 0;
    if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
      std::fclose(statm);
    }
    const rlim_t size = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE));
    const rlimit limit{size + (2 << 20), size + (2 << 20)};  // 2 MiB more: no room for a thread's 8 MiB stack
    if (pages == 0 || setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
    // glibc keeps the stacks of threads that ended for the next ones: threads that never end take them first, until
    // none is left to be had
    std::vector<std::thread> holding;
    try {
      while (holding.size() < 64) holding.emplace_back([] { pause(); });
      _exit(4);  // the limit left room for every thread: nothing tested
    } catch (const std::system_error&) {}
    try {
      UtilisationMonitor alone(0.05, -1);
      const auto start = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(400)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        alone.step_boundary();
      }
      const UtilisationSummary u = alone.finish();
      // finish()'s last sample may come within a clock tick of the one before, and is then no reading
      _exit(u.samples_between_steps >= 2 && u.samples >= u.samples_between_steps ? 0 : 5);
    } catch (...) {
      _exit(6);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: no limit set, 4: a thread started under it, 5: too few samples, 6: threw";
}

// /proc/stat counts in clock ticks (10 ms), each CPU's on its own tick: a sample taken less than a
// tick after the last one can find a busy CPU's counters unchanged. That is no reading (not 0 %
// busy), and its time counts in the next sample's share instead.
TEST(Utilisation, AnIntervalTooShortForTheTickCountersIsMergedIntoTheNextNotReadAsIdle) {
  using detail::CpuTimes;
  detail::CpuShare share({CpuTimes{0, 1000, 2000}, CpuTimes{1, 500, 3000}});
  // 5 ms on: CPU 1 ticked (busy), CPU 0 has not yet.
  EXPECT_FALSE(share.since_last({CpuTimes{0, 1000, 2000}, CpuTimes{1, 501, 3001}}).has_value());
  // 20 ticks on from the first reading, 10 of them busy on each CPU: 50 % each. Measured from the
  // skipped reading instead, CPU 1 would read 9 of 19 (47.4 %).
  const std::optional<std::vector<double>> merged = share.since_last({CpuTimes{0, 1010, 2020}, CpuTimes{1, 510, 3020}});
  ASSERT_TRUE(merged.has_value());
  EXPECT_EQ(*merged, (std::vector<double>{50, 50}));
  // Nothing moved at all (a sample right after another, as the last one at finish() can be).
  EXPECT_FALSE(share.since_last({CpuTimes{0, 1010, 2020}, CpuTimes{1, 510, 3020}}).has_value());
  // One tick on each CPU is a reading, if a coarse one: all or nothing.
  const std::optional<std::vector<double>> tick = share.since_last({CpuTimes{0, 1011, 2021}, CpuTimes{1, 510, 3021}});
  ASSERT_TRUE(tick.has_value());
  EXPECT_EQ(*tick, (std::vector<double>{100, 0}));
}

// A timeline of NVML readings every 0.25 s over `wall_s`: SM `before` % in the first 2 s (periods
// that may reach back before the trial), `during` % after.
UtilisationSummary gpu_timeline(double wall_s, double before, double during) {
  UtilisationSummary u;
  for (double t = 0.25; t <= wall_s + 1e-9; t += 0.25) {
    UtilisationSample s;
    s.t_s = t;
    s.gpu_sm_percent = t < 2 ? before : during;
    s.gpu_memory_percent = s.gpu_sm_percent;
    u.timeline.push_back(s);
  }
  return u;
}

// The summary's GPU utilisation is the driver's samples over the trial; a trial too short to hold
// one has no figure and a note saying why, not a reading of the time before it.
TEST(Utilisation, GpuFiguresComeFromSamplesInsideTheTrialOrAreLeftOutWithANote) {
  detail::UtilisationWindow::Result window;
  window.sm_supported = window.memory_supported = true;
  window.sm_percent = UtilisationStat{75, 70, 80};
  window.memory_percent = UtilisationStat{40, 30, 50};
  UtilisationSummary sampled = gpu_timeline(1.0, 3, 3);  // the readings saw the idle time before
  detail::summarise_gpu_percent(sampled, window, 1.0);
  ASSERT_TRUE(sampled.gpu_sm_percent.has_value());
  EXPECT_EQ(sampled.gpu_sm_percent->mean, 75);
  EXPECT_EQ(sampled.gpu_memory_percent->max, 50);
  EXPECT_TRUE(sampled.gpu_percent_note.empty()) << sampled.gpu_percent_note;

  // 40 ms: the one reading, 7 %, describes the driver's last period before the trial.
  window.sm_percent = window.memory_percent = std::nullopt;
  UtilisationSummary short_trial;
  short_trial.timeline.push_back(UtilisationSample{});
  short_trial.timeline.back().t_s = 0.04;
  short_trial.timeline.back().gpu_sm_percent = 7;
  detail::summarise_gpu_percent(short_trial, window, 0.04);
  EXPECT_FALSE(short_trial.gpu_sm_percent.has_value());
  EXPECT_FALSE(short_trial.gpu_memory_percent.has_value());
  EXPECT_NE(short_trial.gpu_percent_note.find("the trial's 0.04 s held no NVML SM and memory utilisation sample"),
            std::string::npos)
      << short_trial.gpu_percent_note;

  // No samples from this driver: the readings taken 2 s or more in (90 %), whose periods lie inside
  // the trial, and a note that says so; a trial shorter than that has none.
  window.sm_supported = window.memory_supported = false;
  UtilisationSummary readings = gpu_timeline(3.0, 10, 90);
  detail::summarise_gpu_percent(readings, window, 3.0);
  ASSERT_TRUE(readings.gpu_sm_percent.has_value());
  EXPECT_EQ(readings.gpu_sm_percent->mean, 90);
  EXPECT_EQ(readings.gpu_sm_percent->min, 90);
  EXPECT_NE(readings.gpu_percent_note.find("the mean of the readings taken 2 s or more into the trial"),
            std::string::npos)
      << readings.gpu_percent_note;
  UtilisationSummary brief = gpu_timeline(1.5, 10, 90);
  detail::summarise_gpu_percent(brief, window, 1.5);
  EXPECT_FALSE(brief.gpu_sm_percent.has_value());
  EXPECT_NE(brief.gpu_percent_note.find("1.50 s are too short"), std::string::npos) << brief.gpu_percent_note;

  // Samples of SM utilisation but not of memory: each figure says its own.
  window.sm_supported = true;
  window.sm_percent = UtilisationStat{75, 70, 80};
  UtilisationSummary mixed = gpu_timeline(1.0, 10, 90);
  detail::summarise_gpu_percent(mixed, window, 1.0);
  EXPECT_TRUE(mixed.gpu_sm_percent.has_value());
  EXPECT_FALSE(mixed.gpu_memory_percent.has_value());
  EXPECT_EQ(mixed.gpu_percent_note.find("SM"), std::string::npos) << mixed.gpu_percent_note;
  EXPECT_NE(mixed.gpu_percent_note.find("no memory utilisation samples"), std::string::npos) << mixed.gpu_percent_note;
}

}  // namespace
}  // namespace batchwise

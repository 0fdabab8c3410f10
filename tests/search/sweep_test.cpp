// sweep on a real (small) workload and on a search-logic double: repetitions interleaved with their
// raw samples kept, out-of-memory points listed and not retried, and the throughput knee.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "batchwise/memory.h"
#include "batchwise/race.h"
#include "batchwise/recommend.h"
#include "batchwise/sweep.h"
#include "batchwise/units.h"
#include "batchwise/workload.h"
#include "support/workloads.h"

namespace batchwise {
namespace {

using namespace test;

TEST(Sweep, InterleavesRepetitionsAndKeepsRawSamples) {
  auto w = small();
  std::vector<int64_t> order;
  const SweepResult r = sweep(*w, SweepOptions()
                                      .batch_sizes({8, 2, 4})
                                      .warmup(1)
                                      .steps(3)
                                      .repetitions(3)
                                      .min_time_s(0)
                                      .budget_bytes(256 << 20)
                                      .on_trial([&](const Trial& t, int, int planned) {
                                        EXPECT_GE(planned, 9);
                                        order.push_back(t.batch);
                                      }));
  // A busy machine may add a repetition at the end (SweepNoise.*): the planned nine come first.
  ASSERT_GE(order.size(), 9u);
  EXPECT_EQ(std::vector<int64_t>(order.begin(), order.begin() + 9), (std::vector<int64_t>{2, 4, 8, 8, 4, 2, 2, 4, 8}));
  ASSERT_EQ(r.points.size(), 3u);
  for (const auto& p : r.points) {
    EXPECT_EQ(p.outcome, Outcome::Ok);
    EXPECT_GE(p.repetitions, 3);
    EXPECT_EQ(p.step_times_s.size(), 3u * static_cast<size_t>(p.repetitions)) << "exactly --steps: --min-time 0";
    EXPECT_EQ(p.steps_run, 4 * p.repetitions);
  }
  ASSERT_TRUE(r.knee_batch.has_value());
}

TEST(Sweep, OutOfMemoryPointsAreListedAndNotRetried) {
  auto w = small();
  std::map<int64_t, int> runs;
  const SweepResult r = sweep(*w, SweepOptions()
                                      .batch_sizes({8, 16, 16384, 32768})
                                      .warmup(0)
                                      .steps(1)
                                      .repetitions(2)
                                      .budget_bytes(40 << 20)
                                      .on_trial([&](const Trial& t, int, int) { ++runs[t.batch]; }));
  ASSERT_EQ(r.points.size(), 4u);
  EXPECT_EQ(r.points[2].outcome, Outcome::Oom);
  EXPECT_EQ(r.points[3].outcome, Outcome::Oom);
  EXPECT_EQ(r.points[3].message, "not run: batch 16384 already ran out of memory");
  // 8, 16, 16384; then 16, 8 (nothing at or above 16384 again; 8 and 16 once more on a busy machine)
  EXPECT_EQ(runs[16384], 1);
  EXPECT_EQ(runs.count(32768), 0u);
  EXPECT_GE(runs[8], 2);
  EXPECT_LE(*r.knee_batch, 16);
}

TEST(Sweep, KneeIsTheSmallestBatchWithinTolerance) {
  auto point = [](int64_t batch, double sps, Outcome o = Outcome::Ok) {
    Trial t;
    t.batch = batch;
    t.samples_per_s = sps;
    t.outcome = o;
    return t;
  };
  EXPECT_EQ(knee_batch({point(16, 100), point(32, 180), point(64, 196), point(128, 200)}, 0.05), 64);
  EXPECT_EQ(knee_batch({point(16, 100), point(32, 96), point(64, 50)}, 0.05), 16);
  EXPECT_EQ(knee_batch({point(16, 100), point(32, 300, Outcome::Oom)}, 0.05), 16);
  EXPECT_FALSE(knee_batch({point(16, 0, Outcome::Oom)}, 0.05).has_value());
}

// Out of memory in one repetition only (the allocator's state differs between passes): batch 64
// runs out of memory in the second, reversed pass, after 128 ran in the first.
class FlakyMemory final : public TrialRunner {
 public:
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t;
    t.batch = o.batch();
    t.repetitions = 1;
    t.samples_per_s = 100.0 * static_cast<double>(o.batch());
    t.step_times_s = {static_cast<double>(o.batch()) / t.samples_per_s};
    t.peak_bytes = o.batch() << 10;
    const int pass = ++runs_[o.batch()];
    t.outcome = o.batch() == 64 && pass == 2 ? Outcome::Oom : Outcome::Ok;
    return t;
  }
  int64_t held_bytes() override { return 0; }
  int64_t default_budget_bytes() override { return 64 << 20; }
  int64_t device_total_bytes() override { return 64 << 20; }

 private:
  std::map<int64_t, int> runs_;
};

TEST(SweepEdges, NothingAboveABatchThatRanOutOfMemoryIsRecommended) {
  FlakyMemory runner;
  const SweepResult s =
      sweep(runner, SweepOptions().batch_sizes({16, 32, 64, 128}).repetitions(2).budget_bytes(64 << 20));
  ASSERT_EQ(s.points.size(), 4u);
  EXPECT_EQ(s.points[2].outcome, Outcome::Oom);
  EXPECT_EQ(s.points[3].outcome, Outcome::Oom) << "128 ran in the first pass, but 64 ran out of memory";
  EXPECT_NE(s.points[3].message.find("batch 64 (smaller) ran out of memory"), std::string::npos) << s.points[3].message;
  ASSERT_TRUE(s.knee_batch.has_value());
  EXPECT_LE(*s.knee_batch, 32);
  const auto rec = recommend(std::nullopt, s);
  ASSERT_TRUE(rec.has_value());
  EXPECT_LE(rec->batch, 32);
}

// Step times injected: samples/s rises with the batch up to a plateau from 128 on, and the trials
// `slowed` picks (by the order they run) take four times as long, as when another process shares
// the cores for a while.
class InjectedSteps final : public TrialRunner {
 public:
  explicit InjectedSteps(std::function<bool(int call, int64_t batch)> slowed, double rate_at_64 = 6400)
      : slowed_(std::move(slowed)), rate_at_64_(rate_at_64) {}
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t;
    t.batch = o.batch();
    t.outcome = Outcome::Ok;
    t.steps = o.steps();
    const double rate = o.batch() == 64 ? rate_at_64_ : 100.0 * static_cast<double>(std::min<int64_t>(o.batch(), 128));
    const double step = static_cast<double>(o.batch()) / rate;
    const double factor = slowed_(calls_++, o.batch()) ? 4.0 : 1.0;
    t.step_times_s.assign(static_cast<size_t>(o.steps()), step * factor);
    t.steps_run = o.steps();
    t.peak_bytes = o.batch() << 10;
    summarize_steps(t);
    return t;
  }
  int64_t held_bytes() override { return 0; }
  int64_t default_budget_bytes() override { return 1 << 30; }
  int64_t device_total_bytes() override { return 1 << 30; }
  int calls() const { return calls_; }

 private:
  std::function<bool(int, int64_t)> slowed_;
  double rate_at_64_;
  int calls_ = 0;
};

// InjectedSteps' quiet trials, each saying it waited for a CPU the share `share` gives it by the order
// they run (none: unread); a trial that waited over 10 % steps `slowdown` times as long, and every
// step `scale` times.
class WaitingSteps final : public TrialRunner {
 public:
  using Share = std::function<std::optional<double>(int call)>;
  explicit WaitingSteps(Share share, double slowdown = 1, double scale = 1)
      : share_(std::move(share)), slowdown_(slowdown), scale_(scale) {}
  explicit WaitingSteps(std::optional<double> share) : WaitingSteps([share](int) { return share; }) {}
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t = steps_.run(o);
    if (calls_ == fails_at_) {
      t.outcome = fails_with_;
      t.message = fails_with_ == Outcome::Oom ? "out of memory" : "stopped after 1 of 7 steps";
      t.step_times_s.clear();
    }
    t.cpu_wait_share = share_(calls_++);
    const bool waited = t.cpu_wait_share && *t.cpu_wait_share > 0.1;
    for (double& step : t.step_times_s) step *= scale_ * (waited ? slowdown_ : 1);
    summarize_steps(t);
    t.wall_s = 1;
    return t;
  }
  void fails_at(int call, Outcome how = Outcome::Oom) { fails_at_ = call, fails_with_ = how; }  // that trial fails
  int64_t held_bytes() override { return 0; }
  int64_t default_budget_bytes() override { return 1 << 30; }
  int64_t device_total_bytes() override { return 1 << 30; }
  int calls() const { return calls_; }

 private:
  InjectedSteps steps_{[](int, int64_t) { return false; }};
  Share share_;
  double slowdown_, scale_;
  int calls_ = 0, fails_at_ = -1;
  Outcome fails_with_ = Outcome::Oom;
};

SweepResult tune_like_sweep(TrialRunner& runner) {
  return sweep(runner, SweepOptions().batch_sizes(doublings(16, 2048)).stop_after_flat(3).budget_bytes(1 << 30));
}

// tune_like_sweep's time left after each trial, each expected to take a second.
std::vector<double> time_left_through(TrialRunner& runner) {
  std::vector<double> left;
  sweep(runner, SweepOptions()
                    .batch_sizes(doublings(16, 2048))
                    .stop_after_flat(3)
                    .budget_bytes(1 << 30)
                    .expected_trial_s([](int64_t) { return 1.0; })
                    .on_eta([&](double s) { left.push_back(s); }));
  return left;
}

TEST(SweepNoise, ABurstOfSlowTrialsNeitherCutsTheSweepNorMovesTheKneeOrTheRace) {
  InjectedSteps quiet_runner([](int, int64_t) { return false; });
  const SweepResult quiet = tune_like_sweep(quiet_runner);
  ASSERT_EQ(quiet.knee_batch, 128);
  EXPECT_EQ(quiet.not_run, (std::vector<int64_t>{2048}));
  EXPECT_TRUE(quiet.remeasured.empty());
  EXPECT_TRUE(quiet.noise_warning.empty()) << quiet.noise_warning;

  // The burst lands on the first repetition's 128, 256 and 512: flat, far below 64's figure, and
  // without a second look they would end the sweep there.
  InjectedSteps burst_runner([](int call, int64_t) { return call >= 3 && call <= 5; });
  const SweepResult noisy = tune_like_sweep(burst_runner);
  EXPECT_EQ(noisy.knee_batch, quiet.knee_batch);
  EXPECT_EQ(noisy.not_run, quiet.not_run) << "the sweep went as far as the quiet one";
  EXPECT_EQ(noisy.remeasured, (std::vector<int64_t>{128, 256, 512}));
  ASSERT_EQ(noisy.points.size(), quiet.points.size());
  for (size_t i = 0; i < noisy.points.size(); ++i)
    EXPECT_DOUBLE_EQ(noisy.points[i].samples_per_s, quiet.points[i].samples_per_s) << noisy.points[i].batch;
  EXPECT_EQ(race_candidates(noisy.points), race_candidates(quiet.points));
  EXPECT_NE(noisy.noise_warning.find("at batches 128, 256, 512 a repetition ran up to 75 % slower"), std::string::npos)
      << noisy.noise_warning;
  EXPECT_NE(noisy.noise_warning.find("most repetitions agree"), std::string::npos) << noisy.noise_warning;
}

// A sweep whose trials waited for a CPU is warned of, with what that does to
// its figures; one whose trials hardly waited, or could not say, is not. The figures are the same.
TEST(SweepNoise, ASweepThatSharedTheCpuSaysSo) {
  WaitingSteps shared(0.4), quiet(0.004), unread(std::nullopt);
  const SweepResult s = tune_like_sweep(shared), q = tune_like_sweep(quiet), u = tune_like_sweep(unread);
  EXPECT_NE(s.shared_cpu_warning.find("the sweep shared the CPU: its threads waited for a core 40 % of the time they "
                                      "were ready to run"),
            std::string::npos)
      << s.shared_cpu_warning;
  EXPECT_NE(s.shared_cpu_warning.find("the larger read slower than they are"), std::string::npos);
  EXPECT_EQ(s.warnings(), std::vector<std::string>{s.shared_cpu_warning}) << "what tune puts in the report's warnings";
  ASSERT_TRUE(s.points.front().cpu_wait_share.has_value());
  EXPECT_DOUBLE_EQ(*s.points.front().cpu_wait_share, 0.4) << "the mean over its repetitions";
  EXPECT_TRUE(q.shared_cpu_warning.empty()) << q.shared_cpu_warning;
  EXPECT_TRUE(u.shared_cpu_warning.empty()) << u.shared_cpu_warning;
  EXPECT_FALSE(u.points.front().cpu_wait_share.has_value());
  ASSERT_EQ(s.points.size(), q.points.size());
  for (size_t i = 0; i < s.points.size(); ++i) EXPECT_DOUBLE_EQ(s.points[i].samples_per_s, q.points[i].samples_per_s);
  EXPECT_EQ(s.knee_batch, q.knee_batch);

  // Shared throughout, the first trial that waited ran again at the end, waited as much, and the
  // retries stopped there: one trial more. Quiet or unread, none ran again.
  EXPECT_EQ(s.cpu_retried, (std::vector<int64_t>{16}));
  EXPECT_EQ(s.cpu_retries_kept, 0);
  EXPECT_EQ(s.points.front().repetitions, 3) << "a retry that waited as much is set aside";
  EXPECT_NE(
      s.shared_cpu_warning.find("A trial that waited ran again at the sweep's end (batch 16), and it does not count "
                                "in its place; the retries stopped at one that waited 40 %: the machine was still "
                                "shared"),
      std::string::npos)
      << s.shared_cpu_warning;
  EXPECT_TRUE(q.cpu_retried.empty());
  EXPECT_TRUE(u.cpu_retried.empty());
}

// A burst of other work over the sweep's first two repetitions (its trials waited 50 % and stepped
// 1.3x slower): one repetition's worth of trials that waited ran again at the sweep's end, when the
// burst was over, and counted in their place, so the figures are the quiet sweep's. Over the first
// repetition alone, the retries leave nothing to warn of. Steps too short for a wait to interrupt
// them (kInterruptibleStepS) are not run again.
TEST(SweepNoise, TrialsThatSharedTheCpuRunAgainAtTheEndAndTheQuieterCount) {
  WaitingSteps quiet_runner(std::optional<double>(0.01));
  const SweepResult quiet = tune_like_sweep(quiet_runner);
  ASSERT_EQ(quiet.not_run, (std::vector<int64_t>{2048}));  // 7 batches: a repetition is 7 trials
  const std::vector<int64_t> swept{16, 32, 64, 128, 256, 512, 1024};
  const auto burst = [](int until) {
    return [until](int call) { return std::optional<double>(call < until ? 0.5 : 0.01); };
  };

  WaitingSteps two_runner(burst(14), 1.3);
  const SweepResult two = tune_like_sweep(two_runner);
  EXPECT_EQ(two_runner.calls(), 3 * 7 + 7);
  EXPECT_EQ(two.cpu_retried, swept) << "the first repetition's, in the order they ran";
  EXPECT_EQ(two.cpu_retries_kept, 7);
  ASSERT_EQ(two.points.size(), quiet.points.size());
  for (size_t i = 0; i < two.points.size(); ++i) {
    EXPECT_DOUBLE_EQ(two.points[i].samples_per_s, quiet.points[i].samples_per_s) << two.points[i].batch;
    EXPECT_EQ(two.points[i].repetitions, 3);
  }
  EXPECT_EQ(two.knee_batch, quiet.knee_batch);
  // One repetition in three still waited: the median share is (0.01 + 0.5 + 0.01) / 3.
  EXPECT_NE(two.shared_cpu_warning.find("waited for a core 17 %"), std::string::npos) << two.shared_cpu_warning;
  EXPECT_NE(
      two.shared_cpu_warning.find("7 trials that waited ran again at the sweep's end (batches 16, 32, 64, 128, 256, "
                                  "512, 1024), and all 7 waited less and count in their place; the trials not "
                                  "run again still carry the wait. Run it"),
      std::string::npos)
      << two.shared_cpu_warning;

  // The time left counts the retries: each trial expected to take the second it takes.
  WaitingSteps eta_runner(burst(14), 1.3);
  std::vector<double> left = time_left_through(eta_runner);
  ASSERT_EQ(left.size(), 3u * 7 + 7);
  EXPECT_EQ(std::vector<double>(left.end() - 8, left.end()), (std::vector<double>{7, 6, 5, 4, 3, 2, 1, 0}))
      << "the last planned trial, then the retries: counted since the trials that need them ran";
  EXPECT_EQ(left.front(), 3 * 8 - 1 + 1) << "the plan's 3 x 8 trials, one done, and its retry";
  // Shared throughout: the retries counted and not run leave the time left when the first ends them.
  WaitingSteps shared_runner(std::optional<double>(0.4));
  left = time_left_through(shared_runner);
  ASSERT_EQ(left.size(), 3u * 7 + 1 + 1);
  EXPECT_EQ(std::vector<double>(left.end() - 2, left.end()), (std::vector<double>{6, 0}))
      << "one retry run of the 7 counted, then none left";

  WaitingSteps one_runner(burst(7), 1.3);
  const SweepResult one = tune_like_sweep(one_runner);
  EXPECT_EQ(one.cpu_retried, swept);
  EXPECT_EQ(one.cpu_retries_kept, 7);
  EXPECT_TRUE(one.shared_cpu_warning.empty()) << one.shared_cpu_warning;
  EXPECT_TRUE(one.warnings().empty());
  ASSERT_TRUE(one.points.front().cpu_wait_share.has_value());
  EXPECT_DOUBLE_EQ(*one.points.front().cpu_wait_share, 0.01) << "the retry's share in place of the burst's";

  WaitingSteps short_runner(burst(7), 1.3, 0.01);  // steps of 0.1 to 0.8 ms
  const SweepResult short_steps = tune_like_sweep(short_runner);
  EXPECT_TRUE(short_steps.cpu_retried.empty());
  EXPECT_EQ(short_runner.calls(), 3 * 7);
}

// The retries end at the first that still waits over 10 % (kept where it waited less), that reads no
// share, or that fails; a failure joins its batch's pool, as any failure does.
TEST(SweepNoise, TheRetriesEndAtOneThatStillWaitsReadsNothingOrFails) {
  // The first repetition (7 trials) waited 50 %, the other two 1 %; the retries wait `retry`.
  const auto first_repetition_waits = [](std::optional<double> retry) -> WaitingSteps::Share {
    return [retry](int call) { return call < 7 ? std::optional<double>(0.5) : call < 21 ? 0.01 : retry; };
  };
  WaitingSteps less_runner(first_repetition_waits(0.3));
  const SweepResult less = tune_like_sweep(less_runner);
  EXPECT_EQ(less.cpu_retried, (std::vector<int64_t>{16}));
  EXPECT_EQ(less.cpu_retries_kept, 1);
  ASSERT_TRUE(less.points.front().cpu_wait_share.has_value());
  EXPECT_NEAR(*less.points.front().cpu_wait_share, (0.3 + 0.01 + 0.01) / 3, 1e-12);
  EXPECT_NE(less.shared_cpu_warning.find("A trial that waited ran again at the sweep's end (batch 16), and it waited "
                                         "less and counts in its place; the retries stopped at one that waited 30 %"),
            std::string::npos)
      << less.shared_cpu_warning;

  WaitingSteps unread_runner(first_repetition_waits(std::nullopt));
  const SweepResult unread = tune_like_sweep(unread_runner);
  EXPECT_EQ(unread_runner.calls(), 3 * 7 + 1);
  EXPECT_EQ(unread.cpu_retries_kept, 0);
  EXPECT_NE(unread.shared_cpu_warning.find("(batch 16), and it does not count in its place; the retries stopped at one "
                                           "that read no wait share"),
            std::string::npos)
      << unread.shared_cpu_warning;

  // Only the first repetition's 1,024 waited, and its retry runs out of memory.
  WaitingSteps oom_runner([](int call) { return std::optional<double>(call == 6 ? 0.5 : 0.01); });
  oom_runner.fails_at(3 * 7);
  const SweepResult oom = tune_like_sweep(oom_runner);
  EXPECT_EQ(oom.cpu_retried, (std::vector<int64_t>{1024}));
  EXPECT_EQ(oom.cpu_retries_kept, 0);
  const Trial& largest = oom.points.back();
  EXPECT_EQ(largest.batch, 1024);
  EXPECT_EQ(largest.outcome, Outcome::Oom) << "a failure is never set aside";
  EXPECT_EQ(largest.repetitions, 4);
  EXPECT_EQ(oom.knee_batch, 128);

  // The first two repetitions waited, and the first retry (batch 16's) runs past the trial timeout on
  // the machine still shared: its batch keeps the three repetitions it measured, and the retries end
  WaitingSteps slow_runner([](int call) { return std::optional<double>(call < 14 ? 0.5 : 0.01); });
  slow_runner.fails_at(3 * 7, Outcome::Timeout);
  const SweepResult slow = tune_like_sweep(slow_runner);
  EXPECT_EQ(slow.cpu_retried, (std::vector<int64_t>{16}));
  EXPECT_EQ(slow.points.front().outcome, Outcome::Ok) << slow.points.front().message;
  EXPECT_EQ(slow.points.front().repetitions, 3);
  EXPECT_NE(slow.shared_cpu_warning.find(
                "the retries stopped at one that ran past the --trial-timeout (batch 16); its batch keeps "),
            std::string::npos)
      << slow.shared_cpu_warning;

  // The first two repetitions waited; the last retry, the first repetition's 1,024, runs out of memory.
  WaitingSteps failing_runner([](int call) { return std::optional<double>(call < 14 ? 0.5 : 0.01); });
  failing_runner.fails_at(3 * 7 + 6);
  const SweepResult failing = tune_like_sweep(failing_runner);
  EXPECT_EQ(failing.cpu_retries_kept, 6);
  EXPECT_NE(failing.shared_cpu_warning.find(
                "and 6 of 7 waited less and count in their place; the retries stopped at one that failed (oom)"),
            std::string::npos)
      << failing.shared_cpu_warning;
}

// Progress keeps one total from the first trial to the last: the trials the stop leaves out count as
// done (the index jumps over them), and a re-measure outside the plan comes with index -1.
TEST(SweepNoise, ProgressKeepsItsPlannedTotalThroughReMeasuresAndTheStop) {
  InjectedSteps runner([](int call, int64_t) { return call >= 3 && call <= 5; });
  std::vector<int> indices, totals;
  const SweepResult s = sweep(runner, SweepOptions()
                                          .batch_sizes(doublings(16, 2048))
                                          .stop_after_flat(3)
                                          .budget_bytes(1 << 30)
                                          .on_trial([&](const Trial& t, int index, int planned) {
                                            indices.push_back(index);
                                            totals.push_back(planned);
                                          }));
  ASSERT_EQ(s.remeasured.size(), 3u);
  ASSERT_EQ(s.not_run, (std::vector<int64_t>{2048}));
  EXPECT_EQ(std::set<int>(totals.begin(), totals.end()), (std::set<int>{8 * 3}));  // 8 batches x 3 repetitions
  EXPECT_EQ(std::count(indices.begin(), indices.end(), -1), 3);
  std::vector<int> planned_indices;
  for (int i : indices)
    if (i >= 0) planned_indices.push_back(i);
  EXPECT_TRUE(std::is_sorted(planned_indices.begin(), planned_indices.end()));
  EXPECT_EQ(planned_indices.back(), 8 * 3 - 1) << "the last trial ends the plan: " << ::testing::PrintToString(indices);
}

TEST(SweepNoise, RepetitionsThatStillDisagreeWhereItMovesTheKneeAreWarnedOf) {
  // Batch 64 trains at 12,500 samples/s, within 5 % of the plateau's 12,800: quietly, the knee.
  const std::vector<int64_t> batches{16, 32, 64, 128, 256};
  InjectedSteps quiet([](int, int64_t) { return false; }, 12500);
  EXPECT_EQ(sweep(quiet, SweepOptions().batch_sizes(batches).budget_bytes(1 << 30)).knee_batch, 64);
  // It runs slow in every repetition but the first: its median says 128 is the knee, its fastest 64.
  int seen = 0;
  InjectedSteps runner([&](int, int64_t batch) { return batch == 64 && seen++ > 0; }, 12500);
  const SweepResult s = sweep(runner, SweepOptions().batch_sizes(batches).budget_bytes(1 << 30));
  EXPECT_EQ(s.remeasured, (std::vector<int64_t>{64}));
  EXPECT_EQ(s.unsettled, (std::vector<int64_t>{64}));
  EXPECT_EQ(s.points[2].repetitions, 4);
  EXPECT_NE(s.noise_warning.find("at 64 they still disagree, so the knee (128) and the batches swept rest on noisy "
                                 "figures"),
            std::string::npos)
      << s.noise_warning;
  // One slow repetition of three is outvoted: no second look, no warning, the quiet knee.
  int once = 0;
  InjectedSteps outvoted([&](int, int64_t batch) { return batch == 64 && once++ == 1; }, 12500);
  const SweepResult t = sweep(outvoted, SweepOptions().batch_sizes(batches).budget_bytes(1 << 30));
  EXPECT_TRUE(t.remeasured.empty());
  EXPECT_TRUE(t.noise_warning.empty()) << t.noise_warning;
  EXPECT_EQ(t.knee_batch, 64);
  // Noise far from the knee (16 slow twice, a third of 32's speed either way) decides nothing: no
  // second look, no warning, as on a quiet machine whose small batches jitter.
  int far = 0;
  InjectedSteps distant([&](int, int64_t batch) { return batch == 16 && far++ > 0; }, 12500);
  const SweepResult u = sweep(distant, SweepOptions().batch_sizes(batches).budget_bytes(1 << 30));
  EXPECT_TRUE(u.remeasured.empty());
  EXPECT_TRUE(u.noise_warning.empty()) << u.noise_warning;
  EXPECT_EQ(u.knee_batch, 64);
}

// Two batches 4 % apart, and a burst of other work during the sweep that slows two of the larger
// batch's three trials by a fifth: one sweep reads the pair the wrong way round (as one of three
// repetitions did on mlp: docs/benchmarks.md, "The pair each mlp verdict turns on"). Timed again
// in alternated trials after the burst, the pooled figures order them, and the rounds stop once
// each round's ratio agrees: the least rounds asked.
class DriftingPair final : public TrialRunner {
 public:
  // `slowed(call)`: the trial slowed by a fifth; `noise(call)`: a factor on every step of it.
  DriftingPair(
      std::function<bool(int)> slowed, std::function<double(int)> noise = [](int) { return 1.0; }, double wall_s = 0.1)
      : slowed_(std::move(slowed)), noise_(std::move(noise)), wall_s_(wall_s) {}
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    Trial t;
    t.batch = o.batch();
    t.outcome = o.batch() >= fails_from_ ? Outcome::Oom : Outcome::Ok;
    t.steps = o.steps();
    const double rate = o.batch() >= 512 ? 10400 : 10000;  // 512 is 4 % faster per sample than 256
    const double step = static_cast<double>(o.batch()) / rate * (slowed_(calls_) ? 1.2 : 1.0) * noise_(calls_);
    ++calls_;
    if (t.outcome == Outcome::Ok) t.step_times_s.assign(static_cast<size_t>(o.steps()), step);
    t.steps_run = t.outcome == Outcome::Ok ? o.steps() : 0;
    t.wall_s = wall_s_;
    summarize_steps(t);
    if (waited_ && waited_(calls_ - 1)) t.cpu_wait_share = 0.5;  // another process held its core half the time
    return t;
  }
  int64_t held_bytes() override { return 0; }
  int64_t default_budget_bytes() override { return 1 << 30; }
  int64_t device_total_bytes() override { return 1 << 30; }
  int calls() const { return calls_; }
  int64_t fails_from_ = std::numeric_limits<int64_t>::max();
  std::function<bool(int)> waited_;  // the calls whose trial waited for a core

 private:
  std::function<bool(int)> slowed_;
  std::function<double(int)> noise_;
  double wall_s_;
  int calls_ = 0;
};

SweepOptions pair_sweep() { return SweepOptions().batch_sizes({256, 512}).warmup(0).steps(3).min_time_s(0); }

double rate_at(const SweepResult& s, int64_t batch) {
  for (const Trial& p : s.points)
    if (p.batch == batch) return p.samples_per_s;
  return 0;
}

TEST(Retime, AlternatedTrialsOrderAPairThatOneSweepReadTheWrongWayRound) {
  // The sweep runs 256 512, 512 256, 256 512: calls 1 and 2 are 512's first two.
  DriftingPair runner([](int call) { return call == 1 || call == 2; });
  SweepResult s = sweep(runner, pair_sweep());
  ASSERT_LT(rate_at(s, 512), rate_at(s, 256)) << "the burst reads 512 slower";
  std::vector<int64_t> order;
  retime(runner, pair_sweep(), s,
         RetimeOptions().batches({256, 512, 1024}).on_trial([&](const Trial& t, int index, int) {
           EXPECT_EQ(index, -1);
           order.push_back(t.batch);
         }));
  EXPECT_GT(rate_at(s, 512) / rate_at(s, 256), 1.03);
  EXPECT_EQ(order, (std::vector<int64_t>{256, 512, 512, 256, 256, 512}));  // alternated, 1024 not swept
  EXPECT_EQ(s.retimed, (std::vector<int64_t>{256, 512}));
  EXPECT_EQ(s.retime_rounds, 3);
  EXPECT_NEAR(s.retime_error, 0, 1e-12);
  EXPECT_EQ(s.retime_note, "each batch's samples/s against the fastest's known to 1.5 %");
  for (const Trial& p : s.points) EXPECT_EQ(p.repetitions, 6);
}

// The sweep's noise warning names the knee it found. Where the rounds move the knee, the warning says
// so; where they do not, it stays as the sweep wrote it.
TEST(Retime, TheSweepsNoiseWarningSaysWhereTheRoundsMovedTheKnee) {
  const std::string warning = "the sweep met noise: ...; at 512 they still disagree, so the knee (256) and ...";
  for (const double tolerance : {0.01, 0.05}) {  // 512 is 4 % faster: the knee within 1 %, not within 5 %
    DriftingPair runner([](int call) { return call == 1 || call == 2; });
    const SweepOptions so = pair_sweep().knee_tolerance(tolerance);
    SweepResult s = sweep(runner, so);
    ASSERT_EQ(s.knee_batch, 256) << "the burst reads 512 slower";
    s.noise_warning = warning;
    retime(runner, so, s, RetimeOptions().batches({256, 512}));
    if (tolerance < 0.04) {
      EXPECT_EQ(s.knee_batch, 512);
      EXPECT_EQ(s.noise_warning, warning + "; timed again before the race, the knee is now 512");
    } else {
      EXPECT_EQ(s.knee_batch, 256);
      EXPECT_EQ(s.noise_warning, warning);
    }
  }
}

// A trial that waited for a core carries another process's work as its batch's own slowness: its
// round counts for nothing, and the next one is run in its place.
TEST(Retime, ARoundWithATrialThatWaitedForACoreIsLeftOut) {
  // The sweep's six calls are clean; the retiming's second round (calls 8 and 9) has 512 first, slowed
  // by a fifth while another process held its core.
  DriftingPair runner([](int call) { return call == 8; });
  runner.waited_ = [](int call) { return call == 8; };
  SweepResult s = sweep(runner, pair_sweep());
  retime(runner, pair_sweep(), s, RetimeOptions().batches({256, 512}));
  EXPECT_EQ(s.retime_rounds, 4);
  EXPECT_EQ(s.retime_note,
            "each batch's samples/s against the fastest's known to 1.5 %; 1 of its 4 rounds left out, a trial in it "
            "having waited for a core over 10 % of its time (another process on the cores?)");
  EXPECT_NEAR(s.retime_error, 0, 1e-12);
  EXPECT_NEAR(rate_at(s, 512) / rate_at(s, 256), 1.04, 1e-9);
  for (const Trial& p : s.points)  // the slowed trial's steps, a fifth slower, are not pooled
    EXPECT_NEAR(p.samples_per_s_min, p.batch >= 512 ? 10400 : 10000, 1e-6) << p.batch;
  for (const Trial& p : s.points) EXPECT_EQ(p.repetitions, 6);  // the sweep's 3 and 3 rounds'

  // Every round waited: nothing is pooled, and nothing counts as timed again.
  DriftingPair shared([](int) { return false; });
  SweepResult t = sweep(shared, pair_sweep());
  shared.waited_ = [](int) { return true; };
  retime(shared, pair_sweep(), t, RetimeOptions().batches({256, 512}));
  EXPECT_TRUE(t.retimed.empty());
  EXPECT_EQ(t.retime_rounds, 2) << "the machine still shared after two rounds: no third";
  EXPECT_EQ(t.retime_note,
            "two rounds in a row had a trial that waited for a core: the machine is still shared; 2 of its 2 rounds "
            "left out, a trial in each having waited for a core over 10 % of its time (another process on the "
            "cores?)");
  for (const Trial& p : t.points) EXPECT_EQ(p.repetitions, 3);
}

TEST(Retime, RoundsEndAtTheBudgetOrTheMostRoundsAndNothingRunsForOneBatch) {
  // Each round's ratio moves by 10 % either way: the precision is never reached.
  const auto noisy = [](int call) { return call % 4 == 1 ? 1.1 : 1.0; };
  DriftingPair runner([](int) { return false; }, noisy, /*wall_s=*/1.0);
  SweepResult s = sweep(runner, pair_sweep());
  retime(runner, pair_sweep(), s, RetimeOptions().batches({256, 512}).budget_s(5.5));
  EXPECT_EQ(s.retime_rounds, 2) << "a third round would take 6 s of trials";
  EXPECT_EQ(s.retime_note, "its budget (5.5 s) reached");
  EXPECT_GT(s.retime_error, 0.015);

  SweepResult t = sweep(runner, pair_sweep());
  retime(runner, pair_sweep(), t, RetimeOptions().batches({256, 512}).max_rounds(5));
  EXPECT_EQ(t.retime_rounds, 5);
  EXPECT_EQ(t.retime_note, "the most rounds (5) reached");

  SweepResult u = sweep(runner, pair_sweep());
  const int before = runner.calls();
  retime(runner, pair_sweep(), u, RetimeOptions().batches({512}));
  EXPECT_EQ(runner.calls(), before);
  EXPECT_TRUE(u.retimed.empty());
  EXPECT_EQ(u.retime_rounds, 0);
  EXPECT_EQ(u.retime_note, "fewer than two of the batches asked ran ok in the sweep");

  retime(runner, pair_sweep(), u, RetimeOptions().batches({256, 512}).budget_s(1.5));  // one round: 2 s
  EXPECT_EQ(runner.calls(), before);
  EXPECT_TRUE(u.retimed.empty());
  EXPECT_EQ(u.retime_note, "its budget (1.5 s) reached");
}

TEST(Retime, ATrialThatFailsJoinsItsPointAndEndsTheTiming) {
  DriftingPair runner([](int) { return false; });
  SweepResult s = sweep(runner, pair_sweep());
  runner.fails_from_ = 512;  // the memory moved since the sweep
  retime(runner, pair_sweep(), s, RetimeOptions().batches({256, 512}));
  EXPECT_EQ(s.retime_rounds, 1);
  EXPECT_EQ(s.retime_note, "a trial at batch 512 failed (oom), and the timing stopped there");
  EXPECT_EQ(s.points[1].outcome, Outcome::Oom);
  EXPECT_EQ(s.points[0].outcome, Outcome::Ok);
  EXPECT_EQ(s.knee_batch, 256);
}

// Two ranks whose step, peak and outcome change with each trial: the third times out.
class TwoRanks final : public TrialRunner {
 public:
  WorkloadInfo info() const override { return {}; }
  Trial run(const TrialOptions& o) override {
    const int call = calls_++;
    Trial t;
    t.batch = o.batch();
    t.outcome = call == 2 ? Outcome::Timeout : Outcome::Ok;
    t.steps = o.steps();
    const double step = 0.01 * (call + 1);
    t.step_times_s.assign(static_cast<size_t>(o.steps()), step);
    t.steps_run = o.steps();
    t.peak_bytes = int64_t{3} << 20;
    summarize_steps(t);
    DistributedTrial d;
    d.world_size = 2;
    d.global_batch = 2 * o.batch();
    d.rank_step_time_s = {step, 0.5 * step};
    d.rank_peak_bytes = {int64_t{call + 1} << 20, int64_t{3 - call} << 20};
    d.rank_outcomes = {t.outcome, t.outcome};
    t.distributed = d;
    return t;
  }
  int64_t held_bytes() override { return 0; }
  int64_t default_budget_bytes() override { return 1 << 30; }
  int64_t device_total_bytes() override { return 1 << 30; }

 private:
  int calls_ = 0;
};

// A data-parallel point's rank figures are its repetitions', as its own figures are: they had been the first
// repetition's (a timeout read "ok" on every rank, a rank's peak below the point's).
TEST(Sweep, ADataParallelPointsRankFiguresAreEveryRepetitions) {
  TwoRanks runner;
  const SweepResult s = sweep(runner, SweepOptions().batch_sizes({32}).repetitions(3).steps(2).warmup(0));
  ASSERT_EQ(s.points.size(), 1u);
  const Trial& p = s.points[0];
  EXPECT_EQ(p.repetitions, 3);
  EXPECT_EQ(p.outcome, Outcome::Timeout);
  ASSERT_TRUE(p.distributed.has_value());
  EXPECT_EQ(p.distributed->rank_outcomes, (std::vector<Outcome>{Outcome::Timeout, Outcome::Timeout}));
  EXPECT_EQ(p.distributed->rank_peak_bytes, (std::vector<int64_t>{int64_t{3} << 20, int64_t{3} << 20}));
  ASSERT_EQ(p.distributed->rank_step_time_s.size(), 2u);
  EXPECT_NEAR(p.distributed->rank_step_time_s[0], 0.02, 1e-12);  // the mean of 0.01, 0.02 and 0.03
  EXPECT_NEAR(p.distributed->rank_step_time_s[1], 0.01, 1e-12);
}

}  // namespace
}  // namespace batchwise

// sweep on a real (small) workload and on a search-logic double: repetitions interleaved with their
// raw samples kept, out-of-memory points listed and not retried, and the throughput knee.
#include <gtest/gtest.h>

#include <map>

#include "batchwise/memory.h"
#include "batchwise/recommend.h"
#include "batchwise/sweep.h"
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
                                      .budget_bytes(256 << 20)
                                      .on_trial([&](const Trial& t, int, int planned) {
                                        EXPECT_EQ(planned, 9);
                                        order.push_back(t.batch);
                                      }));
  EXPECT_EQ(order, (std::vector<int64_t>{2, 4, 8, 8, 4, 2, 2, 4, 8}));
  ASSERT_EQ(r.points.size(), 3u);
  for (const auto& p : r.points) {
    EXPECT_EQ(p.outcome, Outcome::Ok);
    EXPECT_EQ(p.repetitions, 3);
    EXPECT_EQ(p.step_times_s.size(), 9u);
    EXPECT_EQ(p.steps_run, 12);
  }
  ASSERT_TRUE(r.knee_batch.has_value());
}

TEST(Sweep, OutOfMemoryPointsAreListedAndNotRetried) {
  auto w = small();
  int runs = 0;
  const SweepResult r = sweep(*w, SweepOptions()
                                      .batch_sizes({8, 16, 16384, 32768})
                                      .warmup(0)
                                      .steps(1)
                                      .repetitions(2)
                                      .budget_bytes(40 << 20)
                                      .on_trial([&](const Trial&, int, int) { ++runs; }));
  ASSERT_EQ(r.points.size(), 4u);
  EXPECT_EQ(r.points[2].outcome, Outcome::Oom);
  EXPECT_EQ(r.points[3].outcome, Outcome::Oom);
  EXPECT_EQ(r.points[3].message, "not run: batch 16384 already ran out of memory");
  EXPECT_EQ(runs, 5);  // 8, 16, 16384; then 16, 8 (nothing at or above 16384 again)
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
  const SweepResult s = sweep(runner, SweepOptions().batch_sizes({16, 32, 64, 128}).repetitions(2).budget_bytes(64 << 20));
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

}  // namespace
}  // namespace batchwise

// tune() in the library: a fit followed by a sweep and the recommendation.
#include <gtest/gtest.h>

#include <vector>

#include "batchwise/fit.h"
#include "batchwise/sweep.h"
#include "batchwise/tune.h"
#include "support/workloads.h"

namespace batchwise {
namespace {

using namespace test;

TEST(Tune, FitsSweepsAndRecommends) {
  auto w = small();
  // The fit and sweep alone (no doctor, noise scale or race: those have tests of their own).
  const Report r =
      tune(TuneSubject(*w), TuneOptions()
                                .fit(FitOptions().budget_bytes(64 << 20).max(64))
                                // every doubling: stopping where samples/s flattens is a
                                // decision on this machine's speed, not on the code
                                .sweep(SweepOptions().warmup(1).steps(2).repetitions(1).stop_after_flat(-1))
                                .doctor(false)
                                .noise(false)
                                .race(false));
  ASSERT_EQ(r.fit->outcome, FitOutcome::Fits);
  ASSERT_TRUE(r.sweep.has_value());
  EXPECT_EQ(r.sweep->points.size(), 7u);  // 1, 2, 4, ..., 64
  ASSERT_TRUE(r.recommendation.has_value());
  EXPECT_EQ(r.recommendation->batch, *r.sweep->knee_batch);
  EXPECT_NE(r.recommendation->reason.find("samples/s"), std::string::npos);
}

TEST(Tune, SweepsOnlyMultiplesOf) {
  auto w = small();
  const Report r = tune(TuneSubject(*w), TuneOptions()
                                             .fit(FitOptions().budget_bytes(64 << 20).max(100).multiple_of(12))
                                             .sweep(SweepOptions().warmup(0).steps(1).repetitions(1))
                                             .doctor(false)
                                             .noise(false)
                                             .race(false));
  ASSERT_EQ(r.fit->outcome, FitOutcome::Fits);
  EXPECT_EQ(*r.fit->batch, 96);
  std::vector<int64_t> swept;
  for (const auto& p : r.sweep->points) swept.push_back(p.batch);
  EXPECT_EQ(swept, (std::vector<int64_t>{12, 24, 48, 96}));
}

}  // namespace
}  // namespace batchwise

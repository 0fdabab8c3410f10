// The recommendation from a fit and a sweep, and its confirmation by a validation run.
#include <gtest/gtest.h>

#include "batchwise/advice.h"
#include "batchwise/fit.h"
#include "batchwise/recommend.h"
#include "batchwise/sweep.h"
#include "batchwise/validate.h"

namespace batchwise {
namespace {

// A fit reused from the history has its answer but no trials; with a sweep that has no ok point the
// recommendation is the fit's answer, said so, and no internal assertion.
TEST(Recommend, AReusedFitWithoutTrialsStillRecommends) {
  FitResult reused;
  reused.outcome = FitOutcome::Fits;
  reused.batch = 256;
  reused.budget_bytes = 1 << 30;
  SweepResult failed;
  Trial t;
  t.batch = 256;
  t.outcome = Outcome::Error;
  failed.points = {t};
  const auto rec = recommend(reused, failed);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->batch, 256);
  EXPECT_NE(rec->reason.find("the fit's answer alone"), std::string::npos) << rec->reason;
}

ValidationRun run_at(int64_t batch, bool reached, double seconds) {
  ValidationRun r;
  r.batch = batch;
  r.reached = reached;
  r.train_s = seconds;
  r.steps = 100;
  r.epochs = 0.5;
  r.lr = unmeasured_lr(Optimizer::Sgd, 32, 0.01, batch);
  r.message = reached ? "" : "not reached within --max-epochs 1";
  return r;
}

TEST(Validation, ConfirmsCorrectsOrSaysItCouldNot) {
  const Recommendation rec{128, "batch 128 makes the most training progress per second"};
  ValidationResult v;
  v.target = "test accuracy >= 0.85";
  v.runs = {run_at(64, true, 5.0), run_at(128, true, 4.0), run_at(256, false, 9.0)};
  v.fastest_batch = 128;
  Recommendation out = confirm(rec, v);
  EXPECT_EQ(out.batch, 128);
  EXPECT_NE(out.reason.find("validated: it reached test accuracy >= 0.85 soonest, in 4.0 s of training"),
            std::string::npos) << out.reason;
  v.runs[0].train_s = 3.0;
  v.fastest_batch = 64;
  out = confirm(rec, v);
  EXPECT_EQ(out.batch, 64);
  EXPECT_NE(out.reason.find("batch 64 reached test accuracy >= 0.85 soonest, in 3.0 s"), std::string::npos) << out.reason;
  EXPECT_NE(out.reason.find("the predicted batch 128 took 4.0 s"), std::string::npos) << out.reason;
  v.fastest_batch.reset();
  for (auto& r : v.runs) r.reached = false;
  out = confirm(rec, v);
  EXPECT_EQ(out.batch, 128);
  EXPECT_NE(out.reason.find("not validated: no candidate reached"), std::string::npos) << out.reason;
}

}  // namespace
}  // namespace batchwise

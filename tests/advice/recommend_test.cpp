// The recommendation and its confirmation by a validation run.
#include <gtest/gtest.h>

#include "batchwise/advice.h"
#include "batchwise/recommend.h"
#include "batchwise/validate.h"

namespace batchwise {
namespace {

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

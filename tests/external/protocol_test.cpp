// The `--cmd` step-line protocol (src/external/protocol.cpp), on text alone.
#include "external/protocol.h"

#include <gtest/gtest.h>

#include <chrono>

namespace {

using namespace batchwise;
using detail::ProtocolParser;

// Lines read one at a time, 100 ms apart.
CommandResult read(const std::vector<std::string>& lines, int warmup = 0) {
  CommandResult r;
  r.batch = 32;
  r.warmup = warmup;
  const ProtocolParser::Clock::time_point start{};
  ProtocolParser parser(r, start);
  for (size_t i = 0; i < lines.size(); ++i) parser.line(lines[i], start + std::chrono::milliseconds(100 * (i + 1)));
  return r;
}

TEST(Protocol, StepLinesAreTimedAndCountTheirSamples) {
  const CommandResult r =
      read({"epoch 1", "batchwise: step samples=64 loss=0.5", "batchwise: step", "batchwise: step"}, 1);
  EXPECT_EQ(r.protocol_lines, 3);
  EXPECT_EQ(r.steps_seen, 3);
  ASSERT_EQ(r.step_times_s.size(), 2u);  // the first step line is warm-up
  EXPECT_NEAR(r.step_times_s[0], 0.1, 1e-9);
  EXPECT_EQ(r.step_samples, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(r.loss, 0.5);
  EXPECT_EQ(r.first_loss, 0.5);
  // the first loss and the last (the last had been given as the trial's first too)
  const CommandResult two = read({"batchwise: step loss=2.5", "batchwise: step", "batchwise: step loss=1.25"});
  EXPECT_EQ(two.first_loss, 2.5);
  EXPECT_EQ(two.loss, 1.25);
}

// The callbacks' words: the batch their data loader gave each step (`batch=`, per measured step, 0 where a line has
// none or a malformed one), and the callback that reports (`reporter=`, said as it is made).
TEST(Protocol, TheLoaderBatchAndTheReporterAreRead) {
  const CommandResult r =
      read({"batchwise: reporter=lightning", "batchwise: step samples=64 batch=16", "batchwise: step batch=abc",
            "batchwise: step batch=0 uncounted=Batch", "batchwise: step uncounted=Other"});
  EXPECT_EQ(r.reporter, "lightning");
  EXPECT_EQ(r.step_batches, (std::vector<int64_t>{16, 0, 0, 0}));
  EXPECT_EQ(r.step_samples, (std::vector<int64_t>{64, 32, 32, 32}));
  EXPECT_EQ(r.uncounted_batch, "Batch");  // the first type a callback could not count
}

// A throughput or a step of no samples is no measurement: ignored like any malformed value (fuzzing
// found samples_per_s=-143e96 taken as the trial's figure; fuzz/regressions/protocol/).
TEST(Protocol, ValuesThatMeasureNothingAreIgnored) {
  const CommandResult r =
      read({"batchwise: step samples=0 samples_per_s=-143e96", "batchwise: step samples=-4 samples_per_s=0",
            "batchwise: step samples=abc loss=nan peak_bytes=-3", "batchwise: samples_per_s=250.5"});
  EXPECT_EQ(r.steps_seen, 3);
  EXPECT_EQ(r.step_samples, (std::vector<int64_t>{32, 32, 32}));  // the batch
  EXPECT_EQ(r.reported_samples_per_s, 250.5);
  EXPECT_FALSE(r.loss.has_value());
  EXPECT_FALSE(r.first_loss.has_value());
  EXPECT_FALSE(r.reported_peak_bytes.has_value());
  EXPECT_TRUE(r.non_finite_loss);  // loss=nan is no malformed value: the command says it diverged
  EXPECT_EQ(r.non_finite_loss_text, "nan");
  EXPECT_EQ(r.non_finite_loss_step, 3);
  const CommandResult none = read({"batchwise: step samples_per_s=-1"});
  EXPECT_FALSE(none.reported_samples_per_s.has_value());
}

// A command whose loss is NaN or infinite trained nothing, however well it exited: an error trial
// that says at which step, never a throughput.
TEST(Protocol, ALossThatIsNotANumberMakesTheTrialAnError) {
  CommandResult r = read({"batchwise: step loss=2.3", "batchwise: step loss=-Infinity", "batchwise: step loss=nan"});
  r.steps = 3;
  r.exit_status = 0;
  r.wall_s = 5;
  EXPECT_EQ(r.loss, 2.3);
  EXPECT_EQ(r.first_loss, 2.3);
  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Error);
  EXPECT_EQ(v.samples_per_s, 0);
  EXPECT_NE(v.message.find("exit status 0 after 3 of 3 steps, but it reported a training loss of -Infinity at step 2"),
            std::string::npos)
      << v.message;
  r.non_finite_loss = false;
  EXPECT_EQ(classify(r).outcome, Outcome::Ok);
}

TEST(Protocol, AnOutOfMemoryLineIsKeptAndAPrefixHidesAStepLine) {
  const CommandResult r =
      read({"INFO batchwise: step", "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB", "MemoryError"});
  EXPECT_EQ(r.protocol_lines, 0);
  EXPECT_EQ(r.oom_message, "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB");
}

// A traceback quotes the source line that caught or raised the error before the exception's own line:
// the note quotes the exception.
TEST(Protocol, TheExceptionsLineWinsOverATracebacksSourceLine) {
  const CommandResult r =
      read({"Traceback (most recent call last):", "  File \"train.py\", line 9, in <module>",
            "    raise torch.OutOfMemoryError(msg)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4 GiB", "MemoryError: later"});
  EXPECT_EQ(r.oom_message, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4 GiB");
}

}  // namespace

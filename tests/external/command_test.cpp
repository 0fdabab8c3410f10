// run_command against small Python (stdlib) scripts in tests/cmd/, each standing in for one way a
// user's training command can behave. Debian's /usr/bin/python3 runs them when present.
#include "batchwise/command.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "batchwise/command_runner.h"
#include "batchwise/error.h"

#ifndef BATCHWISE_TEST_CMD_DIR
#error "BATCHWISE_TEST_CMD_DIR must name tests/cmd"
#endif

namespace batchwise {
namespace {

namespace fs = std::filesystem;

std::string python() { return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

std::string script(const std::string& name) { return std::string(BATCHWISE_TEST_CMD_DIR) + "/" + name; }

CommandOptions options(const std::string& name, std::vector<std::string> args, int64_t batch = 16) {
  std::vector<std::string> argv = {python(), script(name)};
  argv.insert(argv.end(), args.begin(), args.end());
  return CommandOptions(std::move(argv), batch);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Substitute, ReplacesPlaceholdersInsideArguments) {
  EXPECT_EQ(substitute({"train", "--bs={batch}", "{steps}", "x{batch}y{batch}"}, 256, 7),
            (std::vector<std::string>{"train", "--bs=256", "7", "x256y256"}));
  EXPECT_EQ(
      substitute({"python3", "-c", "print({{'a': 1}}, {'b': 2}, '{{batch}}')", "{", "}", "{}", "{batch"}, 1, 1),
      (std::vector<std::string>{"python3", "-c", "print({'a': 1}, {'b': 2}, '{batch}')", "{", "}", "{}", "{batch"}));
}

TEST(Substitute, UnknownPlaceholderIsAConfigErrorNamingIt) {
  try {
    substitute({"train", "--bs={batch_size}"}, 8, 5);
    FAIL() << "{batch_size} was accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "'{batch_size}'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "{batch} or {steps}")) << e.what();
  }
  EXPECT_THROW(substitute({"train", "{Batch}"}, 8, 5), ConfigError);
  // {batch} written otherwise is refused, naming it: passed through, every trial had run at the script's default
  for (const std::string arg : {"--bs={batch:d}", "--bs={ batch }", "{Steps!r}"}) {
    try {
      substitute({"train", arg}, 8, 5);
      ADD_FAILURE() << arg << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), "is not a placeholder; write {")) << e.what();
    }
  }
  // a JSON, dict or YAML/Hydra mapping argument stays
  EXPECT_EQ(substitute({"train", "{\"batch\": 32}", "{'batch': {batch}}", "+cfg={batch: 32}"}, 8, 5),
            (std::vector<std::string>{"train", "{\"batch\": 32}", "{'batch': 8}", "+cfg={batch: 32}"}));
  EXPECT_THROW(substitute({}, 8, 5), ConfigError);
  EXPECT_THROW(substitute({""}, 8, 5), ConfigError);
}

TEST(RunCommand, NoShellSoSeparatorsStayOneLiteralArgument) {
  const std::string marker = "/tmp/batchwise-pwned-" + std::to_string(getpid());
  unlink(marker.c_str());
  const std::string evil = "; touch " + marker;
  CommandOptions o = options("echo_argv.py", {evil, "$(touch " + marker + ")", "--steps={steps}"}, 64);
  o.env({{"BATCHWISE_TEST_EXTRA", "a b;c"}});
  const CommandResult r = run_command(o);
  EXPECT_EQ(r.exit_status, 0) << r.output_tail;
  EXPECT_TRUE(contains(r.output_tail, "arg: " + evil + "\n")) << r.output_tail;
  EXPECT_TRUE(contains(r.output_tail, "arg: --steps=7\n")) << r.output_tail;  // warm-up 2 + steps 5
  EXPECT_TRUE(contains(r.output_tail, "env: BATCHWISE_BATCH=64\n")) << r.output_tail;
  EXPECT_TRUE(contains(r.output_tail, "env: BATCHWISE_STEPS=7\n")) << r.output_tail;
  EXPECT_TRUE(contains(r.output_tail, "env: PYTHONUNBUFFERED=1\n")) << r.output_tail;
  EXPECT_TRUE(contains(r.output_tail, "env: BATCHWISE_TEST_EXTRA=a b;c\n")) << r.output_tail;
  EXPECT_TRUE(contains(r.output_tail, "stdin: ''\n")) << r.output_tail;  // /dev/null, never our terminal
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << marker << " was created: a shell ran";
}

TEST(RunCommand, StepLinesAreTimedAfterWarmup) {
  const CommandResult r = run_command(
      options("fake_trainer.py", {"--batch-size={batch}", "--steps={steps}", "--step-s=0.05"}, 32).warmup(2).steps(3));
  EXPECT_EQ(r.exit_status, 0) << r.output_tail;
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.steps_seen, 5);
  EXPECT_EQ(r.protocol_lines, 5);
  // Timed between the step lines' arrival, after the 2 warm-up steps: 3 intervals, within the run's
  // wall time. Their lengths are not asserted: a loaded machine delivers lines in bursts.
  ASSERT_EQ(r.step_times_s.size(), 3u);
  for (double t : r.step_times_s) EXPECT_GE(t, 0);
  EXPECT_LE(std::accumulate(r.step_times_s.begin(), r.step_times_s.end(), 0.0), r.wall_s);
  EXPECT_EQ(r.step_samples, (std::vector<int64_t>{32, 32, 32}));
  ASSERT_TRUE(r.loss.has_value());
  EXPECT_DOUBLE_EQ(*r.loss, 0.2);  // 1 / 5, the last step's
  EXPECT_FALSE(r.reported_samples_per_s.has_value());
  EXPECT_FALSE(r.peak_device_bytes.has_value());
  EXPECT_GT(r.peak_rss_bytes, 1 << 20);  // a Python interpreter
  EXPECT_GE(r.wall_s, 0.25);

  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Ok) << v.message;
  EXPECT_FALSE(v.wall_timing);
  const double total_s = std::accumulate(r.step_times_s.begin(), r.step_times_s.end(), 0.0);
  EXPECT_NEAR(v.samples_per_s, 96 / total_s, 1e-9);
  EXPECT_TRUE(contains(v.message, "after 5 of 5 steps")) << v.message;
}

TEST(RunCommand, ReportedThroughputAndPeakAreUsedFromStderrToo) {
  const CommandResult r = run_command(options("fake_trainer.py", {"--batch-size={batch}", "--steps={steps}", "--stderr",
                                                                  "--samples-per-s=1234.5", "--peak-bytes=123456"}));
  ASSERT_TRUE(r.reported_samples_per_s.has_value()) << r.output_tail;
  EXPECT_DOUBLE_EQ(*r.reported_samples_per_s, 1234.5);
  EXPECT_EQ(r.reported_peak_bytes, 123456);
  EXPECT_EQ(r.peak_device_bytes, 123456);
  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Ok);
  EXPECT_DOUBLE_EQ(v.samples_per_s, 1234.5);
  EXPECT_TRUE(contains(v.message, "as the child reported")) << v.message;
}

// A command whose steps train another number of samples than its batch (it ignores {batch}, or its data hold
// fewer samples than it) did not train that batch: an error, not a throughput an answer could name it by (a
// sweep had recommended batch 32 from a script that trained 16 at every batch). A whole multiple is
// accumulation, and stands.
TEST(RunCommand, StepsOfAnotherBatchAreNoMeasureOfIt) {
  const CommandResult other =
      run_command(options("fake_trainer.py", {"--batch-size={batch}", "--steps={steps}", "--samples=40"}, 64));
  const CommandVerdict v = classify(other);
  EXPECT_EQ(v.outcome, Outcome::Error);
  EXPECT_TRUE(contains(v.message, "its step lines report 40 samples a step, not batch 64 nor a whole multiple of it"))
      << v.message;
  const CommandResult twice =
      run_command(options("fake_trainer.py", {"--batch-size={batch}", "--steps={steps}", "--accumulate=2"}, 64));
  EXPECT_EQ(classify(twice).outcome, Outcome::Ok) << classify(twice).message;
}

// The command as the report names it: an argument a shell would not read as itself (a space, a quote, `$`, `;`, `*`,
// `&`, braces with a comma) is quoted, and a ' inside the quotes is escaped (it ended them early, and the command shown
// was not the one that ran); plain words stay as they are (the history's workload key).
TEST(CommandLine, AQuoteInsideQuotesIsEscaped) {
  EXPECT_EQ(command_line({"python3", "train.py", "--batch-size", "{batch}"}), "python3 train.py --batch-size {batch}");
  EXPECT_EQ(command_line({"python3", "/tmp/we ird/tr'ain.py", ""}), "python3 '/tmp/we ird/tr'\\''ain.py' ''");
  EXPECT_EQ(command_line({"sh", "-c", "echo $HOME; ls *.py", "a&b", "{a,b}", "{1..3}", "--lr=1e-3,x"}),
            "sh -c 'echo $HOME; ls *.py' 'a&b' '{a,b}' '{1..3}' --lr=1e-3,x");
}

// Steps of several sizes (an epoch's ragged end) are timed over their span: the samples they trained over the time
// they took, not the median step's samples over the median step's time (32 a step, where steps of 32 and 16, each as
// long, train 24 on average: 1.33x); a command whose step lines name their loader's batch is not taken to have
// trained a batch it did not give; and a callback's run that trained nothing is no measure.
TEST(CommandRunner, StepsOfSeveralSizesAreTimedOverTheirSpan) {
  CommandRunner ragged(
      {python(), script("fake_trainer.py"), "--batch-size={batch}", "--steps={steps}", "--ragged=16", "--step-s=0.04"});
  const Trial t = ragged.run(TrialOptions(32).warmup(1).steps(6));
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  // the measured steps (after one warm-up): 16, 32, 16, 32, 16, 32 samples, over their time (a step past 3x the
  // median, a busy machine's, left out of both)
  ASSERT_EQ(t.step_times_s.size(), 6u);
  double span_s = 0, trained = 0;
  for (size_t i = 0; i < 6; ++i)
    if (t.step_times_s[i] <= 3 * t.step_time_s_median) span_s += t.step_times_s[i], trained += i % 2 == 0 ? 16 : 32;
  EXPECT_NEAR(t.samples_per_s, trained / span_s, 1e-9 * t.samples_per_s);
  EXPECT_LE(t.samples_per_s_min, t.samples_per_s);
  EXPECT_GE(t.samples_per_s_max, t.samples_per_s);
  CommandRunner own({python(), script("fake_trainer.py"), "--batch-size=64", "--loader-batch=64", "--steps={steps}"});
  const Trial other = own.run(TrialOptions(8).warmup(1).steps(2));
  EXPECT_EQ(other.outcome, Outcome::Error);
  EXPECT_TRUE(contains(other.message, "it did not train batch 8")) << other.message;
  CommandRunner evaluates(
      {python(), script("fake_trainer.py"), "--batch-size={batch}", "--steps=0", "--reporter=keras"});
  const Trial nothing = evaluates.run(TrialOptions(8).warmup(1).steps(2));
  EXPECT_EQ(nothing.outcome, Outcome::Error);
  EXPECT_TRUE(contains(nothing.message, "trained nothing")) << nothing.message;
}

// A command's own samples_per_s wins, its spread about it (a min and max of its step lines' 80 samples/s had stood
// beside its 12,345), and a figure far from its step lines' is said; a step line that names a batch the callback could
// not count is said too.
TEST(CommandRunner, ItsOwnFigureCarriesItsSpreadAndWhatItCouldNotCount) {
  const std::string own =
      "import os, time\nfor _ in range(int(os.environ['BATCHWISE_STEPS'])):\n"
      "    time.sleep(0.05); print('batchwise: step uncounted=Batch', flush=True)\n"
      "print('batchwise: samples_per_s=12345', flush=True)\n";
  CommandRunner runner({python(), "-c", own});
  const Trial t = runner.run(TrialOptions(8).warmup(1).steps(3));
  ASSERT_EQ(t.outcome, Outcome::Ok) << t.message;
  EXPECT_EQ(t.samples_per_s, 12345);
  EXPECT_LE(t.samples_per_s_min, 12345);
  EXPECT_GT(t.samples_per_s_min, 0);
  EXPECT_GE(t.samples_per_s_max, 12345);
  EXPECT_TRUE(contains(t.message, "its own samples_per_s (12345) is")) << t.message;
  EXPECT_TRUE(contains(t.message, "could not count the samples of a batch of type Batch")) << t.message;
}

TEST(RunCommand, MalformedProtocolLinesAreIgnored) {
  const CommandResult r =
      run_command(options("fake_trainer.py", {"--batch-size={batch}", "--steps={steps}", "--garbage"}, 8));
  EXPECT_EQ(r.exit_status, 0) << r.output_tail;
  EXPECT_EQ(r.steps_seen, 7);  // "step" is there; its bad samples= falls back to the batch
  EXPECT_EQ(r.protocol_lines, 21);
  EXPECT_EQ(r.step_samples, (std::vector<int64_t>(5, 8)));
  EXPECT_FALSE(r.loss.has_value());
  EXPECT_FALSE(r.reported_samples_per_s.has_value());
  EXPECT_FALSE(r.reported_peak_bytes.has_value());
}

// Without step lines the wall time stands in for the steps, but only for a run of a second or more:
// a shorter one is start-up and "ran no step" (`sh -c true` would otherwise be thousands of
// samples/s). The same run judged at two injected wall times, so the machine's speed decides nothing.
TEST(RunCommand, NoProtocolLinesFallsBackToWallTimeOnlyForARunThatLasted) {
  CommandResult r = run_command(options("fake_trainer.py", {"--batch-size={batch}", "--steps={steps}", "--quiet"}, 10));
  EXPECT_EQ(r.protocol_lines, 0);
  EXPECT_EQ(r.exit_status, 0) << r.output_tail;
  r.wall_s = 2.5;
  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Ok);
  EXPECT_TRUE(v.wall_timing);
  EXPECT_EQ(v.step_times_s.size(), 7u);
  EXPECT_NEAR(v.samples_per_s, 70 / 2.5, 1e-9);
  EXPECT_TRUE(contains(v.message, "fallback")) << v.message;
  r.wall_s = 0.05;
  const CommandVerdict quick = classify(r);
  EXPECT_EQ(quick.outcome, Outcome::Error);
  EXPECT_FALSE(quick.wall_timing);
  EXPECT_EQ(quick.samples_per_s, 0);
  EXPECT_TRUE(contains(quick.message,
                       "ran no step: exit status 0 after 0.05 s without a 'batchwise: step' line, too "
                       "soon for the wall-time fallback (at least 1 s)"))
      << quick.message;
}

TEST(RunCommand, MemoryLimitStopsTheGroupAndIsOutOfMemory) {
  const int64_t limit = 100LL << 20;
  const CommandResult big =
      run_command(options("alloc.py", {"--batch-size={batch}", "--steps={steps}"}, 200).memory_limit_bytes(limit));
  EXPECT_TRUE(big.killed_over_memory_limit) << big.output_tail;
  EXPECT_EQ(big.signal, SIGKILL);
  EXPECT_GT(big.peak_rss_bytes, limit);
  const CommandVerdict v = classify(big);
  EXPECT_EQ(v.outcome, Outcome::Oom);
  EXPECT_TRUE(contains(v.message, " over the 100 MiB budget: stopped by batchwise")) << v.message;
  // by how much: the two had read alike where they round alike ("reached 1.27 GiB, over the 1.27 GiB budget")
  CommandResult close;
  close.killed_over_memory_limit = true, close.memory_limit_bytes = 1300LL << 20;
  close.peak_rss_bytes = close.memory_limit_bytes + (512 << 10);
  EXPECT_TRUE(contains(classify(close).message, "resident memory reached 1.27 GiB, 512 KiB over the 1.27 GiB budget"))
      << classify(close).message;

  const CommandResult small =
      run_command(options("alloc.py", {"--batch-size={batch}", "--steps={steps}"}, 20).memory_limit_bytes(limit));
  EXPECT_FALSE(small.killed_over_memory_limit);
  EXPECT_EQ(small.exit_status, 0) << small.output_tail;
  EXPECT_GT(small.peak_rss_bytes, 20LL << 20);
  EXPECT_LT(small.peak_rss_bytes, limit);
  EXPECT_EQ(classify(small).outcome, Outcome::Ok);
}

TEST(RunCommand, MemoryOfTheWholeProcessGroupCounts) {
  // The parent stays small; a forked worker holds 150 MiB from before the first step, and for up to 10 s past the last
  // (the group killed over its limit ends it sooner): the parent's 7 steps of 50 ms had ended it before a sampler on
  // a machine with 12 busy processes saw it, 10 times in 15.
  const CommandResult r =
      run_command(options("alloc.py", {"--batch-size={batch}", "--steps={steps}", "--in-child", "--hold-s=10"}, 150)
                      .memory_limit_bytes(100LL << 20)
                      .timeout_s(60));  // a worker that failed to hold its memory ends the script; this, anything else
  EXPECT_TRUE(r.killed_over_memory_limit) << r.output_tail;
  EXPECT_EQ(classify(r).outcome, Outcome::Oom);
}

// Forked workers reading the parent's 120 MiB share its pages: the group holds about 120 MiB, not
// 4 x 120 (what summing RSS would say), so a 250 MiB limit is not crossed.
TEST(RunCommand, PagesSharedWithForkedWorkersCountOnce) {
  const CommandResult r = run_command(
      CommandOptions({python(), script("shared_workers.py"), "--mib=120", "--workers=3", "--steps={steps}"}, 1)
          .warmup(0)
          .steps(3)
          .memory_limit_bytes(250LL << 20)
          .timeout_s(20));
  EXPECT_FALSE(r.killed_over_memory_limit) << r.peak_rss_bytes;
  EXPECT_EQ(classify(r).outcome, Outcome::Ok) << r.output_tail;
  EXPECT_GT(r.peak_rss_bytes, 120LL << 20);
  EXPECT_LT(r.peak_rss_bytes, 250LL << 20);
}

TEST(RunCommand, FrameworkOutOfMemoryMessageIsOutOfMemory) {
  const CommandResult r = run_command(options("oom_message.py", {}));
  EXPECT_EQ(r.exit_status, 1);
  EXPECT_TRUE(contains(r.oom_message, "RuntimeError: DefaultCPUAllocator: can't allocate memory")) << r.oom_message;
  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Oom);
  EXPECT_TRUE(contains(v.message,
                       "exit status 1 after 2 of 7 steps, the child printed: RuntimeError: "
                       "DefaultCPUAllocator"))
      << v.message;
}

TEST(IsOomMessage, KnowsTheFrameworks) {
  for (const char* line :
       {"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes", "MemoryError",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when "
        "allocating tensor",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory",
        "terminate called after throwing an instance of 'std::bad_alloc'",
        "OSError: [Errno 12] Cannot allocate memory"})
    EXPECT_TRUE(is_oom_message(line)) << line;
  for (const char* line : {"batchwise: step samples=8", "RuntimeError: shape mismatch", "memory: 12 GiB free"})
    EXPECT_FALSE(is_oom_message(line)) << line;
}

TEST(RunCommand, SigkillFromNobodyWeKnowIsAnError) {
  const CommandResult r = run_command(options("kill_self.py", {}));
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.exit_status, -1);
  EXPECT_FALSE(r.killed_over_memory_limit);
  EXPECT_FALSE(r.oom_killer);
  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Error);
  EXPECT_TRUE(contains(v.message, "killed by signal 9 (SIGKILL) after 3 of 7 steps, not by batchwise")) << v.message;
}

// The timeout leaves python3 time to start and print its step line on a loaded machine; past it,
// SIGTERM, a second's grace, then SIGKILL, and up to 3 s more for a loaded machine to reap it.
TEST(RunCommand, HungChildTimesOutEvenIgnoringSigterm) {
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r = run_command(options("hang.py", {"--ignore-term"}).timeout_s(5.0));
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took_s, 5.0 + 1 + 3);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.steps_seen, 1);
  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Timeout);
  EXPECT_TRUE(contains(v.message,
                       "still running at the 5 s timeout after 1 of 7 steps: stopped by batchwise "
                       "(SIGTERM, then SIGKILL)"))
      << v.message;
}

TEST(RunCommand, StopAfterStepsEndsATrainerThatNeverStops) {
  const CommandResult r =
      run_command(options("fake_trainer.py", {"--batch-size={batch}", "--steps=0", "--forever", "--step-s=0.01"})
                      .stop_after_steps(true)
                      .timeout_s(10));
  EXPECT_TRUE(r.stopped_after_steps);
  EXPECT_FALSE(r.timed_out);
  EXPECT_GE(r.steps_seen, 7);
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_EQ(classify(r).outcome, Outcome::Ok) << classify(r).message;
}

TEST(RunCommand, MissingProgramIsAnErrorNamingIt) {
  try {
    run_command(CommandOptions({"batchwise-no-such-trainer", "--bs={batch}"}, 8));
    FAIL() << "a missing program ran";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'batchwise-no-such-trainer' not found on PATH")) << e.what();
  }
  const std::string path = "/tmp/batchwise-not-executable-" + std::to_string(getpid()) + ".py";
  std::ofstream(path) << "print('hi')\n";
  chmod(path.c_str(), 0644);
  try {
    run_command(CommandOptions({path}, 8));
    FAIL() << "a non-executable file ran";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), path + "' is not executable")) << e.what();
    EXPECT_TRUE(contains(e.what(), "python3 " + path)) << e.what();
  }
  unlink(path.c_str());
}

TEST(RunCommand, ScriptWithoutInterpreterLineIsNotHandedToAShell) {
  const std::string marker = "/tmp/batchwise-sh-ran-" + std::to_string(getpid());
  const std::string path = "/tmp/batchwise-no-shebang-" + std::to_string(getpid());
  std::ofstream(path) << "touch " << marker << "\n";
  chmod(path.c_str(), 0755);
  try {
    run_command(CommandOptions({path}, 8));
    FAIL() << "a script without #! ran";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "add a #! line")) << e.what();
  }
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "/bin/sh ran " << path;
  unlink(path.c_str());
}

TEST(RunCommand, ProgramIsLookedUpOnTheChildsPath) {
  try {
    run_command(CommandOptions({"python3", "-c", "pass"}, 8).env({{"PATH", "/batchwise-nowhere"}}));
    FAIL() << "python3 was found on an empty PATH";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'python3' not found on PATH")) << e.what();
  }
}

TEST(RunCommand, FailingCommandQuotesItsLastLine) {
  const CommandResult r =
      run_command(CommandOptions({python(), "-c", "import sys; print('bad flag'); sys.exit(2)"}, 4));
  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Error);
  EXPECT_EQ(v.message, "exit status 2 after 0 of 7 steps; last output: bad flag");
}

// A progress bar's line is quoted as a terminal last showed it: its last redraw, without its escapes
TEST(RunCommand, ALastLineFromAProgressBarIsQuotedAsShown) {
  const CommandResult r = run_command(CommandOptions(
      {python(), "-c",
       "import sys\n"
       "for i in range(3): sys.stderr.write('\\rEpoch 0: %d0%%|\\x1b[32m%s\\x1b[0m| %d/10' % (i, '#' * i, i)); "
       "sys.stderr.flush()\n"
       "sys.stderr.write('\\r  \\r'); sys.exit(3)"},
      4));
  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.message, "exit status 3 after 0 of 7 steps; last output: Epoch 0: 20%|##| 2/10");
}

// A command that trains on past its steps (docs/cmd.md's helper, pasted, never stops) is stopped a grace after them,
// and its steps count; at its timeout too, where that comes first (every trial had run to its timeout, and the
// timeout discarded it: "still running at the 3 s timeout after 29 of 7 steps")
TEST(RunCommand, ACommandThatTrainsOnPastItsStepsIsStoppedAndItsStepsCount) {
  const std::vector<std::string> forever = {
      python(), "-c",
      "import time\n"
      "while True: time.sleep(0.02); print('batchwise: step samples=4', flush=True)"};
  const CommandResult r = run_command(CommandOptions(forever, 4).past_steps_grace_s(0.5).timeout_s(60));
  EXPECT_TRUE(r.ran_on_past_steps);
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(r.wall_s, 30);
  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Ok) << v.message;
  EXPECT_NE(v.message.find("ran on past its steps (BATCHWISE_STEPS: stop after them), stopped by batchwise, after "),
            std::string::npos)
      << v.message;
  EXPECT_GT(v.samples_per_s, 0);
  const CommandResult at_timeout = run_command(CommandOptions(forever, 4).past_steps_grace_s(600).timeout_s(3));
  EXPECT_TRUE(at_timeout.ran_on_past_steps);
  EXPECT_FALSE(at_timeout.timed_out);
  EXPECT_EQ(classify(at_timeout).outcome, Outcome::Ok) << classify(at_timeout).message;
  // one that stops training after its steps (an evaluation, then its peak line) is left to end
  const CommandResult evaluates = run_command(
      CommandOptions({python(), "-c",
                      "import os, time\n"
                      "for _ in range(int(os.environ['BATCHWISE_STEPS'])): print('batchwise: step samples=4', "
                      "flush=True)\n"
                      "time.sleep(1.5); print('batchwise: peak_bytes=1000', flush=True)"},
                     4)
          .past_steps_grace_s(0.5)
          .timeout_s(60));
  EXPECT_FALSE(evaluates.ran_on_past_steps);
  EXPECT_EQ(evaluates.exit_status, 0);
  EXPECT_EQ(evaluates.reported_peak_bytes, std::optional<int64_t>(1000));
  EXPECT_THROW(run_command(CommandOptions(forever, 4).past_steps_grace_s(std::numeric_limits<double>::quiet_NaN())),
               ConfigError);
  // one that never reaches its steps still times out
  const CommandResult slow =
      run_command(CommandOptions({python(), "-c", "import time; time.sleep(30)"}, 4).timeout_s(2));
  EXPECT_TRUE(slow.timed_out);
  EXPECT_EQ(classify(slow).outcome, Outcome::Timeout);
}

TEST(RunCommand, MegabytesOnBothPipesDoNotDeadlock) {
  const CommandResult r = run_command(options("spew.py", {}).timeout_s(20));
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.steps_seen, 3);
  EXPECT_LT(r.wall_s, 10);
}

TEST(RunCommand, LeftoverDescendantsAreKilledAndNotWaitedFor) {
  const CommandResult r = run_command(options("straggler.py", {}).timeout_s(20));
  EXPECT_EQ(r.exit_status, 0) << r.output_tail;
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.steps_seen, 3);
  EXPECT_LT(r.wall_s, 5);
  const size_t at = r.output_tail.find("grandchild: ");
  ASSERT_NE(at, std::string::npos) << r.output_tail;
  const int grandchild = std::stoi(r.output_tail.substr(at + 12));
  // Gone, or a zombie waiting for its new parent to reap it.
  std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
  std::string pid, name, state;
  if (stat >> pid >> name >> state) {
    EXPECT_EQ(state, "Z");
  }
}

// Gone, or a zombie waiting for its new parent to reap it.
bool gone(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string id, name, state;
  return !(stat >> id >> name >> state) || state == "Z";
}

int read_pid(const std::string& path) {
  std::ifstream in(path);
  int pid = 0;
  in >> pid;
  return pid;
}

std::string scratch_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("batchwise-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// A descendant in a session of its own (setsid, as torchrun starts its workers) is still the run's:
// its memory counts, a memory limit stops it, and it is gone when the run is over.
TEST(RunCommand, DescendantsInSessionsOfTheirOwnAreMeasuredAndKilled) {
  const std::string dir = scratch_dir("setsid");
  const CommandResult r = run_command(
      options("setsid_grandchild.py", {"--mib=150", "--pid-file=" + dir + "/grandchild", "--steps={steps}"}, 1)
          .warmup(0)
          .steps(8)
          .timeout_s(30));
  const int grandchild = read_pid(dir + "/grandchild");
  ASSERT_GT(grandchild, 0) << r.output_tail;
  EXPECT_EQ(classify(r).outcome, Outcome::Ok) << r.output_tail;
  EXPECT_GT(r.peak_rss_bytes, 150LL << 20);  // the parent alone holds some 10 MiB
  EXPECT_TRUE(gone(grandchild)) << "pid " << grandchild << " outlived the run";
  kill(grandchild, SIGKILL);  // in case it did not

  const CommandResult limited =
      run_command(options("setsid_grandchild.py", {"--mib=150", "--pid-file=" + dir + "/limited", "--steps={steps}"}, 1)
                      .warmup(0)
                      .steps(8)
                      .timeout_s(30)
                      .memory_limit_bytes(100LL << 20));
  const int held = read_pid(dir + "/limited");
  EXPECT_TRUE(limited.killed_over_memory_limit) << limited.peak_rss_bytes << "\n" << limited.output_tail;
  EXPECT_EQ(classify(limited).outcome, Outcome::Oom);
  if (held > 0) {
    EXPECT_TRUE(gone(held)) << "pid " << held << " outlived the run";
    kill(held, SIGKILL);
  }
  fs::remove_all(dir);
}

// Real torchrun: two CPU ranks (gloo), each in a session of its own, each holding 400 MiB; stopped
// after its steps, every rank is counted and none is left.
TEST(RunCommand, TorchrunRanksAreMeasuredAndStopped) {
  const std::string torchrun = fs::path(BATCHWISE_TEST_PYTHON).parent_path() / "torchrun";
  if (access(torchrun.c_str(), X_OK) != 0)
    GTEST_SKIP() << torchrun << " is absent: no torch install beside the tests' Python";
  const std::string dir = scratch_dir("torchrun");
  const CommandResult r =
      run_command(CommandOptions({torchrun, "--nproc-per-node", "2", "--standalone", script("torchrun_worker.py"),
                                  "--mib=400", "--pid-dir=" + dir, "--steps={steps}"},
                                 4)
                      .warmup(1)
                      .steps(3)
                      .stop_after_steps(true)
                      .timeout_s(60)
                      .env({{"OMP_NUM_THREADS", "1"}}));
  EXPECT_EQ(classify(r).outcome, Outcome::Ok) << classify(r).message << "\n" << r.output_tail;
  EXPECT_TRUE(r.stopped_after_steps);
  EXPECT_GT(r.peak_rss_bytes, 800LL << 20);  // both ranks' 400 MiB: torchrun alone peaks near 550 MiB
  for (const char* rank : {"rank0", "rank1"}) {
    const int pid = read_pid(dir + "/" + rank);
    EXPECT_GT(pid, 0) << rank << " never started:\n" << r.output_tail;
    if (pid <= 0) continue;
    EXPECT_TRUE(gone(pid)) << rank << " (pid " << pid << ") outlived the run";
    kill(pid, SIGKILL);
  }
  fs::remove_all(dir);
}

int open_fds() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir)) ++count;
    closedir(dir);
  }
  return count;
}

TEST(RunCommand, LeavesNoFileDescriptorsOrChildrenBehind) {
  const int before = open_fds();
  for (int i = 0; i < 3; ++i) run_command(CommandOptions({python(), "-c", "print('batchwise: step')"}, 1));
  EXPECT_THROW(run_command(CommandOptions({"batchwise-no-such-trainer"}, 1)), Error);
  EXPECT_EQ(open_fds(), before);
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // every child reaped
  EXPECT_EQ(errno, ECHILD);
}

TEST(RunCommand, InvalidOptionsAreConfigErrors) {
  EXPECT_THROW(run_command(CommandOptions({"true"}, 0)), ConfigError);
  EXPECT_THROW(run_command(CommandOptions({"true"}, 1).steps(0)), ConfigError);
  EXPECT_THROW(run_command(CommandOptions({"true"}, 1).warmup(-1)), ConfigError);
  EXPECT_THROW(run_command(CommandOptions({"true"}, 1).env({{"A=B", "c"}})), ConfigError);
}

TEST(Classify, OomKillerIsOutOfMemory) {
  CommandResult r;
  r.warmup = 2;
  r.steps = 5;
  r.steps_seen = 3;
  r.signal = SIGKILL;
  r.oom_killer = true;
  r.oom_killer_known = true;
  r.oom_kills = 1;
  r.peak_rss_bytes = 3LL << 30;
  const CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Oom);
  EXPECT_EQ(v.message,
            "killed by the kernel's OOM killer (SIGKILL) after 3 of 7 steps; resident memory peaked at 3.00 GiB");
}

// A command at `batch`, given `warmup` and `steps` steps, that exited 0.
CommandResult exited(int64_t batch, int warmup, int steps) {
  CommandResult r;
  r.batch = batch;
  r.warmup = warmup;
  r.steps = steps;
  r.exit_status = 0;
  return r;
}

// One that exited 0 after its two steps (no warm-up), each 0.5 s of `samples`.
CommandResult two_steps(int64_t batch, int64_t samples) {
  CommandResult r = exited(batch, 0, 2);
  r.steps_seen = 2;
  r.step_times_s = {0.5, 0.5};
  r.step_samples = {samples, samples};
  return r;
}

// A command that ends within its warm-up measured no step, however long it ran; one whose step lines
// came in one read (a buffered stdout) timed none, and under a second its wall time is start-up.
TEST(Classify, NoMeasuredStepIsAnErrorWhateverTheExitStatus) {
  CommandResult r = exited(16, 2, 5);
  r.steps_seen = 1;
  r.wall_s = 30;  // a slow start-up: still not a measure
  CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Error) << v.message;
  EXPECT_EQ(v.message.rfind("ended within its warm-up: exit status 0 after 1 of 7 steps, the first 2 of them", 0), 0u)
      << v.message;
  r.steps_seen = 7;  // every line, read together
  r.wall_s = 0.2;
  v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Error) << v.message;
  EXPECT_EQ(v.message.rfind("too short to time: exit status 0 after 7 of 7 steps in 0.2 s", 0), 0u) << v.message;
  r.wall_s = 2;  // long enough for the wall-time fallback
  v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Ok) << v.message;
  EXPECT_TRUE(v.wall_timing);
}

// Where the step lines name their data loader's batch, a step trained the batch given when that batch or its samples
// are it: accumulation (8 a batch, 32 a step) and a global batch split among the ranks or the accumulated batches
// (4 a batch, 8 a step) pass; a script that ignores {batch} and trains 64 at batch 8 no longer passes as a multiple.
TEST(Classify, TheLoaderBatchSaysWhichBatchTrained) {
  CommandResult r = two_steps(8, 64);
  r.step_batches = {64, 64};
  CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Error);
  EXPECT_TRUE(contains(v.message,
                       "its step lines report batches of 64 from its data loader and 64 samples a step, "
                       "neither of them batch 8: it did not train batch 8"))
      << v.message;
  r.step_batches = {};  // the same lines without batch=: a whole multiple, taken as accumulation
  EXPECT_EQ(classify(r).outcome, Outcome::Ok);
  r.step_samples = {32, 32}, r.step_batches = {8, 8};
  EXPECT_EQ(classify(r).outcome, Outcome::Ok) << classify(r).message;
  r.step_samples = {8, 8}, r.step_batches = {4, 4};
  EXPECT_EQ(classify(r).outcome, Outcome::Ok) << classify(r).message;
}

// A callback that said it reports, in a run that printed no step line, trained nothing: an error however long it ran,
// where the wall-time fallback had measured a script that only evaluated (and fit had climbed on it).
TEST(Classify, ACallbackThatReportedNoStepTrainedNothing) {
  CommandResult r = exited(8, 2, 5);
  r.wall_s = 30;
  r.reporter = "lightning";
  CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Error);
  EXPECT_EQ(v.message.rfind("trained nothing: exit status 0 after 0 of 7 steps, its batchwise callback (lightning) "
                            "made but no training step reported",
                            0),
            0u)
      << v.message;
  r.reporter.clear();  // a script without a callback: its wall time is the fallback's measure
  v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Ok) << v.message;
  EXPECT_TRUE(v.wall_timing);
}

TEST(Classify, CleanExitAfterAllStepsIsOkDespiteAnOomWarning) {
  CommandResult r = two_steps(4, 4);
  r.oom_message = "warning: CUDA out of memory, retrying with a smaller chunk";
  CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Ok) << v.message;
  EXPECT_DOUBLE_EQ(v.samples_per_s, 8.0);
  EXPECT_STREQ(to_string(v.outcome), "ok");
  // stopped by batchwise after its steps (it trained on past the text): the warning did not end it either
  r.exit_status = -1, r.signal = SIGTERM, r.stopped_after_steps = true, r.ran_on_past_steps = true;
  r.oom_message_step = 1;
  v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Ok) << v.message;
  r.oom_message_step = 2;  // printed after its last step (its validation ran out of memory), then stopped: oom
  EXPECT_EQ(classify(r).outcome, Outcome::Oom) << classify(r).message;
  r.oom_message_step = 1, r.timed_out = true;  // stopped at the timeout, not after its steps: oom
  EXPECT_EQ(classify(r).outcome, Outcome::Oom) << classify(r).message;
  r.timed_out = false, r.steps_seen = 1;  // stopped before its steps, with the text: out of memory, as before
  EXPECT_EQ(classify(r).outcome, Outcome::Oom) << classify(r).message;
}

// A figure of the command's own is no measure of a run that trained no step: "ran no step" (a command that only
// printed samples_per_s=1e9 had been taken at 1e9 samples/s), and one that ended within its warm-up measured none.
TEST(Classify, AThroughputOfItsOwnNeedsAStepTrained) {
  CommandResult r = exited(8, 2, 5);
  r.wall_s = 0.08;
  r.reported_samples_per_s = 1e9;
  CommandVerdict v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Error);
  EXPECT_EQ(v.message.rfind("ran no step:", 0), 0u) << v.message;
  r.wall_s = 1.1;  // past the wall-time fallback's second, still no step: the wall time, not its figure
  v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Ok) << v.message;
  EXPECT_TRUE(v.wall_timing);
  EXPECT_LT(v.samples_per_s, 100);
  EXPECT_TRUE(contains(v.message, "its own samples_per_s (1000000000) is not used: no measured step shows it trained"))
      << v.message;
  r.steps_seen = 2, r.wall_s = 5;  // within its warm-up
  v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Error);
  EXPECT_EQ(v.message.rfind("ended within its warm-up", 0), 0u) << v.message;
  r.steps_seen = 7, r.step_times_s = {0.1, 0.1, 0.1, 0.1, 0.1}, r.step_samples = {8, 8, 8, 8, 8};
  v = classify(r);
  EXPECT_EQ(v.outcome, Outcome::Ok) << v.message;
  EXPECT_EQ(v.samples_per_s, 1e9);  // a run that trained: its own figure wins
}

}  // namespace
}  // namespace batchwise

// `batchwise fit|sweep|tune --cmd -- ...`: a user's own training command, run once per trial.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <functional>
#include <nlohmann/json.hpp>
#include <tuple>

#include "support/cli_util.h"

namespace {

using namespace cli;

const std::string kCmdDir = BATCHWISE_TEST_CMD_DIR;

// A real PyTorch training script, fitted with the budget enforced on its resident memory: batches
// found, every trial above the budget stopped as out of memory, throughput from its step lines.
TEST(Cmd, PythonTorchScriptIsFittedAndSweptThroughItsCommand) {
  const std::string script = std::string(BATCHWISE_TEST_PYTHON) + " " + kCmdDir + "/train_torch.py";
  // The interpreter and torch alone take hundreds of MiB, which differ between machines; the budget
  // is set above what batch 1 measures here, so that the activations decide.
  const fs::path base_json = scratch() / "cmd-base.json";
  const Outcome base = batchwise("sweep --cmd --batch-sizes 1 --repetitions 1 --warmup 1 --steps 1 -q --json " +
                                 base_json.string() + " -- " + script + " --batch-size {batch} --steps {steps}");
  ASSERT_EQ(base.code, 0) << base.err << base.out;
  const int64_t floor = nlohmann::json::parse(slurp(base_json)).at("sweep").at("points").at(0).at("peak_bytes");
  ASSERT_GT(floor, 50 << 20);  // a Python process with torch: the child's memory, not ours
  const int64_t budget = floor + (160 << 20);

  const fs::path fit_json = scratch() / "cmd-fit.json";
  const Outcome fit = batchwise("fit --cmd --memory-budget " + std::to_string(budget) +
                                " --target 1 --multiple-of 32 --max 8192 -q --json " + fit_json.string() + " -- " +
                                script + " --batch-size {batch} --steps {steps}");
  ASSERT_EQ(fit.code, 0) << fit.err << fit.out;
  const auto f = nlohmann::json::parse(slurp(fit_json));
  EXPECT_NE(f.at("workload").at("model").get<std::string>().find("train_torch.py --batch-size {batch}"),
            std::string::npos);
  ASSERT_EQ(f.at("fit").at("outcome"), "fits") << f.at("fit").dump(1);
  const int64_t batch = f.at("fit").at("batch");
  EXPECT_GE(batch, 32);
  EXPECT_LT(batch, 8192);
  int oom = 0;
  for (const auto& t : f.at("fit").at("trials")) {
    if (t.at("outcome") == "oom") {
      ++oom;
      EXPECT_GT(t.at("batch").get<int64_t>(), batch);
      EXPECT_NE(t.at("message").get<std::string>().find("budget"), std::string::npos) << t.dump();
    } else {
      EXPECT_EQ(t.at("outcome"), "ok") << t.dump();
      EXPECT_GT(t.at("peak_bytes").get<int64_t>(), floor / 2);
    }
  }
  EXPECT_GE(oom, 1) << "no trial went over the budget: " << f.at("fit").dump(1);

  const fs::path sweep_json = scratch() / "cmd-sweep.json";
  const Outcome sweep = batchwise("sweep --cmd --batch-sizes 16,64 --repetitions 1 --warmup 1 --steps 3 -q --json " +
                                  sweep_json.string() + " -- " + script + " --batch-size {batch} --steps {steps}");
  ASSERT_EQ(sweep.code, 0) << sweep.err;
  const auto swept = nlohmann::json::parse(slurp(sweep_json));  // alive through the loop (ASan found it was not)
  for (const auto& p : swept.at("sweep").at("points")) {
    EXPECT_EQ(p.at("outcome"), "ok") << p.dump();
    EXPECT_EQ(p.at("step_times_s").size(), 3u);  // one per measured `batchwise: step` line
    EXPECT_GT(p.at("samples_per_s").get<double>(), 0);
    EXPECT_EQ(p.at("steps_run"), 4);
    EXPECT_GT(p.at("loss_last").get<double>(), 0);
  }
}

TEST(Cmd, KilledAndHungChildrenAreResultsAndTheRunGoesOn) {
  const fs::path json = scratch() / "cmd-faults.json";
  const Outcome r = batchwise(
      "sweep --cmd --batch-sizes 8,16,32,64 --repetitions 1 --warmup 1 --steps 2 "
      "--trial-timeout 3 -q --json " +
      json.string() + " -- python3 " + kCmdDir +
      "/fake_trainer.py --batch-size {batch} --steps {steps} --step-s 0.01 --kill-at 16 "
      "--hang-at 32");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto points = nlohmann::json::parse(slurp(json)).at("sweep").at("points");
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[0].at("outcome"), "ok");
  EXPECT_EQ(points[1].at("outcome"), "error");
  EXPECT_NE(points[1].at("message").get<std::string>().find("SIGKILL"), std::string::npos) << points[1].dump();
  EXPECT_EQ(points[2].at("outcome"), "timeout");
  EXPECT_LT(points[2].at("wall_s").get<double>(), 3 + 3);
  EXPECT_EQ(points[3].at("outcome"), "ok");  // the run went on past both
  EXPECT_GT(points[3].at("samples_per_s").get<double>(), 0);
}

// A sweep in which no batch trained measured nothing: it exits 1 (an error among them) or 6 (every
// batch out of memory), says so, and still writes its report.
TEST(Cmd, ASweepInWhichNoBatchTrainedExitsNonZero) {
  const fs::path json = scratch() / "cmd-nothing.json";
  const Outcome r = batchwise("sweep --cmd --batch-sizes 8 --repetitions 1 --no-history --json " + json.string() +
                              " -- sh -c 'exit 3'");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("no batch trained: 1 of 1 swept batches ended in an error or a timeout"), std::string::npos)
      << r.out;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j.at("sweep").at("points").at(0).at("outcome"), "error");
  const Outcome oom = batchwise(
      "sweep --model mlp --dataset synthetic --synthetic-size 256 --batch-sizes 8,16 "
      "--repetitions 1 --memory-budget 3MiB --no-history -q");  // above the model (2.04 MiB), below a step
  EXPECT_EQ(oom.code, 6) << oom.err;
  // A command that trains nothing and exits at once is not measured at thousands of samples/s: it
  // ran no step. The console header says what is known of a command, not empty workload fields.
  const fs::path nothing = scratch() / "cmd-true.json";
  const Outcome t = batchwise("sweep --cmd --batch-sizes 8 --repetitions 1 --no-history --json " + nothing.string() +
                              " -- sh -c true");
  EXPECT_EQ(t.code, 1) << t.err;
  const auto nothing_report = nlohmann::json::parse(slurp(nothing));
  const auto& point = nothing_report.at("sweep").at("points").at(0);
  EXPECT_EQ(point.at("outcome"), "error");
  EXPECT_NE(point.at("message").get<std::string>().find("ran no step: exit status 0 after"), std::string::npos)
      << point.dump();
  EXPECT_NE(t.out.find("workload: the command sh -c true (its own model, data, optimizer and rate"), std::string::npos)
      << t.out;
  EXPECT_EQ(t.out.find("(the command's) (0 samples of"), std::string::npos) << t.out;
  // One that runs long enough without step lines is timed by its wall time, and the record says so.
  const fs::path quiet = scratch() / "cmd-quiet.json";
  const Outcome q = batchwise("sweep --cmd --batch-sizes 8 --repetitions 1 --warmup 1 --steps 4 --no-history --json " +
                              quiet.string() + " -- " + std::string(BATCHWISE_TEST_PYTHON) + " " + kCmdDir +
                              "/fake_trainer.py --batch-size {batch} --steps {steps} --quiet --step-s 0.25");
  ASSERT_EQ(q.code, 0) << q.err;
  const auto quiet_report = nlohmann::json::parse(slurp(quiet));
  const auto& timed = quiet_report.at("sweep").at("points").at(0);
  EXPECT_EQ(timed.at("outcome"), "ok") << timed.dump();
  EXPECT_EQ(timed.at("wall_timing"), true) << timed.dump();
  EXPECT_NE(timed.at("message").get<std::string>().find("fallback"), std::string::npos) << timed.dump();
}

// A history whose folder is removed while the run goes on (here by the command itself) is made anew at its path and the
// run stored there, with a note: the run had gone into the removed file, lost unsaid.
TEST(Cmd, AHistoryRemovedDuringTheRunIsMadeAnewWithTheRun) {
  const fs::path folder = scratch() / "removed-history";
  fs::remove_all(folder);
  const fs::path db = folder / "h.sqlite";
  // A sweep of one short trial whose command first does `before` to the history
  const auto sweep_after = [&db](const std::string& before) {
    return batchwise("sweep --cmd --batch-sizes 8 --repetitions 1 --warmup 1 --steps 2 --history " + db.string() +
                     " -- sh -c '" + before + "; exec python3 " + kCmdDir +
                     "/fake_trainer.py --batch-size {batch} --steps {steps} --step-s 0.01'");
  };
  const Outcome r = sweep_after("rm -rf " + folder.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("note: the history " + db.string() +
                       " was removed during the run; the run is stored in a new one there"),
            std::string::npos)
      << r.err;
  const Outcome listed = batchwise("history --json --history " + db.string());
  ASSERT_EQ(listed.code, 0) << listed.err;
  const auto runs = nlohmann::json::parse(listed.out);
  ASSERT_EQ(runs.size(), 1u) << listed.out;
  EXPECT_EQ(runs[0].at("command"), "sweep");
  // Replaced by a copy (a backup put back): the run goes to the file now there, and the note says so
  const Outcome copied =
      sweep_after("cp " + db.string() + " " + db.string() + ".copy && mv " + db.string() + ".copy " + db.string());
  ASSERT_EQ(copied.code, 0) << copied.err;
  EXPECT_NE(copied.err.find("note: the history " + db.string() +
                            " was replaced during the run; the run is stored in the file now at that path"),
            std::string::npos)
      << copied.err;
  EXPECT_EQ(nlohmann::json::parse(batchwise("history --json --history " + db.string()).out).size(), 2u);
  // Its folder replaced by a file: no note that it was stored, the warning that it was not
  const Outcome blocked = sweep_after("rm -rf " + folder.string() + "; touch " + folder.string());
  fs::remove(folder);
  ASSERT_EQ(blocked.code, 0) << blocked.err;
  EXPECT_EQ(blocked.err.find("note: the history"), std::string::npos) << blocked.err;
  EXPECT_NE(blocked.err.find("warning: the run was not stored in the history: "), std::string::npos) << blocked.err;
}

// A command that measures its own throughput: its figure is the point's samples/s, not ours; it has no "state" (its
// tensors are its own process's: zeros had read as a model of no bytes).
TEST(Cmd, TheCommandsOwnThroughputIsWhatTheSweepRanks) {
  const fs::path json = scratch() / "cmd-reported.json";
  const Outcome r =
      batchwise("sweep --cmd --batch-sizes 8,16 --repetitions 2 --warmup 1 --steps 2 -q --json " + json.string() +
                " -- python3 " + kCmdDir +
                "/fake_trainer.py --batch-size {batch} --steps {steps} --step-s 0.01 --samples-per-s 4321");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto report = nlohmann::json::parse(slurp(json));  // alive through the loop (ASan found it was not)
  for (const auto& p : report.at("sweep").at("points")) {
    EXPECT_EQ(p.at("outcome"), "ok");
    EXPECT_DOUBLE_EQ(p.at("samples_per_s").get<double>(), 4321.0);
    EXPECT_EQ(p.at("step_times_s").size(), 4u);  // the raw step times are still ours
    EXPECT_FALSE(p.contains("state")) << "a command's tensors are not counted: no state of zeros";
  }
}

// Step lines that count their samples (an optimizer step over 4 accumulated batches of 8) set the
// samples/s: 32 samples per 0.05 s step, not the batch of 8 (it once reported a quarter).
TEST(Cmd, StepLinesSamplesSetTheThroughput) {
  const fs::path json = scratch() / "cmd-accumulated.json";
  const Outcome r = batchwise("sweep --cmd --batch-sizes 8 --repetitions 1 --warmup 1 --steps 4 -q --json " +
                              json.string() + " -- python3 " + kCmdDir +
                              "/fake_trainer.py --batch-size {batch} --steps {steps} --step-s 0.05 --accumulate 4");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  const auto& p = j.at("sweep").at("points").at(0);
  ASSERT_EQ(p.at("outcome"), "ok") << p.dump();
  const double median_step = p.at("step_time_s_median").get<double>();
  ASSERT_GT(median_step, 0.04);
  EXPECT_NEAR(p.at("samples_per_s").get<double>(), 32 / median_step, 1e-6 * 32 / median_step);
  EXPECT_EQ(j.at("sweep").at("min_time_s"), 0);  // --min-time is not a command's: it runs --steps
}

// A command that exits 0 before the steps it was given (its own step count, not {steps}) is timed on
// what it ran, and its note says so; a single timed step has no spread to show.
TEST(Cmd, ACommandThatStopsShortSaysSoAndShowsNoSpreadForOneStep) {
  const fs::path json = scratch() / "cmd-short.json";
  const Outcome r =
      batchwise("sweep --cmd --batch-sizes 8 --repetitions 1 --warmup 1 --steps 4 --json " + json.string() +
                " -- python3 " + kCmdDir + "/fake_trainer.py --batch-size {batch} --steps 2 --step-s 0.02");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto report = nlohmann::json::parse(slurp(json));
  const auto& p = report.at("sweep").at("points").at(0);
  ASSERT_EQ(p.at("outcome"), "ok") << p.dump();
  EXPECT_EQ(p.at("steps_run"), 2);
  EXPECT_EQ(p.at("message"), "it exited after 2 of the 5 steps it was given (1 warm-up): fewer timed steps");
  EXPECT_NE(r.out.find("fewer timed steps"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("0.0 %"), std::string::npos) << r.out;  // one timed step: "-", not a spread of 0
}

// Ctrl-C to batchwise: the running command (in its own process group, out of the terminal's
// reach) is killed too, not left training. The interrupt comes once the command has written its
// pid, however long a loaded machine takes to start batchwise and python3 (up to a minute).
TEST(Cmd, InterruptingBatchwiseStopsTheRunningCommand) {
  const fs::path pidfile = scratch() / "child.pid";
  fs::remove(pidfile);
  const std::string cmd = "exec " + std::string(BATCHWISE_TEST_BINARY) +
                          " sweep --cmd --batch-sizes 4 --repetitions 1 -q -- python3 " + kCmdDir +
                          "/pid_then_hang.py " + pidfile.string() + " >/dev/null 2>&1";
  const pid_t batchwise_pid = fork();
  ASSERT_GE(batchwise_pid, 0);
  if (batchwise_pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  // Whether batchwise exited within `seconds`, looking every tenth of a second; false at once where
  // `until` holds first.
  const auto exits_within = [&](int seconds, const std::function<bool()>& until) {
    for (int i = 0; i < 10 * seconds && !until(); ++i) {
      if (waitpid(batchwise_pid, &status, WNOHANG) == batchwise_pid) return true;
      ::usleep(100000);
    }
    return false;
  };
  ASSERT_FALSE(exits_within(60, [&] { return fs::exists(pidfile); }))
      << "batchwise exited before its command wrote its pid";
  kill(batchwise_pid, SIGINT);
  // batchwise stops its command and ends by the interrupt (it raises it again on itself); one
  // that does not within 30 s is killed, and fails here.
  const bool exited = exits_within(30, [] { return false; });
  if (!exited) {
    kill(batchwise_pid, SIGKILL);
    waitpid(batchwise_pid, &status, 0);
  }
  EXPECT_TRUE(exited) << "batchwise still ran 30 s after the interrupt";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << "status " << status;
  ASSERT_TRUE(fs::exists(pidfile)) << "the command never started";
  const std::string pid = slurp(pidfile);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = !fs::exists("/proc/" + pid) || slurp("/proc/" + pid + "/stat").find(") Z ") != std::string::npos;
    if (!gone) ::usleep(20000);
  }
  EXPECT_TRUE(gone) << "pid " << pid << " still runs after batchwise was interrupted";
}

TEST(Cmd, TheBatchIsSubstitutedIntoArgumentsWithoutAShell) {
  const fs::path pwned = scratch() / "pwned";
  const fs::path json = scratch() / "cmd-shell.json";
  const Outcome r =
      batchwise("sweep --cmd --batch-sizes 4 --repetitions 1 --warmup 1 --steps 1 -q --json " + json.string() +
                " -- python3 " + kCmdDir + "/echo_argv.py --bs={batch} '; touch " + pwned.string() + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(pwned));
  expect_clean_error("sweep --cmd --batch-sizes 4 -- python3 train.py --lr={learning_rate}", 2, "{learning_rate}");
  expect_clean_error("sweep --batch-sizes 4 -- python3 train.py", 2, "put --cmd before --");
  // its first step line is timed from its start: with no warm-up, the interpreter's start-up had been a step
  expect_clean_error("sweep --cmd --warmup 0 --batch-sizes 4 -- python3 train.py", 2,
                     "--warmup 0 with --cmd: a command's first step line is timed from the command's start");
  // without --, the command's own flags had been read as batchwise's (its --json written by batchwise)
  expect_clean_error("sweep --cmd --batch-sizes 4 python3 train.py", 2,
                     "--cmd: put -- right before your command (python3 ...)");
  // a "--" later does not help: --steps before it had been taken as the sweep's
  expect_clean_error("sweep --cmd --batch-sizes 4 python3 train.py --steps 3 -- --bs 3", 2,
                     "python3 train.py: a word before -- that sweep does not take; your command follows -- whole");
  // a flag of the command's own that batchwise does not know: CLI11's refusal says where -- goes
  expect_clean_error("sweep --cmd --batch-sizes 4 python3 train.py --batch-size 3", 2,
                     "; with --cmd, put -- right before your command, or its own flags are read as batchwise's");
  // a subcommand that refuses --cmd does not point to it (noise had said "put --cmd before --", then refused it)
  expect_clean_error("noise -- python3 train.py", 2,
                     "noise trains batchwise's own loop and cannot run a training command (fit, sweep, tune and plan "
                     "take --cmd before -- python3 train.py)");
  expect_clean_error("validate --cmd --batch-sizes 8,16 --epochs 1 -- python3 train.py", 2,
                     "validate trains batchwise's own loop");
  // A step line and an exit 0 within the warm-up: no measured step, whatever the wall time (it had been
  // measured at the interpreter's start-up, and recommended).
  const Outcome short_run = batchwise("sweep --cmd --batch-sizes 16 --repetitions 1 --no-history -q -- python3 " +
                                      kCmdDir + "/fake_trainer.py --batch-size {batch} --steps 1");
  EXPECT_EQ(short_run.code, 1) << short_run.out << short_run.err;
  EXPECT_NE(short_run.out.find("ended within its warm-up: exit status 0 after 1 of 7 steps, the first 2 of them"),
            std::string::npos)
      << short_run.out;
  // An output over the command's own file (it had replaced the script), and --threads, which the
  // command's process does not read (the report had said N threads)
  const fs::path script = scratch() / "trainer.py";
  fs::copy_file(kCmdDir + "/fake_trainer.py", script, fs::copy_options::overwrite_existing);
  expect_clean_error("fit --cmd --max 8 --html " + script.string() + " -- python3 " + script.string() +
                         " --batch-size {batch} --steps {steps}",
                     2, "that is a file of your --cmd command, " + script.string() + ", which this run reads");
  expect_clean_error(
      "fit --cmd --max 8 --threads 1 -- python3 " + script.string() + " --batch-size {batch} --steps {steps}", 2,
      "--threads: your --cmd command sets its own threads");
  // a program that is not there: bad input, refused before the sweep starts
  expect_clean_error("sweep --cmd --batch-sizes 4 -- /nonexistent/train", 2,
                     "command: '/nonexistent/train' not found; give the program's full path or install it");
  // what execve would refuse in the first trial (they had ended the run there, exit 1): a folder, a script without a
  // #! line, one whose #! interpreter is not there
  const fs::path folder = scratch() / "a-folder", bare = scratch() / "bare.py", bad = scratch() / "bad.py";
  fs::create_directories(folder);
  std::ofstream(bare) << "print('batchwise: step samples=4')\n";
  std::ofstream(bad) << "#!/nonexistent/python -u\nprint('batchwise: step samples=4')\n";
  for (const fs::path& p : {bare, bad}) fs::permissions(p, fs::perms::owner_all);
  expect_clean_error("sweep --cmd --batch-sizes 4 -- " + folder.string(), 2,
                     "command: '" + folder.string() + "' is a folder, not a program");
  expect_clean_error("sweep --cmd --batch-sizes 4 -- " + bare.string(), 2,
                     "command: '" + bare.string() + "' is not a program the system can run; add a #! line");
  expect_clean_error("sweep --cmd --batch-sizes 4 -- " + bad.string(), 2,
                     "command: '" + bad.string() + "' names /nonexistent/python on its #! line, which is not there");
  const fs::path crlf = scratch() / "crlf.py";
  std::ofstream(crlf) << "#!/bin/sh\r\necho 'batchwise: step samples=4'\r\n";
  fs::permissions(crlf, fs::perms::owner_all);
  expect_clean_error("sweep --cmd --batch-sizes 4 -- " + crlf.string(), 2,
                     "names /bin/sh\\r on its #! line, which is not there (or not executable): the line ends in a "
                     "carriage return (Windows line ends: convert them with dos2unix)");
  expect_clean_error("sweep --cmd --device cuda:x --batch-sizes 4 -- python3 train.py", 2,
                     "--device cuda:x with --cmd: choose cpu, cuda, cuda:N or auto");
}

// What only batchwise's own loop can run is refused with --cmd before anything starts, each from the
// one table of such options (tools/batchwise/cli.cpp), naming the flag and what to do instead. The
// command here would fail if it ran.
TEST(Cmd, OptionsOnlyBatchwisesOwnLoopRunsAreRefusedBeforeTheRun) {
  const std::string fails = " -- /nonexistent/train";
  // The workload's own flags: a command brings its model and data, and nothing would read them
  expect_clean_error("sweep --cmd --batch-sizes 4 --data-file /nonexistent.csv" + fails, 2,
                     "--data-file: your --cmd command trains its own model on its own data, so batchwise reads no "
                     "--data-file; drop it");
  expect_clean_error("fit --cmd --model resnet18 --optimizer adam" + fails, 2, "--model: your --cmd command");
  expect_clean_error("tune --cmd --workers 4" + fails, 2, "--workers: your --cmd command");
  expect_clean_error("fit --cmd --trace " + (scratch() / "t.json").string() + fails, 2,
                     "--trace: batchwise profiles its own training step; with --cmd, profile inside your command");
  expect_clean_error("sweep --cmd --batch-sizes 4 --profile" + fails, 2,
                     "--profile: batchwise profiles its own training step; with --cmd, profile inside your command");
  expect_clean_error("sweep --cmd --batch-sizes 4 --accumulation-steps 2" + fails, 2,
                     "--accumulation-steps: batchwise accumulates in its own training step");
  expect_clean_error("tune --cmd --reuse" + fails, 2, "--reuse: a command's fit is not stored by workload");
  expect_clean_error("tune --cmd --epochs 3" + fails, 2, "--epochs: the run race trains batchwise's own loop");
  // tune's flags that only its own loop reads, refused rather than silently unread
  expect_clean_error("tune --cmd --base-batch 32" + fails, 2, "--base-batch: it scales batchwise's own --lr");
  expect_clean_error("tune --cmd --advice-budget 60" + fails, 2, "--advice-budget: the races it budgets train");
  expect_clean_error("tune --cmd --noise-steps 10" + fails, 2, "--noise-steps: the noise scale needs the gradients");
}

// The command's GPU is not LibTorch's: with a CPU-only LibTorch, --cmd --device cuda:N measures the
// command's N-th CUDA device through NVML (here a stand-in with two GPUs, 8 and 24 GiB), found by
// the UUIDs in CUDA_VISIBLE_DEVICES, not by NVML's own order. (It once failed in resolve_device:
// "built against a Torch without CUDA".)
TEST(Cmd, AGpuCommandIsMeasuredThroughNvmlOnTheDeviceItSees) {
  const std::string env = std::string("LD_LIBRARY_PATH=") + BATCHWISE_TEST_FAKE_NVML_DIR +
                          " CUDA_VISIBLE_DEVICES=GPU-bbbb2222,GPU-aaaa1111";
  const std::string script = std::string("python3 ") + kCmdDir + "/alloc.py --batch-size {batch} --steps {steps}";
  for (const auto& [device, name, total] :
       {std::tuple<std::string, std::string, int64_t>{"cuda:1", "Fake GPU A 8GB", 8LL << 30},
        {"cuda", "Fake GPU B 24GB", 24LL << 30},
        {"auto", "Fake GPU B 24GB", 24LL << 30}}) {
    const fs::path json = scratch() / "nvml-cmd.json";
    fs::remove(json);
    const Outcome r = batchwise("sweep --cmd --device " + device +
                                    " --batch-sizes 4 --repetitions 1 --warmup 1 --steps 2 "
                                    "--no-history -q --json " +
                                    json.string() + " -- " + script,
                                env);
    // The stand-in NVML lists no processes, so the command's trial has no memory figure and is an
    // error: a sweep that measured nothing exits 1. The device it resolved is what this checks.
    ASSERT_EQ(r.code, 1) << device << "\n" << r.err << r.out;
    const auto report = nlohmann::json::parse(slurp(json));
    EXPECT_NE(report.at("sweep").at("points").at(0).at("message").get<std::string>().find("no device memory figure"),
              std::string::npos);
    EXPECT_EQ(report.at("context").at("device").at("type"), "cuda") << device;
    EXPECT_EQ(report.at("context").at("device").at("name"), name) << device;
    EXPECT_EQ(report.at("context").at("device").at("total_bytes"), total) << device;
    const int64_t budget = report.at("budget_bytes");
    EXPECT_GT(budget, total / 2) << device;
    EXPECT_LE(budget, total) << device;
  }
  const Outcome past = batchwise("sweep --cmd --device cuda:2 --batch-sizes 4 -- " + script, env);
  EXPECT_EQ(past.code, 5) << past.err;
  EXPECT_NE(past.err.find("NVML finds 2 device(s), none of them the command's CUDA device 2"), std::string::npos)
      << past.err;
  const Outcome hidden =
      batchwise("sweep --cmd --device cuda --batch-sizes 4 -- " + script,
                std::string("LD_LIBRARY_PATH=") + BATCHWISE_TEST_FAKE_NVML_DIR + " CUDA_VISIBLE_DEVICES=7");
  EXPECT_EQ(hidden.code, 5) << hidden.err;
  EXPECT_NE(hidden.err.find("(CUDA_VISIBLE_DEVICES=7)"), std::string::npos) << hidden.err;
}

}  // namespace

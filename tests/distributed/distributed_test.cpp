// Data-parallel trials between real processes on this machine, over c10d's Gloo: the library's
// ranks (this test binary re-run as a worker) and the CLI's (--nproc, and torchrun's variables).
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "batchwise/device.h"
#include "batchwise/distributed.h"
#include "batchwise/memory.h"
#include "batchwise/sweep.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"
#include "distributed/distributed_detail.h"
#include "support/busy_core.h"
#include "support/cli_util.h"

namespace {

using namespace batchwise;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Workload> small_workload(const std::string& model) {
  return make_workload(
      WorkloadOptions().model(model).dataset("synthetic").synthetic_size(600).device("cpu").lr(0.05).seed(7));
}

// A port for a test's group: different per test process, so parallel tests do not collide.
int test_port(int offset) { return 20000 + (static_cast<int>(::getpid()) * 7 + offset) % 30000; }

// Starts `command` (argv) with torchrun's variables for `rank` of `world`; returns the pid.
pid_t start_rank(const std::vector<std::string>& command, int rank, int world, int port,
                 const std::vector<std::pair<std::string, std::string>>& env = {}, const std::string& err_file = "") {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    for (const auto& [k, v] : env) v.empty() ? unsetenv(k.c_str()) : setenv(k.c_str(), v.c_str(), 1);
    if (!err_file.empty()) {
      if (!std::freopen(err_file.c_str(), "w", stderr)) _exit(126);
      if (!std::freopen((err_file + ".out").c_str(), "w", stdout)) _exit(126);
    }
    std::vector<char*> argv;
    for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

// Not a test on its own: one rank of DataParallel.StepsEqualOneProcessOnTheConcatenatedBatches,
// run in a child process with torchrun's variables. It trains `BW_STEPS` data-parallel steps of
// `BW_BATCH` samples per rank and saves rank 0's parameters to `BW_OUT`.
TEST(DataParallel, DISABLED_Worker) {
  const auto address = group_address_from_env();
  ASSERT_TRUE(address.has_value());
  auto workload = small_workload(std::getenv("BW_MODEL"));
  auto group = Group::join(*address, workload->device(), std::chrono::seconds(30));
  DataParallelWorkload dp(dynamic_cast<ModuleWorkload&>(*workload), group);
  const int steps = std::atoi(std::getenv("BW_STEPS"));
  const int64_t batch = std::atoll(std::getenv("BW_BATCH"));
  const int64_t micro = std::atoll(std::getenv("BW_MICRO"));
  for (int i = 0; i < steps; ++i) {
    const Batch b = dp.next_batch(batch);
    if (micro > 1)
      (void)train_step_accumulated(dp, b, micro);
    else
      (void)dp.train_step(b);
  }
  std::vector<at::Tensor> params;
  for (const auto& p : dp.inner().module().parameters()) params.push_back(p.detach().clone());
  if (group->rank() == 0) torch::save(params, std::getenv("BW_OUT"));
}

TEST(DataParallel, StepsEqualOneProcessOnTheConcatenatedBatches) {
  const std::string out = (cli::scratch() / "dp_params.pt").string();
  constexpr int kSteps = 4;
  constexpr int64_t kBatch = 24;  // per rank; 600 samples: the third global batch of 48 crosses no epoch
  int offset = 0;
  for (const std::string model : {"mlp", "lenet"}) {
    for (const int64_t micro : {1, 3}) {
      SCOPED_TRACE(model + ", micro-batches " + std::to_string(micro));
      std::remove(out.c_str());
      const int port = test_port(++offset);
      const std::vector<std::string> worker{self_exe(), "--gtest_also_run_disabled_tests",
                                            "--gtest_filter=DataParallel.DISABLED_Worker"};
      const std::vector<std::pair<std::string, std::string>> env{{"BW_MODEL", model},
                                                                 {"BW_STEPS", std::to_string(kSteps)},
                                                                 {"BW_BATCH", std::to_string(kBatch)},
                                                                 {"BW_MICRO", std::to_string(micro)},
                                                                 {"BW_OUT", out}};
      const pid_t r0 = start_rank(worker, 0, 2, port, env, out + ".0.log");
      const pid_t r1 = start_rank(worker, 1, 2, port, env, out + ".1.log");
      ASSERT_EQ(wait_exit(r0), 0) << cli::slurp(out + ".0.log.out") << cli::slurp(out + ".0.log");
      ASSERT_EQ(wait_exit(r1), 0) << cli::slurp(out + ".1.log.out") << cli::slurp(out + ".1.log");
      std::vector<at::Tensor> distributed;
      torch::load(distributed, out);

      // One process, the same seed, the two ranks' batches as one: batch 2 x kBatch.
      auto one = small_workload(model);
      auto& module = dynamic_cast<ModuleWorkload&>(*one).module();
      std::vector<at::Tensor> initial;
      for (const auto& p : module.parameters()) initial.push_back(p.detach().clone());
      for (int i = 0; i < kSteps; ++i) (void)one->train_step(one->next_batch(2 * kBatch));
      const auto params = module.parameters();
      ASSERT_EQ(params.size(), distributed.size());
      double moved = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(at::allclose(distributed[i], params[i].detach(), 1e-4, 1e-6))
            << "parameter " << i << ": largest difference "
            << (distributed[i] - params[i].detach()).abs().max().item<double>();
        moved = std::max(moved, (params[i].detach() - initial[i]).abs().max().item<double>());
      }
      EXPECT_GT(moved, 1e-3) << "the steps did not train";
    }
  }
}

TEST(DataParallel, OutOfMemoryOnOneRankFailsTheBatchForEveryRank) {
  // torchrun's way: each rank its own command line, here with its own budget.
  const cli::fs::path dir = cli::scratch();
  const int port = test_port(101);
  auto command = [&](const std::string& budget, const std::string& json) {
    // binsearch doubles past the answer (model mode's probes may never fail); --multiple-of keeps
    // the bisection short.
    return std::vector<std::string>{BATCHWISE_TEST_BINARY, "fit",    "--model",      "mlp",           "--dataset",
                                    "synthetic",           "--mode", "binsearch",    "--multiple-of", "512",
                                    "--memory-budget",     budget,   "--no-history", "--json",        json};
  };
  const std::string j0 = (dir / "oom0.json").string(), j1 = (dir / "oom1.json").string();
  const pid_t r0 = start_rank(command("512MiB", j0), 0, 2, port, {}, (dir / "oom0.err").string());
  const pid_t r1 = start_rank(command("96MiB", j1), 1, 2, port, {}, (dir / "oom1.err").string());
  const int c0 = wait_exit(r0), c1 = wait_exit(r1);
  const std::string e0 = cli::slurp(dir / "oom0.err"), e1 = cli::slurp(dir / "oom1.err");
  ASSERT_EQ(c0, 0) << e0;
  ASSERT_EQ(c1, 0) << e1;
  const auto report = nlohmann::json::parse(cli::slurp(j0));
  EXPECT_FALSE(cli::fs::exists(j1)) << "only rank 0 writes the report";
  EXPECT_EQ(report["budget_bytes"], 96 << 20) << "the smallest rank budget decides";
  EXPECT_EQ(report["distributed"]["rank_budget_bytes"], nlohmann::json::array({512 << 20, 96 << 20}));
  const int64_t fitted = report["fit"]["batch"];
  // The same answer on both ranks: rank 1 says it in its last line.
  EXPECT_NE(
      e1.find("rank 1 of 2): done, as agreed with every rank: fit batch " + std::to_string(fitted) + " per device"),
      std::string::npos)
      << e1;
  // Some trial ran out of memory on rank 1 only, and failed for both.
  bool one_rank_oom = false;
  int64_t smallest_failure = INT64_MAX;
  for (const auto& t : report["fit"]["trials"]) {
    const int64_t batch = t["batch"];
    EXPECT_LT(batch, smallest_failure) << "a batch at or above one that failed was tried";
    if (t["outcome"] == "oom") {
      smallest_failure = std::min(smallest_failure, batch);
      EXPECT_EQ(t["distributed"]["rank_outcomes"], nlohmann::json::array({"ok", "oom"}));
      EXPECT_NE(t["message"].get<std::string>().find("out of memory on rank 1 of 2: CPU memory budget exceeded"),
                std::string::npos)
          << t["message"];
      one_rank_oom = true;
    }
  }
  EXPECT_TRUE(one_rank_oom) << report["fit"]["trials"].dump();
  EXPECT_LT(fitted, smallest_failure);
}

namespace {

// `batchwise sweep --nproc 2` until its first trial is done, then `signal` to rank 1. Returns the
// launcher's exit code, its stderr and the seconds from the signal to its end.
std::tuple<int, std::string, double> sweep_then_signal_rank_1(int signal, const std::string& timeout_s) {
  const cli::fs::path dir = cli::scratch();
  const std::string err = (dir / ("fault" + std::to_string(signal) + ".err")).string();
  // A file left by an earlier process with the same pid (the scratch folder is named by pid) would
  // show its "[trial 1/" before this launcher has forked, and rank 1 would not be found.
  cli::fs::remove(err);
  const pid_t launcher = start_rank(
      {BATCHWISE_TEST_BINARY, "sweep", "--model", "lenet", "--dataset", "synthetic", "--nproc", "2", "--batch-sizes",
       "32,64,128", "--steps", "30", "--repetitions", "3", "--no-history", "--dist-timeout", timeout_s},
      0, 1, 0, {{"WORLD_SIZE", ""}, {"RANK", ""}, {"OMP_NUM_THREADS", ""}}, err);
  // Until the first trial is reported, every rank is known to be in the trials.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (cli::slurp(err).find("[trial 1/") == std::string::npos && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string children =
      cli::slurp("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  int rank0 = 0, rank1 = 0;
  std::sscanf(children.c_str(), "%d %d", &rank0, &rank1);
  EXPECT_GT(rank1, 0) << "no rank 1 among the launcher's children: '" << children << "'\n" << cli::slurp(err);
  if (rank1 > 0) kill(rank1, signal);
  const auto signalled = Clock::now();
  const int code = wait_exit(launcher);
  const double seconds = std::chrono::duration<double>(Clock::now() - signalled).count();
  if (rank1 > 0) kill(rank1, SIGKILL);  // a stopped rank the launcher has not ended yet
  return {code, cli::slurp(err), seconds};
}

}  // namespace

TEST(DataParallel, AKilledRankEndsTheOthersWithAClearError) {
  const auto [code, err, seconds] = sweep_then_signal_rank_1(SIGKILL, "20");
  EXPECT_EQ(code, 7) << err;
  EXPECT_LT(seconds, 20) << "the other rank should notice the broken connection at once, not at the timeout";
  EXPECT_NE(err.find("rank 1 of 2 (pid"), std::string::npos) << err;
  EXPECT_NE(err.find("was killed by signal 9"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 0 of 2: "), std::string::npos) << err;
  EXPECT_NE(err.find("another rank died"), std::string::npos) << err;
  for (const char* trace : {"terminate called", "Exception raised from", "frame #"})
    EXPECT_EQ(err.find(trace), std::string::npos) << err;
}

TEST(DataParallel, AHungRankEndsTheOthersAtTheTimeout) {
  const auto [code, err, seconds] = sweep_then_signal_rank_1(SIGSTOP, "3");
  EXPECT_EQ(code, 7) << err;
  EXPECT_LT(seconds, 3 + 10) << "the run must end soon after the 3 s timeout";
  EXPECT_NE(err.find("did not answer within the 3 s timeout"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 1 of 2"), std::string::npos) << err;
}

TEST(DataParallel, NprocSweepReportsScalingAndTheAllReduceShare) {
  const cli::fs::path dir = cli::scratch();
  const auto r = cli::batchwise(
      "sweep --model mlp --dataset synthetic --nproc 2 --batch-sizes 16,64 --steps 3 "
      "--repetitions 2 --no-history --json " +
      (dir / "dp_sweep.json").string() + " --html " + (dir / "dp_sweep.html").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto report = nlohmann::json::parse(cli::slurp(dir / "dp_sweep.json"));
  EXPECT_EQ(report["distributed"]["world_size"], 2);
  EXPECT_EQ(report["distributed"]["backend"], "gloo");
  for (const auto& p : report["sweep"]["points"]) {
    ASSERT_EQ(p["outcome"], "ok") << p.dump();
    const auto& d = p["distributed"];
    EXPECT_EQ(d["global_batch"], 2 * p["batch"].get<int64_t>());
    EXPECT_EQ(d["rank_step_time_s"].size(), 2u);
    EXPECT_GT(d["allreduce_share"].get<double>(), 0);
    EXPECT_LT(d["allreduce_share"].get<double>(), 1);
    // samples/s counts both ranks: 2 x batch over the (slowest rank's) median step.
    EXPECT_NEAR(p["samples_per_s"].get<double>(),
                2.0 * p["batch"].get<double>() / p["step_time_s_median"].get<double>(),
                1e-6 * p["samples_per_s"].get<double>());
    const double eff = d["scaling_efficiency"];
    EXPECT_NEAR(eff, p["samples_per_s"].get<double>() / (2 * d["single_process_samples_per_s"].get<double>()), 1e-9);
  }
  EXPECT_NE(r.out.find("data-parallel: 2 ranks (gloo)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all-reduce"), std::string::npos) << r.out;
  // The ranks run --steps exactly (their all-reduces pair up): neither the JSON nor the header says "at least 0.1 s".
  EXPECT_EQ(report["sweep"]["min_time_s"], 0) << report["sweep"].dump();
  EXPECT_EQ(r.out.find("at least"), std::string::npos) << r.out;
  const std::string html = cli::slurp(dir / "dp_sweep.html");
  EXPECT_NE(html.find("<h2>Data-parallel</h2>"), std::string::npos);
  EXPECT_NE(html.find("ok / ok"), std::string::npos) << "each rank's outcome, per batch";
}

// Rank 0's run alone is checked for time only between steps, while the other ranks wait in a
// collective: it is planned from the measured step time to end within their patience (0.8 x
// --dist-timeout) with room for one slower step, shortened, or left out with a note.
TEST(DataParallel, TheSingleProcessRunIsPlannedWithinTheOtherRanksPatience) {
  EXPECT_EQ(plan_single_process_run(2, 5, 0.1, 8.0), std::make_pair(2, 5));  // 7 steps of 0.1 s: room to spare
  EXPECT_EQ(plan_single_process_run(2, 5, 1.0, 6.0), std::make_pair(1, 3));  // 4 fit beside a slower one
  EXPECT_EQ(plan_single_process_run(2, 5, 1.0, 3.4), std::nullopt);          // 1 step: nothing to measure
  EXPECT_EQ(plan_single_process_run(0, 3, 0.0, 1.0), std::make_pair(0, 3));  // no step time: as asked
  // Steps of ~2 s and a 3 s --dist-timeout: alone, 3 steps would take 6 s while rank 1 waits at
  // most 3 s, and the run once ended there with exit 7. Now the sweep ends ok and says why.
  const cli::fs::path dir = cli::scratch();
  const auto r = cli::batchwise(
      "sweep --model mlp --dataset synthetic --synthetic-size 256 --nproc 2 --batch-sizes 8 "
      "--io-latency-us 250000 --warmup 1 --steps 2 --repetitions 1 --dist-timeout 3 "
      "--no-history -q --json " +
      (dir / "dp_patience.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto report = nlohmann::json::parse(cli::slurp(dir / "dp_patience.json"));
  const auto& p = report["sweep"]["points"][0];
  ASSERT_EQ(p["outcome"], "ok") << p.dump();
  EXPECT_TRUE(p["distributed"]["single_process_samples_per_s"].is_null());
  EXPECT_NE(p["distributed"]["single_process_note"].get<std::string>().find("patience"), std::string::npos)
      << p["distributed"].dump();
}

TEST(DataParallel, PlanUsesTheRanksAndStatesTheLastBatch) {
  // 10000 samples, global batch 1536: 6 full steps, and 784 samples dropped (or 752 padded).
  const auto r = cli::batchwise(
      "plan --model mlp --dataset synthetic --nproc 2 --global-batch 1536 "
      "--memory-budget 64MiB --no-history --json " +
      (cli::scratch() / "dp_plan.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto report = nlohmann::json::parse(cli::slurp(cli::scratch() / "dp_plan.json"));
  const auto& a = report["accumulation_plan"];
  EXPECT_EQ(a["world_size"], 2);
  EXPECT_EQ(a["global_batch"], 1536);
  EXPECT_EQ(a["per_device_batch"].get<int64_t>() * 2, 1536);
  EXPECT_EQ(a["micro_batch"].get<int64_t>() * a["accumulation_steps"].get<int64_t>(), 768);
  EXPECT_LE(a["micro_batch"].get<int64_t>(), report["fit"]["batch"].get<int64_t>());
  EXPECT_NE(r.out.find("the last 784 samples are dropped"), std::string::npos) << r.out;
}

TEST(DataParallel, BadGroupEnvironmentIsAClearError) {
  cli::expect_clean_error("fit --model mlp --dataset synthetic --nproc -1", 2,
                          "--nproc: -1: must be at least 1 (the number of local processes)");
  const auto r = cli::batchwise("--version");
  ASSERT_EQ(r.code, 0);
  // RANK beyond WORLD_SIZE, as a launcher would set it wrongly.
  const std::string bad = "WORLD_SIZE=2 RANK=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 " +
                          std::string(BATCHWISE_TEST_BINARY) + " fit --model mlp --dataset synthetic --no-history 2>&1";
  FILE* p = popen(bad.c_str(), "r");
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p)) text += buf;
  const int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 2) << text;
  EXPECT_NE(text.find("RANK=2 with WORLD_SIZE=2: the rank must be below the world size"), std::string::npos) << text;
  // A launcher's rank given --nproc (it had started a group inside each rank), or plan another --world-size (dropped)
  const std::string launched = "WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999";
  const auto nested = cli::batchwise("sweep --model mlp --dataset synthetic --nproc 2 --no-history", launched);
  EXPECT_EQ(nested.code, 2) << nested.err;
  EXPECT_EQ(nested.err,
            "batchwise sweep: --nproc 2: WORLD_SIZE=2 is set, so a launcher (torchrun) started this "
            "process as one of its ranks; drop --nproc, or run without the launcher\n");
  const auto planned =
      cli::batchwise("plan --model mlp --dataset synthetic --global-batch 256 --world-size 4 --no-history", launched);
  EXPECT_EQ(planned.code, 2) << planned.err;
  EXPECT_NE(planned.err.find("--world-size 4: this run's group has 2 ranks (WORLD_SIZE), and plan plans for them"),
            std::string::npos)
      << planned.err;
}

// Rank 0 writes the outputs: --nproc's launcher checks their paths once, before a rank starts (each rank had said
// it), and a launcher's rank other than 0 leaves them to rank 0 (on another node their folder need not exist: its
// refusal had left rank 0 waiting to its timeout, blaming MASTER_ADDR).
TEST(DataParallel, OnlyTheProcessThatWritesTheOutputsChecksTheirPaths) {
  const std::string missing = (cli::scratch() / "no-such-folder" / "r.json").string();
  const std::string sweep = "sweep --model mlp --dataset synthetic --synthetic-size 256 --batch-sizes 16 --no-history ";
  const auto launcher = cli::batchwise(sweep + "--nproc 2 --json " + missing);
  EXPECT_EQ(launcher.code, 2) << launcher.err;
  EXPECT_EQ(launcher.err,
            "batchwise sweep: --json " + missing + ": cannot write there; check the folder exists and is writable\n");
  const auto rank1 = cli::batchwise(sweep + "--dist-timeout 2 --json " + missing,
                                    "WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 "
                                    "MASTER_PORT=29997");
  EXPECT_EQ(rank1.code, 7) << rank1.err;  // no rank 0 came: the group's error, not the path's
  EXPECT_EQ(rank1.err.find("cannot write"), std::string::npos) << rank1.err;
}

TEST(DataParallel, ATrialTimeoutIsAgreedAsATimeout) {
  // Each rank's clock would stop it at its own step; the deadline is agreed at the all-reduce. The input waits 1 ms a
  // sample (64 ms a step, 3.2 s for the 50) so that no machine is fast enough to finish inside 0.3 s: the lenet steps
  // alone took 0.83 s here, a machine 2.8x as fast would have finished them.
  const cli::fs::path json = cli::scratch() / "dp_timeout.json";
  const auto r = cli::batchwise(
      "sweep --model lenet --dataset synthetic --nproc 2 --batch-sizes 64 --steps 50 --io-latency-us 1000 "
      "--repetitions 1 --trial-timeout 0.3 --no-history --json " +
      json.string());
  ASSERT_EQ(r.code, 1) << r.err;  // its only batch timed out: the sweep measured nothing
  const auto p = nlohmann::json::parse(cli::slurp(json))["sweep"]["points"][0];
  EXPECT_EQ(p["outcome"], "timeout") << p.dump();
  EXPECT_EQ(p["distributed"]["rank_outcomes"], nlohmann::json::array({"timeout", "timeout"}));
  EXPECT_NE(p["message"].get<std::string>().find("timed out on rank"), std::string::npos) << p["message"];
}

// Not a test on its own: one rank of DataParallel.ARankWhoseAllReduceBufferDoesNotFitStillTakesPart.
// Rank 1's next BW_FAIL all-reduce buffers fail as out of memory; each rank prints what it saw.
TEST(DataParallel, DISABLED_BufferWorker) {
  const auto address = group_address_from_env();
  ASSERT_TRUE(address.has_value());
  CpuMemoryTracker::install();  // trials measure memory through it
  auto workload = small_workload("mlp");
  auto group = Group::join(*address, workload->device(), std::chrono::seconds(std::atoi(std::getenv("BW_TIMEOUT_S"))));
  DataParallelWorkload dp(dynamic_cast<ModuleWorkload&>(*workload), group);
  DistributedRunner runner(dp, 0, /*measure_scaling=*/false);
  if (group->rank() == 1) batchwise::detail::fail_flat_buffers(std::atoi(std::getenv("BW_FAIL")));
  try {
    const Trial t = runner.run(TrialOptions(16).warmup(0).steps(2));
    std::printf("first: %s [%s, %s] %s\n", to_string(t.outcome), to_string(t.distributed->rank_outcomes.at(0)),
                to_string(t.distributed->rank_outcomes.at(1)), t.message.c_str());
    const Trial u = runner.run(TrialOptions(16).warmup(0).steps(2));  // the ranks are still in step
    std::printf("second: %s\n", to_string(u.outcome));
  } catch (const DistributedError& e) {
    std::printf("distributed error: %s\n", e.what());
  }
}

// A rank whose all-reduce buffer does not fit must still take part in the all-reduce, or the
// others wait in it until the timeout (on CUDA the retry once hit the same memory cap). Its
// out-of-memory is the trial's outcome for every rank, and the next trial runs in step. Where not
// even the retry fits, that rank says why, and the other ends at once instead of waiting.
TEST(DataParallel, ARankWhoseAllReduceBufferDoesNotFitStillTakesPart) {
  const cli::fs::path dir = cli::scratch();
  const std::vector<std::string> worker{self_exe(), "--gtest_also_run_disabled_tests",
                                        "--gtest_filter=DataParallel.DISABLED_BufferWorker"};
  for (const int failing : {1, 2}) {
    SCOPED_TRACE("failing allocations: " + std::to_string(failing));
    const int port = test_port(200 + failing);
    const std::vector<std::pair<std::string, std::string>> env{{"BW_FAIL", std::to_string(failing)},
                                                               {"BW_TIMEOUT_S", "60"}};
    const std::string log0 = (dir / ("buffer0_" + std::to_string(failing))).string();
    const std::string log1 = (dir / ("buffer1_" + std::to_string(failing))).string();
    const auto start = Clock::now();
    const pid_t r0 = start_rank(worker, 0, 2, port, env, log0);
    const pid_t r1 = start_rank(worker, 1, 2, port, env, log1);
    EXPECT_EQ(wait_exit(r0), 0) << cli::slurp(log0);
    EXPECT_EQ(wait_exit(r1), 0) << cli::slurp(log1);
    const double took_s = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_LT(took_s, 50) << "a rank waited for the other until the timeout";
    const std::string out0 = cli::slurp(log0 + ".out"), out1 = cli::slurp(log1 + ".out");
    if (failing == 1) {
      for (const std::string& out : {out0, out1}) {
        EXPECT_NE(out.find("first: oom [ok, oom] out of memory on rank 1 of 2: the all-reduce buffer did not fit"),
                  std::string::npos)
            << out;
        EXPECT_NE(out.find("second: ok"), std::string::npos) << out;
      }
    } else {
      EXPECT_NE(out1.find("distributed error: rank 1 of 2: batch 16's trial: the all-reduce buffer ("),
                std::string::npos)
          << out1;
      EXPECT_NE(out1.find("does not fit even with this rank's gradients freed and its memory limit lifted"),
                std::string::npos)
          << out1;
      EXPECT_NE(out0.find("distributed error: rank 0 of 2:"), std::string::npos) << out0;
    }
  }
}

// Not a test on its own: one rank of DataParallel.ARankThatWaitedForACoreIsRetriedOnEveryRank.
// Rank 1 shares its core with two busy processes, so its trials wait for it; rank 0 runs on another
// core where there is one. Each rank sweeps two batches once and prints what its sweep ran again and
// the figures it read.
TEST(DataParallel, DISABLED_WaitWorker) {
  const auto address = group_address_from_env();
  ASSERT_TRUE(address.has_value());
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  const int core = address->rank == 1 ? cpus.front() : cpus.back();
  CPU_ZERO(&mask);
  CPU_SET(core, &mask);
  ASSERT_EQ(sched_setaffinity(0, sizeof(mask), &mask), 0);
  std::vector<std::unique_ptr<support::BusyCore>> busy;
  for (int i = 0; address->rank == 1 && i < 2; ++i) busy.push_back(std::make_unique<support::BusyCore>(core));
  CpuMemoryTracker::install();
  auto workload = make_workload(
      WorkloadOptions().model("mlp").dataset("synthetic").synthetic_size(4000).device("cpu").lr(0.05).seed(7));
  auto group = Group::join(*address, workload->device(), std::chrono::seconds(30));
  DataParallelWorkload dp(dynamic_cast<ModuleWorkload&>(*workload), group);
  DistributedRunner runner(dp, 0, /*measure_scaling=*/false);
  try {
    const SweepResult r = sweep(runner, SweepOptions().batch_sizes({256, 512}).warmup(1).steps(4).repetitions(1));
    std::printf("retried: %s\n", fmt::format("{}", fmt::join(r.cpu_retried, ",")).c_str());
    for (const Trial& p : r.points)
      std::printf("batch %lld: %s, wait share %.6f, step %.6f s\n", static_cast<long long>(p.batch),
                  to_string(p.outcome), p.cpu_wait_share.value_or(-1), p.step_time_s_median);
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
  }
}

// The sweep runs a trial again where it waited for a core; every rank must decide that alike, or
// one rank trains a trial the others never join (CI once saw Gloo abort on the mismatch). The ranks
// agree on the wait share (the most any rank waited), so both retry the same trials and read the
// same figures.
TEST(DataParallel, ARankThatWaitedForACoreIsRetriedOnEveryRank) {
  if (!scheduler_times()) GTEST_SKIP() << "no /proc/self/task/*/schedstat: Linux gives no wait share here";
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0 || sched_setaffinity(0, sizeof(mask), &mask) != 0)
    GTEST_SKIP() << "this process may not pin itself to a core";
  const cli::fs::path dir = cli::scratch();
  const std::vector<std::string> worker{self_exe(), "--gtest_also_run_disabled_tests",
                                        "--gtest_filter=DataParallel.DISABLED_WaitWorker"};
  const int port = test_port(300);
  const std::string log0 = (dir / "wait0").string(), log1 = (dir / "wait1").string();
  const pid_t r0 = start_rank(worker, 0, 2, port, {}, log0);
  const pid_t r1 = start_rank(worker, 1, 2, port, {}, log1);
  EXPECT_EQ(wait_exit(r0), 0) << cli::slurp(log0);
  EXPECT_EQ(wait_exit(r1), 0) << cli::slurp(log1);
  const std::string out0 = cli::slurp(log0 + ".out"), out1 = cli::slurp(log1 + ".out");
  const auto figures = [](const std::string& out) {
    const size_t from = out.find("retried: ");
    return from == std::string::npos ? std::string() : out.substr(from, out.find("\n[", from) - from);
  };
  ASSERT_FALSE(figures(out0).empty()) << out0 << cli::slurp(log0);
  EXPECT_EQ(figures(out0), figures(out1)) << "the ranks read different figures:\n" << out0 << "\n" << out1;
  EXPECT_EQ(figures(out0).find("retried: \n"), std::string::npos) << "rank 1 waited, so a trial ran again:\n" << out0;
  EXPECT_EQ(out0.find("error: "), std::string::npos) << out0;
}

// --nproc N with CUDA: one GPU per rank (cuda:LOCAL_RANK); a host with fewer GPUs than ranks is
// refused with the reason and the fix, instead of rank 1 failing on a cuda:1 that does not exist.
TEST(DataParallel, EachCudaRankTakesItsOwnDeviceOrTheRunIsRefused) {
  GroupAddress a;
  a.world_size = a.local_world_size = 2;
  a.local_rank = 1;
  EXPECT_EQ(rank_device("cpu", a, 2), "cpu");
  EXPECT_EQ(rank_device("auto", a, 0), "cpu");
  EXPECT_EQ(rank_device("auto", a, 2), "cuda:1");
  EXPECT_EQ(rank_device("cuda", a, 4), "cuda:1");
  for (const std::string device : {"cuda", "auto"}) {
    try {
      (void)rank_device(device, a, 1);
      ADD_FAILURE() << device << ": two ranks on one GPU were accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                "2 ranks on this host, but it has 1 CUDA device(s): each data-parallel rank needs a GPU of its own "
                "(NCCL runs one rank per device); use --nproc 1 or fewer, or --device cpu to train the ranks on the "
                "CPU over Gloo");
    }
  }
  EXPECT_THROW((void)rank_device("cuda:1", a, 2), ConfigError);  // every rank on one device
  a.local_world_size = 1;  // one rank per host (torchrun across machines): the device asked for
  EXPECT_EQ(rank_device("cuda:1", a, 2), "cuda:1");
  // No GPU at all is the device's error, as one process's (exit 5; its usage error's fix, --nproc 1, had failed so)
  EXPECT_THROW((void)rank_device("cuda", a, 0), DeviceError);
  // The CLI refuses before it starts any rank: one line
  if (visible_cuda_devices() == 0)
    cli::expect_clean_error("fit --model mlp --dataset synthetic --nproc 2 --device cuda --no-history", 5,
                            "batchwise fit: --device cuda: no CUDA device is visible (no GPU, or no driver)");
}

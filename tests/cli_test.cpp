// The command line as a user meets it: exit codes, one-line messages naming the input and the
// fix, never a stack trace; and an end-to-end tune that writes its JSON report.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sys/wait.h>

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path scratch() {
  const fs::path dir = fs::temp_directory_path() / ("batchwise-cli-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

Outcome batchwise(const std::string& args) {
  const fs::path dir = scratch();
  const std::string cmd = std::string(BATCHWISE_TEST_BINARY) + " " + args + " >" + (dir / "out").string() + " 2>" +
                          (dir / "err").string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  Outcome r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  return r;
}

// A bad input: the exit code, one line on stderr containing `message`, and no trace.
void expect_clean_error(const std::string& args, int code, const std::string& message) {
  const Outcome r = batchwise(args);
  EXPECT_EQ(r.code, code) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << args << "\nstderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not one line: " << r.err;
  for (const char* trace : {"terminate called", "Exception raised from", "frame #", "what():"})
    EXPECT_EQ(r.err.find(trace), std::string::npos) << args << "\n" << r.err;
}

TEST(Cli, UnknownNamesListTheChoices) {
  expect_clean_error("fit --model nope", 2,
                     "batchwise fit: --model nope: unknown model; choose one of mlp, lenet, resnet18, transformer");
  expect_clean_error("fit --dataset imagenet", 2, "--dataset imagenet: unknown dataset; choose one of fashion-mnist, synthetic");
  expect_clean_error("sweep --optimizer lion --batch-sizes 8", 2, "--optimizer lion: unknown optimizer; choose one of sgd, adam, adamw");
}

TEST(Cli, MalformedOptions) {
  expect_clean_error("fit --memory-budget 2XB", 2, "--memory-budget: unknown unit 'XB' in '2XB'");
  expect_clean_error("fit --model mlp --dataset synthetic --min 64 --max 8", 2, "--min 64 is above --max 8");
  expect_clean_error("sweep --batch-sizes 16,,32", 2, "--batch-sizes: '' is not a batch size");
  expect_clean_error("sweep --model mlp", 2, "no batch sizes; pass --batch-sizes");
  expect_clean_error("fit --model mlp --dataset synthetic --target 2", 2, "--target 2: must be a fraction");
  expect_clean_error("fit --model transformer --dataset synthetic --seq-len 128-32", 2,
                     "--seq-len: range '128-32' runs backwards");
}

TEST(Cli, PlanForWritesThePlan) {
  expect_clean_error("fit --model mlp --dataset synthetic --plan-for tpu", 2, "--plan-for tpu: give a size like 24GiB");
  const fs::path json = scratch() / "plan.json";
  const Outcome r = batchwise("fit --model mlp --dataset synthetic --synthetic-size 256 --memory-budget 32MiB "
                              "--plan-for a100-40gb --quiet --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("plan for a100-40gb (40.0 GiB): batch "), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j.at("plan").at("device").at("bytes"), 40ll << 30);
  EXPECT_GT(j.at("plan").at("batch").get<int64_t>(), j.at("fit").at("batch").get<int64_t>());
  EXPECT_EQ(j.at("plan").at("assumptions").size(), 5u);
}

TEST(Cli, VariableLengthSequencesFitTheLongest) {
  const fs::path range_json = scratch() / "range.json";
  const fs::path longest_json = scratch() / "longest.json";
  const std::string common = "fit --model transformer --dataset synthetic --synthetic-size 256 --memory-budget 48MiB "
                             "--multiple-of 4 --quiet --json ";
  const Outcome range = batchwise(common + range_json.string() + " --seq-len 8-32");
  const Outcome longest = batchwise(common + longest_json.string() + " --seq-len 32");
  ASSERT_EQ(range.code, 0) << range.err;
  ASSERT_EQ(longest.code, 0) << longest.err;
  const auto r = nlohmann::json::parse(slurp(range_json));
  const auto l = nlohmann::json::parse(slurp(longest_json));
  EXPECT_EQ(r.at("workload").at("seq_len_range"), nlohmann::json::array({8, 32}));
  EXPECT_EQ(r.at("workload").at("input_shape"), nlohmann::json::array({32}));
  EXPECT_EQ(r.at("fit").at("batch"), l.at("fit").at("batch"));  // the worst case decides
  EXPECT_NE(range.out.find("sequences of 8 to 32 tokens: every trial runs at 32"), std::string::npos) << range.out;
}

TEST(Cli, MissingDatasetNamesTheFix) {
  expect_clean_error("fit --data-dir /nonexistent/fmnist", 3,
                     "fashion-mnist: data directory /nonexistent/fmnist does not exist; install Debian's "
                     "dataset-fashion-mnist");
}

TEST(Cli, CorruptDatasetIsADataError) {
  const fs::path dir = scratch() / "corrupt";
  fs::create_directories(dir);
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"})
    fs::copy_file(fs::path("/usr/share/datasets/fashion-mnist") / name, dir / name, fs::copy_options::overwrite_existing);
  std::ofstream(dir / "train-images-idx3-ubyte.gz", std::ios::binary | std::ios::trunc) << "not gzip, not IDX";
  expect_clean_error("fit --data-dir " + dir.string(), 3, "train-images-idx3-ubyte.gz: expected magic 2051");
}

TEST(Cli, BudgetBelowTheModel) {
  expect_clean_error("fit --model resnet18 --dataset synthetic --memory-budget 1MiB", 2,
                     "--memory-budget 1.00 MiB is below the model's own size");
}

TEST(Cli, CudaWithoutAGpuIsADeviceError) {
  if (std::system("nvidia-smi -L >/dev/null 2>&1") == 0) GTEST_SKIP() << "this machine has a GPU";
  expect_clean_error("fit --model mlp --dataset synthetic --device cuda", 5, "--device cuda: ");
}

TEST(Cli, NothingFitsExitsSixWithANullBatch) {
  const fs::path json = scratch() / "nofit.json";
  const Outcome r = batchwise("fit --model mlp --dataset synthetic --memory-budget 3MiB --quiet --json " + json.string());
  EXPECT_EQ(r.code, 6) << r.err;
  EXPECT_NE(r.out.find("no batch fits: batch 1 did not complete"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_TRUE(j.at("fit").at("batch").is_null());
  EXPECT_EQ(j.at("fit").at("outcome"), "does_not_fit");
}

TEST(Cli, EverySubcommandHasHelpWithAnExample) {
  for (const char* sub : {"fit", "sweep", "tune"}) {
    const Outcome r = batchwise(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find("Example:"), std::string::npos) << sub << r.out;
    EXPECT_NE(r.out.find("--memory-budget"), std::string::npos) << sub;
  }
}

TEST(Cli, TuneOnATinySyntheticWorkloadWritesTheReport) {
  const fs::path json = scratch() / "tune.json";
  const Outcome r = batchwise(
      "tune --model mlp --dataset synthetic --synthetic-size 512 --memory-budget 64MiB --max 64 --warmup 1 --steps 2 "
      "--repetitions 2 --threads 1 --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("[trial 1] batch 1: ok"), std::string::npos) << r.err;  // progress, one line per trial
  EXPECT_NE(r.out.find("recommendation: batch "), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j.at("schema_version"), "1");
  EXPECT_EQ(j.at("context").at("threads"), 1);
  EXPECT_EQ(j.at("context").at("device").at("type"), "cpu");
  EXPECT_EQ(j.at("workload").at("model"), "mlp");
  EXPECT_EQ(j.at("budget_bytes"), 64ll << 20);
  EXPECT_EQ(j.at("fit").at("outcome"), "fits");
  EXPECT_EQ(j.at("fit").at("batch"), 64);
  EXPECT_EQ(j.at("sweep").at("points").size(), 7u);
  for (const auto& p : j.at("sweep").at("points")) {
    EXPECT_EQ(p.at("outcome"), "ok");
    EXPECT_EQ(p.at("step_times_s").size(), 4u);  // 2 steps x 2 repetitions, raw
    EXPECT_EQ(p.at("steps_run"), 6);
  }
  EXPECT_EQ(j.at("recommendation").at("batch"), j.at("sweep").at("knee_batch"));
}

}  // namespace

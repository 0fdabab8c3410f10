// TorchScript models exported from Python (src/engine/torchscript.cpp), loaded by the batchwise
// binary as a user's --model FILE.pt: a torchvision ResNet-18 fitted and swept within a budget, and
// each kind of bad model file with its own message.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/cli_util.h"

namespace {

using namespace cli;

// Runs a Python script with the torch batchwise was built against; false (and the reason in `why`)
// when it fails.
bool python(const std::string& args, std::string& why) {
  const fs::path log = scratch() / "python.log";
  const std::string cmd = std::string(BATCHWISE_TEST_PYTHON) + " " + args + " >" + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  why = slurp(log);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// TorchScript files exported from Python once per test binary run (atomically, as CTest runs tests
// in parallel): a torchvision ResNet-18 through examples/export_torchscript.py, and a module with
// no parameters.
class TorchScriptModels : public ::testing::Test {
 protected:
  static fs::path dir() { return fs::temp_directory_path() / "batchwise-torchscript-models"; }
  static std::string exported(const std::string& name, const std::string& script_args) {
    const fs::path file = dir() / name;
    if (fs::exists(file)) return file.string();
    fs::create_directories(dir());
    const fs::path tmp = dir() / (name + "." + std::to_string(::getpid()));
    std::string why;
    if (!python(script_args + " " + tmp.string(), why)) {
      ADD_FAILURE() << "exporting " << name << " failed (bash scripts/bootstrap.sh test installs torchvision):\n"
                    << why;
      return {};
    }
    fs::rename(tmp, file);
    return file.string();
  }
  static std::string resnet18() {
    return exported("resnet18.pt", std::string(BATCHWISE_TEST_SOURCE_DIR) +
                                       "/examples/export_torchscript.py --model resnet18 --num-classes 10 --out");
  }
};

TEST_F(TorchScriptModels, TorchvisionResNet18IsFittedAndSweptWithABudget) {
  const std::string model = resnet18();
  ASSERT_FALSE(model.empty());
  const fs::path fit_json = scratch() / "r18-fit.json";
  const Outcome fit = batchwise("fit --model " + model +
                                " --input-shape 3x32x32 --dataset synthetic --synthetic-size 512 "
                                "--memory-budget 256MiB --min 2 --max 1024 --threads 2 -q --json " +
                                fit_json.string());
  ASSERT_EQ(fit.code, 0) << fit.err << fit.out;
  const auto f = nlohmann::json::parse(slurp(fit_json));
  EXPECT_EQ(f.at("workload").at("model"), model);
  EXPECT_EQ(f.at("workload").at("parameter_count"), 11181642);            // torchvision's resnet18 with 10 classes
  EXPECT_EQ(f.at("workload").at("trainable_parameter_count"), 11181642);  // none frozen
  EXPECT_EQ(f.at("fit").at("outcome"), "fits");
  const int64_t batch = f.at("fit").at("batch");
  EXPECT_GT(batch, 2);
  EXPECT_LT(batch, 1024);  // the budget, not --max, set it
  const auto allowed = static_cast<int64_t>(0.9 * (256 << 20));
  // The batch above the answer was tried and did not fit, or the line that predicted the answer's
  // peak puts it over the target (fit.above, untried).
  bool above_failed = f.at("fit").contains("above") && f.at("fit").at("above").at("batch") == batch + 1 &&
                      f.at("fit").at("above").at("predicted_bytes").get<int64_t>() > allowed;
  for (const auto& t : f.at("fit").at("trials")) {
    if (t.at("batch") == batch) EXPECT_LE(t.at("peak_bytes").get<int64_t>(), allowed);
    if (t.at("batch") == batch + 1) above_failed = t.at("within_target") == false;
  }
  EXPECT_TRUE(above_failed) << f.at("fit").dump();

  const fs::path sweep_json = scratch() / "r18-sweep.json";
  const Outcome sweep = batchwise("sweep --model " + model +
                                  " --input-shape 3x32x32 --dataset synthetic "
                                  "--synthetic-size 512 --memory-budget 256MiB --batch-sizes 4,16 --repetitions 1 "
                                  "--warmup 1 --steps 2 --threads 2 -q --json " +
                                  sweep_json.string());
  ASSERT_EQ(sweep.code, 0) << sweep.err;
  const auto s = nlohmann::json::parse(slurp(sweep_json));
  ASSERT_EQ(s.at("sweep").at("points").size(), 2u);
  for (const auto& p : s.at("sweep").at("points")) {
    EXPECT_EQ(p.at("outcome"), "ok");
    EXPECT_GT(p.at("samples_per_s").get<double>(), 0);
    EXPECT_NE(p.at("loss_first").get<double>(), 0);
  }
}

// A TorchScript model that runs out of the budget is out of memory, not an error: the interpreter
// rethrows the allocator's OutOfMemoryError as a plain error around its text, and binsearch counted
// mobilenet_v2's batch 256 under 256 MiB as "failed with an error".
TEST_F(TorchScriptModels, RunningOutOfTheBudgetIsOutOfMemory) {
  const std::string model = resnet18();
  ASSERT_FALSE(model.empty());
  const fs::path json = scratch() / "r18-oom.json";
  const Outcome sweep = batchwise("sweep --model " + model +
                                  " --input-shape 3x32x32 --dataset synthetic "
                                  "--synthetic-size 512 --memory-budget 256MiB --batch-sizes 2,2048 --repetitions 1 "
                                  "--warmup 0 --steps 1 --threads 2 -q --json " +
                                  json.string());
  ASSERT_EQ(sweep.code, 0) << sweep.err;
  const auto points = nlohmann::json::parse(slurp(json)).at("sweep").at("points");
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].at("outcome"), "ok");
  EXPECT_EQ(points[1].at("outcome"), "oom") << points[1].dump();
}

TEST_F(TorchScriptModels, BadModelFilesEachGetTheirOwnMessage) {
  const fs::path not_script = scratch() / "weights.pt";
  std::ofstream(not_script) << "this is a state_dict, honest";
  expect_clean_error("fit --model " + not_script.string(), 4, "not a TorchScript file");
  expect_clean_error("fit --model " + (scratch() / "missing.pt").string(), 4, "missing.pt: no such file");
  const std::string empty =
      exported("no-parameters.pt", std::string(BATCHWISE_TEST_SOURCE_DIR) + "/tests/export_no_parameters.py");
  ASSERT_FALSE(empty.empty());
  expect_clean_error("fit --model " + empty + " --dataset synthetic", 4, "the module has no trainable parameters");
  const std::string model = resnet18();
  ASSERT_FALSE(model.empty());
  expect_clean_error("fit --model " + model + " --dataset synthetic --input-shape 1x28x28", 4,
                     "rejects a batch of shape [2, 1, 28, 28] (--input-shape 1x28x28): RuntimeError: Given groups=1");
}

// What the probe refuses is refused by its cause, before anything trains (exit 4): an output that needs no gradient
// (every trial had failed at its backward pass, with torch's text), an output of another shape than mse's targets
// (mse had broadcast [N, 2] against [N] and trained on it, warning at every step), parameters of another type than
// the data's and a forward of two inputs (each told to pass another --input-shape).
TEST_F(TorchScriptModels, TheProbeRefusesAModelNoTrialCouldTrainByItsCause) {
  const auto model = [&](const std::string& kind) {
    return exported(kind + ".pt", std::string(BATCHWISE_TEST_SOURCE_DIR) + "/tests/export_probe_models.py " + kind);
  };
  const std::string synthetic = " --dataset synthetic --synthetic-size 64 --no-history -q";
  expect_clean_error("fit --model " + model("detached") + synthetic, 4,
                     "detached.pt: its output needs no gradient (it is detached, or computed under no_grad)");
  const fs::path csv = scratch() / "regression.csv";
  std::ofstream out(csv);
  for (int i = 0; i < 64; ++i) out << i % 3 << "," << i % 5 << "," << i % 7 << "," << i % 2 << "," << 0.5 * i << "\n";
  out.close();
  const Outcome broadcast = batchwise("sweep --model " + model("two-outputs") + " --dataset csv --data-file " +
                                      csv.string() + " --loss mse --batch-sizes 8 --no-history -q");
  EXPECT_EQ(broadcast.code, 4) << broadcast.err;
  EXPECT_NE(broadcast.err.find("its output [2, 2] does not fit the --loss mse targets: the targets are [2]: mse would "
                               "broadcast [2, 2] against them into a loss of neither; give the model an output of "
                               "the targets' shape"),
            std::string::npos)
      << broadcast.err;
  EXPECT_EQ(broadcast.err.find("Warning"), std::string::npos) << broadcast.err;
  expect_clean_error("fit --model " + model("float64") + synthetic, 4,
                     "the data is float32, the model's parameters float64: script the model in float32");
  const Outcome two = batchwise("fit --model " + model("two-inputs") + synthetic);
  EXPECT_EQ(two.code, 4) << two.err;
  EXPECT_NE(two.err.find("batchwise calls forward with one tensor, the batch: give the model a forward(x)"),
            std::string::npos)
      << two.err;
  EXPECT_EQ(two.err.find("--input-shape the model was"), std::string::npos) << two.err;
}

// A model's error outside a trial (noise's steps) says its cause: it had said only the TorchScript interpreter's
// preamble, "The following operation failed in the TorchScript interpreter."
TEST_F(TorchScriptModels, AModelsErrorOutsideATrialSaysItsCause) {
  const std::string model = exported("raises-above-40.pt", std::string(BATCHWISE_TEST_SOURCE_DIR) +
                                                               "/tests/export_probe_models.py "
                                                               "raises-above-40");
  ASSERT_FALSE(model.empty());
  const Outcome r = batchwise("noise --model " + model +
                              " --dataset synthetic --synthetic-size 512 --batch 128 --micro-batch 64 --noise-steps 3 "
                              "--no-history -q");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err, "batchwise noise: builtins.RuntimeError: batch too large for this model\n");
}

// A model whose outputs are NaN: every trial ends at its first step as an error that blames the data
// or the model, nothing is measured or recommended, and fit, sweep and tune exit 1.
TEST_F(TorchScriptModels, AModelWhoseOutputIsNaNIsNeverMeasured) {
  const std::string model =
      exported("nan-output.pt", std::string(BATCHWISE_TEST_SOURCE_DIR) + "/tests/export_nan_model.py");
  ASSERT_FALSE(model.empty());
  const std::string workload = " --model " + model + " --dataset synthetic --synthetic-size 256 --no-history -q";
  const fs::path json = scratch() / "nan-sweep.json";
  const Outcome sweep = batchwise("sweep" + workload + " --batch-sizes 8,16 --repetitions 1 --json " + json.string());
  EXPECT_EQ(sweep.code, 1) << sweep.err;
  const auto report = nlohmann::json::parse(slurp(json));
  for (const auto& p : report.at("sweep").at("points")) {
    EXPECT_EQ(p.at("outcome"), "error") << p.dump();
    EXPECT_EQ(p.at("non_finite"), true) << p.dump();
    EXPECT_NE(p.at("message").get<std::string>().find("the training loss is NaN at the first step, before any update: "
                                                      "the data or the model"),
              std::string::npos)
        << p.dump();
  }
  const Outcome fit = batchwise("fit" + workload + " --max 64");
  EXPECT_EQ(fit.code, 1) << fit.err << fit.out;
  EXPECT_NE((fit.out + fit.err).find("the training loss is NaN at the first step"), std::string::npos) << fit.err;
  EXPECT_EQ((fit.out + fit.err).find("no batch fits"), std::string::npos) << fit.out;  // an error, not memory
  const fs::path tune_json = scratch() / "nan-tune.json";
  const Outcome tune = batchwise("tune" + workload + " --max 64 --json " + tune_json.string());
  EXPECT_EQ(tune.code, 1) << tune.err << tune.out;
  if (fs::exists(tune_json)) {
    const auto t = nlohmann::json::parse(slurp(tune_json));
    EXPECT_TRUE(!t.contains("recommendation") || t.at("recommendation").is_null()) << t.dump();
  }
}

}  // namespace

// The command line as a user meets it: exit codes, one-line messages naming the input and the
// fix, never a stack trace; and an end-to-end tune that writes its JSON report.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include "support/busy_core.h"
#include "support/cli_util.h"
#include "support/history_edit.h"
#include "support/race_rule.h"

#include <fcntl.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <set>

#include <sys/wait.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

namespace {

using namespace cli;

// Whether tune's sweep in `report` (its JSON) left the race 2 candidates or more
// (support::sweep_leaves_a_race). A test of the race's wiring checks the race where one ran, the
// fallback where none did, and is reported skipped then.
bool sweep_leaves_a_race(const nlohmann::json& report) { return support::sweep_leaves_a_race(report.dump()); }

// The message a test whose race did not run is skipped with.
constexpr const char* kNoRaceRan =
    "the sweep left the race fewer than 2 candidates on this machine now (a loaded machine's rates), so no race ran: "
    "its checks did not run this time";

TEST(Cli, UnknownNamesListTheChoices) {
  expect_clean_error("fit --model nope", 2,
                     "batchwise fit: --model nope: unknown model; choose one of mlp, lenet, resnet18, transformer");
  expect_clean_error(
      "fit --dataset imagenet", 2,
      "--dataset imagenet: unknown dataset; choose one of fashion-mnist, cifar10, idx, npy, csv, synthetic");
  expect_clean_error("sweep --optimizer lion --batch-sizes 8", 2,
                     "--optimizer lion: unknown optimizer; choose one of sgd, adam, adamw");
}

// Refused before anything loads or is said, each as one line: a --min above --max, a size under a
// byte or past a double's range, a training command that is not there, flags that contradict each other
// or that the subcommand reads nothing of.
TEST(Cli, RefusedBeforeAnythingRuns) {
  // tune's too, before the fit's stage line (one line on stderr), as fit's own refusal is
  expect_clean_error("tune --model mlp --dataset synthetic --min 64 --max 32", 2, "--min 64 is above --max 32");
  // A size under a byte had read as no budget given, and the device's default ran unseen.
  expect_clean_error("fit --model mlp --dataset synthetic --memory-budget 0.4", 2,
                     "--memory-budget: '0.4' is less than a byte");
  expect_clean_error("fit --model mlp --dataset synthetic --memory-budget 1e400GiB", 2,
                     "--memory-budget: '1e400GiB' is not a size: its number '1e400' is malformed or out of range");
  // A training command that is not there: refused before the fit starts (it was exit 1 after its stage line)
  expect_clean_error("fit --cmd -- /nonexistent/trainer {batch}", 2,
                     "command: '/nonexistent/trainer' not found; give the program's full path or install it");
  expect_clean_error("tune --cmd -- batchwise-no-such-trainer {batch}", 2,
                     "command: 'batchwise-no-such-trainer' not found on PATH");
  // An empty value had meant the default, unsaid
  expect_clean_error("fit --model mlp --dataset synthetic --memory-budget ''", 2, "--memory-budget '': an empty value");
  expect_clean_error("fit --model mlp --dataset synthetic --input-shape ''", 2, "--input-shape '': an empty value");
  expect_clean_error("fit --model mlp --dataset synthetic --label-column ''", 2, "--label-column '': an empty value");
  // Both: which was meant? (a --history that is no history had run on, unstored)
  expect_clean_error("fit --model mlp --dataset synthetic --history x.sqlite --no-history", 2, "--no-history");
  // a schedule's phase past the run, before the stage line names the schedule
  expect_clean_error("validate --model mlp --dataset synthetic --batch-sizes 8 --epochs 1 --batch-schedule 8:0,16:5", 2,
                     "--batch-schedule 8:0,16:5: its last phase starts at epoch 5, not within the 1-epoch run");
  expect_clean_error("validate --model mlp --dataset synthetic --batch-sizes 8 --epochs 1 --trial-timeout 5", 2,
                     "--trial-timeout does not apply here: validate trains whole runs");
  // the budget's share a fit may peak at, which validate fits nothing by (it had been taken for the accuracy)
  expect_clean_error("validate --model mlp --dataset synthetic --batch-sizes 8 --epochs 1 --target 0.88", 2,
                     "--target does not apply here: validate fits no batch: it trains the batches given within the "
                     "whole --memory-budget; the held-out accuracy to train to is --target-accuracy");
  // a phase that no step reaches (32 steps of 32 pass epoch 0.999 only at the run's end): it had trained as
  // the fixed batch 32, said to be the schedule
  expect_clean_error(
      "validate --model mlp --dataset synthetic --synthetic-size 1000 --batch-sizes 32 --epochs 1 --batch-schedule "
      "32:0,64:0.999",
      2,
      "--batch-schedule 32:0,64:0.999: the phase of batch 64 from epoch 0.999 gets no step: the run's last step begins "
      "at epoch 0.992");
  // a batch more samples than the run trains: its one step had trained 5x the run beside the others' one run
  expect_clean_error(
      "validate --model mlp --dataset synthetic --synthetic-size 2000 --batch-sizes 32,1024 --epochs 0.1", 2,
      "--batch-sizes: batch 1024 is more samples than a 0.1-epoch run of ");
  // a target the initial weights meet: every run "reached" it at its first evaluation, and one was picked
  expect_clean_error(
      "validate --model mlp --dataset synthetic --synthetic-size 1000 --batch-sizes 32,64 --target-loss 30", 2,
      "--target-loss 30: the initial weights already reach it (test loss ");
  // and tune's validation, before its fit (it had ended the whole tune at its last phase)
  expect_clean_error("tune --model mlp --dataset synthetic --synthetic-size 1000 --validate --target-loss 30", 2,
                     "--target-loss 30: the initial weights already reach it (test loss ");
  // plan fits nothing given the micro-batch, and recommends no batch to trace
  expect_clean_error("plan --model mlp --dataset synthetic --global-batch 64 --max-micro-batch 32 --plan-for t4", 2,
                     "--plan-for with --max-micro-batch 32: given the micro-batch, plan fits nothing");
  expect_clean_error("plan --model mlp --dataset synthetic --global-batch 64 --trace t.json", 2,
                     "--trace does not apply here: plan recommends no batch");
  // an old name beside its new one: one of the two would be dropped
  expect_clean_error("noise --model mlp --dataset synthetic --steps 5 --noise-steps 7", 2,
                     "--noise-steps and --steps exclude each other; give one of them");
}

// Input that cannot apply is refused by name before anything trains: a shape past 2^63 elements, a folder as a
// file, a flag only a run that is not asked for reads.
TEST(Cli, InputThatCannotApplyIsRefusedByName) {
  // A shape whose element count passes 2^63 (it had wrapped to 784, passed as Fashion-MNIST's, and failed in torch)
  expect_clean_error("plan --model mlp --global-batch 32 --max-micro-batch 32 --input-shape 16x1152921504606847025", 2,
                     "--input-shape 16x1152921504606847025: more than 2^63 elements per sample");
  // A folder as --trace is named so, with a file to give (the trace's own check had come first: "not a file")
  expect_clean_error("sweep --model mlp --dataset synthetic --batch-sizes 8 --trace /tmp", 2,
                     "--trace /tmp: is a folder; give a file's path (e.g. /tmp/trace.json)");
  // A flag only validation's runs read, without --validate (--rule-lr had been silently unused)
  expect_clean_error("tune --model mlp --dataset synthetic --rule-lr", 2,
                     "--rule-lr: only the validation's runs read it, and tune runs none without --validate; add "
                     "--validate, or drop it");
  expect_clean_error("sweep --model mlp --dataset synthetic --batch-sizes 32,64 --accumulation-steps 64", 2,
                     "--accumulation-steps 64: more micro-batches than batch 32 has samples (each takes one at least); "
                     "give at most 32, or larger batches");
  // A test split where nothing is evaluated held out (a file of garbage had been accepted, unread, exit 0)
  const std::string golden = std::string(BATCHWISE_TEST_GOLDEN_DIR) + "/report.json";
  for (const char* command : {"sweep --batch-sizes 8", "fit --max 8", "loader --batch 8"})
    expect_clean_error(
        std::string(command) + " --model mlp --dataset synthetic --test-data-file " + golden, 2,
        "--test-data-file does not apply here: " + std::string(command).substr(0, std::string(command).find(' ')) +
            " evaluates nothing held out");
  for (const char* command : {"noise --batch 8", "plan --global-batch 8"})
    expect_clean_error(
        std::string(command) + " --model mlp --dataset synthetic --test-labels-file " + golden, 2,
        "--test-labels-file does not apply here: " + std::string(command).substr(0, std::string(command).find(' ')) +
            " evaluates nothing held out");
}

// A fit of one step a trial measures a first step's peak, which leaves out what a second holds (Adam's state beside
// the activations): said where memory decided the answer; not where the --max did.
TEST(Cli, AFitOfOneStepATrialIsWarnedOf) {
  const fs::path json = scratch() / "fit-one-step.json";
  const std::string base = "fit --model mlp --dataset synthetic --synthetic-size 256 --optimizer adam --no-history -q ";
  Outcome r = batchwise(base + "--memory-budget 32MiB --fit-steps 1 --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(slurp(json).find("--fit-steps 1 with no --warmup: each fit trial's peak is its first step's"),
            std::string::npos);
  r = batchwise(base + "--memory-budget 32MiB --fit-steps 1 --warmup 1 --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(json).find("--fit-steps 1 with no --warmup"), std::string::npos);
  r = batchwise(base + "--max 16 --fit-steps 1 --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(json).find("--fit-steps 1 with no --warmup"), std::string::npos);
}

TEST(Cli, AMinPastTheRunIsRefused) {
  // Every batch from --min is more samples than the run: refused before the fit (tune had answered 4000 for a run of
  // 1024, which validate refuses)
  expect_clean_error("tune --model mlp --dataset synthetic --synthetic-size 1024 --epochs 1 --min 2048 --max 4096", 2,
                     "--min 2048: every batch from it is more samples than your 1-epoch run of 1024 samples trains "
                     "(1024), so no answer could take one step of it; give --min 1024 or less, or a longer --epochs");
}

TEST(Cli, MalformedOptions) {
  expect_clean_error("fit --memory-budget 2XB", 2, "--memory-budget: unknown unit 'XB' in '2XB'");
  expect_clean_error("validate --model mlp --dataset synthetic --memory-budget 5000GiB --batch-sizes 8", 2,
                     "--memory-budget 4.88 TiB: more than the ");
  expect_clean_error("fit --model mlp --dataset synthetic --min 64 --max 8", 2, "--min 64 is above --max 8");
  expect_clean_error("fit --model mlp --dataset synthetic --min 100000", 2,  // no --max given: its default, said so
                     "--min 100000 is above --max 65536 (its default); lower --min, or raise --max");
  // Counted before expanded (it once ended in std::bad_alloc); zero classes or processes are refused.
  expect_clean_error("sweep --model mlp --dataset synthetic --batch-sizes 1-999999999+1", 2,
                     "--batch-sizes: range '1-999999999+1' is 999999999 batch sizes, each a trial; at most 1024");
  // A batch past --batch's bound (it built its index for minutes, holding gigabytes; validate's too).
  expect_clean_error("validate --model mlp --dataset synthetic --batch-sizes 99999999999 --epochs 1", 2,
                     "--batch-sizes: 99999999999 in '99999999999' is more than the most batchwise takes, 1073741824");
  expect_clean_error("validate --model mlp --dataset synthetic --batch-sizes 64 --epochs 1 --batch-schedule ''", 2,
                     "--batch-schedule: '' in '' has no ':'");
  // A target's limits beside full runs, which train to their end (silently unused before).
  expect_clean_error("validate --model mlp --dataset synthetic --batch-sizes 64 --epochs 1 --max-seconds 60", 2,
                     "--max-seconds 60: it limits a run to a target, and --epochs 1 trains every run to its end; drop "
                     "--max-seconds");
  expect_clean_error("tune --model mlp --dataset synthetic --epochs 2 --stop-slower-than 1.5", 2,
                     "--stop-slower-than 1.5: it limits a run to a target");
  expect_clean_error("fit --model mlp --dataset synthetic --num-classes 0", 2,
                     "--num-classes: 0: must be at least 2 (a classifier's classes, at least 2");
  expect_clean_error("fit --model mlp --dataset synthetic --nproc 0", 2,
                     "--nproc: 0: must be at least 1 (the number of local processes)");
  // More CPU ranks than CPUs, before any rank starts (1,000 once hung the machine forming the group)
  expect_clean_error("fit --model mlp --dataset synthetic --device cpu --nproc 1000", 2,
                     "--nproc 1000: more ranks than the ");
  expect_clean_error("sweep --batch-sizes 16,,32", 2, "--batch-sizes: '' is not a batch size");
  expect_clean_error("sweep --model mlp", 2, "batchwise sweep: no batch sizes to sweep; pass --batch-sizes");
  // 0 epochs is no run: refused, not read as the flag left out (it once ran a plain tune).
  expect_clean_error("tune --model mlp --dataset synthetic --epochs 0", 2,
                     "--epochs: 0: must be above 0 (leave it out: tune then answers for its race's horizon");
  expect_clean_error("validate --model mlp --dataset synthetic --batch-sizes 8 --epochs nan", 2,
                     "--epochs: nan: not a finite number");
  // Positive, but less than one sample of the data: no run (tune once answered it at low confidence).
  for (const char* command : {"tune", "validate --batch-sizes 8"})
    expect_clean_error(std::string(command) + " --model mlp --dataset synthetic --synthetic-size 1024 --epochs 1e-300",
                       2, "--epochs 1e-300: a run of 1e-300 epochs of 1024 samples trains less than one sample");
  expect_clean_error("fit --model mlp --dataset synthetic --target 2", 2,
                     "--target: 2: must be at most 1 (a fraction of the budget)");
  expect_clean_error("fit --model transformer --dataset synthetic --seq-len 128-32", 2,
                     "--seq-len: range '128-32' runs backwards");
  expect_clean_error("fit --model transformer --dataset synthetic --seq-len -4", 2,
                     "--seq-len: '-4' is negative: sequence lengths start at 1");
  expect_clean_error("tune --model mlp --dataset synthetic --seq-len 16-32", 2,
                     "--seq-len 16-32: only the transformer reads sequences of tokens, and --model mlp takes images or "
                     "feature vectors; leave --seq-len out");
  expect_clean_error("bogus", 2, "batchwise: 'bogus' is not a subcommand; use one of fit, sweep, tune, ");
  // CLI11's own words for a usage error, said as batchwise says the rest
  expect_clean_error("fit --maxx 8", 2, "batchwise fit: --maxx: no such option of fit; did you mean --max; see");
  expect_clean_error("sweep --batch-sizes 8 --repetitions 1 --repetitions 2", 2,
                     "--repetitions: given 2 times; give it once");
  expect_clean_error("compare only-one.json", 2, "reports: needs 2 values, got 1");
  expect_clean_error("report a.json b.json", 2, "unexpected argument b.json: report takes no more");
  // an option with its value after a positional: the option named, not "arguments were not expected"
  expect_clean_error("report a.json --html x.html", 2, "batchwise report: --html: no such option of report");
  // the same after a positional of two values: the option named, not "takes at most 2 values, got 3"
  expect_clean_error("compare a.json b.json --html x.html", 2, "batchwise compare: --html: no such option of compare");
  // Contradictions refused, not settled silently; folders and files told apart; messages with a fix
  expect_clean_error("sweep --model mlp --dataset synthetic --range 8-16*2 --batch-sizes 32", 2,
                     "--batch-sizes and --range exclude each other; give one of them");
  expect_clean_error("tune --model mlp --dataset synthetic --no-race --advice-budget 10", 2,
                     "exclude each other; give one of them");
  expect_clean_error("plan --model mlp --dataset synthetic --global-batch 64 --nproc 2 --world-size 4", 2,
                     "exclude each other; give one of them");
  expect_clean_error("fit --model mlp --dataset synthetic --json ''", 2, "--json '': an empty path");
  expect_clean_error("doctor --json ''", 2, "--json '': an empty path");  // doctor had written nothing, exit 0
  expect_clean_error("fit --model mlp --dataset synthetic --json " + scratch().string(), 2,
                     scratch().string() + ": is a folder; give a file's path");
  expect_clean_error("fit --model mlp --dataset csv --data-file " + scratch().string(), 3,
                     scratch().string() + ": is a folder, not a file");
  const std::string pipe = (scratch() / "pipe.csv").string();
  ASSERT_EQ(mkfifo(pipe.c_str(), 0600), 0);
  expect_clean_error("fit --model mlp --dataset csv --data-file " + pipe, 3,
                     pipe +
                         ": not a regular file (a pipe, a socket or a device), which batchwise cannot read again "
                         "for each trial; save what it gives to a file and give that file's path");
  std::filesystem::remove(pipe);
  expect_clean_error(
      "fit --model mlp --dataset fashion-mnist --data-dir " + std::string(BATCHWISE_TEST_GOLDEN_DIR) + "/report.json",
      3, "is a file, not a folder");
  expect_clean_error("sweep --model mlp --dataset synthetic --batch-sizes 4-64+0", 2,
                     "--batch-sizes: range '4-64+0' needs a step of at least 1");
  expect_clean_error("fit --model mlp --dataset synthetic --max 64 --multiple-of 128", 2,
                     "no multiple of 128 lies between them; give a --max of at least 128");
  expect_clean_error("fit --model mlp --dataset synthetic --memory-budget 2 GiB", 2,
                     "unexpected argument GiB: a size is one word, with no space: e.g. 2GiB");
  // What a data-parallel run refuses is said once, before the ranks start (each rank had said it, and
  // after starting)
  expect_clean_error("fit --model mlp --dataset synthetic --nproc 2 --trace " + (scratch() / "t.json").string(), 2,
                     "batchwise fit: --trace is not supported in a data-parallel run (2 ranks); run it in one process");
  expect_clean_error("tune --model mlp --dataset synthetic --nproc 2 --epochs 2 --lr-schedule cosine", 2,
                     "batchwise tune: --epochs is not supported in a data-parallel run (2 ranks)");
  expect_clean_error("sweep --model mlp --dataset synthetic --batch-sizes 8 --nproc 2 --profile", 2,
                     "batchwise sweep: --profile is not supported in a data-parallel run (2 ranks)");
  expect_clean_error("fit --model mlp --dataset synthetic --nproc 2 --precision fp16", 2,
                     "batchwise fit: --precision fp16 with more than one process: fp16's loss scaling is not agreed");
  // plan's bounds, as it parses: not after a fit up to the global batch (which took seconds, or ran on)
  expect_clean_error("plan --model mlp --dataset synthetic --global-batch 1000000000", 2,
                     "--global-batch: 1000000000: must be at most 16777216 (plan's search is linear in it)");
  // Whole numbers are read in decimal (010 had been octal, 8; 0x10 hex; 1e3 no number at all)
  expect_clean_error("fit --model mlp --dataset synthetic --min 010 --max 9", 2, "--min 10 is above --max 9");
  expect_clean_error("fit --model mlp --dataset synthetic --min 2000 --max 1e3", 2, "--min 2000 is above --max 1000");
  expect_clean_error("fit --model mlp --dataset synthetic --max 0x10", 2, "--max: 0x10: not a whole number");
  expect_clean_error("fit --model mlp --dataset synthetic --seed 1e19", 2,
                     "--seed: 1e19: past 2^53, write it in decimal digits");
  expect_clean_error("fit --model mlp --dataset synthetic --seed 18446744073709551616", 2,
                     "--seed: 18446744073709551616: must be at most 18446744073709551615");
  expect_clean_error("fit --model mlp --dataset synthetic --seed 018446744073709551616", 2,
                     "--seed: 018446744073709551616: must be at most 18446744073709551615");
  expect_clean_error("fit --model mlp --dataset synthetic --max 12.5", 2, "--max: 12.5: must be a whole number");
  expect_clean_error("validate --model mlp --dataset synthetic --batch-sizes 8 --epochs 1 --extend-below -1", 2,
                     "--extend-below: -1: must be at least 0");
  // Samples that cannot be held in memory: said before torch's allocator says it in its own words
  expect_clean_error("fit --model mlp --dataset synthetic --synthetic-size 1000000000 --input-shape 3x224x224", 2,
                     "--synthetic-size 1000000000 at --input-shape 3x224x224: its samples take");
}

// A usage error before a --cmd command's "--" names what the user got wrong: CLI11 lists "--" first, and the
// command's own words after it ("--: no such option of fit; did you mean --lr", "--batch-size: no such option").
TEST(Cli, AUsageErrorBeforeACommandsDashesNamesItsOwnWord) {
  expect_clean_error("fit --cmd --max 64 -v -- python3 train.py --batch-size {batch}", 2,
                     "batchwise fit: -v: no such option of fit; see batchwise fit --help");
  expect_clean_error("sweep --cmd --batch-sizes 8 --maxx 3 extra -- true", 2,
                     "batchwise sweep: --maxx: no such option of sweep");  // had named "true", the command
  // a word before "--": it, not an option of the command after it (`--batch-size: no such option of fit`)
  expect_clean_error("fit --cmd --max 64 extra -- python3 train.py --batch-size {batch}", 2,
                     "batchwise fit: extra: a word before -- that fit does not take; your command follows -- whole");
}

// tune's target goes to the race; one it cannot use is refused up front, not ignored.
TEST(Cli, TuneRefusesATargetItCannotUse) {
  expect_clean_error("tune --model mlp --dataset synthetic --target-accuracy 1.5", 2,
                     "--target-accuracy: 1.5: must be at most 1");
  expect_clean_error("tune --model mlp --dataset synthetic --loss mse --target-accuracy 0.9", 2,
                     "--loss mse: there is no accuracy to reach; give --target-loss");
  expect_clean_error("tune --cmd --device cpu --target-accuracy 0.9 -- python3 train.py", 2,
                     "the batch race that measures the time to a target trains batchwise's own loop");
  // Both targets: refused, not one of them used silently.
  for (const char* command : {"tune", "validate --batch-sizes 32"})
    expect_clean_error(
        std::string(command) + " --model mlp --dataset synthetic --target-accuracy 0.5 --target-loss 0.1", 2,
        "--target-accuracy 0.5 and --target-loss 0.1: one target at a time; give one of them");
}

TEST(Cli, PlanForWritesThePlan) {
  expect_clean_error("fit --model mlp --dataset synthetic --plan-for tpu", 2, "--plan-for tpu: give a size like 24GiB");
  const fs::path json = scratch() / "plan.json";
  const Outcome r = batchwise(
      "fit --model mlp --dataset synthetic --synthetic-size 256 --memory-budget 32MiB "
      "--plan-for a100-40gb --quiet --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  // 42,298,834,944 bytes: what CUDA reports on an "A100 40GB", not 40 GiB.
  EXPECT_NE(r.out.find("plan for a100-40gb (39.4 GiB): batch "), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j.at("plan").at("device").at("bytes"), 42298834944ll);
  EXPECT_GT(j.at("plan").at("batch").get<int64_t>(), j.at("fit").at("batch").get<int64_t>());
  EXPECT_EQ(j.at("plan").at("assumptions").size(), 5u);
  // Measured on CPU: every allowance is added, and the text names the fit's precision.
  EXPECT_EQ(j.at("plan").at("allowance").at("workspace_bytes"), 64ll << 20);
  EXPECT_NE(r.out.find("at the same precision (fp32)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the allowances added cover what this CPU measurement lacks"), std::string::npos) << r.out;
  const Outcome bf16 = batchwise(
      "fit --model mlp --dataset synthetic --synthetic-size 256 --memory-budget 32MiB "
      "--fit-steps 1 --precision bf16 --plan-for l4 --quiet");
  ASSERT_EQ(bf16.code, 0) << bf16.err;
  EXPECT_NE(bf16.out.find("at the same precision (bf16)"), std::string::npos) << bf16.out;
}

TEST(Cli, VariableLengthSequencesFitTheLongest) {
  const fs::path range_json = scratch() / "range.json";
  const fs::path longest_json = scratch() / "longest.json";
  const std::string common =
      "fit --model transformer --dataset synthetic --synthetic-size 256 --memory-budget 48MiB "
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
    fs::copy_file(fs::path("/usr/share/datasets/fashion-mnist") / name, dir / name,
                  fs::copy_options::overwrite_existing);
  std::ofstream(dir / "train-images-idx3-ubyte.gz", std::ios::binary | std::ios::trunc) << "not gzip, not IDX";
  expect_clean_error("fit --data-dir " + dir.string(), 3, "train-images-idx3-ubyte.gz: expected magic 2051");
}

TEST(Cli, BudgetBelowTheModel) {
  expect_clean_error("fit --model resnet18 --dataset synthetic --memory-budget 1MiB", 2,
                     "--memory-budget 1.00 MiB is below the model's own size");
  // every command that trains: no batch trains in it (they ran, and ended out of memory with a fix that
  // could not work, "give a smaller --batch")
  for (const std::string command : {"sweep --batch-sizes 8", "noise --batch 64 --noise-steps 3",
                                    "validate --batch-sizes 8 --epochs 1", "loader --batch 8"})
    expect_clean_error(command + " --model mlp --dataset synthetic --synthetic-size 512 --memory-budget 1MiB", 2,
                       "--memory-budget 1.00 MiB is below the model's own size: mlp holds ");
  // The budget holds the model but its --target's share does not: the target is named, not the budget
  expect_clean_error("fit --model mlp --dataset synthetic --memory-budget 1GiB --target 0.001", 2,
                     "--target 0.001: 0.1 % of --memory-budget 1.00 GiB is 1.02 MiB, below the model's own size: mlp "
                     "holds ");
  // a sweep whose every batch peaked past --target of the budget: measured as asked, none is the answer,
  // and no batch fits it (exit 6), as fit says (it had recommended one past the target, unsaid)
  const fs::path json = scratch() / "over-target.json";
  const Outcome over = batchwise(
      "sweep --model mlp --dataset synthetic --synthetic-size 512 --batch-sizes 8,16 --repetitions 1 --steps 1 "
      "--warmup 0 --memory-budget 8MiB --target 0.3 --no-history -q --json " +
      json.string());
  EXPECT_EQ(over.code, 6) << over.err;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_FALSE(j.contains("recommendation") && !j.at("recommendation").is_null()) << j.dump();
  EXPECT_NE(j.at("context")
                .at("warnings")
                .dump()
                .find("no batch swept peaks within the 30.0 % target of the 8.00 MiB "
                      "budget (2.40 MiB)"),
            std::string::npos)
      << j.at("context").at("warnings").dump();
}

TEST(Cli, CudaWithoutAGpuIsADeviceError) {
  if (std::system("nvidia-smi -L >/dev/null 2>&1") == 0) GTEST_SKIP() << "this machine has a GPU";
  expect_clean_error("fit --model mlp --dataset synthetic --device cuda", 5, "--device cuda: ");
}

// Every option a subcommand offers (batchwise --list-options asks CLI11 itself, deprecated ones
// included; validate's, loader's and noise's --cmd, which they refuse, left out) is in that subcommand's --help, under
// one of the sections in their fixed order; a renamed flag's old spelling still works, listed as deprecated, and warns.
TEST(Cli, EverySubcommandsHelpListsEveryOptionItAcceptsBySection) {
  const Outcome list = batchwise("--list-options");
  ASSERT_EQ(list.code, 0) << list.err;
  std::map<std::string, std::vector<std::string>> accepted;
  std::istringstream lines(list.out);
  for (std::string sub, flag; lines >> sub >> flag;) {
    EXPECT_EQ(flag.rfind("-", 0), 0u) << sub << " " << flag << ": a positional, which no completion offers";
    accepted[sub].push_back(flag);
  }
  ASSERT_GE(accepted.size(), 11u) << list.out;
  for (const auto& [sub, flags] : accepted) {
    const Outcome help = batchwise(sub + " --help");
    ASSERT_EQ(help.code, 0) << sub;
    for (const std::string& flag : flags) {
      bool listed = false;
      for (size_t at = help.out.find(flag); at != std::string::npos && !listed; at = help.out.find(flag, at + 1)) {
        const char after = at + flag.size() < help.out.size() ? help.out[at + flag.size()] : '\n';
        listed = (at == 0 || help.out[at - 1] == ' ' || help.out[at - 1] == ',') &&
                 (after == ' ' || after == ',' || after == '=' || after == '\n');
      }
      EXPECT_TRUE(listed) << sub << " accepts " << flag << " but its --help does not list it:\n" << help.out;
    }
  }
  const Outcome tune = batchwise("tune --help");
  size_t last = 0;
  for (const char* section :
       {"\nOptions:\n", "\nWorkload:\n", "\nInput pipeline:\n", "\nDevice and memory:\n", "\nFit:\n", "\nSweep:\n",
        "\nYour run:\n", "\nAdvice:\n", "\nValidation:\n", "\nOutput:\n", "\nExample:\n"}) {
    const size_t at = tune.out.find(section);
    ASSERT_NE(at, std::string::npos) << section << tune.out;
    EXPECT_GT(at, last) << section << " out of order:\n" << tune.out;
    last = at;
  }
  EXPECT_LT(tune.out.find("--model"), tune.out.find("\nInput pipeline:\n"));  // under Workload
  // fit's --steps became --fit-steps (tune's name; --steps counts a sweep trial's measured steps).
  const Outcome old = batchwise(
      "fit --model mlp --dataset synthetic --synthetic-size 256 --memory-budget 64MiB --max 8 "
      "--steps 1 --no-history -q");
  ASSERT_EQ(old.code, 0) << old.err;
  EXPECT_NE(old.err.find("batchwise fit: warning: --steps is now --fit-steps"), std::string::npos) << old.err;
  EXPECT_NE(batchwise("fit --help").out.find("Deprecated:\n  --steps"), std::string::npos);
  const Outcome renamed = batchwise(
      "fit --model mlp --dataset synthetic --synthetic-size 256 --memory-budget 64MiB "
      "--max 8 --fit-steps 1 --no-history -q");
  ASSERT_EQ(renamed.code, 0) << renamed.err;
  EXPECT_EQ(renamed.err.find("warning"), std::string::npos) << renamed.err;
}

TEST(Cli, NothingFitsExitsSixWithANullBatch) {
  const fs::path json = scratch() / "nofit.json";
  const Outcome r =
      batchwise("fit --model mlp --dataset synthetic --memory-budget 3MiB --quiet --json " + json.string());
  EXPECT_EQ(r.code, 6) << r.err;
  EXPECT_NE(r.out.find("no batch fits: batch 1 did not complete"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_TRUE(j.at("fit").at("batch").is_null());
  EXPECT_EQ(j.at("fit").at("outcome"), "does_not_fit");
}

namespace {
// The subcommands as `batchwise --help` lists them (from the one table, tools/batchwise/commands/commands.cpp).
std::vector<std::string> subcommands() {
  const Outcome help = batchwise("--help");
  std::vector<std::string> names;
  std::istringstream lines(help.out);
  bool listing = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("SUBCOMMANDS:", 0) == 0 || line.rfind("Subcommands:", 0) == 0) {
      listing = true;
    } else if (listing && line.size() > 2 && line[0] == ' ' && line[2] != ' ') {
      names.push_back(line.substr(2, line.find(' ', 2) - 2));
    } else if (listing && !line.empty() && line[0] != ' ') {
      listing = false;
    }
  }
  return names;
}
}  // namespace

TEST(Cli, EverySubcommandHasHelpWithAnExample) {
  const std::vector<std::string> subs = subcommands();
  EXPECT_GE(subs.size(), 11u) << fmt::format("{}", fmt::join(subs, ", "));
  for (const char* sub : {"fit", "sweep", "tune", "validate", "compare"})  // the listing was read
    EXPECT_NE(std::find(subs.begin(), subs.end(), sub), subs.end()) << sub;
  for (const std::string& sub : subs) {
    const Outcome r = batchwise(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find("Example:"), std::string::npos) << sub << r.out;
    // a positional the subcommand hides (validate's, loader's and noise's --cmd command) is not offered
    EXPECT_EQ(r.out.find("[...]"), std::string::npos) << sub << r.out.substr(0, 300);
    if (std::string(sub) == "fit" || std::string(sub) == "sweep" || std::string(sub) == "tune" ||
        std::string(sub) == "plan")
      EXPECT_NE(r.out.find("--memory-budget"), std::string::npos) << sub;
  }
}

// Two reports of the same workload, B twice as fast at batch 32 and 64 MiB lighter at batch 64,
// on a different device, torch and OS: ratios per batch, the differences, and a missing side.
TEST(Cli, CompareShowsPerBatchRatiosAndWhatDiffers) {
  auto a = nlohmann::json::parse(slurp(std::string(BATCHWISE_TEST_GOLDEN_DIR) + "/report.json"));
  auto b = a;
  b["context"]["device"]["name"] = "Other CPU";
  b["context"]["torch_version"] = "2.16.0";
  b["context"]["os"] = "Linux 6.12.0 x86_64";
  b["workload"]["data_path"] = "/elsewhere/fashion-mnist";  // A's, an older report's, names none
  auto& points = b["sweep"]["points"];
  ASSERT_GE(points.size(), 2u);
  const int64_t first = points[0]["batch"], second = points[1]["batch"];
  points[0]["samples_per_s"] = points[0]["samples_per_s"].get<double>() * 2;
  points[1]["peak_bytes"] = points[1]["peak_bytes"].get<int64_t>() / 2;
  points.erase(points.size() - 1);  // B did not measure its largest batch
  const fs::path pa = scratch() / "a.json", pb = scratch() / "b.json", out = scratch() / "cmp.json";
  std::ofstream(pa) << a.dump();
  std::ofstream(pb) << b.dump();

  const Outcome r = batchwise("compare " + pa.string() + " " + pb.string() + " --json " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("torch          A 2.15.0  |  B 2.16.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2.00x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.50x"), std::string::npos) << r.out;
  const auto c = nlohmann::json::parse(slurp(out));
  ASSERT_EQ(c.at("points").size(), a["sweep"]["points"].size());
  for (const auto& p : c.at("points")) {
    if (p.at("batch") == first) EXPECT_DOUBLE_EQ(p.at("speed_ratio").get<double>(), 2.0);
    if (p.at("batch") == second) EXPECT_DOUBLE_EQ(p.at("speed_ratio").get<double>(), 1.0);
  }
  EXPECT_TRUE(c.at("points").back().at("samples_per_s").at("b").is_null());
  EXPECT_EQ(c.at("differences").size(), 4u);
  EXPECT_NE(r.out.find("B Linux 6.12.0 x86_64"), std::string::npos) << "the operating system differs: " << r.out;
  EXPECT_NE(r.out.find("A -  |  B /elsewhere/fashion-mnist"), std::string::npos) << "the data differs: " << r.out;
  // Batch `second` ran at the same speed in both: a ratio within the runs' spreads is marked noise.
  EXPECT_NE(r.out.find("1.00x~"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ratios are within the two runs' spreads (marked ~)"), std::string::npos) << r.out;

  // Another workload, another budget: the budget in bytes as people read them, and a warning that the
  // ratios are not a speed-up.
  b["workload"]["model"] = "mlp";
  b["budget_bytes"] = 2 * a["budget_bytes"].get<int64_t>();
  std::ofstream(pb) << b.dump();
  const Outcome other = batchwise("compare " + pa.string() + " " + pb.string());
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_NE(other.out.find("warning: A and B train different workloads (model "), std::string::npos) << other.out;
  EXPECT_NE(other.out.find("budget         A "), std::string::npos) << other.out;
  EXPECT_EQ(other.out.find(std::to_string(a["budget_bytes"].get<int64_t>())), std::string::npos)
      << "no raw byte counts: " << other.out;

  std::ofstream(scratch() / "not.json") << "{\"hello\": 1}";
  expect_clean_error("compare " + pa.string() + " " + (scratch() / "not.json").string(), 3,
                     "not.json: not a batchwise report");
  expect_clean_error("compare " + pa.string() + " " + (scratch() / "missing.json").string(), 3,
                     "missing.json: cannot be read");
  EXPECT_EQ(batchwise("compare " + pa.string()).code, 2);  // CLI11's usage message: one file is not two
}

// TuneWithEpochsAnswersForTheRun's run race: its answer is the recommendation, with the rate it
// trained at, in the console, the JSON and the HTML; the schedule is weighed either way, and said so.
void check_the_run_race(const Outcome& r, const nlohmann::json& j, const std::string& html) {
  EXPECT_NE(r.err.find("run race over"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("run race (your 0.05-epoch cosine run"), std::string::npos) << r.out;
  EXPECT_FALSE(j.contains("race"));  // the run race replaces the batch race
  const auto& race = j.at("run_race");
  EXPECT_EQ(race.at("epochs"), 0.05);
  EXPECT_EQ(race.at("lengths_epochs"), nlohmann::json::parse("[0.0125, 0.025, 0.05]"));
  EXPECT_EQ(race.at("lr_schedule"), "cosine");
  EXPECT_EQ(race.at("runs").size(), 3u);
  ASSERT_GE(race.at("entries").size(), 2u) << race.dump();
  ASSERT_TRUE(race.at("best_batch").is_number()) << race.dump();
  EXPECT_EQ(j.at("recommendation").at("batch"), race.at("best_batch"));
  EXPECT_TRUE(j.at("recommendation").at("confidence").is_string());
  EXPECT_NE(r.out.find("(confidence " + j.at("recommendation").at("confidence").get<std::string>() + ")"),
            std::string::npos)
      << r.out;
  EXPECT_NE(j.at("recommendation").at("reason").get<std::string>().find("finishes the 0.05-epoch run soonest"),
            std::string::npos);
  EXPECT_EQ(j.at("lr").at("batch"), race.at("best_batch"));
  EXPECT_NE(html.find("Run race: your 0.05-epoch cosine run"), std::string::npos);
  EXPECT_FALSE(race.at("schedule_reason").get<std::string>().empty()) << race.dump();
}

// tune --epochs: the run race answers for the run; its pick is the recommendation, with the rate
// it trained at, in the console, the JSON and the HTML; a target beside it, or a decaying rate
// without it, is refused before anything runs.
TEST(Cli, TuneWithEpochsAnswersForTheRun) {
  const fs::path json = scratch() / "tune-epochs.json", html = scratch() / "tune-epochs.html";
  const Outcome r = batchwise(
      // Two batches whose steps are short (about 1 ms at one thread), the larger one 1.5x faster when
      // quiet: both stay candidates on a loaded machine, as far as measured (a larger batch more than
      // 5 % slower than a smaller one is dominated). The sweep's rate is a batch over its median step, and a
      // step longer than the scheduler's slice is mostly preempted on a loaded machine while a shorter
      // one mostly is not: with 32, 48 and 64 (2-7 ms steps) and three busy loops beside it, 32 read
      // 12-20k samples/s and 48 and 64 7.5-10k, four times in four; 48 and 64 were dominated, and the
      // run race, with one candidate, did not run. 8 and 16 read 6-10k and 10-15k. With --base-batch
      // 8, they train at 0.01 and 0.02. That is the usual reading, not a margin (16 at 0.95x to 2.5x of
      // 8's rate keeps both): where the sweep leaves one, the test checks the fallback and is skipped.
      // On Fashion-MNIST, whose test split the compressed runs learn (synthetic data's held-out loss
      // does not move in so short a run, and the run race then rightly recommends nothing:
      // RunRace.AReferenceThatNeverLeftTheStartPredictsNothing). A run of 0.05 epochs, whose
      // compressed runs are a quarter, half and all of it within a budget of 30 s however busy the
      // machine: with 2 epochs and a budget of 1 s, a loaded machine's slower sweep bought runs too
      // short to leave the start, and the race recommended nothing.
      "tune --model mlp --memory-budget 64MiB --max 64 --batch-sizes 8,16 --base-batch 8 "
      "--warmup 1 --steps 3 --repetitions 3 --threads 1 --advice-budget 30 --noise-steps 4 --epochs 0.05 "
      "--lr-schedule cosine --no-history --verbose --json " +
      json.string() + " --html " + html.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  const bool raced = sweep_leaves_a_race(j);
  if (raced)
    check_the_run_race(r, j, slurp(html));
  else
    EXPECT_NE(j.at("context").at("warnings").dump().find("--epochs was not used"), std::string::npos) << j.dump();

  const Outcome both = batchwise("tune --model mlp --dataset synthetic --epochs 2 --target-accuracy 0.8");
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("give one of them"), std::string::npos) << both.err;
  const Outcome schedule = batchwise("tune --model mlp --dataset synthetic --lr-schedule cosine");
  EXPECT_EQ(schedule.code, 2);
  EXPECT_NE(schedule.err.find("give --epochs N"), std::string::npos) << schedule.err;
  const Outcome shape =
      batchwise("validate --model mlp --dataset synthetic --batch-sizes 16 --epochs 1 --lr-schedule linear");
  EXPECT_EQ(shape.code, 2);
  EXPECT_NE(shape.err.find("choose one of constant, cosine, step"), std::string::npos) << shape.err;
  // validate trains a batch schedule given, and refuses a bad one. On 1,024 synthetic samples at 5x the
  // default rate, which the runs learn from in an epoch (at the default rate on 256 samples the held-out
  // loss moved 0.06 %, and validate now judges no run that did not leave the start).
  const fs::path scheduled = scratch() / "validate-schedule.json";
  const Outcome phased = batchwise(
      "validate --model mlp --dataset synthetic --synthetic-size 1024 --lr 0.05 --batch-sizes 16 --epochs 2 "
      "--lr-schedule cosine --batch-schedule 16:0,64:1 --rule-lr --threads 1 --no-history --json " +
      scheduled.string());
  ASSERT_EQ(phased.code, 0) << phased.err;
  EXPECT_NE(phased.err.find("[validate] schedule 16:0,64:1"), std::string::npos) << phased.err;
  // its progress names it as the schedule, not as its first phase's batch
  EXPECT_NE(phased.err.find("[validate 2/2] schedule 16:0,64:1: epoch "), std::string::npos) << phased.err;
  EXPECT_NE(phased.out.find("schedule 16:0,64:1"), std::string::npos) << phased.out;
  const auto v = nlohmann::json::parse(slurp(scheduled)).at("validation");
  ASSERT_EQ(v.at("runs").size(), 2u);
  EXPECT_EQ(v.at("runs")[1].at("schedule"), "16:0,64:1");
  EXPECT_EQ(v.at("runs")[1].at("steps"), 64 + 16);  // 1,024 / 16 steps, then 1,024 / 64
  EXPECT_EQ(v.at("fastest_batch"), 16);             // a schedule is never the fastest fixed batch
  const Outcome unspaced = batchwise(
      "validate --model mlp --dataset synthetic --batch-sizes 16 --batch-schedule 16:0,64:1 "
      "--target-accuracy 0.5");
  EXPECT_EQ(unspaced.code, 2);
  EXPECT_NE(unspaced.err.find("--batch-schedule 16:0,64:1: a schedule's phases are epochs of a run of known length; "
                              "give --epochs N"),
            std::string::npos)
      << unspaced.err;
  const Outcome bad =
      batchwise("validate --model mlp --dataset synthetic --batch-sizes 16 --epochs 2 --batch-schedule 16");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--batch-schedule: '16' in '16' has no ':'"), std::string::npos) << bad.err;
  // --extend-below: a grid whose best is its smallest batch (one batch: always) trains half of it too.
  const fs::path extended = scratch() / "validate-extended.json";
  const Outcome below = batchwise(
      "validate --model mlp --dataset synthetic --synthetic-size 1024 --lr 0.05 --batch-sizes 16 --epochs 1 "
      "--lr-schedule cosine --extend-below 1 --rule-lr --threads 1 --no-history --json " +
      extended.string());
  ASSERT_EQ(below.code, 0) << below.err;
  EXPECT_NE(below.err.find("at each of 16 (8 too where 16 ends best)"), std::string::npos) << below.err;
  const auto runs = nlohmann::json::parse(slurp(extended)).at("validation").at("runs");
  ASSERT_EQ(runs.size(), 2u) << runs.dump();
  EXPECT_EQ(runs[0].at("batch"), 8);
  EXPECT_EQ(runs[1].at("batch"), 16);
  expect_clean_error("validate --model mlp --dataset synthetic --batch-sizes 16 --extend-below 1 --target-accuracy 0.5",
                     2,
                     "--extend-below 1: it extends full runs, whose best is judged at the run's end; give --epochs N");
  if (!raced) GTEST_SKIP() << kNoRaceRan;
}

// A run that cannot leave the plateau in the races (a rate of 1e-9): the run race and the batch race
// that follows both rank nothing, and the answer is the smallest batch the batch race trained
// longest, at low confidence, with the command that checks it. Before, the noise scale's goodput at
// the initial weights answered, and once named a batch that trained to chance.
TEST(Cli, TuneWhoseRacesNeverLeaveThePlateauAnswersTheSmallestBatchTrainedLongest) {
  const fs::path json = scratch() / "tune-plateau.json";
  const Outcome r = batchwise(
      "tune --model mlp --memory-budget 64MiB --max 64 --batch-sizes 8,16 --warmup 1 --steps 3 --repetitions 3 "
      "--threads 1 --advice-budget 1 --noise-steps 4 --epochs 2 --lr 1e-9 --lr-schedule cosine --no-history --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  if (!sweep_leaves_a_race(j)) {
    EXPECT_FALSE(j.contains("run_race") || j.contains("race")) << r.err;
    GTEST_SKIP() << kNoRaceRan;
  }
  ASSERT_TRUE(j.contains("run_race") && j.contains("race")) << r.err;
  EXPECT_TRUE(j.at("run_race").at("best_batch").is_null());
  const auto& race = j.at("race");
  EXPECT_TRUE(race.at("stuck").get<bool>()) << race.dump();
  EXPECT_TRUE(race.at("best_batch").is_null());
  int64_t smallest = 0;
  int longest = 0;
  for (const auto& e : race.at("entries")) {
    const int rungs = e.at("rungs").get<int>();
    const int64_t batch = e.at("batch").get<int64_t>();
    if (e.at("loss_at_horizon").is_null()) continue;
    if (rungs > longest || (rungs == longest && batch < smallest)) longest = rungs, smallest = batch;
  }
  ASSERT_GT(smallest, 0) << race.dump();
  const auto& rec = j.at("recommendation");
  EXPECT_EQ(rec.at("batch").get<int64_t>(), smallest);
  EXPECT_EQ(rec.at("confidence"), "low");
  const std::string reason = rec.at("reason").get<std::string>();
  EXPECT_NE(reason.find("This is the plateau's answer, not a measured one"), std::string::npos) << reason;
  EXPECT_NE(reason.find("`batchwise validate --epochs 2 --batch-sizes"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("goodput"), std::string::npos) << reason;
  EXPECT_EQ(j.at("lr").at("batch").get<int64_t>(), smallest);
  EXPECT_NE(r.out.find("race: no batch left the plateau at the start"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the answer is the smallest batch it trained longest"), std::string::npos) << r.out;
}

// A batch race whose budget fits no candidate a comparison's steps in its first rung trains none: the
// answer falls back to the knee, and a warning says the race trained nothing (before, none did).
TEST(Cli, ABatchRaceThatTrainsNoBatchSaysSo) {
  const fs::path json = scratch() / "tune-race-none.json";
  const Outcome r = batchwise(
      "tune --model mlp --memory-budget 64MiB --max 64 --batch-sizes 8,16 --warmup 1 --steps 3 --repetitions 3 "
      "--threads 1 --advice-budget 0.001 --no-noise --no-history -q --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  if (!sweep_leaves_a_race(j)) GTEST_SKIP() << kNoRaceRan;
  ASSERT_TRUE(j.contains("race")) << r.err;
  EXPECT_TRUE(j.at("race").value("entries", nlohmann::json::array()).empty()) << j.at("race").dump();
  const std::string warnings = j.at("context").at("warnings").dump();
  EXPECT_NE(warnings.find("the batch race trained no batch: each of 8, 16 fits too few steps in its first rung"),
            std::string::npos)
      << warnings;
  EXPECT_EQ(j.at("recommendation").at("confidence"), "low");
}

// Without --verbose, tune prints what a person reads first: one line per phase on stderr ("[2/4]
// sweep: ...", the total fixed from the start), and on stdout the header, at most five lines of
// why and the answer last; every table stays behind --verbose and in the reports.
TEST(Cli, TuneWithoutVerbosePrintsPhasesTheWhyAndTheAnswer) {
  const fs::path json = scratch() / "tune-brief.json";
  const Outcome r = batchwise(
      "tune --model mlp --dataset synthetic --synthetic-size 512 --memory-budget 64MiB --max 64 --warmup 1 --steps 2 "
      "--repetitions 2 --threads 1 --advice-budget 1 --no-history --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  };
  const std::vector<std::string> err = lines(r.err), out = lines(r.out);
  EXPECT_LE(err.size() + out.size(), 30u) << r.err << r.out;
  ASSERT_FALSE(err.empty());
  const std::string total = err.front().substr(err.front().find('/'), err.front().find(']') - err.front().find('/'));
  // [1/N] fit, then what the rest is expected to take, then [2/N] sweep, ... with N the same throughout.
  ASSERT_GE(err.size(), 2u) << r.err;
  EXPECT_EQ(err[1].rfind("expected: about ", 0), 0u) << r.err;
  EXPECT_NE(err[1].find(", at most "), std::string::npos) << r.err;
  EXPECT_NE(err[1].find("done about "), std::string::npos) << r.err;
  for (size_t i = 0, phase = 1; i < err.size(); ++i)  // "expected now: ..." before the race on a slowed machine
    if (i != 1 && err[i].rfind("expected now: ", 0) != 0)
      EXPECT_EQ(err[i].rfind(fmt::format("[{}{}] ", phase++, total), 0), 0u) << r.err;
  EXPECT_EQ(err.front().rfind("[1/4] fit: ", 0), 0u) << r.err;  // the race is planned whether it runs or not
  const auto j = nlohmann::json::parse(slurp(json));
  const bool raced = sweep_leaves_a_race(j);
  if (raced) {
    EXPECT_NE(r.err.find("[4/4] batch race over "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(" with its range tests and evaluations)"), std::string::npos) << r.err;
    // It names the batches its first rung trains, as the race then does (before, also those it left out)
    std::string line = r.err.substr(r.err.find("[4/4] batch race over ") + 22);
    line = line.substr(0, line.find_first_of(":("));
    std::vector<int64_t> listed;
    for (size_t at = line.rfind("none of ", 0) == 0 ? line.size() : 0; at < line.size();
         at = line.find(", ", at) == std::string::npos ? line.size() : line.find(", ", at) + 2)
      listed.push_back(std::stoll(line.substr(at)));
    const std::string notes = j.at("race").value("notes", nlohmann::json::array()).dump();
    if (j.at("race").contains("left_out"))  // for too few steps in the first rung (not at a wall limit)
      for (const auto& b : j.at("race").at("left_out"))
        if (notes.find(fmt::format("batch {} left out: ", b.get<int64_t>())) != std::string::npos)
          EXPECT_EQ(std::count(listed.begin(), listed.end(), b.get<int64_t>()), 0) << line;
  }
  EXPECT_EQ(r.err.find("[trial"), std::string::npos) << r.err;
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().rfind(fmt::format("answer: batch {} | lr ", j.at("recommendation").at("batch").get<int>()), 0),
            0u)
      << r.out;
  EXPECT_NE(out.back().find(" | confidence " + j.at("recommendation").at("confidence").get<std::string>()),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nwhy:\n  fit: batch 64 "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("sweep ("), std::string::npos) << r.out;
  // Without --epochs, a race's answer states the horizon it stands for and how to ask for a run.
  const auto& race = j.value("race", nlohmann::json::object());
  if (race.contains("best_batch") && race.at("best_batch") == j.at("recommendation").at("batch")) {
    const std::string reason = j.at("recommendation").at("reason");
    EXPECT_NE(reason.find("; this answers for about "), std::string::npos) << reason;
    EXPECT_NE(reason.find("`tune --epochs N --lr-schedule cosine` answers for it"), std::string::npos) << reason;
  }
  // Where the time went, phase by phase, in the JSON and on one line.
  const auto& timing = j.at("timing");
  std::vector<std::string> phases;
  double sum = 0;
  for (const auto& p : timing.at("phases")) {
    phases.push_back(p.at("phase"));
    sum += p.at("wall_s").get<double>();
    EXPECT_GE(p.at("wall_s").get<double>(), 0);
  }
  std::vector<std::string> ran{"doctor", "fit", "sweep", "noise scale"};
  if (raced) ran.push_back("race");
  ran.push_back("learning rate");
  EXPECT_EQ(phases, ran) << timing.dump();
  EXPECT_LE(sum, timing.at("total_s").get<double>() + 1e-9);
  // What was expected, stated once the fit had timed the steps, beside what it took.
  ASSERT_TRUE(timing.contains("expected_s")) << timing.dump();
  EXPECT_GT(timing.at("expected_s").get<double>(), 0);
  EXPECT_GE(timing.at("at_most_s").get<double>(), timing.at("expected_s").get<double>());
  for (const auto& p : timing.at("phases"))
    if (p.at("phase") == "sweep" || p.at("phase") == "race") EXPECT_GT(p.value("expected_s", 0.0), 0) << p.dump();
  EXPECT_NE(r.out.find(fmt::format(
                "time: {:.0f} s in all ({:.0f} s expected, at most {:.0f} s: ", timing.at("total_s").get<double>(),
                timing.at("expected_s").get<double>(), timing.at("at_most_s").get<double>())),
            std::string::npos)
      << r.out;
  // --verbose: every table, and a line per trial.
  const Outcome verbose = batchwise(
      "tune --model mlp --dataset synthetic --synthetic-size 512 --memory-budget 64MiB --max 64 --warmup 1 --steps 2 "
      "--repetitions 1 --threads 1 --no-race --no-history --verbose");
  ASSERT_EQ(verbose.code, 0) << verbose.err;
  EXPECT_NE(verbose.out.find("sweep ("), std::string::npos) << verbose.out;
  EXPECT_NE(verbose.err.find("[trial 1/7] batch 1: "), std::string::npos) << verbose.err;
  if (!raced) GTEST_SKIP() << kNoRaceRan;
}

// TuneOnATinySyntheticWorkloadWritesTheReport's batch race: the sweep's fast batches trained from
// the same weights at equal time, its winner recommended with its measured learning rate, and the
// run plan over the race's flat range.
void check_the_batch_race(const Outcome& r, const nlohmann::json& j) {
  const auto& race = j.at("race");
  ASSERT_GE(race.at("entries").size(), 2u) << race.dump();
  EXPECT_NE(r.err.find("batch race over"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[race rung 1/"), std::string::npos) << r.err;  // progress while it trains
  EXPECT_EQ(j.at("recommendation").at("batch"), race.at("best_batch"));
  // "reached the lowest held-out loss (...)", or "reached a held-out loss (...)" where the last rung
  // could not tell the lead from a larger batch (a loaded machine shortens the rungs to keep to
  // --advice-budget, and short rungs tell less apart).
  EXPECT_NE(j.at("recommendation").at("reason").get<std::string>().find(" held-out loss ("), std::string::npos)
      << j.at("recommendation").dump();
  EXPECT_NE(j.at("recommendation").at("reason").get<std::string>().find("from your initial weights"),
            std::string::npos);
  // --target-loss reaches the race; the initial weights already meet this one, so it ranks as without.
  EXPECT_EQ(race.at("target"), "");
  EXPECT_NE(race.at("notes").dump().find("the target (held-out loss <= 100) is met by the initial weights already"),
            std::string::npos)
      << race.at("notes").dump();
  EXPECT_EQ(j.at("lr").at("batch"), j.at("recommendation").at("batch"));
  ASSERT_TRUE(j.contains("run_plan")) << j.dump();
  // The plan: the base batch first, then the recommended one and the rest of the race's flat
  // range, by batch.
  const auto& rows = j.at("run_plan").at("rows");
  EXPECT_EQ(rows.at(0).at("batch"), 32);
  EXPECT_EQ(rows.at(0).at("label"), "base");
  const auto& flat = race.at("within_5_percent");
  bool recommended = j.at("recommendation").at("batch") == 32;  // then the base row is the recommendation
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows.at(i).at("label") == "recommended") {
      EXPECT_EQ(rows.at(i).at("batch"), j.at("recommendation").at("batch"));
      recommended = true;
    } else {
      EXPECT_EQ(rows.at(i).at("label"), "within 5 %") << rows.dump();
      EXPECT_NE(std::find(flat.begin(), flat.end(), rows.at(i).at("batch")), flat.end()) << rows.dump();
    }
    if (i > 1) EXPECT_LT(rows.at(i - 1).at("batch").get<int>(), rows.at(i).at("batch").get<int>());
  }
  EXPECT_TRUE(recommended) << rows.dump();
}

// A run shorter than one step of the answer (0.2 epochs of 100 samples: 20): the answer, goodput's where
// the races cannot rank, is said to train more than the run in one step.
TEST(Cli, TuneForARunShorterThanOneStepOfItsAnswerSaysSo) {
  const fs::path json = scratch() / "short-run.json";
  const Outcome r = batchwise(
      "tune --model mlp --dataset synthetic --synthetic-size 100 --lr 0.05 --max 256 --trial-timeout 10 --epochs 0.2 "
      "--lr-schedule cosine --no-history -q --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  const int64_t batch = j.at("recommendation").at("batch").get<int64_t>();
  const std::string warnings = j.at("context").at("warnings").dump();
  const std::string said = fmt::format("batch {} is more samples than your 0.2-epoch run trains (20): one step", batch);
  EXPECT_EQ(warnings.find(said) != std::string::npos, batch > 20) << warnings;
}

TEST(Cli, TuneOnATinySyntheticWorkloadWritesTheReport) {
  const fs::path json = scratch() / "tune.json", html = scratch() / "tune.html";
  const Outcome r = batchwise(
      // --advice-budget 4: the race trains what is left after its overhead (range tests, evaluations),
      // at least a quarter of it, and a candidate with fewer than 8 steps in the first rung is left
      // out; 1 s left a loaded machine's slower steps at the edge of that.
      "tune --model mlp --dataset synthetic --synthetic-size 512 --memory-budget 64MiB --max 64 --warmup 1 --steps 2 "
      "--repetitions 2 --threads 1 --advice-budget 4 --sweep-all --target-loss 100 --verbose --json " +
      json.string() + " --html " + html.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("[trial 1] batch 32: ok"), std::string::npos) << r.err;  // progress, one line per trial
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << "stderr is not a terminal here: plain lines, no live line";
  EXPECT_NE(r.err.find("[trial 14/14] batch 1: "), std::string::npos)
      << r.err;  // the sweep's i of n (2 x 7, serpentine)
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
  EXPECT_DOUBLE_EQ(j.at("sweep").at("min_time_s").get<double>(), 0.1);
  for (const auto& p : j.at("sweep").at("points")) {
    EXPECT_EQ(p.at("outcome"), "ok");
    // 2 steps or more a repetition (the 0.1 s --min-time), raw; 1 warm-up step each
    const int repetitions = p.at("repetitions");
    EXPECT_GE(p.at("step_times_s").size(), 4u);
    EXPECT_EQ(p.at("steps_run").get<size_t>(), p.at("step_times_s").size() + static_cast<size_t>(repetitions));
  }
  // The noise scale measured at the largest batch swept, goodput for every swept batch, and the
  // recommendation from the batch race (check_the_batch_race).
  EXPECT_EQ(j.at("noise_scale").at("batch"), 64);
  EXPECT_EQ(j.at("noise_scale").at("micro_batch"), 8);
  ASSERT_TRUE(j.at("noise_scale").at("b_simple").is_number()) << j.at("noise_scale").dump();
  EXPECT_EQ(j.at("goodput").at("points").size(), 7u);
  const bool raced = sweep_leaves_a_race(j);
  if (raced) {
    check_the_batch_race(r, j);
  } else {  // goodput's optimum, as without the race
    EXPECT_FALSE(j.contains("race"));
    EXPECT_NE(j.at("recommendation").at("reason").get<std::string>().find("statistical efficiency"), std::string::npos)
        << j.at("recommendation").dump();
  }
  // Without the race, the goodput optimum as before; a target nothing used is reported.
  const Outcome plain = batchwise(
      "tune --model mlp --dataset synthetic --synthetic-size 512 --memory-budget 64MiB --max 64 --warmup 1 --steps 2 "
      "--repetitions 2 --threads 1 --no-race --no-history -q --batch-sizes 1-64*2 --target-accuracy 0.8 --json " +
      (scratch() / "plain.json").string());
  ASSERT_EQ(plain.code, 0) << plain.err;
  const auto p = nlohmann::json::parse(slurp(scratch() / "plain.json"));
  EXPECT_FALSE(p.contains("race"));
  EXPECT_NE(p.at("context")
                .at("warnings")
                .dump()
                .find("the target was not used: without --validate only the batch "
                      "race uses it, and no race ran (--no-race"),
            std::string::npos)
      << p.at("context").dump();
  EXPECT_EQ(p.at("sweep").at("points").size(), 7u);  // batches given are all swept, flat or not
  EXPECT_EQ(p.at("recommendation").at("batch"), p.at("goodput").at("best_batch"));
  EXPECT_NE(p.at("recommendation").at("reason").get<std::string>().find("statistical efficiency"), std::string::npos);

  // The HTML report of the same run: its throughput chart has the sweep's 7 points, and
  // `batchwise report` draws the same page from the JSON.
  const std::string page = slurp(html);
  for (const char* section : {"id=\"recommendation\"", "id=\"throughput\"", "id=\"memory\"", "id=\"fit-trials\""})
    EXPECT_NE(page.find(section), std::string::npos) << section;
  EXPECT_NE(page.find("<b id=\"recommended-batch\">" + std::to_string(j.at("recommendation").at("batch").get<int>()) +
                      "</b>"),
            std::string::npos);
  const std::string opening = "data-chart=\"throughput\">";
  const size_t chart = page.find(opening) + opening.size();
  ASSERT_GT(chart, opening.size());
  const auto config = nlohmann::json::parse(page.substr(chart, page.find("</script>", chart) - chart));
  EXPECT_EQ(config.at("data").at("datasets").at(0).at("data").size(), 7u);
  const fs::path again = scratch() / "again.html";
  const Outcome report = batchwise("report " + json.string() + " -o " + again.string());
  ASSERT_EQ(report.code, 0) << report.err;
  EXPECT_EQ(slurp(again), page);
  if (!raced) GTEST_SKIP() << kNoRaceRan;
}

// plan: the global batch kept exact over devices and micro-batches, the epoch's last batch, and the
// learning rate for it; or the nearest global batch, with the reason.
TEST(Cli, PlanKeepsTheGlobalBatchAndStatesTheLastBatch) {
  const fs::path json = scratch() / "plan.json";
  const std::string base = "plan --model mlp --dataset synthetic --synthetic-size 1000 --no-history ";
  Outcome r = batchwise(
      base + "--global-batch 96 --world-size 2 --max-micro-batch 16 --lr 0.1 --base-batch 32 --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: global batch 96 = micro-batch 16 x 3 accumulation steps x 2 devices (exact)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("the last 40 samples are dropped"), std::string::npos) << r.out;  // 1000 = 10 x 96 + 40
  auto j = nlohmann::json::parse(slurp(json));
  const auto& a = j.at("accumulation_plan");
  EXPECT_EQ(a.at("micro_batch").get<int>() * a.at("accumulation_steps").get<int>() * a.at("world_size").get<int>(), 96);
  EXPECT_EQ(a.at("epoch").at("dropped_samples"), 40);
  EXPECT_EQ(a.at("epoch").at("steps"), 10);
  EXPECT_DOUBLE_EQ(j.at("lr").at("lr").get<double>(), 0.3);  // linear: 0.1 x 96/32
  EXPECT_FALSE(j.contains("fit"));                           // --max-micro-batch given: nothing to fit
  // Two devices: no range test looked at the rate, and the console says so; the run plan counts the
  // plan's 10 steps (the last 40 samples dropped), not 11, and its warm-up in steps and epochs.
  EXPECT_NE(r.out.find("learning rate at batch 96: 0.3, unchecked: the scaling rule alone"), std::string::npos)
      << r.out;
  for (const auto& row : j.at("run_plan").at("rows")) {
    if (row.at("batch") == 96) EXPECT_EQ(row.at("steps_per_epoch"), 10);
    if (row.at("batch") == 32) EXPECT_EQ(row.at("steps_per_epoch"), 31);  // the base batch's, dropped too
  }
  EXPECT_NE(r.out.find("50 steps (5 epochs) from 0.1"), std::string::npos) << r.out;
  // A batch taken on trust (--max-micro-batch) past the budget: its range test is held to the budget and the rate
  // is the rule's, unchecked, said so (the test had trained 9.9 GB of a batch of 2^20 against 256 MiB)
  r = batchwise(
      "plan --model mlp --dataset synthetic --synthetic-size 100 --no-history --global-batch 8192 "
      "--max-micro-batch 8192 --memory-budget 8MiB --lr 0.1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("unchecked: a learning-rate range test at batch 8192 ran out of the 7.20 MiB it may use"),
            std::string::npos)
      << r.out;
  // A base batch larger than the data trains no step an epoch under drop_last (it had read 1)
  r = batchwise(
      "plan --model mlp --dataset synthetic --synthetic-size 20 --no-history --global-batch 16 "
      "--max-micro-batch 16 --base-batch 32 --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto planned = nlohmann::json::parse(slurp(json));  // alive through the loop (ASan: a temporary's had died)
  for (const auto& row : planned.at("run_plan").at("rows"))
    EXPECT_EQ(row.at("steps_per_epoch"), row.at("batch") == 16 ? 1 : 0) << row.dump();
  EXPECT_NE(r.out.find("  epoch: 1 optimizer step; "), std::string::npos) << r.out;  // not "1 optimizer steps"

  r = batchwise(base + "--global-batch 100 --world-size 3 --max-micro-batch 16 --last-batch pad --json " +
                json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(slurp(json));
  EXPECT_FALSE(j.at("accumulation_plan").at("exact").get<bool>());
  EXPECT_EQ(j.at("accumulation_plan").at("global_batch"), 99);
  EXPECT_NE(r.out.find("100 samples do not divide evenly over 3 devices"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("topped up with 89 repeated samples"), std::string::npos) << r.out;  // 1000 = 10 x 99 + 10

  // Without --max-micro-batch the largest micro-batch is fitted first.
  r = batchwise(base + "--global-batch 64 --memory-budget 64MiB --max 32 --fit-steps 1 -q --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j.at("fit").at("batch"), 32);
  EXPECT_EQ(j.at("accumulation_plan").at("micro_batch"), 32);
  EXPECT_EQ(j.at("accumulation_plan").at("accumulation_steps"), 2);
  // Without --max the fit searches no further than a device's share of the global batch.
  r = batchwise(base + "--global-batch 48 --world-size 2 --memory-budget 64MiB --fit-steps 1 -q --json " +
                json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j.at("fit").at("batch"), 24);
  EXPECT_TRUE(j.at("fit").at("limited_by_max").get<bool>());
  EXPECT_EQ(j.at("accumulation_plan").at("accumulation_steps"), 1);
  expect_clean_error(base + "--global-batch 64 --max-micro-batch 8 --last-batch sometimes", 2,
                     "--last-batch 'sometimes': choose drop (drop_last), pad or keep");
}

TEST(Cli, NoiseReportsTheNoiseScaleWithItsTimeline) {
  const fs::path json = scratch() / "noise.json";
  const Outcome r = batchwise(
      "noise --model mlp --dataset synthetic --synthetic-size 512 --batch 64 --micro-batch 8 "
      "--noise-steps 8 --no-history --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("B_simple = tr(Sigma) / |G|^2 = "), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(json));
  const auto& n = j.at("noise_scale");
  EXPECT_EQ(n.at("timeline").size(), 8u);
  EXPECT_TRUE(n.at("b_simple").is_number());
  EXPECT_LE(n.at("b_simple_band").at(0).get<double>(), n.at("b_simple").get<double>());
  EXPECT_FALSE(j.contains("recommendation"));
  expect_clean_error("noise --model mlp --dataset synthetic --batch 64 --micro-batch 24", 2,
                     "--micro-batch 24 must be below --batch 64 and divide it: e.g. --micro-batch 16");
  expect_clean_error("noise --model mlp --dataset synthetic --batch 2", 2,
                     "--micro-batch 32 must be below --batch 2 and divide it: e.g. --micro-batch 1");
  expect_clean_error(
      "noise --model mlp --dataset synthetic --batch 1 --micro-batch 1", 2,
      "--batch 1: it compares a batch's gradient with its micro-batches', so --batch must be at least 2");
  // What noise reads nothing of is refused by name, not taken and ignored; the budget holds its steps.
  expect_clean_error("noise --model mlp --dataset synthetic --trace " + (scratch() / "t.json").string(), 2,
                     "--trace does not apply here: noise recommends no batch");
  expect_clean_error("noise --model mlp --dataset synthetic --trial-timeout 5", 2,
                     "--trial-timeout does not apply here: noise runs no trials");
  expect_clean_error("noise --model mlp --dataset synthetic --target 0.5", 2,
                     "--target does not apply here: noise fits no batch");
  const std::string small = "noise --model mlp --dataset synthetic --synthetic-size 512 --batch 64 --noise-steps 3 ";
  const Outcome tight = batchwise(small + "--memory-budget 3MiB --no-history -q --json " + json.string());
  EXPECT_EQ(tight.code, 6) << tight.err;
  EXPECT_NE(tight.err.find("batchwise noise: batch 64 does not fit the memory budget (3.00 MiB): CPU memory budget "
                           "exceeded"),
            std::string::npos)
      << tight.err;
  {  // the report is written all the same (it was not), and says why it holds no noise scale
    const auto report = nlohmann::json::parse(slurp(json));
    EXPECT_FALSE(report.contains("noise_scale") && !report.at("noise_scale").is_null()) << report.dump();
    EXPECT_EQ(report.at("context").at("warnings").at(0).get<std::string>().find("batch 64 does not fit the memory"),
              0u);
  }
  // A loss that stopped being finite measured nothing: exit 1, the step named, the report written.
  const Outcome nan = batchwise(small + "--lr 1e6 --no-history -q --json " + json.string());
  EXPECT_EQ(nan.code, 1) << nan.err;
  const auto d = nlohmann::json::parse(slurp(json)).at("noise_scale");
  EXPECT_TRUE(d.at("diverged").get<bool>()) << d.dump();
  EXPECT_TRUE(d.at("b_simple").is_null());
  EXPECT_NE(d.at("message").get<std::string>().find("at step "), std::string::npos) << d.dump();
  expect_clean_error("noise --cmd -- true", 2, "it cannot be measured through --cmd");
  // and its --help does not offer --cmd (validate's and loader's neither)
  for (const char* command : {"noise", "validate", "loader"}) {
    const Outcome help = batchwise(std::string(command) + " --help");
    EXPECT_EQ(help.out.find("--cmd"), std::string::npos) << command << ":\n" << help.out;
  }
}

// validate: real training on Fashion-MNIST to a test accuracy at each candidate, each with its
// scaled learning rate; the soonest is recommended. The candidates train smallest first, whatever
// order they were given in, and the stage line lists them so.
TEST(Cli, ValidateTrainsToTheTargetAtEachBatch) {
  const fs::path json = scratch() / "validate.json";
  const Outcome r = batchwise(
      "validate --model mlp --batch-sizes 256,64 --target-accuracy 0.75 --max-epochs 1 "
      "--threads 2 --no-history --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("validating: training to the target at each of 64, 256"), std::string::npos) << r.err;
  // Progress while each candidate trains (epoch, held-out metric, time so far and left), then its end.
  EXPECT_NE(r.err.find("[validate 1/2] batch 64: epoch "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[validate 2/2] batch 256: epoch "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" s left; "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[validate] batch 64 (lr "), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  const auto& v = j.at("validation");
  EXPECT_EQ(v.at("target"), "test accuracy >= 0.75");
  EXPECT_NE(v.at("held_out").get<std::string>().find("10000 samples"), std::string::npos);
  ASSERT_EQ(v.at("runs").size(), 2u);
  for (const auto& run : v.at("runs")) {
    EXPECT_TRUE(run.at("reached").get<bool>()) << run.dump();
    EXPECT_GE(run.at("accuracy").get<double>(), 0.75);
    EXPECT_GT(run.at("train_s").get<double>(), 0);
    EXPECT_EQ(run.at("curve").back().at("accuracy"), run.at("accuracy"));
    // 1/20 of an epoch between evaluations: the target was not yet reached one evaluation earlier.
    if (run.at("curve").size() > 1)
      EXPECT_LT(run.at("curve").at(run.at("curve").size() - 2).at("accuracy").get<double>(), 0.75);
  }
  // Each batch at its scaled rate (0.01 x 64/32, 0.01 x 256/32), capped where a range test from
  // the same weights saw the loss run away too close above it, with a warm-up from the base rate.
  for (const auto& run : v.at("runs")) {
    const double rule = 0.01 * run.at("batch").get<double>() / 32;
    EXPECT_LE(run.at("lr").get<double>(), rule + 1e-12) << run.dump();
    EXPECT_GE(run.at("lr").get<double>(), 0.01) << run.dump();
    EXPECT_EQ(run.at("lr_capped").get<bool>(), run.at("lr").get<double>() < rule - 1e-12) << run.dump();
    EXPECT_GT(run.at("warmup_steps").get<int>(), 0) << run.dump();
  }
  EXPECT_EQ(j.at("recommendation").at("batch"), v.at("fastest_batch"));
  EXPECT_NE(r.out.find("<- soonest"), std::string::npos) << r.out;

  const Outcome never = batchwise(
      "validate --model mlp --batch-sizes 64 --target-accuracy 0.99 --max-epochs 0.05 "
      "--no-history -q --json " +
      json.string());
  ASSERT_EQ(never.code, 0) << never.err;
  const auto n = nlohmann::json::parse(slurp(json));
  EXPECT_FALSE(n.at("validation").at("runs").at(0).at("reached").get<bool>());
  EXPECT_EQ(n.at("validation").at("runs").at(0).at("message"), "not reached within --max-epochs 0.05");
  EXPECT_TRUE(n.at("validation").at("fastest_batch").is_null());
  EXPECT_FALSE(n.contains("recommendation"));

  // No run trained: a failure, as a sweep in which no batch trained is (6: every run out of memory,
  // 1: a loss that stopped being finite), the report written with each run's message.
  const Outcome oom =
      batchwise("validate --model mlp --batch-sizes 8,16 --epochs 0.01 --memory-budget 3MiB --no-history -q --json " +
                json.string());
  EXPECT_EQ(oom.code, 6) << oom.err;
  EXPECT_NE(oom.out.find("warning: no run trained: 0 of 2 validation runs ended in an error or a loss that was not "
                         "finite, 2 ran out of memory"),
            std::string::npos)
      << oom.out;
  const auto written = nlohmann::json::parse(slurp(json));  // named: a range-for over a temporary's member reads freed
  for (const auto& run : written.at("validation").at("runs"))
    EXPECT_EQ(run.at("message").get<std::string>().rfind("failed: CPU memory budget exceeded", 0), 0) << run.dump();
  const Outcome diverged =
      batchwise("validate --model mlp --batch-sizes 32,64 --epochs 0.01 --rule-lr --lr 1000 --no-history -q");
  EXPECT_EQ(diverged.code, 1) << diverged.err;
  EXPECT_NE(diverged.out.find("warning: no run trained: 2 of 2 validation runs ended in an error"), std::string::npos)
      << diverged.out;
  expect_clean_error(
      "validate --model mlp --dataset csv --data-file " + (scratch() / "none.csv").string() + " --batch-sizes 64", 2,
      "--dataset csv: validation and tune --epochs need a held-out test split");

  // Your own file, part of it held out: full runs judged on the samples training never saw.
  std::string rows = "a,b,label\n";
  for (int i = 0; i < 400; ++i) rows += fmt::format("{},{},{}\n", i % 7 - 3, i % 5 - 2, (i % 7 + i % 5) % 2);
  std::ofstream(scratch() / "rows.csv") << rows;
  const Outcome split =
      batchwise("validate --model mlp --dataset csv --data-file " + (scratch() / "rows.csv").string() +
                " --held-out-split 0.25 --batch-sizes 16,32,512 --epochs 2 --no-history -q --json " + json.string());
  ASSERT_EQ(split.code, 0) << split.err;
  const auto s = nlohmann::json::parse(slurp(json));
  // A batch above the 300 training samples (within the run's 600) trains as asked, and is said to repeat samples.
  EXPECT_NE(s.at("context")
                .at("warnings")
                .dump()
                .find("batch 512 is larger than the 300 training samples: each step "
                      "repeats samples"),
            std::string::npos)
      << s.at("context").at("warnings").dump();
  EXPECT_EQ(s.at("validation").at("held_out"), "rows.csv held out (25 %) test split, 100 samples");
  EXPECT_EQ(s.at("workload").at("dataset"), "rows.csv less 25 % held out");
  for (const auto& run : s.at("validation").at("runs")) EXPECT_TRUE(run.at("final_accuracy").is_number()) << run;
  // A test file of other columns is named as such (it had said "mat1 and mat2 shapes cannot be multiplied")
  std::ofstream(scratch() / "rows-narrow.csv") << "a,label\n1,0\n2,1\n";
  expect_clean_error("validate --model mlp --dataset csv --data-file " + (scratch() / "rows.csv").string() +
                         " --test-data-file " + (scratch() / "rows-narrow.csv").string() +
                         " --batch-sizes 16 --epochs 1 --no-history -q",
                     3, "rows-narrow.csv: 1 feature a sample, where the training data, rows.csv, has 2: a test file");
  // Or a test file of your own, beside the training file.
  std::string test_rows = "a,b,label\n";  // other samples of the same task
  for (int i = 400; i < 500; ++i) test_rows += fmt::format("{},{},{}\n", i % 7 - 3, i % 3 - 1, (i % 7 + i % 3) % 2);
  std::ofstream(scratch() / "rows-test.csv") << test_rows;
  const Outcome own = batchwise("validate --model mlp --dataset csv --data-file " + (scratch() / "rows.csv").string() +
                                " --test-data-file " + (scratch() / "rows-test.csv").string() +
                                " --batch-sizes 16 --epochs 1 --no-history -q --json " + json.string());
  ASSERT_EQ(own.code, 0) << own.err;
  const auto t = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(t.at("validation").at("held_out"), "rows-test.csv test split, 100 samples");
  EXPECT_EQ(t.at("workload").at("dataset"), "rows.csv");
}

// A grid of full runs takes hours: a first Ctrl-C (or SIGHUP) keeps the runs that finished, in the table, the
// JSON and the history, drops the one under way, recommends nothing from a part of the grid, and
// says how to train the rest; batchwise then ends by the interrupt, as any program does. The signal
// comes once batch 32's run has started, which about 2 s of training at 32 and 64 are left behind.
TEST(Cli, CtrlCDuringValidateKeepsTheRunsThatFinished) {
  const fs::path json = scratch() / "validate-interrupted.json";
  const fs::path db = scratch() / "interrupted.sqlite";
  const fs::path html = scratch() / "validate-interrupted.html";
  fs::remove(json);
  fs::remove(db);
  const Outcome r = signalled_when(
      "validate --model mlp --dataset synthetic --synthetic-size 4096 --lr 0.05 --batch-sizes 16,32,64 --epochs 8 "
      "--lr-schedule cosine --rule-lr --threads 1 --history " +
          db.string() + " --json " + json.string() + " --html " + html.string(),
      "[validate 2/3]", SIGINT);
  ASSERT_EQ(r.code, 130) << r.err;  // 128 + SIGINT
  EXPECT_NE(r.err.find("stopping after this step: the runs that finished are kept and written"), std::string::npos)
      << r.err;
  const auto v = nlohmann::json::parse(slurp(json)).at("validation");
  EXPECT_EQ(v.at("interrupted"), true);
  ASSERT_GE(v.at("runs").size(), 1u);
  EXPECT_EQ(v.at("runs")[0].at("batch"), 16);
  EXPECT_TRUE(v.at("runs")[0].contains("final_loss"));
  ASSERT_FALSE(v.at("not_trained").empty());  // 32's run, or 64's, was under way
  EXPECT_EQ(v.at("not_trained").back(), 64);
  EXPECT_EQ(v.at("runs").size() + v.at("not_trained").size(), 3u);
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_FALSE(j.contains("recommendation") && !j.at("recommendation").is_null()) << j.dump().substr(0, 400);
  EXPECT_NE(r.out.find("warning: interrupted (SIGINT) with "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not trained, so no batch is recommended (to finish it: the same validate again; "
                       "--batch-sizes "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("but judges them among themselves, not against the runs kept here)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("fastest of the runs that ended"), std::string::npos) << r.out;  // no arrow: no pick
  EXPECT_EQ(r.out.find("<- fastest"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("answer: none: interrupted before batch"), std::string::npos) << r.out;
  const std::string page = slurp(html);  // the HTML says why, as the console does
  EXPECT_NE(page.find("No batch was recommended</p>\n<p class=\"reason\">interrupted before batch"), std::string::npos);
  const Outcome history = batchwise("history --json --history " + db.string());
  ASSERT_EQ(history.code, 0) << history.err;
  EXPECT_NE(history.out.find("validate"), std::string::npos) << history.out;
  EXPECT_NE(history.out.find("8 epochs, cosine rate, interrupted"), std::string::npos) << history.out;
  // A closed terminal (an ssh session dropped) sends SIGHUP: the same, ending by it (129).
  fs::remove(json);
  const Outcome hup = signalled_when(
      "validate --model mlp --dataset synthetic --synthetic-size 4096 --lr 0.05 --batch-sizes 16,32,64 --epochs 8 "
      "--lr-schedule cosine --rule-lr --threads 1 --no-history --json " +
          json.string(),
      "[validate 2/3]", SIGHUP);
  ASSERT_EQ(hup.code, 129) << hup.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(json)).at("validation").at("interrupted"), true);
  EXPECT_NE(hup.out.find("warning: interrupted (SIGHUP) with "), std::string::npos) << hup.out;
}

// `nohup batchwise validate ... &`: a SIGHUP the caller ignored stays ignored, so the closed terminal neither stops
// nor ends the run (batchwise had set its own handler over nohup's, and took it as a stop: exit 129).
TEST(Cli, ASignalTheCallerIgnoredStaysIgnored) {
  const fs::path json = scratch() / "validate-nohup.json";
  fs::remove(json);
  struct sigaction before {};
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGHUP, &ignore, &before);  // inherited by the shell and batchwise, as nohup sets it
  const Outcome r = signalled_when(
      "validate --model mlp --dataset synthetic --synthetic-size 2048 --batch-sizes 32,64 --epochs 2 "
      "--lr-schedule cosine --rule-lr --threads 1 --no-history --json " +
          json.string(),
      "[validate 1/2]", SIGHUP);
  sigaction(SIGHUP, &before, nullptr);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("stopping after this step"), std::string::npos) << r.err;
  const auto v = nlohmann::json::parse(slurp(json)).at("validation");
  EXPECT_FALSE(v.value("interrupted", false));
  EXPECT_EQ(v.at("runs").size(), 2u);
  // The same outside a validation: main's handler (which stops a --cmd trainer, then ends batchwise) leaves it too.
  sigaction(SIGHUP, &ignore, nullptr);
  const Outcome fit = signalled_when("fit --model mlp --dataset synthetic --synthetic-size 2048 --max 256 --no-history",
                                     "[trial 1", SIGHUP);
  sigaction(SIGHUP, &before, nullptr);
  EXPECT_EQ(fit.code, 0) << fit.err;
  EXPECT_NE(fit.out.find("recommendation: batch"), std::string::npos) << fit.out;
}

// tune --validate's full runs take as long as validate's: a first Ctrl-C while they train keeps the
// runs that ended in the report, and tune's answer stands as the sweep gave it, not validated (low
// confidence, saying so); the precisions after it are not compared; then tune ends by the signal.
TEST(Cli, CtrlCDuringTuneValidateKeepsTheRunsAndTheAnswerUnvalidated) {
  const fs::path json = scratch() / "tune-interrupted.json";
  fs::remove(json);
  const Outcome r = signalled_when(
      "tune --model mlp --dataset synthetic --synthetic-size 4096 --lr 0.05 --min 16 --max 64 --fit-steps 1 "
      "--steps 2 --repetitions 1 --no-noise --no-race --validate --epochs 20 --lr-schedule cosine --rule-lr "
      "--compare-precision --threads 1 -v --no-history --json " +
          json.string(),
      "[validate 2/", SIGINT);  // the candidates (the knee and its neighbours) follow the sweep's figures
  ASSERT_EQ(r.code, 130) << r.err;
  EXPECT_NE(r.err.find("batchwise tune: stopping after this step: the validation's runs that finished are kept"),
            std::string::npos)
      << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  const auto& v = j.at("validation");
  EXPECT_EQ(v.at("interrupted"), true);
  ASSERT_EQ(v.at("runs").size(), 1u) << v.dump();  // the first; the second was under way
  const int64_t kept = v.at("runs")[0].at("batch");
  ASSERT_FALSE(v.at("not_trained").empty());
  std::vector<std::string> rest;
  for (const auto& b : v.at("not_trained")) rest.push_back(std::to_string(b.get<int64_t>()));
  const auto& rec = j.at("recommendation");  // the sweep's knee, as without --validate
  EXPECT_EQ(rec.at("batch"), j.at("sweep").at("knee_batch"));
  EXPECT_NE(rec.at("reason").get<std::string>().find(
                fmt::format("not validated: the validation was stopped before {} trained", fmt::join(rest, ", "))),
            std::string::npos)
      << rec.dump();
  EXPECT_EQ(rec.at("confidence"), "low");
  EXPECT_NE(rec.at("confidence_reason")
                .get<std::string>()
                .find("the validation was stopped before all its runs "
                      "ended, so it checked nothing"),
            std::string::npos)
      << rec.dump();
  EXPECT_FALSE(j.contains("precision_comparison")) << j.dump().substr(0, 400);
  EXPECT_NE(r.out.find("warning: the precisions were not compared: a stop was asked in the validation before them"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(fmt::format("warning: the validation was interrupted (SIGINT) with 1 of {} runs ended: the run "
                                   "that had ended is kept; {} {} not trained, so tune's answer stands, not validated "
                                   "(to validate it: the same tune --validate again, or batchwise validate "
                                   "--batch-sizes {},",
                                   1 + rest.size(), fmt::join(rest, ", "), rest.size() > 1 ? "were" : "was", kept)),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("trained your 20-epoch run fastest"), std::string::npos) << r.out;  // it decided nothing
  // The note after its last run, from which a signal ends tune at once again.
  EXPECT_NE(r.err.find("validation: 1 of its runs ended, then it was stopped"), std::string::npos) << r.err;
  // The stage line names the halvings below the smallest (the first trained) it may add.
  EXPECT_NE(
      r.err.find(fmt::format("({} too where {} ends best, then {} where {} does)", kept / 2, kept, kept / 4, kept / 2)),
      std::string::npos)
      << r.err;
}

// Past the note after the validation's last run, a Ctrl-C ends tune at once again, as in its other
// phases (here in the precision comparison after it): no report, no stop line. Each sample waits
// 4 ms for its input, so the comparison's trial (12 steps and more of 16 samples) lasts over
// 0.7 s on any machine: with nothing but computing after the note, it had ended about 0.25 s after
// it here, and a machine twice as fast would end before the signal came.
TEST(Cli, CtrlCAfterTuneValidateEndsTuneAtOnce) {
  const fs::path json = scratch() / "tune-after.json";
  fs::remove(json);
  const Outcome r = signalled_when(
      "tune --model mlp --dataset synthetic --synthetic-size 256 --io-latency-us 4000 --lr 0.05 --min 16 --max 32 "
      "--fit-steps 1 --steps 12 --repetitions 1 --no-noise --no-race --validate --epochs 1 --lr-schedule cosine "
      "--rule-lr --compare-precision --threads 1 -v --no-history --json " +
          json.string(),
      "of its runs ended", SIGINT);
  ASSERT_EQ(r.code, 130) << r.err;
  EXPECT_EQ(r.err.find("stopping after this step"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(json));
}

// A report whose folder went while the run trained (removed, unmounted) is not lost with the run's
// hours: it is written to the temp folder, the error names both paths, and the exit is 2.
TEST(Cli, AReportWhoseFolderWentMidRunIsWrittenToTheTempFolder) {
  const fs::path dir = scratch() / "gone";
  fs::create_directories(dir);
  const Outcome r = acted_when(
      "validate --model mlp --dataset synthetic --synthetic-size 4096 --lr 0.05 --batch-sizes 16,32 --epochs 4 "
      "--lr-schedule cosine --rule-lr --threads 1 --no-history --json " +
          (dir / "v.json").string() + " --html " + (dir / "v.html").string(),
      "validating:", [&](pid_t) { return fs::remove_all(dir) > 0; });
  ASSERT_EQ(r.code, 2) << r.err;
  const std::string said = "batchwise validate: error: --json " + (dir / "v.json").string() +
                           ": cannot write there (No such file or directory); check the folder exists and is "
                           "writable; the report was written to ";
  const size_t at = r.err.find(said);
  ASSERT_NE(at, std::string::npos) << r.err;
  const size_t from = at + said.size();
  const fs::path rescued = r.err.substr(from, r.err.find(" instead", from) - from);
  EXPECT_EQ(rescued.extension(), ".json");
  const auto j = nlohmann::json::parse(slurp(rescued));  // the whole report
  EXPECT_EQ(j.at("validation").at("runs").size(), 2u);
  EXPECT_EQ(j.at("recommendation").at("batch"), j.at("validation").at("fastest_batch"));
  EXPECT_NE(r.err.find("error: --html " + (dir / "v.html").string()), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("HTML report: "), std::string::npos) << r.err;  // not where it was asked
  fs::remove(rescued);
  fs::remove(fs::path(rescued).replace_extension(".html"));
  // A $TMPDIR that is no folder: /tmp, said by its whole path (the current folder had taken it, named relatively)
  const Outcome lost = batchwise(
      "sweep --model mlp --dataset synthetic --synthetic-size 256 --batch-sizes 8 --repetitions 1 --steps 3 "
      "--min-time 0 --no-history -q --json /dev/full",
      "TMPDIR=/nonexistent/tmp");
  EXPECT_EQ(lost.code, 2) << lost.err;
  const std::string to = "the report was written to /tmp/batchwise-sweep-";
  const size_t written = lost.err.find(to);
  ASSERT_NE(written, std::string::npos) << lost.err;
  const size_t path = written + to.size() - std::string("/tmp/batchwise-sweep-").size();
  fs::remove(lost.err.substr(path, lost.err.find(" instead", path) - path));
}

// A trace whose folder went while the run trained is said as an error (exit 2), and the run's report and
// history are written all the same: a failing trace had ended the run with neither. The trace is
// renamed into place whole: a file already there is kept until a whole trace replaces it.
TEST(Cli, ATraceThatCannotBeWrittenLosesNothingElse) {
  const fs::path dir = scratch() / "trace-gone", kept = scratch() / "trace-kept";
  fs::remove_all(kept);
  fs::create_directories(dir);
  fs::create_directories(kept);
  const Outcome r = acted_when(
      "validate --model mlp --dataset synthetic --synthetic-size 4096 --lr 0.05 --batch-sizes 16,32 --epochs 4 "
      "--lr-schedule cosine --rule-lr --threads 1 --history " +
          (kept / "h.sqlite").string() + " --json " + (kept / "v.json").string() + " --trace " +
          (dir / "t.json").string(),
      "validating:", [&](pid_t) { return fs::remove_all(dir) > 0; });
  ASSERT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("batchwise validate: error: --trace " + (dir / "t.json").string() + ": cannot write there"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(kept / "v.json")).at("validation").at("runs").size(), 2u);
  EXPECT_NE(batchwise("history --history " + (kept / "h.sqlite").string()).out.find("validate"), std::string::npos);
  // A trace written over an earlier one: whole, in its mode, and nothing of the call's own left beside it
  std::ofstream(kept / "t.json") << "an earlier trace";
  fs::permissions(kept / "t.json", fs::perms::owner_read | fs::perms::owner_write);
  const Outcome again = batchwise(
      "fit --model mlp --dataset synthetic --synthetic-size 256 --max 8 --no-history -q "
      "--trace " +
      (kept / "t.json").string());
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(nlohmann::json::parse(slurp(kept / "t.json")).contains("traceEvents"));
  EXPECT_EQ(fs::status(kept / "t.json").permissions(), fs::perms::owner_read | fs::perms::owner_write);
  // A descriptor's name, a device: no file to rename a trace onto, refused before the run (a --trace /dev/stdout
  // had replaced the file the shell opened for stdout)
  expect_clean_error("fit --model mlp --dataset synthetic --max 8 --trace /dev/stdout", 2,
                     "--trace /dev/stdout: not a file (a trace is read back once written, and renamed into place)");
  expect_clean_error("fit --model mlp --dataset synthetic --max 8 --trace /dev/null", 2,
                     "--trace /dev/null: not a file");
  // A trace the disk cannot take (here a file-size limit: EFBIG, as ENOSPC): said to be the write's failure, exit 2,
  // and no part of it left beside its path (it had been "this build of torch may lack Kineto", exit 1, beside a
  // part of Kineto's own)
  const Outcome full =
      batchwise("fit --model mlp --dataset synthetic --synthetic-size 256 --max 8 --no-history -q --trace " +
                    (kept / "big.json").string(),
                "trap '' XFSZ; ulimit -f 16;");
  EXPECT_EQ(full.code, 2) << full.err;
  EXPECT_NE(full.err.find("--trace " + (kept / "big.json").string() + ": writing the trace failed (is the disk full?)"),
            std::string::npos)
      << full.err;
  EXPECT_FALSE(fs::exists(kept / "big.json"));
  for (const auto& e : fs::directory_iterator(kept)) EXPECT_EQ(e.path().extension() == ".tmp", false) << e.path();
  for (const auto& e : fs::directory_iterator(kept))
    EXPECT_EQ(e.path().filename().string().rfind("big.json", 0), std::string::npos) << e.path();
}

// --json through a symbolic link writes its target and keeps the link; into a FIFO (or a device, such as
// /dev/stdout) it writes into it. Each had been replaced by a file of the report, exit 0 (as root, /dev/full).
TEST(Cli, AReportThroughALinkOrIntoAFifoKeepsThem) {
  const fs::path dir = scratch() / "special";
  fs::remove_all(dir);
  fs::create_directories(dir / "real");
  fs::create_symlink("real/target.json", dir / "link.json");  // dangling until the report is written
  const fs::path fifo = dir / "fifo.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int reader = open(fifo.c_str(), O_RDWR | O_NONBLOCK);  // a reader, so that writing it never waits
  ASSERT_GE(reader, 0);
  // a few steps: the report stays well inside the pipe's 64 KiB, which is read once batchwise has ended
  const std::string sweep =
      "sweep --model mlp --dataset synthetic --synthetic-size 256 --batch-sizes 8 "
      "--repetitions 1 --steps 3 --min-time 0 --no-history -q --json ";
  Outcome r = batchwise(sweep + (dir / "link.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "real" / "target.json")).at("sweep").at("points").size(), 1u);
  r = batchwise(sweep + fifo.string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_fifo(fifo));
  std::string written;
  char buffer[4096];
  for (ssize_t n; (n = read(reader, buffer, sizeof buffer)) > 0;) written.append(buffer, static_cast<size_t>(n));
  close(reader);
  EXPECT_EQ(nlohmann::json::parse(written).at("sweep").at("points").size(), 1u);
  // /dev/stdout is this process's descriptor 1, written as it is (here a pipe, whose link reads "pipe:[N]";
  // a `>> log` is appended to, not reopened and truncated)
  r = batchwise(sweep + "/dev/stdout");
  EXPECT_EQ(r.code, 0) << r.err;
  // the JSON alone (`| jq` reads it whole): the table beside it goes to stderr
  EXPECT_EQ(nlohmann::json::parse(r.out).at("schema_version"), "1") << r.out;
  EXPECT_NE(r.err.find("recommendation: batch 8"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink("/dev/stdout") || fs::is_character_file("/dev/stdout"));
}

// A stderr that cannot be written loses its lines, never the run (fmt::print's throw had ended it in
// std::terminate, exit 134, its report and history row unwritten); a stdout that cannot be written is an
// error said on stderr, exit 2 (the answer had been lost to a full disk with exit 0).
TEST(Cli, StandardStreamsThatCannotBeWrittenAreNoSilentLoss) {
  const fs::path dir = scratch() / "streams";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string run = "XDG_DATA_HOME=" + (dir / "xdg").string() + " " + BATCHWISE_TEST_BINARY +
                          " sweep --model mlp --dataset synthetic --synthetic-size 256 --batch-sizes 8 "
                          "--repetitions 1 --steps 3 --min-time 0 --json " +
                          (dir / "r.json").string() + " </dev/null ";
  const auto code = [](const std::string& command) {
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  for (const std::string err : {"2>&-", "2>/dev/full"}) {
    fs::remove(dir / "r.json");
    EXPECT_EQ(code(run + ">/dev/null " + err), 0) << err;
    EXPECT_EQ(nlohmann::json::parse(slurp(dir / "r.json")).at("sweep").at("points").size(), 1u) << err;
  }
  EXPECT_EQ(code(run + ">/dev/full 2>" + (dir / "err").string()), 2);
  EXPECT_NE(slurp(dir / "err")
                .find("batchwise sweep: error: standard output: writing failed (No space left on "
                      "device); what it showed is lost"),
            std::string::npos)
      << slurp(dir / "err");
  EXPECT_EQ(code(run + ">&- 2>" + (dir / "err").string()), 2);
  EXPECT_NE(slurp(dir / "err").find("standard output: writing failed (closed when batchwise started)"),
            std::string::npos)
      << slurp(dir / "err");
  EXPECT_TRUE(fs::is_regular_file(dir / "r.json"));  // the report and the history, written all the same
  EXPECT_EQ(code(std::string(BATCHWISE_TEST_BINARY) + " sweep --no-such-flag 2>&-"), 2);
  // --help and --list-options are all they print (--list-options had ended in std::terminate, --help in exit 0);
  // a closed stdout that is shown nothing is no failure of it
  for (const std::string asked : {" --help", " --list-options", " fit --help", " --version"}) {
    for (const std::string out : {" >/dev/full", " >&-"}) {  // --help to a closed stdout had exited 0
      EXPECT_EQ(code(BATCHWISE_TEST_BINARY + asked + out + " 2>" + (dir / "err").string()), 2) << asked << out;
      EXPECT_NE(slurp(dir / "err").find("standard output: writing failed"), std::string::npos) << slurp(dir / "err");
    }
  }
  EXPECT_EQ(code(BATCHWISE_TEST_BINARY + std::string(" history --history ") + (dir / "none.sqlite").string() +
                 " >&- 2>" + (dir / "err").string()),
            2);
  EXPECT_NE(slurp(dir / "err").find("no such file"), std::string::npos) << slurp(dir / "err");
  EXPECT_EQ(slurp(dir / "err").find("standard output"), std::string::npos) << slurp(dir / "err");
}

// A report is written whole under a temporary name of its own and renamed into place: another writer's
// "PATH.tmp" (here a folder of that name) is no matter (two runs writing one --json had shared it, and
// left one's text under the tail of the other's, or failed "cannot write there"); the file gets the mode
// any file the user writes gets, and no temporary file stays.
TEST(Cli, AReportIsWrittenWholeUnderATemporaryNameOfItsOwn) {
  const fs::path dir = scratch() / "whole";
  fs::remove_all(dir);
  fs::create_directories(dir / "report.json.tmp");
  const Outcome r = batchwise(
      "sweep --model mlp --dataset synthetic --synthetic-size 256 --batch-sizes 8 --repetitions 1 --steps 3 "
      "--min-time 0 --no-history -q --json " +
      (dir / "report.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "report.json")).at("sweep").at("points").size(), 1u);
  std::ofstream(dir / "mine.txt") << "a file of the user's";
  EXPECT_EQ(fs::status(dir / "report.json").permissions(), fs::status(dir / "mine.txt").permissions());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"mine.txt", "report.json", "report.json.tmp"}));
}

// The linear rule hands lenet 0.64 at 2048 and 1.28 at 4096, rates at which it never left chance
// accuracy; the rates validate trains with (the rule capped by a range test from the same
// weights) leave it, and the recommended rate is the one the winner trained with.
TEST(Cli, LargeBatchesTrainAtTheirCappedRates) {
  const fs::path json = scratch() / "large.json";
  const Outcome r = batchwise(
      "validate --model lenet --batch-sizes 2048,4096 --target-accuracy 0.3 --max-epochs 1 "
      "--held-out-samples 2000 --eval-every 4096 --no-history -q --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  for (const auto& run : j.at("validation").at("runs")) {
    EXPECT_TRUE(run.at("reached").get<bool>()) << run.dump();
    EXPECT_TRUE(run.at("lr_capped").get<bool>()) << run.dump();
    EXPECT_LT(run.at("lr").get<double>(), 0.01 * run.at("batch").get<double>() / 32);
  }
  const int64_t soonest = j.at("validation").at("fastest_batch");
  for (const auto& run : j.at("validation").at("runs"))
    if (run.at("batch") == soonest) EXPECT_DOUBLE_EQ(j.at("lr").at("lr").get<double>(), run.at("lr").get<double>());
  EXPECT_TRUE(j.at("lr").at("capped").get<bool>()) << j.at("lr").dump();
}

TEST(Cli, TuneValidateConfirmsOrCorrectsTheRecommendation) {
  const fs::path json = scratch() / "tune-validate.json";
  const Outcome r = batchwise(
      "tune --model mlp --min 32 --max 128 --fit-steps 1 --steps 2 --repetitions 1 --no-noise "
      "--validate --target-accuracy 0.7 --max-epochs 0.5 --threads 2 --no-history -q --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  const auto& v = j.at("validation");
  ASSERT_GE(v.at("runs").size(), 2u);
  const std::string reason = j.at("recommendation").at("reason");
  if (v.at("fastest_batch").is_null()) {
    EXPECT_NE(reason.find("not validated"), std::string::npos) << reason;
  } else {
    EXPECT_EQ(j.at("recommendation").at("batch"), v.at("fastest_batch"));
    EXPECT_TRUE(reason.find("validated: it reached test accuracy >= 0.7 soonest") != std::string::npos ||
                reason.find("soonest, in ") != std::string::npos)
        << reason;
  }
}

// A rate that makes the loss infinite or NaN trains nothing: the batch is an error trial that says
// so, nothing is recommended from it, and a sweep in which no batch trained exits 1.
TEST(Cli, ASweepWhoseLossIsNotANumberRecommendsNothing) {
  const fs::path json = scratch() / "sweep-nan.json";
  const Outcome r = batchwise(
      "sweep --model mlp --dataset synthetic --synthetic-size 256 --batch-sizes 32 --lr 1000000 --warmup 0 --steps 30 "
      "--repetitions 1 --threads 1 --no-history --json " +
      json.string());
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("no batch trained: 1 of 1 swept batches ended in an error"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(json));
  const auto& point = j.at("sweep").at("points").at(0);
  EXPECT_EQ(point.at("outcome"), "error");
  EXPECT_EQ(point.at("non_finite"), true);
  EXPECT_NE(point.at("message").get<std::string>().find("training diverged"), std::string::npos) << point.dump();
  EXPECT_TRUE(!j.contains("recommendation") || j.at("recommendation").is_null()) << j.dump();
  // Data-parallel: a rank whose loss is not a number ends the trial on every rank together, through
  // the all-reduce's status slot, rather than leaving the others in the all-reduce until the timeout.
  const fs::path dp = scratch() / "sweep-nan-dp.json";
  const Outcome d = batchwise(
      "sweep --model mlp --dataset synthetic --synthetic-size 256 --batch-sizes 32 --lr 1000000 --warmup 0 --steps 30 "
      "--repetitions 1 --threads 1 --nproc 2 --dist-timeout 60 --no-history -q --json " +
      dp.string());
  EXPECT_EQ(d.code, 1) << d.err;
  const auto dj = nlohmann::json::parse(slurp(dp));
  const auto& dpoint = dj.at("sweep").at("points").at(0);
  EXPECT_EQ(dpoint.at("outcome"), "error") << dpoint.dump();
  EXPECT_NE(dpoint.at("message").get<std::string>().find("the training loss became"), std::string::npos)
      << dpoint.dump();
}

// A rank whose group's store cannot be reached (here: nothing listens at its MASTER_PORT) says so in its own
// line, exit 7; c10d's log of it, with a page of C++ frames, is kept back (TORCH_CPP_LOG_LEVEL=FATAL).
TEST(Cli, ARankThatCannotReachItsGroupSaysSoInOneLine) {
  const Outcome r = batchwise(
      "fit --model mlp --dataset synthetic --synthetic-size 256 --device cpu --max 16 --dist-timeout 2 "
      "--no-history -q",
      "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1");
  EXPECT_EQ(r.code, 7) << r.err;
  EXPECT_NE(r.err.find("rank 1 of 2: the group's store at 127.0.0.1:1 could not be reached"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("frame #"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("[c10d]"), std::string::npos) << r.err;
}

// A launcher killed outright (SIGKILL, which it cannot pass on; the OOM killer) takes its ranks with it: they had
// trained on, orphans, to the end of the run or their --dist-timeout
TEST(Cli, ALauncherKilledOutrightTakesItsRanksWithIt) {
  const fs::path dir = scratch();
  const std::string cmd = "XDG_DATA_HOME=" + (dir / "xdg").string() + " exec " + std::string(BATCHWISE_TEST_BINARY) +
                          " sweep --model mlp --dataset synthetic --synthetic-size 256 --batch-sizes 8 --steps 1000000 "
                          "--warmup 0 --repetitions 1 --threads 1 --nproc 2 --dist-timeout 600 --no-history -q "
                          ">/dev/null 2>&1 </dev/null";
  const pid_t launcher = fork();
  if (launcher == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto field = [](pid_t pid, const std::string& key) {  // from /proc/PID/status; empty once it is gone
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind(key, 0) == 0) return line.substr(line.find_first_not_of(" \t", key.size()));
    return std::string();
  };
  std::vector<pid_t> ranks;
  for (int i = 0; i < 1200 && ranks.size() < 2; ++i) {
    ranks.clear();
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") == std::string::npos &&
          field(std::stoi(name), "PPid:") == std::to_string(launcher))
        ranks.push_back(std::stoi(name));
    }
    if (ranks.size() < 2) ::usleep(100000);
  }
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  ASSERT_EQ(ranks.size(), 2u) << "the launcher had not started its two ranks in 120 s";
  const auto alive = [&](pid_t pid) {  // a zombie that nobody reaps (no init here) has ended
    const std::string state = field(pid, "State:");
    return !state.empty() && state[0] != 'Z';
  };
  bool left = true;
  for (int i = 0; i < 300 && left; ++i) {
    left = alive(ranks[0]) || alive(ranks[1]);
    if (left) ::usleep(100000);
  }
  for (const pid_t rank : ranks)
    if (alive(rank)) kill(rank, SIGKILL);
  EXPECT_FALSE(left) << "a rank still ran 30 s after its launcher was killed";
}

// A batch larger than the training set repeats samples within a step: sweep measures it as asked,
// says so, and answers within the training set; the noise scale refuses it (it would measure the
// repeats). Both had gone without a word (sweep answered 512 on 100 samples).
TEST(Cli, ABatchLargerThanTheTrainingSetIsSaidSoAndNotTheAnswer) {
  const fs::path json = scratch() / "sweep-larger.json";
  const Outcome r = batchwise(
      "sweep --model mlp --dataset synthetic --synthetic-size 100 --batch-sizes 8,64,512 --repetitions 1 "
      "--warmup 0 --steps 1 --threads 1 -q --no-history --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_NE(j.at("context")
                .at("warnings")
                .dump()
                .find("batch 512 is larger than the 100 training samples: each step repeats samples"),
            std::string::npos)
      << j.at("context").at("warnings").dump();
  EXPECT_LE(j.at("recommendation").at("batch").get<int>(), 100) << j.at("recommendation").dump();
  expect_clean_error("noise --model mlp --dataset synthetic --synthetic-size 100 --batch 256 --micro-batch 32", 2,
                     "--batch 256: larger than the 100 training samples");
  // Data-parallel, a rank's batch draws from its share: 64 per device at 2 ranks is 128 samples a step from 100 (it
  // had been compared with the whole set, and answered)
  const fs::path dp = scratch() / "sweep-larger-dp.json";
  const Outcome d = batchwise(
      "sweep --model mlp --dataset synthetic --synthetic-size 100 --batch-sizes 8,32,64 --repetitions 1 --warmup 0 "
      "--steps 1 --threads 1 --nproc 2 --dist-timeout 60 -q --no-history --json " +
      dp.string());
  ASSERT_EQ(d.code, 0) << d.err;
  const auto dj = nlohmann::json::parse(slurp(dp));
  const std::string warnings = dj.at("context").at("warnings").dump();
  EXPECT_NE(warnings.find("batch 64 is larger than the 50 training samples"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("data-parallel over 2 ranks: a step trains the ranks' batches together, each rank taking 50 "
                          "of the 100 training samples an epoch"),
            std::string::npos)
      << warnings;
  EXPECT_LE(dj.at("recommendation").at("batch").get<int>(), 50) << dj.at("recommendation").dump();
}

TEST(Cli, SweepProfileTimesEachPhase) {
  const fs::path json = scratch() / "profile.json";
  const Outcome r = batchwise(
      "sweep --model mlp --dataset synthetic --synthetic-size 512 --batch-sizes 16,64 "
      "--repetitions 1 --steps 2 --profile --no-history -q --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step profile (a separate pass"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(j.at("step_profile").size(), 2u);
  for (const auto& p : j.at("step_profile")) {
    EXPECT_GE(p.at("coverage").get<double>(), 0.9);
    EXPECT_GT(p.at("forward_s").get<double>(), 0);
  }
  expect_clean_error("sweep --batch-sizes 8 --profile --cmd -- true", 2, "--profile: batchwise profiles its own");
}

TEST(Cli, ComparePrecisionPutsBf16BesideFp32) {
  const fs::path json = scratch() / "precision.json";
  const Outcome r = batchwise(
      "tune --model lenet --dataset synthetic --synthetic-size 512 --memory-budget 256MiB "
      "--min 16 --max 64 --repetitions 1 --steps 2 --fit-steps 1 --no-noise --compare-precision "
      "--no-history -q --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  const auto& p = j.at("precision_comparison");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p.at(0).at("precision"), "fp32");
  EXPECT_EQ(p.at(1).at("precision"), "bf16");
  for (const auto& e : p) {
    EXPECT_GT(e.at("samples_per_s").get<double>(), 0) << e.dump();
    EXPECT_GT(e.at("peak_bytes").get<int64_t>(), 0) << e.dump();
    EXPECT_EQ(e.at("batch"), j.at("recommendation").at("batch"));
  }
  EXPECT_LT(p.at(1).at("peak_bytes").get<int64_t>(), p.at(0).at("peak_bytes").get<int64_t>());
  EXPECT_NE(r.out.find("precision comparison (throughput at batch"), std::string::npos) << r.out;

  // Each precision's fit is the fit of that precision alone: the run's own model is released first
  // (its parameters and optimizer state once made the bf16 fit 2290 where alone it is 2565, at 24 MiB).
  const std::string flags =
      "--model mlp --dataset synthetic --synthetic-size 512 --memory-budget 12MiB --max 8192 "
      "--no-history -q --json ";
  const Outcome both =
      batchwise("tune " + flags + json.string() +
                " --min 256 --repetitions 1 --steps 2 --fit-steps 1 --no-noise --no-race --compare-precision");
  ASSERT_EQ(both.code, 0) << both.err;
  const auto c = nlohmann::json::parse(slurp(json)).at("precision_comparison");
  ASSERT_EQ(c.size(), 2u);
  const Outcome alone =
      batchwise("fit " + flags + (scratch() / "bf16.json").string() + " --fit-steps 1 --precision bf16");
  ASSERT_EQ(alone.code, 0) << alone.err;
  EXPECT_EQ(c.at(1).at("fit_batch"), nlohmann::json::parse(slurp(scratch() / "bf16.json")).at("fit").at("batch"));
}

// A precision's one-batch sweep warns as the main sweep does: here that it shared the CPU, tune
// pinned to one core beside a busy process pinned there too, where its verdict ("pays", "does not
// pay") rests on readings another process set. Before, tune kept the main sweep's warnings only.
TEST(Cli, ComparePrecisionWarnsWhereItsSweepSharedTheCpu) {
  if (!fs::exists("/proc/self/schedstat")) GTEST_SKIP() << "Linux gives no run-queue delay here";
  if (std::system("command -v taskset >/dev/null 2>&1") != 0) GTEST_SKIP() << "no taskset (util-linux) here";
  const int core = support::first_allowed_core();
  const support::BusyCore busy(core);
  ASSERT_GT(busy.pid(), 0) << "fork failed";
  const fs::path json = scratch() / "precision-shared.json";
  const Outcome r = batchwise(
      "tune --model lenet --dataset synthetic --synthetic-size 512 --memory-budget 256MiB --batch-sizes 32 "
      "--repetitions 1 --steps 4 --fit-steps 1 --no-noise --no-race --compare-precision --no-history -q --json " +
          json.string(),
      fmt::format("taskset -c {} env", core));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto warnings = nlohmann::json::parse(slurp(json)).at("context").at("warnings");
  bool bf16 = false;
  for (const auto& w : warnings) {
    const std::string text = w.get<std::string>();
    if (text.rfind("precision bf16 at batch 32: the sweep shared the CPU", 0) != 0) continue;
    bf16 = true;  // said of its one batch, from its figures: no knee, no candidates
    EXPECT_NE(text.find("% of the time they were ready to run"), std::string::npos) << text;
    EXPECT_EQ(text.find("knee"), std::string::npos) << text;
    EXPECT_NE(text.find("; its samples/s, and the verdict on them, rest on that reading"), std::string::npos) << text;
  }
  EXPECT_TRUE(bf16) << warnings.dump();
}

// loader at a batch larger than the training set searches as asked and warns that each step repeats
// samples (it said nothing).
TEST(Cli, ALoaderBatchLargerThanTheTrainingSetIsWarnedOf) {
  const fs::path json = scratch() / "loader-large.json";
  const Outcome r = batchwise(
      "loader --model mlp --dataset synthetic --synthetic-size 100 --batch 128 --steps 2 "
      "--no-history -q --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto warnings = nlohmann::json::parse(slurp(json)).at("context").at("warnings").dump();
  EXPECT_NE(warnings.find("batch 128 is larger than the 100 training samples: each step repeats samples"),
            std::string::npos)
      << warnings;
}

// loader: the decision follows from the figures the report gives for each setting (which setting
// removes the stall depends on this machine's speed; decide_loader's own tests use known figures).
TEST(Cli, LoaderReportsEverySettingAndChoosesByItsFigures) {
  const fs::path json = scratch() / "loader.json";
  const Outcome r = batchwise(
      "loader --model mlp --dataset synthetic --synthetic-size 1000 --io-latency-us 125 "
      "--batch 64 --steps 6 --no-history -q --json " +
      json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  const auto& l = j.at("loader");
  EXPECT_EQ(l.at("batch"), 64);
  auto input_bound_follows_the_wait = [](const nlohmann::json& t) {
    EXPECT_EQ(t.at("input_bound").get<bool>(), t.at("data_wait_share").get<double>() > 0.2) << t.dump();
  };
  input_bound_follows_the_wait(l.at("before"));
  EXPECT_EQ(l.at("before").at("workers"), 0);
  // Workers 0, 1, 2, 4, 8 at prefetch 2 and 4 (no workers: prefetch 2 only), the given setting (0 workers)
  // measured once, as `before`.
  std::vector<std::pair<int, int>> tried;
  double best = l.at("before").at("outcome") == "ok" ? l.at("before").at("samples_per_s").get<double>() : 0;
  for (const auto& t : l.at("trials")) {
    tried.emplace_back(t.at("workers"), t.at("prefetch"));
    input_bound_follows_the_wait(t);
    if (t.at("outcome") == "ok") best = std::max(best, t.at("samples_per_s").get<double>());
  }
  EXPECT_EQ(tried, (std::vector<std::pair<int, int>>{{1, 2}, {1, 4}, {2, 2}, {2, 4}, {4, 2}, {4, 4}, {8, 2}, {8, 4}}));
  const nlohmann::json* expected = nullptr;  // decide_loader's rule, applied to the reported figures
  if (!l.at("before").at("input_bound").get<bool>()) {
    expected = &l.at("before");
  } else {
    for (const auto& t : l.at("trials"))
      if (t.at("outcome") == "ok" && !t.at("input_bound").get<bool>() &&
          t.at("samples_per_s").get<double>() >= 0.95 * best) {
        expected = &t;
        break;
      }
  }
  if (!expected) {
    EXPECT_TRUE(l.at("after").is_null()) << l.dump();
    EXPECT_NE(l.at("advice").get<std::string>().find("no setting tried removes the stall"), std::string::npos);
  } else {
    ASSERT_FALSE(l.at("after").is_null()) << l.at("advice");
    EXPECT_EQ(l.at("after").at("workers"), expected->at("workers")) << l.dump();
    EXPECT_EQ(l.at("after").at("prefetch"), expected->at("prefetch")) << l.dump();
    if (expected != &l.at("before")) {
      EXPECT_NE(r.out.find("<- use"), std::string::npos) << r.out;
      const std::string setting = "--workers " + std::to_string(expected->at("workers").get<int>()) + " --prefetch " +
                                  std::to_string(expected->at("prefetch").get<int>());
      EXPECT_NE(l.at("advice").get<std::string>().find(setting), std::string::npos) << l.at("advice");
    }
  }
  EXPECT_GT(l.at("pipeline_samples_per_s").get<double>(), 0);
  EXPECT_GT(l.at("step_consumes_samples_per_s").get<double>(), 0);

  // Its trials held to the budget: where none trained, no verdict on the pipeline, and exit 6.
  const Outcome tight = batchwise(
      "loader --model mlp --dataset synthetic --synthetic-size 1000 --batch 64 --steps 2 "
      "--memory-budget 3MiB --no-history -q --json " +
      json.string());
  EXPECT_EQ(tight.code, 6) << tight.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(json)).at("loader").at("advice"),
            "no setting trained at batch 64: every one of its 9 trials ran out of memory (lower --batch, or raise "
            "--memory-budget); nothing was measured");
  expect_clean_error("loader --model mlp --dataset synthetic --no-monitor", 2,
                     "--no-monitor does not apply here: loader's trials sample no utilisation");
  expect_clean_error("loader --model mlp --dataset synthetic --target 0.5", 2,
                     "--target does not apply here: loader fits no batch");
}

TEST(Cli, ReportErrorsNameTheInput) {
  expect_clean_error("report /nonexistent/run.json", 3,
                     "/nonexistent/run.json: cannot be read (No such file or directory); give the path of a report "
                     "written with --json");
  std::ofstream(scratch() / "garbage.json") << "<html>";
  expect_clean_error("report " + (scratch() / "garbage.json").string(), 3, "garbage.json: not JSON");
  const std::string golden = std::string(BATCHWISE_TEST_GOLDEN_DIR) + "/report.json";
  expect_clean_error("report " + golden + " -o " + golden, 2,
                     "that is the JSON report " + golden + ", which this run reads; the output would overwrite it");
  expect_clean_error("report " + golden + " -o /nonexistent/dir/r.html", 2,
                     "-o /nonexistent/dir/r.html: cannot write there");
  expect_clean_error("report " + golden + " -o ''", 2, "-o '': an empty path");  // it wrote report.html beside it
  // a folder is named as one ("cannot write there (Not a directory)" had been said of /tmp/); a report named .html
  // without -o is not blamed on -o
  expect_clean_error("report " + golden + " -o " + scratch().string() + "/", 2, "is a folder; give a file's path");
  fs::copy_file(golden, scratch() / "named.html", fs::copy_options::overwrite_existing);
  expect_clean_error("report " + (scratch() / "named.html").string(), 2,
                     "named.html: the page is written beside the report with .html, which is the report's own name");
  // a stream has no name to write the page beside: "/dev/stdin.html" had been written (as root), and a pipe's
  // "-o /dev/fd/63.html" blamed for what -o never said
  expect_clean_error("report /dev/stdin", 2,
                     "/dev/stdin: a stream (a pipe, a device or a descriptor), so it has no name to write the page "
                     "beside; give -o FILE (or -o /dev/stdout)");
  // a descriptor's name over a file (`report /dev/stdin < run.json`): its name is no file's either
  expect_clean_error("report /dev/fd/3 3<" + golden, 2, "/dev/fd/3: a stream (a pipe, a device or a descriptor)");
  const fs::path fifo = scratch() / "report.pipe";
  fs::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_clean_error("report " + fifo.string(), 2, fifo.string() + ": a stream (a pipe, a device or a descriptor)");
  fs::remove(fifo);
  expect_clean_error("fit --model mlp --dataset synthetic --max 8 --html /nonexistent/dir/r.html", 2,
                     "--html /nonexistent/dir/r.html: cannot write there");
  expect_clean_error("report " + scratch().string(), 3, ": is a folder; give the path of a report written with --json");
  expect_clean_error("compare " + golden + " " + scratch().string(), 3, ": is a folder");
}

// A default history that cannot be opened (its folder a file here; a read-only HOME) names itself as the
// default and both fixes: it had said "--history PATH", a flag the user never gave, and not --no-history.
TEST(Cli, ADefaultHistoryThatCannotBeOpenedSaysHowToRunWithoutIt) {
  const fs::path xdg = scratch() / "xdg";
  fs::remove_all(xdg);
  std::ofstream(xdg) << "a file where the history's folder goes\n";
  const Outcome r = batchwise("fit --model mlp --dataset synthetic --max 8 -q");
  fs::remove(xdg);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(
      r.err.find("the default history, " + (xdg / "batchwise" / "history.sqlite").string() + ": cannot open it ("),
      std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("give --history a writable path, or --no-history not to store the run"), std::string::npos)
      << r.err;
  // A damaged default (written over, cut short) is the default's fault too, not a --history the user never gave.
  fs::create_directories(xdg / "batchwise");
  std::ofstream(xdg / "batchwise" / "history.sqlite") << "not a database, a note\n";
  const Outcome damaged = batchwise("fit --model mlp --dataset synthetic --max 8 -q");
  fs::remove_all(xdg);
  EXPECT_EQ(damaged.code, 2) << damaged.err;
  EXPECT_NE(damaged.err.find("the default history, " + (xdg / "batchwise" / "history.sqlite").string() +
                             ": not a usable batchwise history ("),
            std::string::npos)
      << damaged.err;
  EXPECT_NE(damaged.err.find("move it away to start anew, or give --history another path, or --no-history not to "
                             "store the run"),
            std::string::npos)
      << damaged.err;
  // the fix once (the open's own had been said inside the parentheses too)
  const size_t fix = damaged.err.find("give --history another path");
  EXPECT_EQ(damaged.err.find("give --history another path", fix + 1), std::string::npos) << damaged.err;
  // A folder where the default goes: the default's, with the way to run without it
  fs::create_directories(xdg / "batchwise" / "history.sqlite");
  const Outcome folder = batchwise("fit --model mlp --dataset synthetic --max 8 -q");
  fs::remove_all(xdg);
  EXPECT_EQ(folder.code, 2) << folder.err;
  EXPECT_NE(folder.err.find("the default history, " + (xdg / "batchwise" / "history.sqlite").string() +
                            ": is a folder; give --history a file's path (e.g. "),
            std::string::npos)
      << folder.err;
  EXPECT_NE(folder.err.find("/history.sqlite), or --no-history not to store the run"), std::string::npos) << folder.err;
}

// An output that names a file the run reads, or another output's file, is refused before anything
// runs, and the file is left as it was: --json over the --data-file had replaced the data with the
// report, exit 0.
TEST(Cli, AnOutputNeverOverwritesAnInputOrAnotherOutput) {
  const fs::path data = scratch() / "apart.csv";
  std::ofstream(data) << "label,a,b\n0,1,2\n1,2,3\n";
  const std::string before = slurp(data);
  const std::string fit = "fit --model mlp --dataset csv --data-file " + data.string() + " --max 4 --no-history ";
  expect_clean_error(fit + "--json " + data.string(), 2,
                     "--json " + data.string() + ": that is --data-file " + data.string() +
                         ", which this run reads; the output would overwrite it: give --json another file");
  // however it is spelt
  expect_clean_error(fit + "--html " + (scratch() / "." / "apart.csv").string(), 2, "that is --data-file");
  EXPECT_EQ(slurp(data), before);
  // two spellings of one file that does not exist yet: a bare name and ./name
  {
    const fs::path was = fs::current_path();
    fs::current_path(scratch());
    fs::remove("apart-new.json");
    expect_clean_error(fit + "--json apart-new.json --html ./apart-new.json", 2, "--json writes that file too");
    fs::current_path(was);
  }
  // a file of the dataset's folder, read or not (a --json over fashion-mnist's test labels had replaced them, exit 0)
  const fs::path folder = scratch() / "apart-data";
  fs::create_directories(folder);
  std::ofstream(folder / "t10k-labels-idx1-ubyte.gz") << "labels";
  expect_clean_error("fit --model mlp --data-dir " + folder.string() + " --max 4 --no-history --json " +
                         (folder / "t10k-labels-idx1-ubyte.gz").string(),
                     2, "that is a file of the dataset's folder, " + (folder / "t10k-labels-idx1-ubyte.gz").string());
  EXPECT_EQ(slurp(folder / "t10k-labels-idx1-ubyte.gz"), "labels");
  // another file there is not the dataset's: written (here the run then finds the folder has no training images)
  const Outcome other = batchwise("fit --model mlp --data-dir " + folder.string() + " --max 4 --no-history --json " +
                                  (folder / "out.json").string());
  EXPECT_EQ(other.code, 3) << other.err;
  EXPECT_NE(other.err.find("train-images-idx3-ubyte"), std::string::npos) << other.err;
  const fs::path out = scratch() / "apart.out";
  expect_clean_error(fit + "--json " + out.string() + " --html " + out.string(), 2,
                     "--html " + out.string() + ": --json writes that file too");
  // the default history, which a --json over it had replaced with one report (exit 0, every stored run lost)
  const fs::path xdg = scratch() / "xdg" / "batchwise";
  fs::create_directories(xdg);
  std::ofstream(xdg / "history.sqlite") << "";
  expect_clean_error(fit.substr(0, fit.find("--no-history")) + "--json " + (xdg / "history.sqlite").string(), 2,
                     "the run history " + (xdg / "history.sqlite").string() + ": --json writes that file too");
  EXPECT_EQ(fs::file_size(xdg / "history.sqlite"), 0u);
  // one pipe named twice (`--json /dev/stdout --html /dev/stdout | jq` had mixed the JSON and the page on it),
  // and a device twice is no clash
  const fs::path fifo = scratch() / "apart.pipe";
  fs::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_clean_error(fit + "--json " + fifo.string() + " --html " + fifo.string(), 2,
                     "--html " + fifo.string() + ": --json writes that file too");
  fs::remove(fifo);
  const Outcome devices = batchwise(fit + "-q --json /dev/null --html /dev/null");
  EXPECT_EQ(devices.code, 0) << devices.err;
  const std::string golden = std::string(BATCHWISE_TEST_GOLDEN_DIR) + "/report.json";
  expect_clean_error("compare " + golden + " " + golden + " --json " + golden, 2, "that is the first report");
  // batchwise history reads: a history named that is not there is a mistyped path, and is not made
  const fs::path typo = scratch() / "no-such-history.sqlite";
  fs::remove(typo);
  expect_clean_error("history --history " + typo.string(), 2, typo.string() + ": no such file");
  EXPECT_FALSE(fs::exists(typo));
  const fs::path pipe = scratch() / "history.pipe";
  ASSERT_EQ(mkfifo(pipe.c_str(), 0600), 0);
  expect_clean_error(
      "history --history " + pipe.string(), 2,
      pipe.string() + ": not a regular file (a pipe, a socket or a device); give --history a file's path");
  fs::remove(pipe);
}

// Every run lands in the history; tune --reuse takes a matching fit from it instead of fitting.
TEST(Cli, RunsAreStoredAndTuneReusesAMatchingFit) {
  const fs::path db = scratch() / "runs.sqlite";
  fs::remove(db);
  const std::string workload =
      "--model mlp --dataset synthetic --synthetic-size 256 --memory-budget 64MiB --max 32 "
      "--warmup 1 --steps 1 --repetitions 1 -q --history " +
      db.string();
  const Outcome first = batchwise("tune " + workload);
  ASSERT_EQ(first.code, 0) << first.err;
  const fs::path json = scratch() / "reused.json";
  const Outcome second = batchwise("tune --reuse " + workload + " --json " + json.string());
  ASSERT_EQ(second.code, 0) << second.err;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j.at("fit").at("batch"), 32);
  EXPECT_TRUE(j.at("fit").at("trials").empty());
  EXPECT_NE(j.at("fit").at("message").get<std::string>().find("reused from run 1"), std::string::npos);
  // Reused, it still stopped at the first run's --max, stored so: a later reuse with a larger --max fits anew
  // (the flag had read false once reused, and the next reuse answered --max 256 with 32).
  EXPECT_EQ(j.at("fit").at("limited_by_max"), true);
  EXPECT_EQ(j.at("fit").at("mode"), "model");  // the stored search's
  EXPECT_FALSE(j.at("sweep").at("points").empty());
  const Outcome other = batchwise("tune --reuse --target 0.8 " + workload + " --json " + json.string());
  EXPECT_FALSE(nlohmann::json::parse(slurp(json)).at("fit").at("trials").empty());  // another target: fitted anew
  const Outcome list = batchwise("history --json --history " + db.string());
  ASSERT_EQ(list.code, 0) << list.err;
  const auto runs = nlohmann::json::parse(list.out);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].at("id"), 3);
  EXPECT_EQ(runs[2].at("fit_batch"), 32);
  EXPECT_NE(runs[2].at("workload").get<std::string>().find("mlp on synthetic"), std::string::npos);
  EXPECT_EQ(runs[2].at("run"), "-");  // a plain tune names no run (tune --epochs would: "2 epochs, cosine rate")
  const Outcome table = batchwise("history --history " + db.string());
  EXPECT_NE(table.out.find("(3 shown, newest first)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(" run "), std::string::npos) << table.out;
  std::ofstream(scratch() / "garbage.sqlite") << "not a database at all, just words";
  expect_clean_error("history --history " + (scratch() / "garbage.sqlite").string(), 2,
                     "not a usable batchwise history");
  // a report given as the history is another kind of file, not a damaged history (it had been "damaged: move it away
  // to start anew")
  const Outcome report = batchwise("history --history " + std::string(BATCHWISE_TEST_GOLDEN_DIR) + "/report.json");
  EXPECT_EQ(report.code, 2) << report.err;
  EXPECT_NE(report.err.find("it is no SQLite database at all (another kind of file), so no history batchwise wrote); "
                            "give --history another path"),
            std::string::npos)
      << report.err;
  EXPECT_EQ(report.err.find("damaged"), std::string::npos) << report.err;
}

// Before its fit, tune states what the last tune of the same kind here took, from the history: one
// that ran what this one asks for. Whether a tune races depends on its sweep (fewer than 2 candidates
// race nothing), so which earlier run a tune may borrow from is read from the runs' own reports; a
// tune of another kind (no race) does not borrow a raced tune's figure.
TEST(Cli, TuneStatesWhatTheLastSuchTuneTookBeforeItStarts) {
  const fs::path db = scratch() / "last-tune.sqlite";
  fs::remove(db);
  const std::string workload =
      "tune --model mlp --dataset synthetic --synthetic-size 512 --memory-budget 64MiB --max "
      "64 --warmup 1 --steps 2 --repetitions 1 --threads 1 --history " +
      db.string();
  std::vector<bool> raced;  // run i + 1's
  const auto run = [&](const std::string& extra) {
    const fs::path json = scratch() / fmt::format("last-tune-{}.json", raced.size() + 1);
    Outcome r = batchwise(workload + extra + " --json " + json.string());
    if (r.code == 0) {
      const auto j = nlohmann::json::parse(slurp(json));
      raced.push_back(j.contains("race") || j.contains("run_race"));
    }
    return r;
  };
  // What `r` states: the newest earlier run that raced if `races` (it asked for a race), else the
  // newest that did not; or nothing.
  const auto expect_borrowed = [&](const Outcome& r, bool races) {
    int from = 0;
    for (int i = static_cast<int>(raced.size()) - 1; i >= 1 && from == 0; --i)
      if (raced[i - 1] == races) from = i;
    if (from == 0) {
      EXPECT_EQ(r.err.find("as the last such tune here took"), std::string::npos) << r.err;
      return;
    }
    const size_t at = r.err.find(fmt::format("s in all, as the last such tune here took (run {}, ", from));
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_LT(at, r.err.find("] fit: ")) << r.err;  // before the fit
  };
  const Outcome first = run("");
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.err.find("as the last such tune here took"), std::string::npos) << first.err;
  const Outcome second = run("");
  ASSERT_EQ(second.code, 0) << second.err;
  expect_borrowed(second, true);  // it asks for a race: what it borrows is a raced tune's, whether it races or not
  const Outcome other = run(" --no-race");
  ASSERT_EQ(other.code, 0) << other.err;
  ASSERT_FALSE(raced[2]);
  expect_borrowed(other, false);
}

// A tune that ran on a machine slowed past its plan (it took more than twice the most it stated and
// 30 s, or a race stopped at its wall limit) is passed over: the next such tune states the one before.
TEST(Cli, TuneDoesNotStateWhatATuneSlowedPastItsPlanTook) {
  const fs::path db = scratch() / "slowed-tune.sqlite";
  fs::remove(db);
  const std::string tune =
      "tune --model mlp --dataset synthetic --synthetic-size 512 --memory-budget 64MiB --max 64 --warmup 1 --steps 2 "
      "--repetitions 1 --threads 1 --no-race --history " +
      db.string();
  const Outcome first = batchwise(tune);
  ASSERT_EQ(first.code, 0) << first.err;
  const Outcome second = batchwise(tune);
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.err.find("s in all, as the last such tune here took (run 1, "), std::string::npos) << second.err;
  support::edit_history_report(db.string(), 2, [](nlohmann::json& report) {
    nlohmann::json& timing = report.at("timing");
    ASSERT_GT(timing.value("at_most_s", 0.0), 0) << timing.dump();
    const double slowed = 2 * timing.at("at_most_s").get<double>() + 31;  // past twice the most, and 30 s more
    for (nlohmann::json& phase : timing.at("phases"))
      if (phase.at("phase") == "sweep") phase["wall_s"] = slowed;
    timing["total_s"] = slowed;
  });
  const Outcome third = batchwise(tune);
  ASSERT_EQ(third.code, 0) << third.err;
  EXPECT_NE(third.err.find("s in all, as the last such tune here took (run 1, "), std::string::npos) << third.err;
  EXPECT_EQ(third.err.find("(run 2, "), std::string::npos) << third.err;
}

namespace {

// What a tune writes on a terminal `columns` wide (stderr a pseudo-terminal): its lines that stay
// (`*written`: all of it) and its live lines, each what "\r\033[K" rewrote until the next one.
std::vector<std::string> live_lines(const std::string& args, unsigned short columns, std::string* written) {
  winsize size{};
  size.ws_row = 24;
  size.ws_col = columns;
  // Made here: the child's scratch() would name a folder by its own pid, which nothing removes.
  const std::string command = "XDG_DATA_HOME=" + (scratch() / "xdg").string() +
                              " COLUMNS= " + std::string(BATCHWISE_TEST_BINARY) + " " + args + " >/dev/null";
  int terminal = -1;
  const pid_t child = forkpty(&terminal, nullptr, nullptr, &size);
  if (child < 0) {
    ADD_FAILURE() << "forkpty failed";
    return {};
  }
  if (child == 0) {  // stderr is the terminal; the report on stdout is not what is checked
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  char buffer[4096];
  for (ssize_t n; (n = read(terminal, buffer, sizeof buffer)) > 0;) written->append(buffer, static_cast<size_t>(n));
  close(terminal);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << *written;
  const std::string clear = "\r\033[K";
  std::vector<std::string> lines;
  for (size_t at = written->find(clear); at != std::string::npos;) {
    const size_t next = written->find(clear, at + clear.size());
    std::string line = written->substr(at + clear.size(), next == std::string::npos ? next : next - at - clear.size());
    at = next;
    if (!line.empty() && line.find('\n') == std::string::npos)  // not cleared, not a line that stays
      lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace

// On a terminal the live line is rewritten in place ("\r\033[K" clears only the row the cursor is
// on), so it must fit one row: a wider one wraps, and every update leaves its first rows behind. A
// tune on a 60-column pseudo-terminal: every live line (one the next output overwrites, with no
// newline) fits 59 columns, the long ones cut in the middle.
TEST(Cli, LiveLinesFitTheTerminalsWidth) {
  std::string written;
  const auto lines = live_lines(
      "tune --model mlp --dataset synthetic --synthetic-size 512 --memory-budget 64MiB --max 64 --warmup 1 --steps 2 "
      "--repetitions 1 --threads 1 --no-history",
      60, &written);
  int cut = 0;
  for (const std::string& line : lines) {
    cut += line.find("...") != std::string::npos ? 1 : 0;
    const auto columns = std::count_if(line.begin(), line.end(), [](char c) { return (c & 0xC0) != 0x80; });
    EXPECT_LE(columns, 59) << line;
  }
  EXPECT_FALSE(lines.empty()) << written;
  EXPECT_GT(cut, 0) << written;  // the sweep's and the race's lines are wider than 59 columns
}

// On a wide terminal a live line carries its phase ("[2/4] sweep over ...: batch 64 ..."), but a line
// that starts with its phase's words gets only the counter: "[4/4] run race: batch 16, your 2-epoch
// run compressed to ...", not "[4/4] run race over 16, 32 run race: batch 16, ...".
TEST(Cli, ALiveLineDoesNotRepeatItsPhasesWords) {
  std::string written;
  const auto lines = live_lines(
      "tune --model mlp --dataset synthetic --synthetic-size 512 --memory-budget 64MiB --max 64 --warmup 1 --steps 2 "
      "--repetitions 1 --threads 1 --no-history --epochs 2 --lr-schedule cosine",
      250, &written);
  if (written.find("run race over") == std::string::npos) GTEST_SKIP() << kNoRaceRan;
  int run_race = 0;
  for (const std::string& line : lines) {
    if (line.find("run race: batch") == std::string::npos) continue;
    ++run_race;
    EXPECT_EQ(line.find("run race over"), std::string::npos) << line;
    EXPECT_EQ(line.substr(line.find("] ") + 2).rfind("run race: batch", 0), 0u) << line;  // "[4/4] run race: ..."
  }
  EXPECT_GT(run_race, 0) << written;
}

// --trace: a Chrome trace of one step at the recommended batch, with the step's operators in it.
TEST(Cli, TraceWritesAChromeTraceOfOneStep) {
  const fs::path trace = scratch() / "step.trace.json";
  const Outcome r = batchwise(
      "fit --model mlp --dataset synthetic --synthetic-size 256 --memory-budget 64MiB --max 32 "
      "-q --trace " +
      trace.string());
  ASSERT_EQ(r.code, 0) << r.err;
  // Kineto's Chrome trace: an object whose traceEvents hold the operators, with their durations.
  const auto doc = nlohmann::json::parse(slurp(trace));
  ASSERT_TRUE(doc.is_object() && doc.contains("traceEvents"));
  EXPECT_EQ(doc.value("traceName", ""), trace.string());  // the path's, not the name it was written under first
  const auto& events = doc.at("traceEvents");
  std::set<std::string> names;
  for (const auto& e : events) {
    EXPECT_TRUE(e.contains("ph")) << e.dump();
    EXPECT_NE(e.value("cat", ""), "kernel") << e.dump();  // no GPU kernels on CPU
    if (e.value("cat", "") != "cpu_op") continue;
    EXPECT_TRUE(e.contains("ts") && e.contains("dur")) << e.dump();
    names.insert(e.value("name", ""));
  }
  for (const char* op : {"aten::addmm", "aten::relu"})  // the mlp's forward pass
    EXPECT_TRUE(names.count(op)) << op << " missing from the trace";
  bool backward = false;
  for (const auto& n : names) backward = backward || n.find("Backward") != std::string::npos;
  EXPECT_TRUE(backward) << "no backward operator in the trace";
  expect_clean_error("fit --model mlp --dataset synthetic --max 8 --trace /nonexistent/dir/t.json", 2,
                     "--trace /nonexistent/dir/t.json: cannot write there");
}

TEST(Cli, FileDatasetsTrainAndTheirErrorsAreDataErrors) {
  const fs::path csv = scratch() / "points.csv";
  {
    std::ofstream out(csv);
    out << "x0,x1,x2,label\n";
    for (int i = 0; i < 200; ++i) out << i % 7 << "," << i % 5 << "," << (i * 3) % 11 << "," << i % 3 << "\n";
  }
  const Outcome ok = batchwise("fit --model mlp --dataset csv --data-file " + csv.string() +
                               " --label-column label --memory-budget 64MiB --max 64 -q");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("on points.csv (200 samples of 3)"), std::string::npos) << ok.out;
  // Regression: one float target per sample, mse, a model with one output.
  const fs::path values = scratch() / "values.csv";
  {
    std::ofstream out(values);
    for (int i = 0; i < 100; ++i) out << i % 7 << "," << i % 5 << "," << 0.25 * i << "\n";
  }
  const Outcome regression = batchwise("fit --model mlp --dataset csv --data-file " + values.string() +
                                       " --loss mse --memory-budget 64MiB --max 32 -q");
  EXPECT_EQ(regression.code, 0) << regression.err;
  expect_clean_error("fit --model mlp --dataset csv --data-file " + values.string(), 3,
                     "label column 2 holds fractional values");
  const fs::path bad = scratch() / "bad.csv";
  std::ofstream(bad) << "1,2,0\n1,x,1\n";
  expect_clean_error("fit --model mlp --dataset csv --data-file " + bad.string(), 3,
                     "bad.csv line 2, column 1: 'x' is not a number");
  expect_clean_error("fit --model mlp --dataset npy --data-file " + csv.string(), 2,
                     "--dataset npy: needs --labels-file LABELS.npy");
  expect_clean_error("fit --model lenet --dataset cifar10 --data-dir " + scratch().string(), 3,
                     "holds none of data_batch_1.bin to data_batch_5.bin");
}

}  // namespace

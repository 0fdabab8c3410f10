// The flag groups and the numeric bounds the subcommands share (output.cpp: how reports are written).
#include "cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
#include <sstream>
#include <string_view>

#include "batchwise/choices.h"
#include "batchwise/command.h"
#include "batchwise/command_runner.h"
#include "batchwise/data.h"
#include "batchwise/distributed.h"
#include "batchwise/error.h"
#include "batchwise/history.h"
#include "batchwise/html.h"
#include "batchwise/models.h"
#include "batchwise/trace.h"
#include "batchwise/units.h"

namespace batchwise::cli {

namespace {

// What each numeric flag accepts (option_bounds, choices.h), wherever a subcommand declares it:
// CLI11 checks the value as it parses, before anything runs, and the message names the flag
// ("--steps: 0: must be at least 1"). Omitting a flag keeps its default (often "0: none" or "the
// device's"). A whole-number flag (`whole`) reads its value in decimal, as --batch-sizes does: CLI11
// read 010 as octal (8) and 0x10 as 16, and 1e3 as no number at all; such a value is written as
// the decimal it is before CLI11 converts it, and a fraction is refused.
CLI::Validator in_range(const OptionBound& b, bool whole) {
  return CLI::Validator(
      [b, whole](std::string& value) -> std::string {
        double v = 0;
        const bool hex = value.find_first_of("xX") != std::string::npos;  // strtod reads 0x10 as 16
        if (hex || !CLI::detail::lexical_cast(value, v))
          return fmt::format("{}: not a {} number", value, whole ? "whole" : "finite");
        if (const std::string why = out_of_bound(b, v, value); !why.empty()) return why;
        if (!whole) return "";
        if (v != std::floor(v)) return fmt::format("{}: must be a whole number", value);
        if (value.find_first_not_of("0123456789") == std::string::npos) {  // decimal digits: leading zeros go
          const std::string original = value;
          value.erase(0, std::min(value.find_first_not_of('0'), value.size() - 1));
          // No flag holds more than 2^64 - 1, which a double cannot tell from 2^64 (CLI11 then clamped it)
          constexpr std::string_view kMost = "18446744073709551615";
          if (value.size() > kMost.size() || (value.size() == kMost.size() && value > kMost))
            return fmt::format("{}: must be at most {}", original, kMost);
          return "";
        }
        // Above 2^53 a double does not hold every whole number (1e19 was "Could not convert"): digits only
        if (std::abs(v) >= 9007199254740992.0) return fmt::format("{}: past 2^53, write it in decimal digits", value);
        value = fmt::format("{:.0f}", v);
        return "";
      },
      "", "range");
}

// An option CLI11 converts to an integer: in_range reads its value as a whole number.
bool whole_number(const CLI::Option* option) {
  const std::string type = option->get_type_name();
  return type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0;
}

}  // namespace

std::vector<std::string>& renamed_warnings() {
  static std::vector<std::string> warnings;
  return warnings;
}

void bound_numeric_flags(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    for (const OptionBound& b : option_bounds())
      if (CLI::Option* option = sub->get_option_no_throw(b.flag)) option->transform(in_range(b, whole_number(option)));
}

namespace {

// The sections of --help, in order, and the options in each (by long name). An option in none stays
// in its subcommand's own "Options".
const std::vector<std::pair<std::string, std::vector<std::string>>> kGroups = {
    {"Workload",
     {"--model", "--dataset", "--data-dir", "--data-file", "--labels-file", "--label-column", "--held-out-split",
      "--test-data-file", "--test-labels-file", "--loss", "--num-classes", "--input-shape", "--optimizer", "--lr",
      "--precision", "--seq-len", "--synthetic-size", "--seed"}},
    {"Input pipeline", {"--workers", "--prefetch", "--augment", "--io-latency-us"}},
    {"Device and memory", {"--device", "--memory-budget", "--target", "--threads", "--trial-timeout", "--no-monitor"}},
    {"Your training command", {"--cmd", "command"}},
    {"Fit", {"--mode", "--min", "--max", "--multiple-of", "--fit-steps", "--plan-for", "--reuse", "--reuse-max-age"}},
    {"Sweep",
     {"--batch-sizes", "--range", "--steps", "--warmup", "--repetitions", "--min-time", "--sweep-all", "--profile",
      "--accumulation-steps"}},
    {"Your run", {"--epochs", "--lr-schedule", "--target-accuracy", "--target-loss", "--base-batch"}},
    {"Advice", {"--no-noise", "--noise-steps", "--no-race", "--advice-budget", "--compare-precision"}},
    {"Validation",
     {"--validate", "--batch-schedule", "--extend-below", "--max-epochs", "--max-seconds", "--eval-every",
      "--held-out-samples", "--stop-slower-than", "--rule-lr"}},
    {"Data-parallel", {"--nproc", "--dist-timeout", "--dist-backend"}},
    {"Output", {"--json", "--html", "--history", "--no-history", "--trace", "--quiet", "--verbose"}},
};

std::vector<CLI::App*> subcommands(CLI::App& app) {
  return app.get_subcommands([](CLI::App*) { return true; });
}

// CLI11 lists groups in the order their first option was declared; this lists a subcommand's own
// "Options" first, then kGroups' sections in the table's order, "Deprecated" last.
class SectionedHelp : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
    std::string out = make_description(app) + make_usage(app, name) + make_positionals(app);
    std::vector<std::string> order{"Options"};
    for (const auto& [group, names] : kGroups) order.push_back(group);
    for (const std::string& group : app->get_groups())
      if (std::find(order.begin(), order.end(), group) == order.end() && group != "Deprecated" && !group.empty())
        order.push_back(group);  // "": hidden
    order.push_back("Deprecated");
    for (const std::string& group : order) {
      const std::vector<const CLI::Option*> options =
          app->get_options([&group](const CLI::Option* o) { return o->get_group() == group && o->nonpositional(); });
      if (!options.empty()) out += make_group(group, false, options);
    }
    return out + make_subcommands(app, mode) + "\n" + make_footer(app);
  }
  // Without CLI11's "Excludes: --steps" (a deprecated name's, beside the flag that replaced it), which
  // pushed the description to a line of its own; the flags that exclude each other are refused by name
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::string opts = CLI::Formatter::make_option_opts(opt);
    if (const size_t at = opts.find(" Excludes:"); at != std::string::npos) opts.erase(at);
    return opts;
  }
  // A hidden positional (--cmd's command, where the subcommand runs none) is not offered either: it
  // had shown as "[...]"
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string usage = CLI::Formatter::make_usage(app, std::move(name));
    const CLI::Option* command = app->get_option_no_throw("command");
    if (command && command->get_group().empty())
      if (const size_t at = usage.find(" [...]"); at != std::string::npos) usage.erase(at, 6);
    return usage;
  }
};

}  // namespace

void group_options(CLI::App& app) {
  const auto help = std::make_shared<SectionedHelp>();
  app.formatter(help);
  for (CLI::App* sub : subcommands(app)) {
    sub->formatter(help);
    for (CLI::Option* option : sub->get_options([](const CLI::Option*) { return true; })) {
      if (option->get_group() != "Options") continue;  // Deprecated, or a group set where it was declared
      const std::string name = option->get_name(/*positional=*/false, /*all_options=*/false);
      for (const auto& [group, names] : kGroups)
        // The loader's --warmup and --steps time each setting it searches: its own, not a sweep's
        if (std::find(names.begin(), names.end(), name) != names.end() &&
            !(sub->get_name() == "loader" && group == "Sweep"))
          option->group(group);
    }
  }
}

std::string list_options(CLI::App& app) {
  std::string out;
  for (CLI::App* sub : subcommands(app))
    for (const CLI::Option* option : sub->get_options([](const CLI::Option*) { return true; })) {
      const std::string name = option->get_name(/*positional=*/false, /*all_options=*/false);
      if (name == "--help" || name.empty() || option->get_group().empty()) continue;  // hidden: not offered
      if (!option->nonpositional()) continue;  // a positional (a --cmd's command, compare's reports): no flag
      out += fmt::format("{} {}\n", sub->get_name(), name);
    }
  return out;
}

CLI::Option* bound(CLI::Option* option, double low, double high, bool low_open, const char* why) {
  return option->transform(in_range(OptionBound{"", low, low_open, high, why}, whole_number(option)));
}

// ---- flag groups ----------------------------------------------------------------------------------

namespace {

// --model's and --dataset's help, from the tables of built-in models and datasets.
std::string model_help() {
  return fmt::format("{}, or a TorchScript file (model.pt, saved with torch.jit.save)", fmt::join(model_names(), ", "));
}

std::string dataset_help() {
  std::vector<std::string> names;
  for (const BuiltinDataset& d : builtin_datasets())
    names.push_back(d.needs.empty() ? d.name : fmt::format("{} ({})", d.name, d.needs));
  const std::string last = names.back();
  names.pop_back();
  return fmt::format("{} or {}", fmt::join(names, ", "), last);
}

}  // namespace

void WorkloadFlags::add(CLI::App* cmd) {
  app = cmd;
  auto& w = workload;
  cmd->add_option("--model", w.model(), model_help())->capture_default_str();
  cmd->add_option("--dataset", w.dataset(), dataset_help())->capture_default_str();
  cmd->add_option("--data-dir", w.data_dir(),
                  "fashion-mnist: the folder of its IDX files (default: /usr/share/datasets/fashion-mnist); cifar10: "
                  "the cifar-10-batches-bin folder");
  cmd->add_option("--data-file", w.data_file(), "idx: the images file; npy: the features .npy; csv: the .csv file");
  cmd->add_option("--labels-file", w.labels_file(), "idx: the labels file; npy: the labels .npy");
  cmd->add_option("--label-column", w.label_column(),
                  "csv: the label column's header name or 0-based index (default: the last)");
  cmd->add_option("--held-out-split", w.held_out_split(),
                  "idx, npy, csv: hold out this fraction of the samples (a fixed draw, the same for every --seed) as "
                  "the test split that validation, --epochs and the races evaluate on; training never sees them");
  cmd->add_option("--test-data-file", w.test_data_file(),
                  "idx, npy, csv: your test split's file, in --data-file's format: validation, --epochs and the races "
                  "evaluate on it");
  cmd->add_option("--test-labels-file", w.test_labels_file(), "idx, npy: your test split's labels");
  cmd->add_option("--loss", loss, "cross-entropy (class labels) or mse (regression targets)")->capture_default_str();
  cmd->add_option("--num-classes", w.num_classes(),
                  "classes the model predicts (default: largest label + 1; synthetic 10)");
  cmd->add_option(
      "--input-shape", input_shape,
      "one sample's shape without the batch, e.g. 3x32x32: what a TorchScript model takes, and the shape of "
      "synthetic samples (default: the dataset's)");
  cmd->add_option("--device", w.device(), "cpu, cuda, cuda:N or auto")->capture_default_str();
  cmd->add_option("--optimizer", optimizer, "sgd (momentum 0.9), adam or adamw")->capture_default_str();
  cmd->add_option("--precision", precision,
                  "fp32, bf16 (autocast to bfloat16) or fp16 (autocast to float16 with loss scaling; on a CPU it pays "
                  "only with half-precision units)")
      ->capture_default_str();
  cmd->add_option("--lr", w.lr(), "learning rate (default: sgd 0.01, adam/adamw 0.001)");
  cmd->add_option("--seq-len", seq_len,
                  "tokens per sample, transformer on synthetic data; a range like 32-128 fits the longest")
      ->capture_default_str();
  cmd->add_option("--workers", w.workers(),
                  "input pipeline threads that prepare batches ahead (0: in the training thread)")
      ->capture_default_str();
  cmd->add_option("--prefetch", w.prefetch(), "batches each worker may have ready ahead")->capture_default_str();
  cmd->add_flag("--augment", w.augment(), "random crop (padding 4) and horizontal flip in the input pipeline (images)");
  cmd->add_option("--io-latency-us", w.io_latency_us(),
                  "emulate a slow input: a per-sample delay (sleep) in the pipeline, in microseconds")
      ->capture_default_str();
  cmd->add_option("--synthetic-size", w.synthetic_size(), "samples in the synthetic dataset")->capture_default_str();
  cmd->add_option("--seed", w.seed(), "seed of initialisation, data order and synthetic data")->capture_default_str();
  cmd->add_option("--memory-budget", memory_budget,
                  "memory the device may use, e.g. 2GiB (default: CPU 80 % of available RAM, CUDA the device's total)");
  cmd->add_option("--target", target, "fraction of the budget a fitting batch may peak at")->capture_default_str();
  cmd->add_option("--threads", threads, "intra-op threads (default: torch's choice)");
  cmd->add_option("--json", json, "write the JSON report to FILE");
  cmd->add_option("--html", html, "write the HTML report (charts, self-contained, opens offline) to FILE");
  auto* stored = cmd->add_option(
      "--history", history, "the run history to store this run in (default: $XDG_DATA_HOME/batchwise/history.sqlite)");
  cmd->add_flag("--no-history", no_history, "do not store this run")->excludes(stored);  // both: which was meant?
  cmd->add_option("--trace", trace,
                  "write a Chrome trace (Perfetto, chrome://tracing) of one training step at the recommended batch to "
                  "FILE");
  cmd->add_option("--trial-timeout", trial_timeout_s, "seconds a trial may run, checked between steps (0: none)");
  cmd->add_flag("--quiet,-q", quiet, "print no progress lines");
  cmd->add_flag("--no-monitor", no_monitor, "do not sample CPU/GPU utilisation during trials");
  cmd->add_flag("--cmd", use_cmd,
                "train with your own command instead of a built-in workload; it follows --, with {batch} and {steps} "
                "substituted (no shell), and prints `batchwise: step` lines (docs/cmd.md); --device cpu measures its "
                "resident memory, cuda its device memory (NVML); --trial-timeout defaults to 600 s");
  cmd->add_option("command", command, "with --cmd: the training command, after --");
}

void WorkloadFlags::refuse_for_ranks(int world_size) const {
  if (use_cmd && world_size > 1)
    throw ConfigError(fmt::format(
        "--cmd (run your own command under torchrun instead) is not supported in a data-parallel run ({} ranks); "
        "run it in one process",
        world_size));
  refuse_in_data_parallel({{!trace.empty(), "--trace"}}, world_size);
  if (world_size > 1) refuse_data_parallel_precision(parse_precision(precision));
  if (world_size > 1 && writes_outputs()) {  // --nproc's launcher: said once, before a rank starts
    check_writable(json, "--json");
    check_writable(html, "--html");
  }
}

// Rank 0 writes a data-parallel run's outputs: another rank's paths are its to check (on another node of a torchrun
// they need not exist; a rank 1 that refused them had left rank 0 waiting for it to its timeout, blaming MASTER_ADDR)
bool writes_outputs() {
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  return !(rank && world && std::atoi(world) > 1 && std::atoi(rank) != 0);
}

namespace {
// The arguments main parsed, where the first "--" is among them, and whether --cmd is (none noted: a caller of check
// that parsed its own, which the rule below leaves alone)
std::vector<std::string> g_args;
size_t g_separator = std::string::npos;
bool g_cmd_given = false;

// A --cmd command that did not start after the first "--": its first word comes before it, or there is none. Its own
// flags were then read as batchwise's (`--cmd python3 train.py --steps 3 -- --x` had taken --steps as the sweep's).
bool command_before_separator(const std::vector<std::string>& command) {
  if (g_args.empty() || command.empty()) return false;
  if (g_separator == std::string::npos) return true;
  const auto first = std::find(g_args.begin() + 1, g_args.end(), command.front());
  return first < g_args.begin() + static_cast<std::ptrdiff_t>(g_separator);
}
}  // namespace

void note_command_separator(int argc, char** argv) {
  g_args.assign(argv, argv + std::max(argc, 0));
  const auto dash = std::find(g_args.begin() + std::min<ptrdiff_t>(1, argc), g_args.end(), "--");
  g_separator = dash == g_args.end() ? std::string::npos : static_cast<size_t>(dash - g_args.begin());
  g_cmd_given = std::find(g_args.begin(), dash, "--cmd") != dash;
}

bool command_separator_missing() { return g_cmd_given && g_separator == std::string::npos; }

void WorkloadFlags::hide_cmd() const {
  for (const char* name : {"--cmd", "command"}) app->get_option(name)->group("");
}

void WorkloadFlags::not_read(std::vector<std::pair<std::string, std::string>> flags_and_why) {
  unread = std::move(flags_and_why);
  for (const auto& [flag, why] : unread) app->get_option(flag)->group("");
}

void WorkloadFlags::resolve() {
  workload.optimizer(parse_optimizer(optimizer)).precision(parse_precision(precision)).loss(parse_loss(loss));
  if (threads > 0) torch::set_num_threads(threads);
  // "64" or a range "32-128": only its shortest and longest length matter.
  const auto lengths = parse_batch_sizes(seq_len, "--seq-len");
  workload.seq_len(lengths.back()).seq_len_min(lengths.size() > 1 ? lengths.front() : 0);
  if (!input_shape.empty()) workload.input_shape(parse_shape(input_shape, "--input-shape"));
}

int64_t WorkloadFlags::budget_bytes() const {
  return memory_budget.empty() ? 0 : parse_bytes(memory_budget, "--memory-budget");
}

void WorkloadFlags::check(const std::string& name) const {
  // First: without "--" right before it, CLI11 had read the command's own flags as batchwise's (`--cmd python3 train.py
  // --json x.json` ran train.py without its --json and wrote batchwise's report there)
  if (use_cmd && command_before_separator(command))
    throw ConfigError(fmt::format(
        "--cmd: put -- right before your command ({} ...): without it, the words after {} are read as batchwise's "
        "flags; e.g. batchwise {} [batchwise's flags] --cmd -- {} [its own flags]",
        command.front(), command.front(), name, command.front()));
  (void)budget_bytes();
  for (const auto& [flag, why] : unread)
    if (app && app->count(flag) > 0) throw ConfigError(fmt::format("{} does not apply here: {}", flag, why));
  for (const auto& [flag, path] :
       {std::pair{"--json", &json}, {"--html", &html}, {"--trace", &trace}, {"--history", &history}})
    if (app && path->empty() && app->count(flag) > 0)  // --json '' had written nothing, exit 0
      throw ConfigError(fmt::format("{} '': an empty path; give a file's path", flag));
  for (const auto& [flag, value, example] :
       {std::tuple<const char*, const std::string*, const char*>{"--memory-budget", &memory_budget, "2GiB"},
        {"--input-shape", &input_shape, "3x32x32"},
        {"--label-column", &workload.label_column(), "label"}})
    if (app && value->empty() && app->count(flag) > 0)  // it had meant the default, unsaid
      throw ConfigError(fmt::format("{} '': an empty value; give one (e.g. {}) or leave {} out for the default", flag,
                                    example, flag));
  std::vector<NamedPath> inputs = {{"--model", is_model_path(workload.model()) ? workload.model() : ""},
                                   {"--data-file", workload.data_file()},
                                   {"--labels-file", workload.labels_file()},
                                   {"--test-data-file", workload.test_data_file()},
                                   {"--test-labels-file", workload.test_labels_file()}};
  // The files the dataset reads from its folder (fashion-mnist's four, cifar10's six): a --json over its test labels
  // had replaced them, exit 0
  const std::string& dir = workload.data_dir();
  if (!use_cmd)
    for (const std::string& file : dataset_folder_files(
             workload.dataset(), dir.empty() && workload.dataset() == "fashion-mnist" ? kFashionMnistDir : dir))
      inputs.emplace_back("a file of the dataset's folder,", file);
  if (use_cmd)  // the command's program and the files it names (a --json over train.py had replaced it)
    for (const std::string& arg : command)
      if (std::error_code e; !arg.empty() && std::filesystem::is_regular_file(arg, e))
        inputs.emplace_back("a file of your --cmd command,", arg);
  // The history by its path, the default's too: a --json over it had replaced every stored run with one report
  if (writes_outputs())
    check_apart({{"--json", json},
                 {"--html", html},
                 {"--trace", trace},
                 {history.empty() ? "the run history" : "--history", no_history ? "" : history_path(history)}},
                inputs);
  if (use_cmd && app && app->count("--threads") > 0)  // the child had run at its own count, the report said N
    throw ConfigError(
        "--threads: your --cmd command sets its own threads (torch.set_num_threads, OMP_NUM_THREADS in its "
        "environment); drop it");
  if (writes_outputs()) {
    check_writable(trace, "--trace");
    if (!trace.empty()) (void)trace_file(trace);  // a file: a descriptor, FIFO or device refused before the run
    check_writable(json, "--json");
    check_writable(html, "--html");
  }
  if (!html.empty() && chartjs_version().empty()) (void)to_html("", "--html");  // built without Chart.js: say so now
  static const std::regex unit(R"(^[KMGTPE]?i?B$)");
  if (!command.empty() && !use_cmd && std::regex_match(command.front(), unit))  // --memory-budget 2 GiB
    throw ConfigError(fmt::format("unexpected argument {}: a size is one word, with no space: e.g. 2{}",
                                  command.front(), command.front()));
  // A subcommand that trains only its own loop (its --cmd hidden) does not point to --cmd, which it refuses
  if (!command.empty() && !use_cmd && app && app->get_option_no_throw("--cmd") &&
      app->get_option_no_throw("--cmd")->get_group().empty())
    throw ConfigError(
        fmt::format("unexpected argument {}: {} trains batchwise's own loop and cannot run a training "
                    "command (fit, sweep, tune and plan take --cmd before -- {})",
                    command.front(), name, command_line(command)));
  if (!command.empty() && !use_cmd)
    throw ConfigError(fmt::format("unexpected argument {}: to run a training command, put --cmd before -- {}",
                                  command.front(), command_line(command)));
  // A training command brings its own model, data and loop: a workload flag beside it would be
  // read by nothing (a --data-file that is not there went unreported).
  for (const auto& [group, flags] : kGroups)
    for (const std::string& flag : flags)
      if (use_cmd && app && (group == "Workload" || group == "Input pipeline") && app->get_option_no_throw(flag) &&
          app->count(flag) > 0)
        throw ConfigError(
            fmt::format("{}: your --cmd command trains its own model on its own data, so batchwise "
                        "reads no {}; drop it (or drop --cmd to train batchwise's own workload)",
                        flag, flag));
}

void FitFlags::add(CLI::App* cmd) {
  cmd->add_option(
         "--mode", mode,
         "model (predict, verify, refine: exact in few trials), binsearch (doubling, then bisection; exact) or "
         "power (doubling only)")
      ->capture_default_str();
  cmd->add_option("--min", min, "smallest batch tried")->capture_default_str();
  cmd->add_option("--max", max,
                  "largest batch tried (default 65536; tune on CPU: 4096; plan: a device's share of --global-batch)");
  cmd->add_option("--multiple-of", multiple_of, "every batch tried is a multiple of this")->capture_default_str();
  cmd->add_option("--plan-for", plan_for,
                  "also predict the largest batch on a CUDA device of this memory: 24GiB, or t4, v100, l4, a10, "
                  "rtx4090, a100-40gb, l40s, a6000, a100-80gb, h100, h200");
}

void FitFlags::check() const {
  if (max > 0 && min > max)
    throw ConfigError(fmt::format("--min {} is above --max {}; swap them or lower --min", min, max));
}

std::string FitFlags::first_step_warning(const std::optional<FitResult>& fit, bool warmup_flag) const {
  if (steps + warmup >= 2 || !fit || !fit->batch || fit->limited_by_max) return "";  // memory decided it
  return fmt::format(
      "--fit-steps {}{}: each fit trial's peak is its first step's, before the gradients and the optimizer's state "
      "are held beside the activations as from the second step on, so batch {} may not fit in training; the "
      "default, --fit-steps 2, measures it",
      steps, warmup_flag ? " with no --warmup" : "", *fit->batch);
}

FitOptions FitFlags::options(const WorkloadFlags& w, int64_t budget) const {
  return FitOptions()
      .mode(parse_fit_mode(mode))
      .budget_bytes(budget)
      .target(w.target)
      .min(min)
      .max(max)
      .multiple_of(multiple_of)
      .steps(steps)
      .warmup(warmup)
      .trial_timeout_s(w.trial_timeout_s)
      .monitor(!w.no_monitor);
}

void SweepFlags::add(CLI::App* cmd) {
  cmd->add_flag("--profile", profile,
                "after the sweep, time each batch's step phase by phase (data, to device, forward, backward, "
                "optimizer) in a separate pass");
  auto* sizes = cmd->add_option("--batch-sizes", batch_sizes, "list or range of batch sizes: 16,32,64 or 8-4096*2");
  cmd->add_option("--range", range, "range of batch sizes first-last*factor or first-last+step, e.g. 8-4096*2")
      ->excludes(sizes);  // the synopsis's alternatives: given both, they had been merged without a word
  cmd->add_option("--warmup", warmup, "unmeasured steps per trial")->capture_default_str();
  cmd->add_option("--repetitions", repetitions, "trials per batch size, interleaved")->capture_default_str();
  cmd->add_option("--min-time", min_time_s,
                  "seconds of measured steps per trial at least: short steps run more than --steps, so that the "
                  "clock's and the scheduler's jitter average out (not for --cmd or data-parallel: they run --steps)")
      ->capture_default_str();
}

SweepOptions SweepFlags::options(const WorkloadFlags& w, int64_t budget) const {
  // A command's first step line is timed from its start (interpreter, imports, data): with no warm-up that is a
  // measured step (9 samples/s read for 80, a spread of 761 %)
  if (w.use_cmd && warmup == 0)
    throw ConfigError(
        "--warmup 0 with --cmd: a command's first step line is timed from the command's start (its interpreter, "
        "imports and data), which would be a measured step; give --warmup 1 or more");
  std::vector<int64_t> sizes;
  for (const auto& [text, flag] : {std::pair{batch_sizes, "--batch-sizes"}, std::pair{range, "--range"}}) {
    if (text.empty()) continue;
    const auto more = parse_batch_sizes(text, flag);
    sizes.insert(sizes.end(), more.begin(), more.end());
  }
  // A micro-batch takes one sample at least: more steps than a batch's samples had been cut to the batch, unsaid
  for (const int64_t b : sizes)
    if (accumulation_steps > b)
      throw ConfigError(
          fmt::format("--accumulation-steps {}: more micro-batches than batch {} has samples (each "
                      "takes one at least); give at most {}, or larger batches",
                      accumulation_steps, b, b));
  return SweepOptions()
      .batch_sizes(sizes)
      .warmup(warmup)
      .steps(steps)
      .repetitions(repetitions)
      .min_time_s(min_time_s)
      .budget_bytes(budget)
      .accumulation_steps(accumulation_steps)
      .stop_after_flat(sweep_all ? -1 : 0)  // 0: tune's default
      .monitor(!w.no_monitor)
      .trial_timeout_s(w.trial_timeout_s);
}

void DistFlags::add(CLI::App* cmd) {
  cmd->add_option("--nproc", nproc,
                  "train data-parallel in N local processes (torch.distributed; gloo on CPU, nccl on CUDA): batches "
                  "are per device. Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) every process "
                  "joins that group instead");
  cmd->add_option("--dist-timeout", timeout_s,
                  "seconds a rank waits for the others in a collective before the run ends with exit code 7")
      ->capture_default_str();
  cmd->add_option("--dist-backend", backend, "gloo, nccl or auto")->capture_default_str();
}

void ValidateFlags::add(CLI::App* cmd) {
  cmd->add_option("--target-accuracy", target_accuracy,
                  fmt::format("stop at this test accuracy (default {} when no target)", kDefaultTargetAccuracy));
  cmd->add_option("--target-loss", target_loss, "stop at this test loss");
  target_limits.push_back(cmd->add_option("--max-epochs", max_epochs, "give up after this many epochs per candidate")
                              ->capture_default_str());
  target_limits.push_back(
      cmd->add_option("--max-seconds", max_seconds, "give up after this much training time per candidate (0: none)")
          ->capture_default_str());
  runs_only = target_limits;
  runs_only.push_back(cmd->add_option(
      "--eval-every", eval_every,
      "evaluate every this many training samples (default: 1/20 epoch; with --epochs, 1/10 of the run)"));
  runs_only.push_back(cmd->add_option(
      "--held-out-samples", held_out_samples,
      "evaluate on the first N held-out samples (default: all; fewer evaluate faster, less precisely)"));
  target_limits.push_back(
      cmd->add_option("--stop-slower-than", stop_slower_than,
                      "stop a candidate once its training time passes this multiple of the fastest so far (e.g. 1.5; "
                      "default: never)"));
  runs_only.push_back(target_limits.back());
  runs_only.push_back(
      cmd->add_flag("--rule-lr", rule_lr,
                    "train each candidate at the scaling rule's rate alone (Goyal's epochs of warm-up), not the rate "
                    "tune advises (the rule capped by a range test at that batch)"));
}

void ValidateFlags::add_run(CLI::App* cmd) {
  cmd->add_option("--epochs", epochs,
                  "train full runs of this many epochs (warm-up, then --lr-schedule) and compare their final test "
                  "quality and training time, instead of timing each batch to a target");
  cmd->add_option("--lr-schedule", lr_schedule,
                  fmt::format("the rate after the warm-up over an --epochs run: {} (step: x0.1 at half the steps after "
                              "the warm-up, x0.01 at three quarters of them)",
                              fmt::join(lr_schedule_names(), ", ")))
      ->capture_default_str();
}

// The flags' ranges are the parser's (option_bounds) and validate()'s own checks; these are the ones
// between flags.
void ValidateFlags::check(const WorkloadFlags& w) {
  const LrSchedule schedule = parse_lr_schedule(lr_schedule);
  check_targets(epochs, target_accuracy, target_loss);
  for (const CLI::Option* limit : target_limits)  // silently unused before
    if (epochs > 0 && limit->count() > 0)
      throw ConfigError(
          fmt::format("{} {}: it limits a run to a target, and --epochs {} trains every run to its "
                      "end; drop {}",
                      limit->get_name(), limit->as<std::string>(), epochs, limit->get_name()));
  if (epochs == 0 && schedule != LrSchedule::Constant)
    throw ConfigError(fmt::format(
        "--lr-schedule {}: a decaying rate decays over a run of known length; give --epochs N", lr_schedule));
  if (w.use_cmd)
    throw ConfigError(
        "validate trains batchwise's own loop, evaluating held-out data as it trains (full runs, or time to a "
        "target); it cannot run through --cmd");
  if (epochs > 0) return;
  if (w.workload.loss() == Loss::Mse && target_loss == 0)
    throw ConfigError(
        "--loss mse: there is no accuracy to reach; give --target-loss (e.g. 0.4), or --epochs N to train full runs "
        "and "
        "compare their final loss");
  if (target_accuracy == 0 && target_loss == 0) target_accuracy = kDefaultTargetAccuracy;
}

ValidateOptions ValidateFlags::options(std::vector<int64_t> candidates, int64_t base_batch) const {
  return ValidateOptions(std::move(candidates))
      .target_accuracy(target_accuracy)
      .target_loss(target_loss)
      .max_epochs(max_epochs)
      .max_seconds(max_seconds)
      .eval_every_samples(eval_every)
      .base_batch(base_batch)
      .held_out_samples(held_out_samples)
      .stop_slower_than(stop_slower_than)
      .measure_lr(!rule_lr)
      .epochs(epochs)
      .lr_schedule(parse_lr_schedule(lr_schedule));
}

void refuse_data_parallel(const char* flag, int world_size) {
  const std::optional<GroupAddress> address = group_address_from_env();
  const int ranks = world_size > 0 ? world_size : address ? address->world_size : 1;
  if (ranks > 1)
    throw ConfigError(
        fmt::format("{} is not supported in a data-parallel run ({} ranks); run it in one process", flag, ranks));
}

const std::vector<OwnLoopOption>& own_loop_options() {
  static const std::vector<OwnLoopOption> kOptions = {
      {"--profile", "batchwise profiles its own training step; with --cmd, profile inside your command", true},
      {"--trace", "batchwise profiles its own training step; with --cmd, profile inside your command", true},
      {"--accumulation-steps",
       "batchwise accumulates in its own training step; with --cmd, accumulate inside your command", false},
      {"--compare-precision",
       "batchwise sets the precision of its own training step; with --cmd, run your command once per precision "
       "and compare the reports",
       true},
      {"--reuse", "a command's fit is not stored by workload; drop --reuse with --cmd", true},
      {"--target-accuracy/--target-loss",
       "the batch race that measures the time to a target trains batchwise's own loop, not a command; drop the "
       "target with --cmd",
       true},
      {"--epochs", "the run race trains batchwise's own loop, not a command; drop --epochs with --cmd", true},
      {"--validate",
       "validation trains batchwise's own loop, not a command; check the batch with your command's own runs", true},
      {"--base-batch",
       "it scales batchwise's own --lr, and your command sets its own learning rate (no rate is advised for it); drop "
       "it",
       false},
      {"--advice-budget", "the races it budgets train batchwise's own loop, and a command runs none; drop it", false},
      {"--noise-steps",
       "the noise scale needs the gradients of batchwise's own step, and a command's are not measured; drop it", false},
  };
  return kOptions;
}

namespace {
const OwnLoopOption& own_loop_option(const char* flag) {
  const auto& table = own_loop_options();
  const auto it = std::find_if(table.begin(), table.end(),
                               [flag = std::string_view(flag)](const OwnLoopOption& o) { return o.flag == flag; });
  if (it == table.end()) throw Error(fmt::format("{}: not in the table of own-loop options (cli.cpp)", flag));
  return *it;
}
}  // namespace

void refuse_with_cmd(bool use_cmd, std::initializer_list<std::pair<bool, const char*>> given) {
  for (const auto& [on, flag] : given) {
    const OwnLoopOption& option = own_loop_option(flag);
    if (on && use_cmd && *option.with_cmd) throw ConfigError(fmt::format("{}: {}", option.flag, option.with_cmd));
  }
}

void refuse_in_data_parallel(std::initializer_list<std::pair<bool, const char*>> given, int world_size) {
  for (const auto& [on, flag] : given)
    if (own_loop_option(flag).data_parallel && on) refuse_data_parallel(flag, world_size);
}

namespace {

// Whether two paths name one file: the same file where both exist (links, ./, ../), else the same
// path once made absolute and normal.
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code error;
  // By the file itself, not std::filesystem::equivalent, which answers nothing for a pipe or a socket:
  // `--json /dev/stdout --html /dev/stdout | jq` had mixed both on the pipe. A device (a terminal,
  // /dev/null) takes any number of outputs.
  struct stat sa = {};
  struct stat sb = {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && !S_ISCHR(sa.st_mode) && !S_ISBLK(sa.st_mode);
  // absolute first: weakly_canonical leaves "r.json" relative where nothing of it exists yet, and
  // makes "./r.json" absolute
  const fs::path x = fs::weakly_canonical(fs::absolute(a, error), error),
                 y = fs::weakly_canonical(fs::absolute(b, error), error);
  return !error && x == y;
}

}  // namespace

void check_apart(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [flag, path] = outputs[i];
    if (path.empty()) continue;
    for (const auto& [read, input] : inputs)
      if (!input.empty() && same_file(path, input))
        throw ConfigError(
            fmt::format("{} {}: that is {} {}, which this run reads; the output would overwrite it: give "
                        "{} another file",
                        flag, path, read, input, flag));
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].second.empty() && same_file(path, outputs[j].second))
        throw ConfigError(
            fmt::format("{} {}: {} writes that file too, and one would overwrite the other: give each "
                        "its own file",
                        flag, path, outputs[j].first));
  }
}

std::string history_path(const std::string& flag) { return flag.empty() ? default_history_path() : flag; }

}  // namespace batchwise::cli

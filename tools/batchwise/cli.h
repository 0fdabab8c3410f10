#pragma once
// What the subcommands share: exit codes, the numeric bounds every flag is checked against, the flag
// groups several subcommands declare (each flag once, here), and file output. A subcommand's own
// flags live in its file under commands/; to add one, edit that file only.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "batchwise/fit.h"
#include "batchwise/sweep.h"
#include "batchwise/validate.h"
#include "batchwise/workload.h"
#include "tell.h"

namespace batchwise::cli {

// Exit codes (documented in docs/cli.md).
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;       // a run that ended in an error (fit outcome "error", an unexpected failure)
constexpr int kExitUsage = 2;        // bad flags or options
constexpr int kExitData = 3;         // dataset missing or corrupt
constexpr int kExitModel = 4;        // model cannot be built for this input
constexpr int kExitDevice = 5;       // device absent or unusable
constexpr int kExitDoesNotFit = 6;   // fit: not even the minimum batch fits
constexpr int kExitDistributed = 7;  // a data-parallel rank died, hung past --dist-timeout, or the group did not form

/// The batch a --lr is meant for, where a subcommand has no --base-batch.
constexpr int64_t kDefaultBaseBatch = 32;

/// One subcommand: it declares itself and its flags, checks them, and runs.
class Command {
 public:
  virtual ~Command() = default;
  /// Adds the subcommand to `app`, with its flags bound to this object's options.
  virtual CLI::App* add(CLI::App& app) = 0;
  /// Runs the parsed subcommand; returns the exit code. Errors are thrown (main maps them).
  virtual int run() = 0;
  /// --nproc N: the ranks main starts (0 or 1: none), and how long they may wait for each other.
  virtual int nproc() const { return 0; }
  virtual double dist_timeout_s() const { return 300; }
  /// --device as given (the ranks' devices are checked against it before they start).
  virtual std::string device() const { return "cpu"; }
  /// Throws ConfigError for what a data-parallel run of `world_size` ranks refuses among the flags
  /// given (--cmd, --trace, --profile, ...): main asks before it starts the ranks, so the refusal is
  /// said once, not by every rank after it started. Each rank still checks its own.
  virtual void refuse_for_ranks(int world_size) const { (void)world_size; }
};

/// Every subcommand, one of each, in the order of `batchwise --help`: the one table of them
/// (commands/commands.cpp), which main.cpp adds and the tests read back from `batchwise --help`.
std::vector<std::unique_ptr<Command>> all_commands();

/// Every numeric flag the subcommands share is checked against one table as CLI11 parses it, so the
/// message names the flag ("--steps: 0: must be at least 1"); call after every subcommand is added.
void bound_numeric_flags(CLI::App& app);

/// Every option's section in --help (CLI11 groups), from one table by its long name, so each
/// subcommand's help reads the same sections in the same order: Workload, Input pipeline, Device and
/// memory, Your training command, Fit, Sweep, Your run, Advice, Validation, Data-parallel, Output;
/// a subcommand's own options stay under "Options". Call after every subcommand is added.
void group_options(CLI::App& app);

/// Every option each subcommand accepts, hidden or not, one "subcommand --flag" per line (the short
/// name after a comma): what `batchwise --list-options` prints, for shell completion and the test
/// that every accepted flag is in its subcommand's --help.
std::string list_options(CLI::App& app);

/// The warnings of renamed flags used in this command line, printed once it has parsed (a value the
/// flag refuses is one message, the refusal, not a warning beside it).
std::vector<std::string>& renamed_warnings();

/// A flag renamed so that one name means one thing: `old_name` still sets `value` for a release,
/// listed under "Deprecated" in --help, and a warning names the new spelling when it is used. The two
/// given together are refused (each sets `value`: one would be dropped); add `new_name` first.
template <class T>
CLI::Option* renamed(CLI::App* cmd, const std::string& old_name, const std::string& new_name, T& value,
                     const std::string& why) {
  const std::string sub = cmd->get_name();
  return cmd->add_option(old_name, value, "the old name of " + new_name + " (" + why + ")")
      ->group("Deprecated")
      ->excludes(new_name)
      ->each([sub, old_name, new_name, why](const std::string&) {
        renamed_warnings().push_back("batchwise " + sub + ": warning: " + old_name + " is now " + new_name + " (" +
                                     why + "); the old name works until the next release");
      });
}

/// A subcommand's own numeric flag, bounded where it is declared, with the same checks and message
/// as the table's: `bound(cmd->add_option("--smoothing", x, "..."), 0, 1, /*low_open=*/false)`.
CLI::Option* bound(CLI::Option* option, double low, double high, bool low_open = false, const char* why = nullptr);

// ---- flag groups ----------------------------------------------------------------------------------

/// The workload and where it trains: every subcommand that trains (fit, sweep, tune, plan, noise,
/// validate, loader).
struct WorkloadFlags {
  WorkloadOptions workload;
  std::string optimizer = "sgd", precision = "fp32", loss = "cross-entropy";  ///< parsed by resolve()
  std::string seq_len = "64";  ///< "64", or a range "32-128" whose longest is fitted
  std::string input_shape;
  std::string memory_budget;
  double target = 0.9;
  int threads = 0;
  double trial_timeout_s = 0;
  bool no_monitor = false;
  bool use_cmd = false;  ///< --cmd: the trials run the user's command
  std::vector<std::string> command;
  /// Output: the JSON and HTML reports, the run history, the step trace, progress lines.
  std::string json, html, history, trace;
  bool no_history = false, quiet = false;
  CLI::App* app = nullptr;  ///< the subcommand add() declared them on: which flags were given

  void add(CLI::App* cmd);
  /// What a data-parallel run of `world_size` ranks refuses among these flags (--cmd, --trace).
  void refuse_for_ranks(int world_size) const;
  /// --cmd and its command left out of `cmd`'s --help and option list: a subcommand that only trains
  /// batchwise's own loop (validate, loader, noise) still refuses them, by name.
  void hide_cmd() const;
  /// The flags of these that a subcommand reads nothing of, each with why: left out of its --help and
  /// option list, and refused by name where given (check()), rather than taken and ignored.
  void not_read(std::vector<std::pair<std::string, std::string>> flags_and_why);
  std::vector<std::pair<std::string, std::string>> unread;
  /// The flags that need parsing (--optimizer, --precision, --loss, --seq-len, --input-shape) into
  /// `workload`; threads set. Throws ConfigError naming the flag.
  void resolve();
  /// The budget --memory-budget gives; 0: the device's default.
  int64_t budget_bytes() const;
  /// The checks every training subcommand shares (--cmd's companions, and the workload's flags it does
  /// not read; outputs writable, and apart from the inputs).
  void check(const std::string& command) const;
};

/// The fit's flags: fit, tune and plan.
struct FitFlags {
  std::string mode = "model";
  int64_t min = 1, max = 0, multiple_of = 1;  // max 0: the default for the command and device
  int steps = 2, warmup = 0;
  std::string plan_for;

  /// --mode, --min, --max, --multiple-of, --plan-for (each subcommand names its own --steps).
  void add(CLI::App* cmd);
  /// A --min above a --max given: refused before anything loads or is said (fit() refuses it too).
  void check() const;
  FitOptions options(const WorkloadFlags& w, int64_t budget) const;
  /// Where the fit's trials take one step in all (--fit-steps 1, no --warmup), the report's warning: a first step's
  /// peak leaves out the gradients and optimizer state a second step holds beside its activations (mlp with Adam in
  /// 32 MiB: 2962 "fits" at one step, 2501 at two, and 2962 runs out of memory in training). Empty otherwise.
  /// `warmup_flag`: the command's --warmup is the fit's (fit's is; tune's is the sweep's, plan has none).
  std::string first_step_warning(const std::optional<FitResult>& fit, bool warmup_flag) const;
};

/// The sweep's flags: sweep and tune.
struct SweepFlags {
  std::string batch_sizes, range;
  int warmup = 2, steps = 5, repetitions = 3;
  double min_time_s = 0.1;
  bool profile = false;
  int64_t accumulation_steps = 1;
  bool sweep_all = false;

  /// --profile, --batch-sizes, --range, --warmup, --repetitions, --min-time (each subcommand names its own --steps).
  void add(CLI::App* cmd);
  SweepOptions options(const WorkloadFlags& w, int64_t budget) const;
};

/// Data-parallel ranks: fit, sweep, tune and plan.
struct DistFlags {
  int nproc = 0;
  double timeout_s = 300;
  std::string backend = "auto";
  void add(CLI::App* cmd);
};

/// The target a validation trains to, or the full run it trains: validate, tune --validate.
struct ValidateFlags {
  double target_accuracy = 0, target_loss = 0, max_epochs = 3, max_seconds = 600;
  /// Full runs (--epochs, --lr-schedule): added to a command by add_run.
  double epochs = 0;
  std::string lr_schedule = "constant";
  int64_t eval_every = 0, held_out_samples = 0;
  double stop_slower_than = 0;
  bool rule_lr = false;
  /// The flags that limit a target's runs, refused beside --epochs (full runs train to their end).
  std::vector<CLI::Option*> target_limits;
  /// The flags only the validation's runs read: tune refuses them without --validate.
  std::vector<CLI::Option*> runs_only;

  void add(CLI::App* cmd);
  /// --epochs and --lr-schedule: the run the user will do.
  void add_run(CLI::App* cmd);
  /// Throws ConfigError for a target that cannot be reached, or a target beside --epochs; without
  /// --epochs, defaults the target to accuracy 0.85.
  void check(const WorkloadFlags& w);
  ValidateOptions options(std::vector<int64_t> candidates, int64_t base_batch) const;
};

/// Throws ConfigError when the environment asks for a data-parallel run (or `world_size` > 1 is
/// given: the ranks about to start), naming `flag` as one that runs in one process only.
void refuse_data_parallel(const char* flag, int world_size = 0);

/// An option that needs batchwise's own training loop, in the one table of them (cli.cpp): why
/// `--cmd` refuses it, with the fix, and whether a data-parallel run refuses it too.
struct OwnLoopOption {
  const char* flag;
  const char* with_cmd;  ///< the reason and the fix when given with --cmd ("": --cmd takes it)
  bool data_parallel;    ///< a data-parallel run refuses it
};
const std::vector<OwnLoopOption>& own_loop_options();

/// With --cmd (`use_cmd`), throws ConfigError for the first flag of `given` that is set and that
/// --cmd refuses ("--profile: batchwise profiles its own training step; ..."). Each flag must be in
/// own_loop_options().
void refuse_with_cmd(bool use_cmd, std::initializer_list<std::pair<bool, const char*>> given);

/// In a data-parallel run, throws ConfigError for the first flag of `given` that is set and that
/// the table says a data-parallel run refuses (refuse_data_parallel's message).
void refuse_in_data_parallel(std::initializer_list<std::pair<bool, const char*>> given, int world_size = 0);

// ---- output ---------------------------------------------------------------------------------------

/// Whether `path` is this process's standard output (/dev/stdout, /dev/fd/1, /proc/self/fd/1, or a link to one): the
/// table a person reads then goes to stderr, so that `--json /dev/stdout | jq` reads the JSON alone.
bool names_stdout(const std::string& path);

/// `text` where `path` leads (write_output): a file written beside it and renamed into place, so a reader never
/// sees half a file; a descriptor, FIFO or device written into. `flag` names the flag in errors.
void write_file(const std::string& path, const std::string& text, const char* flag = "--json");

/// Throws ConfigError naming `flag` when `path` cannot be written (before a run, not after it).
void check_writable(const std::string& path, const char* flag);

/// Whether this process writes the run's outputs (--json, --html, --trace, the history): not a data-parallel rank
/// other than 0 (RANK and WORLD_SIZE set), whose paths are rank 0's to check.
bool writes_outputs();

/// Main notes whether its arguments hold "--", which a --cmd command must follow: without it, the command's own
/// flags (--json, --lr) are read as batchwise's.
void note_command_separator(int argc, char** argv);

/// --cmd was among main's arguments and "--" was not.
bool command_separator_missing();

/// CLI11's words for a usage error, as the rest of batchwise says one: a flag given twice ("--steps:
/// given 2 times; give it once", where CLI11 said "At Most 1 required but received 2"), too few values,
/// and an unknown option with the nearest of `sub`'s (the subcommand parsed; may be null).
std::string usage_error_text(const std::string& what, const CLI::App* sub);

/// A flag and the path it names, for check_apart.
using NamedPath = std::pair<const char*, std::string>;

/// Throws ConfigError (exit 2) before anything runs where an output would overwrite what the run
/// reads or another output: an output path that is one of `inputs` (the same file, however spelt,
/// links followed) or an earlier one of `outputs`. Empty paths are skipped. Example: "--json
/// data.csv: that is --data-file data.csv, which this run reads; the report would overwrite it:
/// give the report another file".
void check_apart(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

/// The run history's path: --history, else the default.
std::string history_path(const std::string& flag);

}  // namespace batchwise::cli

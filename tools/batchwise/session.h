#pragma once
// One run of a training subcommand, from its flags to its printed report: the workload (built-in,
// TorchScript, or the user's --cmd), the trial runner (in this process, a command, or data-parallel
// ranks), the report's context and budget, the progress lines, and at the end the console table,
// the JSON and HTML reports and the run history. The subcommand fills report in between.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "batchwise/distributed.h"
#include "batchwise/history.h"
#include "batchwise/log_throttle.h"
#include "batchwise/race.h"
#include "batchwise/record.h"
#include "batchwise/run_race.h"
#include "batchwise/trial.h"
#include "batchwise/tune.h"
#include "batchwise/validate.h"
#include "cli.h"

namespace batchwise::cli {

class Session {
 public:
  /// Sets the run up: the data-parallel group the environment describes (refused for subcommands
  /// that run in one process: `distributed` false), the workload or command, the runner, the context
  /// and the budget. `test_split`: load the held-out test split before anything long runs.
  Session(std::string command, WorkloadFlags& flags, const DistFlags* distributed, bool test_split = false);
  ~Session();

  /// Prints the table and writes the JSON, HTML and history (rank 0 of a data-parallel run; the
  /// others say they are done); the step trace first, with --trace. Returns `code`, or the fit's
  /// exit code when it did not fit.
  int finish(int code = kExitOk);

  /// The workload batchwise trains itself (null with --cmd), and as a ModuleWorkload.
  Workload* workload() { return workload_.get(); }
  ModuleWorkload* module() { return dynamic_cast<ModuleWorkload*>(workload_.get()); }
  TrialRunner& runner() { return *runner_; }
  /// The ranks of a data-parallel run (1 otherwise).
  int world_size() const;
  bool data_parallel() const { return world_size() > 1; }
  bool cuda() const { return cuda_; }
  /// The held-out data: the test split when it was asked for, else loaded (or sampled) now.
  const Dataset& held_out();
  /// Frees the workload and its runner (tune --compare-precision fits the others without it).
  void release();
  /// The run history (--history), opened on first use.
  History& history();

  /// Progress for the library's callbacks: a line per trial, a live line on a terminal, a line
  /// every 10 s of a validation or race elsewhere; nothing with --quiet or on ranks other than 0.
  FitOptions with_progress(FitOptions options);
  SweepOptions with_progress(SweepOptions options);
  void on_validate(const ValidateProgress& p);
  void on_race(const RaceProgress& p);
  // A compressed run's lines (its start, then how far it has come) share their key
  // (compressed_run_key, run_race.h): a log prints a run's first line, then one every 10 s.
  void on_run_race(const std::string& text) { training_line(text, compressed_run_key(text)); }
  void stage(const std::string& text);
  /// tune's stages: a phase's start as "[2/5] sweep: ..."; a note within a phase (a doctor's
  /// warning, which the report's header also carries) only when not brief.
  void stage(const TuneStage& t);
  /// Brief (tune without --verbose): progress is the phase lines, each trial or race step only on a
  /// terminal's live line; the report is to_summary's short answer instead of every table.
  void set_brief(bool brief) { brief_ = brief; }
  void print_validation(const ValidationResult& v);
  /// A live line is left on the terminal: clear it before the next output.
  void clear_line();

  std::string command;
  WorkloadFlags& flags;
  Report report;

 private:
  void join_group(const DistFlags* distributed);
  static void refuse_unread_seq_len(const WorkloadFlags& f);
  void make_runner(bool test_split);
  void trial_line(const Trial& t, int index, int planned);
  void start_line(int64_t batch, int index, int planned);
  void training_line(const std::string& text, const std::string& candidate);
  /// Rewrites the terminal's live line with `line` (after the brief phase prefix), fitted to one row.
  void live(const std::string& line);
  std::pair<std::string, std::string> position(int index, int planned, int done) const;

  bool brief_ = false;
  std::string phase_;  ///< the current phase's "[2/5] sweep", the live line's prefix when brief
  const DistFlags* dist_ = nullptr;
  std::optional<GroupAddress> address_;
  std::unique_ptr<History> history_;
  std::shared_ptr<Group> group_;
  std::unique_ptr<Workload> workload_;
  std::unique_ptr<DataParallelWorkload> dp_workload_;
  std::unique_ptr<TrialRunner> runner_;
  std::vector<int64_t> rank_budgets_;
  Dataset held_out_;
  bool cuda_ = false;
  bool lead_ = true;  // the rank that reports
  bool live_ = false;
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now(), phase_start_ = Clock::now();
  /// The phase's own estimate of its time left (a sweep's Eta), and when it gave it; unset: the
  /// estimate is the phase's pace.
  std::optional<double> eta_left_s_;
  Clock::time_point eta_at_;
  LogThrottle log_;  ///< a log's lines of a long training pass (training_line)
};

/// --plan-for: the fit's prediction on another device (fit, tune, plan).
void plan_for_device(const FitFlags& fit, const WorkloadFlags& w, Report& report);

/// The learning rate at the recommended batch (its global batch across ranks) by the scaling rule
/// alone, for the subcommands that measure none (fit, sweep).
void rule_learning_rate(Session& s, int64_t base_batch);

}  // namespace batchwise::cli

// A training subcommand's run: its set-up (group, workload, runner, context, budget), its progress
// lines, and its output (table, JSON, HTML, history, step trace).
#include "session.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "batchwise/command.h"
#include "batchwise/command_runner.h"
#include "batchwise/device.h"
#include "batchwise/error.h"
#include "batchwise/html.h"
#include "batchwise/memory.h"
#include "batchwise/models.h"
#include "batchwise/report.h"
#include "batchwise/trace.h"
#include "batchwise/units.h"

namespace batchwise::cli {

Session::Session(std::string name, WorkloadFlags& f, const DistFlags* distributed, bool test_split)
    : command(std::move(name)), flags(f), dist_(distributed), live_(isatty(STDERR_FILENO) != 0) {
  CpuMemoryTracker::install();  // before any model exists, so its tensors are counted
  join_group(distributed);
  refuse_with_cmd(f.use_cmd, {{!f.trace.empty(), "--trace"}});  // before the run, not after it
  // The program, before anything is said (its first trial's exec had said it after the fit's stage line)
  if (f.use_cmd && !f.command.empty()) check_program(f.command.front());
  refuse_unread_seq_len(f);
  make_runner(test_split);
  if (f.use_cmd) {
    report.context = make_context(DeviceSpec{});
    if (cuda_) {
      report.context.device_type = "cuda";
      report.context.device_name = static_cast<const CommandRunner&>(*runner_).device_name();
    }
  } else {
    report.context =
        make_context(workload_->device().is_cuda() ? resolve_device(workload_->device().str()) : DeviceSpec{});
  }
  if (group_)
    report.distributed = DistributedRun{group_->size(), group_->backend(), rank_budgets_, distributed->timeout_s};
  report.context.device_total_bytes = runner_->device_total_bytes();
  report.workload = runner_->info();
  if (report.budget_bytes == 0) report.budget_bytes = runner_->default_budget_bytes();
  report.target = f.target;
  if (!f.no_history) (void)history();  // a history that cannot be opened fails now, not after the run
}

Session::~Session() = default;

// --seq-len with a model that reads no sequences had trained as if it were not given.
void Session::refuse_unread_seq_len(const WorkloadFlags& f) {
  if (f.use_cmd || !f.app || f.app->count("--seq-len") == 0 || is_model_path(f.workload.model())) return;
  if (const BuiltinModel* m = find_builtin_model(f.workload.model()); m && !m->sequences)
    throw ConfigError(
        fmt::format("--seq-len {}: only the transformer reads sequences of tokens, and --model {} takes "
                    "images or feature vectors; leave --seq-len out",
                    f.seq_len, f.workload.model()));
}

// Data-parallel: the ranks --nproc started, or a group torchrun's environment describes.
void Session::join_group(const DistFlags* distributed) {
  address_ = group_address_from_env();
  if (!address_ || address_->world_size <= 1) {
    address_.reset();
    return;
  }
  if (!distributed)
    throw ConfigError(
        fmt::format("{} runs in one process, but WORLD_SIZE={} asks for a data-parallel run; data-parallel "
                    "trials are for fit, sweep, tune and plan",
                    command, address_->world_size));
  flags.refuse_for_ranks(address_->world_size);
  if (distributed->timeout_s <= 0)
    throw ConfigError(fmt::format("--dist-timeout {}: must be a positive number of seconds", distributed->timeout_s));
  auto& w = flags.workload;
  w.device(rank_device(w.device(), *address_, visible_cuda_devices()));  // one device per local rank
  lead_ = address_->rank == 0;
  if (!lead_) {  // rank 0 writes the report, the history and the table
    flags.json.clear();
    flags.html.clear();
    flags.no_history = true;
  }
}

// The trials run either on a built-in (or TorchScript) workload in this process, or on the user's
// command, one child process per trial; data-parallel ranks wrap the workload.
void Session::make_runner(bool test_split) {
  int64_t budget = flags.budget_bytes();
  if (flags.use_cmd) {  // the command's GPU is not LibTorch's: CommandRunner finds it through NVML
    auto command_runner = std::make_unique<CommandRunner>(flags.command, flags.workload.device());
    cuda_ = command_runner->is_cuda();
    runner_ = std::move(command_runner);
    if (flags.trial_timeout_s == 0) flags.trial_timeout_s = 600;  // a hung command must not hang the run
    report.budget_bytes = budget;
    return;
  }
  // Before a long run; a part held out of the training file comes with it, from one read.
  if (test_split && flags.workload.held_out_split() == 0) held_out_ = load_test_split(flags.workload);
  workload_ = make_workload(flags.workload, test_split || command == "tune" ? &held_out_ : nullptr);
  if (held_out_.size() > 0 && module()) check_held_out(held_out_, *module());  // before a long run too
  runner_ = std::make_unique<WorkloadRunner>(*workload_);
  // each rank its own device, before any command trains; fit and tune's fit within the target
  if (budget > 0)
    (void)checked_budget_bytes(*runner_, budget, command == "fit" || command == "tune" ? flags.target : 1.0);
  cuda_ = workload_->device().is_cuda();
  if (address_) {
    group_ = Group::join(*address_, workload_->device(),
                         std::chrono::milliseconds(static_cast<int64_t>(dist_->timeout_s * 1000)),
                         parse_backend(dist_->backend));
    dp_workload_ = std::make_unique<DataParallelWorkload>(dynamic_cast<ModuleWorkload&>(*workload_), group_);
    // Each rank enforces its own budget; the decisions use the smallest, which every rank can honour.
    // Without a budget, the ranks on one host share its RAM (a CUDA rank has its device to itself).
    const int64_t own_budget = budget > 0 ? budget
                               : workload_->device().is_cuda()
                                   ? runner_->default_budget_bytes()
                                   : runner_->default_budget_bytes() / address_->local_world_size;
    auto distributed = std::make_unique<DistributedRunner>(*dp_workload_, own_budget,
                                                           /*measure_scaling=*/command == "sweep" || command == "tune");
    rank_budgets_ = distributed->gather(own_budget, "agreeing on the memory budget");
    budget = *std::min_element(rank_budgets_.begin(), rank_budgets_.end());
    runner_ = std::move(distributed);
  }
  report.budget_bytes = budget;
}

History& Session::history() {
  if (!history_) history_ = std::make_unique<History>(history_path(flags.history));
  return *history_;
}

int Session::world_size() const { return group_ ? group_->size() : 1; }

const Dataset& Session::held_out() {
  if (held_out_.size() == 0 && module()) {
    held_out_ = held_out_or_training_sample(flags.workload, module()->data());
    check_held_out(held_out_, *module());
  }
  return held_out_;
}

void Session::release() {
  dp_workload_.reset();
  runner_.reset();
  workload_.reset();
  held_out_ = Dataset{};
}

// ---- progress -------------------------------------------------------------------------------------

// "3/14" and ", ~12 s left" for trial `index` of `planned`, `done` trials of this phase finished.
std::pair<std::string, std::string> Session::position(int index, int planned, int done) const {
  if (index < 0) return {"again", ""};  // a re-measure outside the plan
  const std::string of = planned > 0 ? fmt::format("{}/{}", index + 1, planned) : fmt::format("{}", index + 1);
  const auto now = Clock::now();
  if (eta_left_s_) {  // the phase's own estimate, counted down since it came
    const double left = *eta_left_s_ - std::chrono::duration<double>(now - eta_at_).count();
    return {of, done < planned ? fmt::format(", ~{:.0f} s left", std::max(0.0, left)) : std::string()};
  }
  const double phase = std::chrono::duration<double>(now - phase_start_).count();
  const std::string eta = planned > 0 && done > 0 && done < planned
                              ? fmt::format(", ~{:.0f} s left", phase / done * (planned - done))
                              : std::string();
  return {of, eta};
}

// One line per trial; the estimate of time left uses the current phase's pace (a fit's trials and a
// sweep's are timed apart). On a terminal the finished line replaces the live one; elsewhere (a log,
// a pipe) it is simply the next line.
void Session::trial_line(const Trial& t, int index, int planned) {
  if (flags.quiet || !lead_ || (brief_ && !live_)) return;
  const auto now = Clock::now();
  if (index == 0)
    phase_start_ = now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t.wall_s));
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const auto [of, eta] = position(index, planned, index + 1);
  const std::string what = t.outcome == Outcome::Ok && t.samples_per_s > 0 && t.warmup_steps > 0
                               ? fmt::format("{:.0f} samples/s", t.samples_per_s)
                               : to_string(t.outcome);
  const std::string line = fmt::format("[trial {}] batch {}: {}, peak {} ({:.1f} s elapsed{})", of, t.batch, what,
                                       format_bytes(t.peak_bytes), elapsed, eta);
  if (brief_)
    live(line);  // the next replaces it
  else
    tell("{}{}\n", live_ ? "\r\033[K" : "", line);
}

// On a terminal: a live line for the trial now running (which batch, time so far, time left).
void Session::start_line(int64_t batch, int index, int planned) {
  if (flags.quiet || !live_ || !lead_) return;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  const auto [of, eta] = position(index, planned, index);
  live(fmt::format("[trial {}] batch {}: training... ({:.1f} s elapsed{})", of, batch, elapsed, eta));
}

FitOptions Session::with_progress(FitOptions options) {
  return options.on_trial([this](const Trial& t, int i, int n) { trial_line(t, i, n); })
      .on_trial_start([this](int64_t b, int i, int n) { start_line(b, i, n); });
}

SweepOptions Session::with_progress(SweepOptions options) {
  return options.on_trial([this](const Trial& t, int i, int n) { trial_line(t, i, n); })
      .on_trial_start([this](int64_t b, int i, int n) { start_line(b, i, n); })
      .on_eta([this](double left_s) {
        eta_left_s_ = left_s;
        eta_at_ = Clock::now();
      });
}

// Long training passes (validate, the batch race): a live line on a terminal; elsewhere a line when
// a candidate starts, then one every 10 s, so a log shows the run is alive and how far it is.
void Session::training_line(const std::string& text, const std::string& candidate) {
  if (flags.quiet || !lead_) return;
  if (live_) {
    live(text);
  } else if (brief_) {
    return;  // a log gets the phase lines only
  } else if (log_.pass(candidate)) {
    tell("{}\n", text);
  }
}

namespace {
// A loss that is not finite reads as words, not fmt's "-nan" (a diverged run's progress line had said "loss -nan")
std::string metric_text(double loss, const std::optional<double>& accuracy) {
  const std::string l = std::isfinite(loss) ? fmt::format("{:.3f}", loss)
                        : std::isnan(loss)  ? "not a number (diverged)"
                                            : "infinite (diverged)";
  return accuracy ? fmt::format("accuracy {:.3f}, loss {}", *accuracy, l) : "loss " + l;
}
}  // namespace

void Session::on_validate(const ValidateProgress& p) {
  const std::string target = p.target_left_s ? fmt::format("~{:.0f} s to the target, ", *p.target_left_s) : "";
  training_line(fmt::format("[validate {}/{}] {}: epoch {:.2f}, {}, {:.1f} s trained ({}at most {:.0f} s left; "
                            "{:.0f} s elapsed)",
                            p.index + 1, p.count,
                            p.schedule.empty() ? fmt::format("batch {}", p.batch) : "schedule " + p.schedule, p.epochs,
                            metric_text(p.loss, p.accuracy), p.train_s, target, p.limit_left_s, p.elapsed_s),
                fmt::format("validate {}", p.index));
}

void Session::on_race(const RaceProgress& p) {
  training_line(fmt::format("[race rung {}/{}, {}/{}] batch {}: epoch {:.2f}, held-out {} ({:.0f} s elapsed, ~{:.0f} s "
                            "left)",
                            p.rung, p.rungs, p.index, p.count, p.batch, p.epochs, metric_text(p.loss, p.accuracy),
                            p.elapsed_s, p.left_s),
                fmt::format("race {} {}", p.rung, p.index));
}

namespace {

// Columns a text takes on a terminal: its UTF-8 code points (the tool's text has no wide or combining
// characters).
size_t columns_of(const std::string& text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// The first `n` code points of `text`, or its last `n` when `from_end`.
std::string code_points(const std::string& text, size_t n, bool from_end) {
  size_t seen = 0;
  if (!from_end) {
    for (size_t i = 0; i < text.size(); ++i)
      if ((text[i] & 0xC0) != 0x80 && seen++ == n) return text.substr(0, i);
    return text;
  }
  for (size_t i = text.size(); i-- > 0;)
    if ((text[i] & 0xC0) != 0x80 && ++seen == n) return text.substr(i);
  return text;
}

// Writes `text` to `path` (the --json or --html given) and returns true; where that fails at the end
// of a run (its folder removed or made read-only meanwhile, a full disk), hours of results are not
// lost: they go to the temp folder, and `unwritten` says why and where.
bool write_or_rescue(const std::string& path, const std::string& text, const char* flag, const std::string& command,
                     std::vector<std::string>& unwritten) {
  try {
    write_file(path, text, flag);
    return true;
  } catch (const Error& e) {  // write_file removed its temporary file
    std::error_code ignored;
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    // Named by what it is (--json's .json, --html's .html), whatever the path given was called.
    const std::string name = fmt::format("batchwise-{}-{:%Y%m%d-%H%M%S}-{}.{}", command, local, getpid(),
                                         std::string(flag) == "--html" ? "html" : "json");
    // A $TMPDIR that is no folder: /tmp (it had been the current folder, said by a relative name)
    std::filesystem::path folder = std::filesystem::temp_directory_path(ignored);
    if (ignored || folder.empty()) folder = "/tmp";
    const std::filesystem::path rescue = std::filesystem::absolute(folder / name, ignored);
    try {
      write_file(rescue.string(), text, flag);
      unwritten.push_back(fmt::format("{}; the report was written to {} instead", e.what(), rescue.string()));
    } catch (const Error& again) {
      unwritten.push_back(fmt::format("{}; nor could it be written to the temp folder: {}", e.what(), again.what()));
    }
    return false;
  }
}

// The terminal's width in columns (stderr's), else $COLUMNS, else 80.
size_t terminal_columns() {
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* env = std::getenv("COLUMNS"); env && std::atoi(env) > 0) return static_cast<size_t>(std::atoi(env));
  return 80;
}

}  // namespace

// A live line is rewritten in place with "\r\033[K", which clears only the terminal row the cursor
// is on: a line wider than the terminal wraps, and every update would leave its first rows behind.
// So it is fitted to one row: the brief phase prefix shortened to its "[2/4]", then the middle of
// the line cut ("..."), keeping its start (what trains) and its end (the time elapsed and left).
// A line that starts with its phase's words ("run race: batch 16, ..." in "[4/4] run race over 16,
// 32, 64") gets only the counter, not the words twice.
void Session::live(const std::string& line) {
  const size_t width = terminal_columns() - 1;  // the last column would wrap on some terminals
  const std::string counter = phase_.substr(0, phase_.find(']') + 1);
  const std::string words = phase_.substr(std::min(phase_.size(), counter.size() + 1));
  const std::string head = line.substr(0, line.find(':'));
  const bool says_its_phase = !head.empty() && words.rfind(head, 0) == 0 &&
                              (words.size() == head.size() || words[head.size()] == ' ');  // a whole word
  std::string text = brief_ ? (says_its_phase ? counter : phase_) + " " + line : line;
  if (columns_of(text) > width && brief_) text = counter + " " + line;
  if (const size_t n = columns_of(text); n > width && width > 20) {
    const size_t tail = (width - 3) / 2;
    text = code_points(text, width - 3 - tail, false) + "..." + code_points(text, tail, true);
  }
  tell("\r\033[K{}", text);
  std::fflush(stderr);
}

void Session::clear_line() {
  if (live_ && !flags.quiet && lead_) tell("\r\033[K");
}

void Session::stage(const std::string& text) {
  if (flags.quiet || !lead_) return;
  clear_line();
  tell("{}\n", text);
}

void Session::stage(const TuneStage& t) {
  if (t.phase > 0) {
    phase_ = fmt::format("[{}/{}] {}", t.phase, t.phases, t.what.substr(0, t.what.find(':')));
    eta_left_s_.reset();  // a new phase: its own estimate, when it gives one
    stage(fmt::format("[{}/{}] {}", t.phase, t.phases, t.what));
  } else if (t.plan) {  // tune's expected duration: a line in every mode, with the clock time it ends
    const std::time_t end = std::time(nullptr) + static_cast<std::time_t>(std::lround(t.expected_s));
    std::tm local{};
    localtime_r(&end, &local);
    stage(fmt::format("{}, done about {:%H:%M:%S}", t.what, local));
  } else if (!brief_) {
    stage(t.what);
  }
}

void Session::print_validation(const ValidationResult& v) {
  clear_line();
  if (flags.quiet || !lead_) return;
  for (const auto& run : v.runs) {
    std::string outcome;
    if (run.final_loss)
      outcome = fmt::format(
          "{} in {} of training: test loss {:.4g}{}{}{}", format_epochs(v.epochs), format_seconds(run.train_s),
          *run.final_loss, run.final_accuracy ? fmt::format(", accuracy {:.4f}", *run.final_accuracy) : std::string(),
          run.good ? " (within noise of the best)" : "", run.message.empty() ? "" : "; " + run.message);
    else if (run.reached)
      outcome = fmt::format("reached {} in {} of training ({:.2f} epochs)", v.target, format_seconds(run.train_s),
                            run.epochs);
    else
      outcome = run.message;
    if (run.schedule.empty())
      tell("[validate] batch {} (lr {:.4g}): {}\n", run.batch, run.lr.lr, outcome);
    else
      tell("[validate] schedule {} (lr {}): {}\n", run.schedule,
           run.phase_lrs.empty() ? fmt::format("{:.4g}", run.lr.lr)
                                 : fmt::format("{:.4g}", fmt::join(run.phase_lrs, ", ")),
           outcome);
  }
  if (v.schedule_saving)
    tell("[validate] the schedule trained {:.0f} % {} than the fastest good fixed batch ({})\n",
         100 * std::abs(*v.schedule_saving), *v.schedule_saving >= 0 ? "less time" : "more time",
         v.fastest_batch ? std::to_string(*v.fastest_batch) : "");
  else
    for (const auto& run : v.runs)
      if (!run.schedule.empty() && run.final_loss && !run.good && run.message.empty() && v.best_batch)
        tell(
            "[validate] the schedule {} ended worse than the best fixed batch, beyond the test set's "
            "noise\n",
            run.schedule);
}

// ---- output ---------------------------------------------------------------------------------------

int Session::finish(int code) {
  // Data-parallel, the training-set limits the warnings name where a swept batch passed them are each rank's share
  // (a step's global batch is the ranks' together, drawn from one order): said once, beside them
  const int64_t share = per_device_training_samples(report);
  if (data_parallel() && share > 0 && report.sweep &&
      std::any_of(report.sweep->points.begin(), report.sweep->points.end(),
                  [share](const Trial& p) { return p.batch > share; }))
    report.context.warnings.push_back(
        fmt::format("data-parallel over {} ranks: a step trains the ranks' batches together, each rank "
                    "taking {} of the {} training samples an epoch, so the training-set limits above are "
                    "per rank",
                    world_size(), share, report.workload.dataset_size));
  // A trace that could not be written, or whose step failed, is said at the end and sets the exit code; the run's
  // report, HTML and history are written all the same (a failing trace had ended the run with none of them)
  std::vector<std::string> unwritten;  // a file not written where asked (a report: written to the temp folder)
  std::string untraced;
  if (!flags.trace.empty()) {
    try {
      if (!report.recommendation) {
        tell("batchwise {}: warning: --trace {}: no batch was recommended, so no step was traced\n", command,
             flags.trace);
      } else {
        // Kineto logs its stages (and, on a machine without a GPU driver, an error about it) to stderr;
        // the line below says what was traced. A KINETO_LOG_LEVEL the user set is kept.
        setenv("KINETO_LOG_LEVEL", "6", /*overwrite=*/0);
        const StepTrace trace = write_step_trace(*workload_, report.recommendation->batch, flags.trace);
        if (!flags.quiet) {
          const std::string kernels =
              workload_->device().is_cuda() ? fmt::format(", {} GPU kernels", trace.kernel_events) : std::string();
          tell("trace of one step at batch {}: {} ({} events{}; open in https://ui.perfetto.dev)\n",
               report.recommendation->batch, flags.trace, trace.events, kernels);
        }
        if (!trace.note.empty()) tell("batchwise {}: warning: --trace: {}\n", command, trace.note);
      }
    } catch (const ConfigError& e) {
      unwritten.push_back(e.what());
    } catch (const Error& e) {
      untraced = e.what();
    }
  }
  if (report.fit && report.fit->outcome == FitOutcome::DoesNotFit) code = kExitDoesNotFit;
  if (report.fit && report.fit->outcome == FitOutcome::Error) code = kExitFailed;
  // A part in which nothing trained measured nothing: the report says why per item, and the exit code
  // says it failed (6: every one ran out of memory; else 1). A sweep's always; a loader search's and a
  // validation's where they are the command (tune's loader search follows a batch that trained; tune
  // --validate warns, its answer standing unvalidated; a stopped validate ends by its signal).
  for (const NothingTrained& none : nothing_trained(report)) {
    using Part = NothingTrained::Part;
    if (none.part == Part::Sweep || (none.part == Part::Loader && command == "loader") ||
        (none.part == Part::Validation && command == "validate") || none.part == Part::RunRace)
      code = none.out_of_memory ? kExitDoesNotFit : kExitFailed;
    if (!none.warning.empty()) report.context.warnings.push_back(none.warning);
  }
  if (workload_)  // a pass whose training could not be undone (tune's own are taken already)
    for (std::string& w : workload_->take_restore_failures()) report.context.warnings.push_back(std::move(w));
  if (group_) (void)group_->all_gather({0}, "ending the run together");  // rank 0 hosts the store: it leaves last
  if (!lead_) {
    if (!flags.quiet) {
      const std::string fitted =
          report.fit && report.fit->batch ? fmt::format("fit batch {} per device", *report.fit->batch) : std::string();
      const std::string rec = report.recommendation
                                  ? fmt::format("recommended batch {} per device", report.recommendation->batch)
                                  : std::string();
      tell("batchwise {} (rank {} of {}): done, as agreed with every rank{}{}{}\n", command, address_->rank,
           address_->world_size, fitted.empty() && rec.empty() ? "" : ": ", fitted,
           !fitted.empty() && !rec.empty() ? ", " + rec : rec);
    }
    return code;
  }
  // The files first: a reader of stdout that is gone (| head) ends batchwise by SIGPIPE at the table.
  const std::string json = to_json(report);
  if (!flags.json.empty()) write_or_rescue(flags.json, json, "--json", command, unwritten);
  const bool html = !flags.html.empty() &&
                    write_or_rescue(flags.html, to_html(json, "this run's report"), "--html", command, unwritten);
  std::string not_stored;
  if (!flags.no_history) {
    try {
      // Removed during the run (its folder with it), or replaced: the run goes to the file at the path now, or a new
      // one there, and the note says which once it is stored
      const bool moved = history_ && history_->moved();
      std::error_code none;
      const bool replaced = moved && std::filesystem::exists(history_path(flags.history), none);
      if (moved) history_.reset();
      history().add(command, json);
      if (moved && !flags.quiet)
        tell("batchwise {}: note: the history {} was {} during the run; the run is stored in {}\n", command,
             history_path(flags.history), replaced ? "replaced" : "removed",
             replaced ? "the file now at that path" : "a new one there");
    } catch (const Error& e) {  // the run itself succeeded; losing its record is worth a warning, not a failure
      not_stored = e.what();
    }
  }
  // the table beside a report on stdout goes to stderr: `--json /dev/stdout | jq` reads the JSON alone
  show(brief_ ? to_summary(report) : to_table(report), names_stdout(flags.json) || names_stdout(flags.html));
  if (html && !flags.quiet) tell("HTML report: {}\n", flags.html);
  if (!not_stored.empty())
    tell("batchwise {}: warning: the run was not stored in the history: {}\n", command, not_stored);
  for (const std::string& u : unwritten) tell("batchwise {}: error: {}\n", command, u);
  if (!untraced.empty()) tell("batchwise {}: error: {}\n", command, untraced);
  if (code != kExitOk) return code;
  return !unwritten.empty() ? kExitUsage : !untraced.empty() ? kExitFailed : kExitOk;
}

void plan_for_device(const FitFlags& fit, const WorkloadFlags& w, Report& report) {
  if (fit.plan_for.empty() || !report.fit) return;
  const PlanSource source{report.context.device_type, report.workload.precision};
  report.plan = plan_for(*report.fit, source, parse_plan_device(fit.plan_for), w.target, fit.multiple_of);
  if (w.use_cmd && source.device_type == "cpu")  // a command's process tree, not its tensors, was measured
    report.plan->assumptions.insert(
        report.plan->assumptions.begin(),
        "the command's resident memory measured here (its interpreter, libraries, host-side data and loader workers "
        "as well as its tensors) is what the device would hold: on a GPU the host-side part stays in host memory, so "
        "the prediction understates the batch; measure on the device with fit --cmd --device cuda");
}

void rule_learning_rate(Session& s, int64_t base_batch) {
  const auto& w = s.report.workload;
  const std::optional<Optimizer> optimizer = known_optimizer(w.optimizer);
  if (!s.report.recommendation || w.lr <= 0 || !optimizer) return;
  s.report.lr = unmeasured_lr(*optimizer, base_batch, w.lr, s.report.recommendation->batch * s.world_size());
}

}  // namespace batchwise::cli

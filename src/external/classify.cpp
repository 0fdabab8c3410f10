// classify(): a CommandResult judged. How the command ended (its exit status or signal, a deadline,
// the memory limit, the kernel's OOM killer), what its output said (the frameworks' out-of-memory
// texts, a non-finite loss) and whether it trained the steps asked for, in one outcome and one
// sentence that names the cause.
#include "batchwise/command.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

#include "batchwise/units.h"
#include "check.h"

namespace batchwise {

namespace {

std::string signal_text(int sig) {
  static const std::map<int, const char*> kNames = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},   {SIGTRAP, "SIGTRAP"},
      {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},
      {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"}, {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
      {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  const auto it = kNames.find(sig);
  return it == kNames.end() ? fmt::format("signal {}", sig) : fmt::format("signal {} ({})", sig, it->second);
}

}  // namespace

namespace {

// The median of the values above 0 (an epoch's last, shorter batch is one step of many); 0 where there is none.
int64_t median_of(std::vector<int64_t> s) {
  s.erase(std::remove(s.begin(), s.end(), int64_t{0}), s.end());
  if (s.empty()) return 0;
  std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
  return s[s.size() / 2];
}

int64_t median_samples(const CommandResult& r) { return median_of(r.step_samples); }

// Its steps did not train its batch. Where the step lines name the batch their data loader gave (`batch=`, the
// callbacks'), a step trains it when that batch or the step's samples are the one given (its samples are the
// accumulated and the ranks' batches together, or the global batch {batch} is split among them); a multiple no longer
// passes (a script that ignores {batch} and trains 64 had passed at 8 as "accumulation"). Otherwise, its samples must
// be the batch or a whole multiple of it.
bool trained_another_batch(const CommandResult& r) {
  if (r.batch <= 0 || r.step_samples.empty()) return false;
  if (const int64_t loader = median_of(r.step_batches); loader > 0)
    return loader != r.batch && median_samples(r) != r.batch;
  return median_samples(r) % r.batch != 0;
}

// What the step lines of a run that trained another batch say it trained.
std::string what_trained(const CommandResult& r) {
  if (const int64_t loader = median_of(r.step_batches); loader > 0)
    return fmt::format("batches of {} from its data loader and {} samples a step, neither of them batch {}", loader,
                       median_samples(r), r.batch);
  return fmt::format(
      "{} samples a step, not batch {} nor a whole multiple of it (as gradient accumulation or data-parallel ranks "
      "train)",
      median_samples(r), r.batch);
}

// A line as a terminal last showed it: the text after its last carriage return that holds any (a progress bar
// redraws itself so), without colour and cursor escapes or other control characters (the message had carried a
// bar's every redraw, 15 carriage returns and 28 escapes, into the table and the JSON)
std::string as_shown(const std::string& line) {
  size_t from = 0;
  for (size_t cr = line.find('\r'); cr != std::string::npos; cr = line.find('\r', cr + 1))
    if (line.find_first_not_of(" \t\r", cr + 1) != std::string::npos) from = cr + 1;
  const size_t to = std::min(line.find('\r', from), line.size());
  std::string out;
  for (size_t i = from; i < to; ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c == 0x1b) {  // ESC [ parameters final-byte (CSI), or ESC and one character
      if (i + 1 < line.size() && line[i + 1] == '[') {
        i += 2;
        while (i < line.size() && !(line[i] >= 0x40 && line[i] <= 0x7e)) ++i;
      } else {
        ++i;
      }
    } else if (c >= 0x20 || c == '\t') {
      out += line[i];
    }
  }
  return out.erase(out.find_last_not_of(" \t") + 1);
}

// The last line with text that is not a protocol line, as shown (for the error message).
std::string last_line_of(const std::string& output) {
  std::string last;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line = as_shown(line);
        line.find_first_not_of(" \t") != std::string::npos && line.compare(0, 10, "batchwise:") != 0)
      last = line;
  return last;
}

// How a command that batchwise stopped after its steps ended, where it did; else `ended`.
std::string how_it_stopped(const CommandResult& r, const std::string& ended) {
  if (!r.stopped_after_steps) return ended;
  return r.ran_on_past_steps ? "ran on past its steps (BATCHWISE_STEPS: stop after them), stopped by batchwise,"
                             : "stopped by batchwise, as asked,";
}

// A command that ended well (exit 0, or stopped by batchwise after its steps) and reported a finite loss and its
// batch: its samples/s from its own figure, its step lines, or its wall time; an error where none measures a step.
CommandVerdict judged_run(const CommandResult& r, const std::string& ended, const std::string& steps,
                          const std::string& last_line) {
  CommandVerdict v;
  const int total = r.warmup + r.steps;
  v.outcome = Outcome::Ok;
  const std::string how = how_it_stopped(r, ended);
  const double measured_s = std::accumulate(r.step_times_s.begin(), r.step_times_s.end(), 0.0);
  const double measured = std::accumulate(r.step_samples.begin(), r.step_samples.end(), 0.0);  // no overflow
  v.step_times_s = r.step_times_s;
  if (r.reported_samples_per_s && r.steps_seen > r.warmup) {  // its own figure, of a run that trained a measured step
    v.samples_per_s = *r.reported_samples_per_s;
    v.message = fmt::format("{} {}: {:.1f} samples/s as the child reported", how, steps, v.samples_per_s);
  } else if (!r.step_times_s.empty() && measured_s > 0) {
    v.samples_per_s = measured / measured_s;
    std::vector<double> sorted = r.step_times_s;
    std::sort(sorted.begin(), sorted.end());
    v.message = fmt::format("{} {}: {:.1f} samples/s (median step {:.3g} s over {} timed steps)", how, steps,
                            v.samples_per_s, sorted[sorted.size() / 2], sorted.size());
  } else if (r.steps_seen == 0 && r.wall_s < kWallFallbackMinS) {
    // Nothing says it trained, and it did not run long enough for its wall time to mean a step.
    v.outcome = Outcome::Error;
    v.step_times_s.clear();
    v.message = fmt::format(
        "ran no step: {} after {:.3g} s without a 'batchwise: step' line, too soon for the wall-time fallback "
        "(at least {:g} s); a command that trains prints a step line per step (docs/cmd.md), or runs its {} steps "
        "for longer{}",
        ended, r.wall_s, kWallFallbackMinS, total, last_line.empty() ? "; no output" : "; last output: " + last_line);
  } else if (r.steps_seen > 0 && r.steps_seen <= r.warmup) {
    // It ended within its warm-up, whatever its wall time: start-up and a step or two, no measured step
    // (one that stopped after its first of 7 steps had been measured at its interpreter's start-up).
    v.outcome = Outcome::Error;
    v.step_times_s.clear();
    v.message = fmt::format(
        "ended within its warm-up: {} {}, the first {} of them warm-up (untimed), so no step was measured; a "
        "command that trains runs the steps it is given ({{steps}} in its arguments, docs/cmd.md)",
        ended, steps, r.warmup);
  } else if (r.wall_s < kWallFallbackMinS) {
    // Step lines past the warm-up, none timed: they were read together (a buffered stdout), and the
    // run is too short for its wall time to mean its steps.
    v.outcome = Outcome::Error;
    v.step_times_s.clear();
    v.message = fmt::format(
        "too short to time: {} {} in {:.3g} s, its step lines read together (no gap between them to time) and "
        "too soon for the wall-time fallback (at least {:g} s); flush stdout after each step line (Python: "
        "print(..., flush=True))",
        ended, steps, r.wall_s, kWallFallbackMinS);
  } else {
    const int ran = r.steps_seen > 0 ? r.steps_seen : total;
    v.wall_timing = true;
    v.step_times_s.assign(static_cast<size_t>(ran), r.wall_s / ran);
    v.samples_per_s = r.wall_s > 0 ? static_cast<double>(r.batch) * ran / r.wall_s : 0;
    v.message = fmt::format(
        "{} {}: {:.1f} samples/s from wall time, a fallback ({:.3g} s for {} steps, start-up included; {}){}", how,
        r.steps_seen > 0 ? steps : "without step lines", v.samples_per_s, r.wall_s, ran,
        r.steps_seen > 0 ? "its step lines were not timed: flush stdout after each, and give it 2 or more steps"
                         : "print 'batchwise: step' lines to time steps",
        // a figure of its own, with no step measured, is not taken (samples_per_s=1e9 alone had been the answer)
        r.reported_samples_per_s
            ? fmt::format("; its own samples_per_s ({:.0f}) is not used: no measured step shows it trained",
                          *r.reported_samples_per_s)
            : "");
  }
  return v;
}

}  // namespace

CommandVerdict classify(const CommandResult& r) {
  CommandVerdict v;
  const int total = r.warmup + r.steps;
  const std::string steps = fmt::format("after {} of {} steps", r.steps_seen, total);
  const std::string ended = r.signal             ? "killed by " + signal_text(r.signal)
                            : r.exit_status >= 0 ? fmt::format("exit status {}", r.exit_status)
                                                 : "ended with an unknown status (reaped elsewhere in this process)";
  const std::string last_line = last_line_of(r.output_tail);  // for the error message
  const std::string stopped_how = how_it_stopped(r, ended);
  // It trained the steps asked for and exited 0, or it trained on past the text and was stopped after its steps
  // (not at the timeout): an out-of-memory text it printed on the way (a warning it caught) did not end it. A text
  // after its last step (its validation ran out of memory, then it hung) is out of memory still.
  const bool clean_exit =
      r.steps_seen >= total &&
      (r.exit_status == 0 || (r.stopped_after_steps && !r.timed_out && r.oom_message_step < r.steps_seen));

  if (r.killed_over_memory_limit) {
    v.outcome = Outcome::Oom;
    // by how much, too: the two can read alike ("reached 1.27 GiB, over the 1.27 GiB budget")
    v.message = fmt::format("resident memory reached {}, {} over the {} budget: stopped by batchwise {}",
                            format_bytes(r.peak_rss_bytes),
                            format_bytes(std::max<int64_t>(r.peak_rss_bytes - r.memory_limit_bytes, 0)),
                            format_bytes(r.memory_limit_bytes), steps);
  } else if (r.oom_killer) {
    v.outcome = Outcome::Oom;
    v.message = fmt::format("killed by the kernel's OOM killer (SIGKILL) {}; resident memory peaked at {}", steps,
                            format_bytes(r.peak_rss_bytes));
  } else if (!r.oom_message.empty() && !clean_exit) {
    v.outcome = Outcome::Oom;
    const std::string how =
        r.timed_out ? fmt::format("stopped by batchwise at the {:g} s timeout", r.timeout_s) : stopped_how;
    v.message = fmt::format("{} {}, the child printed: {}", how, steps, r.oom_message);
  } else if (r.timed_out) {
    v.outcome = Outcome::Timeout;
    v.message = fmt::format("still running at the {:g} s timeout {}: stopped by batchwise ({})", r.timeout_s, steps,
                            r.signal == SIGKILL ? "SIGTERM, then SIGKILL" : "SIGTERM");
  } else if ((r.stopped_after_steps || r.exit_status == 0) && r.non_finite_loss) {
    // The command said its loss is not a number: it trained nothing, however it ended.
    v.outcome = Outcome::Error;
    v.message = fmt::format(
        "{} {}, but it reported a training loss of {} at step {}: the loss is not a finite "
        "number; at the first step check the data and the model, later lower the learning rate",
        stopped_how, steps, r.non_finite_loss_text, r.non_finite_loss_step);
  } else if ((r.stopped_after_steps || r.exit_status == 0) && trained_another_batch(r)) {
    // Its steps were not of the batch it was given: what it measured is not this batch's, and an answer on it
    // would name a batch that never trained (a script that ignores {batch}, or data of fewer samples than it)
    v.outcome = Outcome::Error;
    v.message = fmt::format(
        "{} {}, but its step lines report {}: it did not train batch {}; pass {{batch}} to its batch size, and give "
        "it data of at least a batch (docs/cmd.md)",
        stopped_how, steps, what_trained(r), r.batch);
  } else if ((r.stopped_after_steps || r.exit_status == 0) && r.steps_seen == 0 && !r.reporter.empty()) {
    // Its callback was made, and reported no step: the command evaluated, or trained zero steps, whatever its time
    v.outcome = Outcome::Error;
    v.message = fmt::format(
        "trained nothing: {} {}, its batchwise callback ({}) made but no training step reported; a trial must train "
        "(only evaluation, max_steps, epochs or limit_train_batches of 0, or the callback not given to the trainer, "
        "train none){}",
        ended, steps, r.reporter, last_line.empty() ? "" : "; last output: " + last_line);
  } else if (r.stopped_after_steps || r.exit_status == 0) {
    v = judged_run(r, ended, steps, last_line);
  } else {
    v.outcome = Outcome::Error;
    v.message = fmt::format("{} {}", ended, steps);
    if (r.signal == SIGKILL)
      v.message += r.oom_killer_known ? ", not by batchwise and not by the kernel's OOM killer"
                                      : ", not by batchwise (the kernel's OOM kill count could not be read)";
    else if (r.oom_kills > 0)
      v.message += fmt::format("; the kernel's OOM killer killed {} process(es) in this cgroup meanwhile", r.oom_kills);
    v.message += last_line.empty() ? "; no output" : "; last output: " + last_line;
  }
  return v;
}

}  // namespace batchwise

#pragma once
// `batchwise ... --nproc N`: this program started N times as the ranks of one torch.distributed
// group on this machine, as torchrun would start them, and waited for. And a run that a first
// Ctrl-C asks to stop instead of ending it.
#include <csignal>
#include <string>

namespace batchwise::cli {

/// Whether this process is a rank started by launch_ranks (BATCHWISE_LAUNCHED is set).
bool launched_rank();

/// Reads which of SIGINT, SIGTERM and SIGHUP this process was started with ignored (nohup's SIGHUP;
/// SIGINT in a script's background job): called first in main, before any handler is set. Every
/// handler batchwise sets (main's, launch_ranks', StopOnSignal's) leaves those ignored, as the caller
/// asked: a nohup'd validate had taken a closed terminal's SIGHUP as a stop.
void note_ignored_signals();
/// Whether note_ignored_signals found `sig` ignored.
bool ignored_signal(int sig);

/// Starts `nproc` copies of this executable with the same arguments and torchrun's variables
/// (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT;
/// OMP_NUM_THREADS = usable CPUs / nproc unless set), forwards
/// SIGINT/SIGTERM/SIGHUP to them, and waits. When a rank fails, the others get `grace_s` to notice and end on their
/// own, then are killed. Returns the exit code: 0 when every rank succeeded, rank 0's when it failed with one,
/// otherwise `failed_code`. Prints one line per rank that failed.
int launch_ranks(int nproc, int argc, char** argv, double grace_s, int failed_code);

/// While it lives, the first SIGINT (Ctrl-C), SIGTERM or SIGHUP asks the run to stop (requested() turns
/// true, and stderr says so at once) instead of ending the process, so that what finished can be
/// written; a second, of any kind, ends it as the signal does. SIGPIPE is ignored after the
/// first (the Ctrl-C ends `| tee` too). One at a time; the handlers before it (main's, which stop a --cmd
/// trainer) are put back when it goes (an error after a stop is then reported as any error is).
class StopOnSignal {
 public:
  /// `command` and `what` name the run and what is kept in the line printed when the signal comes.
  StopOnSignal(const std::string& command, const std::string& what);
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  bool requested() const;
  /// The signal that asked ("SIGINT", "SIGTERM" or "SIGHUP"); "" when none did.
  std::string name() const;
  /// After a stop: stdout and stderr, where either is a pipe whose reader is gone (the Ctrl-C that
  /// asked ended `| tee` too), write to /dev/null instead, so that what finished is still written to
  /// its files and nothing fails on the way.
  void mute_broken_outputs() const;
  /// Once what finished is written: ends the process by the signal that asked, as the signal ends
  /// any program (a shell reads 130 for Ctrl-C). Returns only when none asked.
  void end_by_it() const;
  /// Where no stop was asked: puts the handlers before it back (a signal ends the process again).
  /// One that came since the caller's requested() ends the process now, as it would have without
  /// the stop. The destructor then does nothing more.
  void release();

 private:
  void restore_handlers();  // the handlers (and SIGPIPE's action) as they were before this stop

  struct sigaction before_[3] = {};  // SIGINT's, SIGTERM's, SIGHUP's

  struct sigaction before_pipe_ = {};
  bool released_ = false;
};

}  // namespace batchwise::cli

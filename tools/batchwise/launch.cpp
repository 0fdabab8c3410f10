#include "launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "batchwise/device.h"
#include "tell.h"

namespace batchwise::cli {

namespace {

// The signals that stop or end a run, in StopOnSignal::before_'s order: Ctrl-C; a scheduler; a closed terminal.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
// Which of them this process was started with ignored (note_ignored_signals): nohup's SIGHUP, SIGINT in a
// script's background job. A handler's reset to the default leaves them ignored too.
bool g_ignored[std::size(kStopSignals)] = {};

std::vector<pid_t> g_children;  // for the signal handler: reserved before any fork, never reallocated
volatile sig_atomic_t g_signal = 0;

// StopOnSignal's: the signal that asked, and the line its handler writes (built beforehand: a
// handler may only write()). Any thread may take the signal: an atomic the main thread reads.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "async-signal-safe only where lock-free");
char g_stop_line[512];
size_t g_stop_line_size = 0;

// A port the kernel considers free now (bound to port 0, read back, released).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string describe(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

}  // namespace

bool launched_rank() { return std::getenv("BATCHWISE_LAUNCHED") != nullptr; }

void note_ignored_signals() {
  for (size_t k = 0; k < std::size(kStopSignals); ++k) {
    struct sigaction now {};
    sigaction(kStopSignals[k], nullptr, &now);
    g_ignored[k] = now.sa_handler == SIG_IGN;
  }
}

bool ignored_signal(int sig) {
  for (size_t k = 0; k < std::size(kStopSignals); ++k)
    if (kStopSignals[k] == sig) return g_ignored[k];
  return false;
}

int launch_ranks(int nproc, int argc, char** argv, double grace_s, int failed_code) {
  const std::string port = std::to_string(free_port());
  const std::string threads = std::to_string(std::max(1, usable_cpu_cores() / nproc));
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  g_children.reserve(static_cast<size_t>(nproc));
  // A signal to the launcher (Ctrl-C, a scheduler's SIGTERM) goes to every rank; the launcher ends
  // the same way once they have. Blocked while forking, so none is missed or half-handled.
  sigset_t forwarded, previous;
  sigemptyset(&forwarded);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&forwarded, sig);
  sigprocmask(SIG_BLOCK, &forwarded, &previous);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    if (ignored_signal(sig)) continue;  // nohup's SIGHUP: the ranks inherit it ignored, as this does
    struct sigaction action {};
    action.sa_handler = [](int signo) {
      g_signal = signo;
      for (const pid_t child : g_children) kill(child, signo);
    };
    sigaction(sig, &action, nullptr);
  }
  const pid_t launcher = getpid();
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      tell("batchwise: could not start rank {}: {}\n", rank, std::strerror(errno));
      for (const pid_t child : g_children) kill(child, SIGKILL);
      sigprocmask(SIG_SETMASK, &previous, nullptr);
      return failed_code;
    }
    if (pid == 0) {
      for (int sig : {SIGINT, SIGTERM, SIGHUP})
        if (!ignored_signal(sig)) signal(sig, SIG_DFL);
      sigprocmask(SIG_SETMASK, &previous, nullptr);
      // A launcher killed outright (SIGKILL, which it cannot pass on; the OOM killer) takes its ranks with it:
      // they had trained on, orphans, to the end of the run or their timeout
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher) _exit(failed_code);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("OMP_NUM_THREADS", threads.c_str(), 0);  // as torchrun: the cores shared, unless set
      setenv("BATCHWISE_LAUNCHED", "1", 1);
      execv("/proc/self/exe", args.data());
      tell("batchwise: rank {}: could not start {}: {}\n", rank, argv[0], std::strerror(errno));
      _exit(127);
    }
    g_children.push_back(pid);
  }
  sigprocmask(SIG_SETMASK, &previous, nullptr);

  std::vector<int> status(static_cast<size_t>(nproc), -1);
  int running = nproc;
  std::optional<std::chrono::steady_clock::time_point> give_up;
  while (running > 0) {
    int st = 0;
    const pid_t pid = waitpid(-1, &st, give_up ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;  // a forwarded signal: the ranks end, then so does this
    if (pid < 0) break;
    if (pid == 0) {  // a rank failed earlier: the others get until give_up to end on their own
      if (std::chrono::steady_clock::now() < *give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      for (int r = 0; r < nproc; ++r)
        if (status[static_cast<size_t>(r)] < 0) {
          tell("batchwise: rank {} of {} did not end after another rank failed; killing it\n", r, nproc);
          kill(g_children[static_cast<size_t>(r)], SIGKILL);
        }
      give_up = std::chrono::steady_clock::now() + std::chrono::hours(1);
      continue;
    }
    const auto it = std::find(g_children.begin(), g_children.end(), pid);
    if (it == g_children.end()) continue;
    const int rank = static_cast<int>(it - g_children.begin());
    status[static_cast<size_t>(rank)] = st;
    --running;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    if (!give_up) {
      // Usage and input errors, and a rank that saw a collective fail (failed_code), leave the
      // others failing alike, dead or hung: they get a moment. Otherwise they first see the
      // failure through their collectives (a broken connection at once, a hang at the timeout).
      const bool quick =
          WIFEXITED(st) && ((WEXITSTATUS(st) >= 2 && WEXITSTATUS(st) <= 5) || WEXITSTATUS(st) == failed_code);
      give_up = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(quick ? 3.0 : grace_s));
    }
  }
  // Each rank that ended otherwise than rank 0 did (rank 0 speaks for itself).
  const int zero = status[0];
  for (int r = 0; r < nproc; ++r) {
    const int st = status[static_cast<size_t>(r)];
    const bool failed = st >= 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    // Killed by the signal the launcher passed on (Ctrl-C): the run was stopped, no rank failed
    const bool stopped = g_signal != 0 && WIFSIGNALED(st) && WTERMSIG(st) == g_signal;
    if (failed && !stopped && (r > 0 || WIFSIGNALED(st)) && !(r > 0 && zero >= 0 && st == zero))
      tell("batchwise: rank {} of {} (pid {}) {}\n", r, nproc, g_children[static_cast<size_t>(r)], describe(st));
  }
  if (g_signal != 0) {
    signal(g_signal, SIG_DFL);
    raise(g_signal);
  }
  if (zero >= 0 && WIFEXITED(zero) && WEXITSTATUS(zero) != 0) return WEXITSTATUS(zero);
  for (const int st : status)  // rank 0 was killed or succeeded: the first rank's own failure code
    if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != failed_code) return WEXITSTATUS(st);
  for (const int st : status)
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return failed_code;
  return 0;
}

StopOnSignal::StopOnSignal(const std::string& command, const std::string& what) {
  const std::string line =
      fmt::format("\nbatchwise {}: stopping after this step: {} (Ctrl-C again ends at once)\n", command, what);
  g_stop_line_size = std::min(line.size(), sizeof(g_stop_line));
  std::memcpy(g_stop_line, line.data(), g_stop_line_size);
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = [](int signo) {
    const int saved_errno = errno;
    if (g_stop_signal.exchange(signo) != 0) {  // the second, of any kind: ends the process now
      signal(signo, SIG_DFL);
      raise(signo);  // blocked within this handler (sa_mask): it ends the process as the handler returns
      errno = saved_errno;
      return;  // not on to the stop's line again (`timeout` signals the process and then its group: two lines)
    }
    for (size_t k = 0; k < std::size(kStopSignals); ++k)  // the next of any kind: the process ends
      if (!g_ignored[k]) signal(kStopSignals[k], SIG_DFL);
    // Ctrl-C reaches a whole pipeline (batchwise validate 2>&1 | tee log): its reader gone must not end
    // the run by SIGPIPE before what finished is written (mute_broken_outputs).
    signal(SIGPIPE, SIG_IGN);
    const ssize_t written = write(STDERR_FILENO, g_stop_line, g_stop_line_size);
    (void)written;
    errno = saved_errno;
  };
  sigemptyset(&action.sa_mask);
  for (const int sig : kStopSignals) sigaddset(&action.sa_mask, sig);
  action.sa_flags = SA_RESTART;
  for (size_t k = 0; k < std::size(kStopSignals); ++k)  // one ignored when batchwise started stays so (nohup)
    sigaction(kStopSignals[k], g_ignored[k] ? nullptr : &action, &before_[k]);
  sigaction(SIGPIPE, nullptr, &before_pipe_);  // the handler ignores it once a stop is asked
}

StopOnSignal::~StopOnSignal() {
  if (released_) return;
  restore_handlers();
  g_stop_signal = 0;
}

void StopOnSignal::restore_handlers() {
  for (size_t k = 0; k < std::size(kStopSignals); ++k) sigaction(kStopSignals[k], &before_[k], nullptr);
  sigaction(SIGPIPE, &before_pipe_, nullptr);
}

void StopOnSignal::release() {
  restore_handlers();
  released_ = true;
  // Between the caller's requested() and the handlers put back, a signal ran this stop's handler:
  // raised again, it now meets the handler before the stop.
  if (const int late = g_stop_signal.exchange(0); late != 0) raise(late);
}

bool StopOnSignal::requested() const { return g_stop_signal != 0; }

std::string StopOnSignal::name() const {
  const int signo = g_stop_signal;
  return signo == SIGINT ? "SIGINT" : signo == SIGTERM ? "SIGTERM" : signo == SIGHUP ? "SIGHUP" : "";
}

void StopOnSignal::mute_broken_outputs() const {
  for (const int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    pollfd p{fd, 0, 0};  // a pipe's write end whose reader is gone reports POLLERR
    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLERR | POLLHUP | POLLNVAL))) continue;
    const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null < 0) continue;
    std::fflush(fd == STDOUT_FILENO ? stdout : stderr);
    dup2(null, fd);
    close(null);
  }
}

void StopOnSignal::end_by_it() const {
  const int signo = g_stop_signal;
  if (signo == 0) return;
  std::fflush(nullptr);
  signal(signo, SIG_DFL);
  raise(signo);
}

}  // namespace batchwise::cli

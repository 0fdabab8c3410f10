// run_command: fork + execve (never a shell), stdout and stderr read through pipes with poll() while
// the child runs, its process tree's resident memory sampled from /proc every 10 ms (the tree: its
// process group and every descendant, those in sessions of their own included), NVML every 50 ms,
// deadlines enforced with SIGTERM then SIGKILL to the whole tree. classify() below turns the
// raw CommandResult into an outcome and a sentence; protocol.cpp reads the step lines (and the
// frameworks' out-of-memory texts).
#include "batchwise/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <sstream>

#include "batchwise/units.h"
#include "check.h"
#include "external/child.h"
#include "external/process_tree.h"
#include "nvml.h"
#include "protocol.h"

namespace batchwise {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kSampleInterval = std::chrono::milliseconds(10);
constexpr int kNvmlEvery = 5;                          // samples between NVML queries
constexpr auto kTermGrace = std::chrono::seconds(1);   // SIGTERM, then SIGKILL
constexpr auto kDrainGrace = std::chrono::seconds(1);  // output after the child exited
constexpr size_t kTailLines = 20;
constexpr size_t kMaxLineBytes = 64 * 1024;
constexpr size_t kTailLineBytes = 1000;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Splits one stream into lines.
struct LineStream {
  int fd = -1;
  std::string partial;
};

using detail::Child;
using detail::child_environment;
using detail::close_fd;
using detail::publish_members;
using detail::start_child;

// The running command, watched until it and its output are done: its lines go to the protocol
// parser and the tail; its process tree is sampled for memory (/proc every 10 ms, NVML every 50 ms);
// a deadline, the memory limit or enough steps stop it (SIGTERM, then SIGKILL to the whole tree).
class Watch {
 public:
  Watch(const CommandOptions& o, CommandResult& r, const Child& child, Clock::time_point start, int total_steps)
      : o_(o),
        r_(r),
        pid_(child.pid),
        start_(start),
        total_steps_(total_steps),
        parser_(r, start),
        tree_(child.pid),
        nvml_(detail::shared_nvml()),
        next_sample_(start) {
    streams_[0].fd = child.out;
    streams_[1].fd = child.err;
  }

  // Until the child has exited and its output is read (or given up on).
  void run() {
    for (;;) {
      Clock::time_point now = Clock::now();
      if (!exited_at_) {
        supervise(now);
      } else {
        if (streams_[0].fd < 0 && streams_[1].fd < 0) break;
        // Descendants still hold the pipes open: stop them, then give up on their output.
        if (!stragglers_killed_ && now - *exited_at_ >= kDrainGrace) {
          tree_.signal_all(SIGKILL);
          stragglers_killed_ = true;
        }
        if (now - *exited_at_ >= 3 * kDrainGrace) break;
      }
      read_ready(now);
      if (!exited_at_) {
        siginfo_t info{};
        // WNOWAIT: the zombie keeps the process group id reserved until we have killed what is left.
        const int waited = waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
        if ((waited == 0 && info.si_pid == pid_) || (waited < 0 && errno == ECHILD)) exited_at_ = Clock::now();
      }
    }
    for (LineStream& s : streams_) {
      if (!s.partial.empty()) on_line(std::move(s.partial), Clock::now());
      close_fd(s.fd);
    }
  }

  // Whatever is left of the tree goes, and is gone before we return: the next run must not find its
  // memory still held. The leader, a zombie until reaped, keeps the group id reserved. Then the exit
  // status, the peaks and the tail.
  void finish() {
    tree_.signal_all(SIGKILL);
    for (const Clock::time_point give_up = Clock::now() + 2 * kTermGrace;
         tree_.others_alive() && Clock::now() < give_up;) {
      tree_.signal_all(SIGKILL);  // and what they started meanwhile
      usleep(5000);
    }
    detail::clear_active_group();
    publish_members({});
    int status = 0;
    rusage usage{};
    pid_t reaped;
    do reaped = wait4(pid_, &status, 0, &usage);
    while (reaped < 0 && errno == EINTR);
    r_.wall_s = seconds(exited_at_.value_or(Clock::now()) - start_);
    // reaped < 0: another thread's waitpid(-1) took the status; exit_status -1 and signal 0 say so.
    if (reaped == pid_ && WIFEXITED(status)) r_.exit_status = WEXITSTATUS(status);
    if (reaped == pid_ && WIFSIGNALED(status)) r_.signal = WTERMSIG(status);
    r_.peak_rss_bytes = std::max(r_.peak_rss_bytes, tree_.leader_peak_bytes());
    if (r_.reported_peak_bytes || r_.nvml_peak_bytes)
      r_.peak_device_bytes = std::max(r_.reported_peak_bytes.value_or(0), r_.nvml_peak_bytes.value_or(0));
    for (const std::string& line : tail_) r_.output_tail += line + "\n";
  }

  bool kill_sent() const { return kill_sent_; }

 private:
  void stop(Clock::time_point now) {
    if (term_sent_ || kill_sent_) return;
    tree_.signal_all(SIGTERM);
    term_sent_ = now;
  }
  void kill_tree() {
    tree_.signal_all(SIGKILL);
    kill_sent_ = true;
  }

  // While it runs: the deadline, SIGKILL after SIGTERM's grace, and a memory sample when one is due.
  void supervise(Clock::time_point now) {
    if (o_.timeout_s() > 0 && !term_sent_ && !kill_sent_ && seconds(now - start_) >= o_.timeout_s()) {
      (steps_done_at_ ? r_.ran_on_past_steps : r_.timed_out) = true;  // its steps were done: they stand
      r_.stopped_after_steps = r_.ran_on_past_steps;
      stop(now);
    }
    // Only one that trains on (a step line past its steps): one that evaluates or saves after them is left to end,
    // and to its peak line
    if (r_.steps_seen > total_steps_ && !term_sent_ && !kill_sent_ && !exited_at_ &&
        seconds(now - *steps_done_at_) >= std::max(o_.past_steps_grace_s(), seconds(*steps_done_at_ - start_))) {
      r_.stopped_after_steps = r_.ran_on_past_steps = true;
      stop(now);
    }
    if (term_sent_ && !kill_sent_ && now - *term_sent_ >= kTermGrace) kill_tree();
    if (now < next_sample_) return;
    const int64_t rss = tree_.sample(now);
    publish_members(tree_.members());
    r_.peak_rss_bytes = std::max(r_.peak_rss_bytes, rss);
    if (o_.memory_limit_bytes() > 0 && rss > o_.memory_limit_bytes() && !kill_sent_) {
      r_.killed_over_memory_limit = true;
      kill_tree();
    }
    if (nvml_.available() && samples_taken_++ % kNvmlEvery == 0) {
      const std::optional<int64_t> used = nvml_.process_memory_bytes(tree_.members());
      if (used && *used > 0) r_.nvml_peak_bytes = std::max(*used, r_.nvml_peak_bytes.value_or(0));
    }
    next_sample_ = now + kSampleInterval;
  }

  // Waits for output until the next sample is due, and splits what arrived into lines.
  void read_ready(Clock::time_point now) {
    pollfd fds[2];
    nfds_t count = 0;
    for (const LineStream& s : streams_)
      if (s.fd >= 0) fds[count++] = pollfd{s.fd, POLLIN, 0};
    const int wait_ms = exited_at_ ? 50
                                   : static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                          std::max(next_sample_ - now, Clock::duration::zero()))
                                                          .count());
    if (count > 0)
      poll(fds, count, wait_ms);
    else if (!exited_at_)
      usleep(static_cast<useconds_t>(wait_ms) * 1000);
    now = Clock::now();
    for (LineStream& s : streams_) {
      if (s.fd < 0) continue;
      const auto it = std::find_if(fds, fds + count, [&](const pollfd& p) { return p.fd == s.fd; });
      if (it == fds + count || !(it->revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[64 * 1024];
      const ssize_t n = read(s.fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (!s.partial.empty()) on_line(std::move(s.partial), now);
        s.partial.clear();
        close_fd(s.fd);
        continue;
      }
      s.partial.append(buf, static_cast<size_t>(n));
      size_t begin = 0;
      for (size_t nl; (nl = s.partial.find('\n', begin)) != std::string::npos; begin = nl + 1)
        on_line(s.partial.substr(begin, nl - begin), now);
      s.partial.erase(0, begin);
      if (s.partial.size() > kMaxLineBytes) {  // a line without end: take it as it is
        on_line(std::move(s.partial), now);
        s.partial.clear();
      }
    }
  }

  void on_line(std::string line, Clock::time_point at) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (parser_.line(line, at) && r_.steps_seen >= total_steps_ && !r_.timed_out) {
      if (o_.stop_after_steps()) {
        r_.stopped_after_steps = true;
        stop(at);
      } else if (!steps_done_at_) {
        steps_done_at_ = at;
      }
    }
    if (line.size() > kTailLineBytes) line = line.substr(0, kTailLineBytes) + " ...";
    tail_.push_back(std::move(line));
    if (tail_.size() > kTailLines) tail_.pop_front();
  }

  const CommandOptions& o_;
  CommandResult& r_;
  const pid_t pid_;
  const Clock::time_point start_;
  const int total_steps_;
  detail::ProtocolParser parser_;
  std::deque<std::string> tail_;
  LineStream streams_[2];
  detail::ProcessTree tree_;
  const detail::Nvml& nvml_;
  int samples_taken_ = 0;
  Clock::time_point next_sample_;
  std::optional<Clock::time_point> term_sent_, exited_at_;
  std::optional<Clock::time_point> steps_done_at_;  ///< when its last step line asked for was read
  bool kill_sent_ = false, stragglers_killed_ = false;
};

}  // namespace

CommandResult run_command(const CommandOptions& options) {
  BATCHWISE_CHECK(options.batch() >= 1, ConfigError, "command: batch size {} is below 1", options.batch());
  BATCHWISE_CHECK(options.steps() >= 1, ConfigError, "command: steps {} is below 1", options.steps());
  BATCHWISE_CHECK(options.warmup() >= 0, ConfigError, "command: warm-up {} is below 0", options.warmup());
  BATCHWISE_CHECK(options.timeout_s() >= 0, ConfigError, "command: timeout {} s is negative", options.timeout_s());
  BATCHWISE_CHECK(options.past_steps_grace_s() >= 0 && std::isfinite(options.past_steps_grace_s()), ConfigError,
                  "command: past_steps_grace_s {}: must be a number of seconds, 0 or more",
                  options.past_steps_grace_s());
  BATCHWISE_CHECK(options.memory_limit_bytes() >= 0, ConfigError, "command: memory limit {} is negative",
                  options.memory_limit_bytes());
  const int total_steps = options.warmup() + options.steps();

  CommandResult r;
  r.argv = substitute(options.argv(), options.batch(), total_steps);
  r.batch = options.batch();
  r.warmup = options.warmup();
  r.steps = options.steps();
  r.timeout_s = options.timeout_s();
  r.memory_limit_bytes = options.memory_limit_bytes();

  const std::optional<int64_t> oom_kills_before = detail::read_oom_kill_count();
  const Clock::time_point start = Clock::now();
  const Child child = start_child(r, child_environment(options, total_steps));
  // Unwinding from here on (an exception while reading) must not leave the child running.
  struct ChildGuard {
    pid_t pid;
    bool armed = true;
    ~ChildGuard() {
      if (!armed) return;
      killpg(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      detail::clear_active_group();
    }
  } child_guard{child.pid};
  Watch watch(options, r, child, start, total_steps);
  watch.run();
  watch.finish();
  child_guard.armed = false;

  const std::optional<int64_t> oom_kills_after = detail::read_oom_kill_count();
  r.oom_killer_known = oom_kills_before && oom_kills_after;
  if (r.oom_killer_known) r.oom_kills = std::max<int64_t>(0, *oom_kills_after - *oom_kills_before);
  r.oom_killer = r.oom_kills > 0 && r.signal == SIGKILL && !watch.kill_sent();
  return r;
}

}  // namespace batchwise

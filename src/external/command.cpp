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
#include "nvml.h"
#include "process_group.h"
#include "protocol.h"

extern char** environ;  // copied into the child's environment

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

std::string signal_text(int sig) {
  static const std::map<int, const char*> kNames = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},   {SIGTRAP, "SIGTRAP"},
      {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},
      {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"}, {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
      {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  const auto it = kNames.find(sig);
  return it == kNames.end() ? fmt::format("signal {}", sig) : fmt::format("signal {} ({})", sig, it->second);
}

// Splits one stream into lines.
struct LineStream {
  int fd = -1;
  std::string partial;
};

// ---- starting the child ------------------------------------------------------------------------

// Moves fd above stderr, so that the child's dup2 onto 0, 1 and 2 cannot clobber another source.
int above_stdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return moved;
}

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

std::vector<std::string> child_environment(const CommandOptions& options, int total_steps) {
  std::vector<std::pair<std::string, std::string>> overrides = {{"PYTHONUNBUFFERED", "1"},
                                                                {"BATCHWISE_BATCH", std::to_string(options.batch())},
                                                                {"BATCHWISE_STEPS", std::to_string(total_steps)}};
  for (const auto& [key, value] : options.env()) {
    BATCHWISE_CHECK(!key.empty() && key.find('=') == std::string::npos, ConfigError,
                    "command environment: '{}' is not a variable name; use a name without '='", key);
    overrides.emplace_back(key, value);
  }
  std::map<std::string, std::string> last;  // a later entry wins
  for (const auto& [key, value] : overrides) last[key] = value;
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    if (!last.count(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [key, value] : last) env.push_back(key + "=" + value);
  return env;
}

std::string exec_failure(const std::string& program, int error) {
  const bool on_path = program.find('/') == std::string::npos;
  switch (error) {
    case ENOENT:
      if (!on_path && access(program.c_str(), F_OK) == 0)  // the file is there: its #! interpreter is not
        return fmt::format(
            "command: '{}' exists, but the interpreter its #! line names does not; fix the #! line "
            "or run it through its interpreter, e.g. python3 {}",
            program, program);
      return fmt::format("command: '{}' not found{}; give the program's full path or install it", program,
                         on_path ? " on PATH" : "");
    case EACCES:
      return fmt::format(
          "command: '{}' is not executable (permission denied); chmod +x it or run it through "
          "its interpreter, e.g. python3 {}",
          program, program);
    case ENOEXEC:
      return fmt::format(
          "command: '{}' is not a program the system can run; add a #! line or run it through "
          "its interpreter, e.g. python3 {}",
          program, program);
    default:
      return fmt::format("command: cannot run '{}': {}", program, std::strerror(error));
  }
}

// The file execve should run for `program`: as given when it holds a '/', else the first
// executable match on the child's PATH (searched here, before fork, as execvp would). Throws Error.
std::string resolve_program(const std::string& program, const std::vector<std::string>& env) {
  if (program.find('/') != std::string::npos) return program;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& entry : env)
    if (entry.compare(0, 5, "PATH=") == 0) path = entry.substr(5);
  int error = ENOENT;
  for (size_t begin = 0; begin <= path.size();) {
    const size_t end = std::min(path.find(':', begin), path.size());
    const std::string dir = end == begin ? "." : path.substr(begin, end - begin);
    const std::string candidate = dir + "/" + program;
    struct stat info {};
    if (stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode)) {
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
      error = EACCES;
    }
    begin = end + 1;
  }
  throw Error(exec_failure(program, error));
}

}  // namespace

std::vector<std::string> substitute(const std::vector<std::string>& argv, int64_t batch, int steps) {
  BATCHWISE_CHECK(!argv.empty() && !argv[0].empty(), ConfigError,
                  "command: no program given; pass the training command, e.g. python3 train.py --batch-size={{batch}}");
  std::vector<std::string> out;
  for (const std::string& arg : argv) {
    std::string s;
    for (size_t i = 0; i < arg.size(); ++i) {
      const char c = arg[i];
      if ((c == '{' || c == '}') && i + 1 < arg.size() && arg[i + 1] == c) {
        s += c;
        ++i;
        continue;
      }
      if (c != '{') {
        s += c;
        continue;
      }
      size_t end = i + 1;  // a placeholder is {identifier}; any other brace is literal
      while (end < arg.size() && (std::isalnum(static_cast<unsigned char>(arg[end])) || arg[end] == '_')) ++end;
      if (end == i + 1 || end == arg.size() || arg[end] != '}') {
        s += c;
        continue;
      }
      const std::string name = arg.substr(i + 1, end - i - 1);
      if (name == "batch")
        s += std::to_string(batch);
      else if (name == "steps")
        s += std::to_string(steps);
      else
        BATCHWISE_CHECK(false, ConfigError,
                        "command argument '{}': unknown placeholder '{{{}}}'; use {{batch}} or {{steps}} "
                        "({{{{ and }}}} are literal braces)",
                        arg, name);
      i = end;
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
// The process group of the command running now (0: none), and the members of its tree outside
// that group as last scanned, for stop_running_command (a signal handler: no /proc walk there).
std::atomic<pid_t> active_group{0};
constexpr size_t kMaxPublished = 256;
std::atomic<pid_t> active_members[kMaxPublished];

void publish_members(const std::vector<int>& members) {
  const pid_t group = active_group.load();
  size_t n = 0;
  for (const int pid : members)
    if (pid != group && n < kMaxPublished) active_members[n++].store(pid);
  for (; n < kMaxPublished && active_members[n].load() != 0; ++n) active_members[n].store(0);
}
}  // namespace

void stop_running_command() {
  const pid_t group = active_group.load();
  if (group <= 0) return;
  killpg(group, SIGKILL);
  for (auto& member : active_members) {  // NOTE: as of the last scan, at most 100 ms old
    const pid_t pid = member.load();
    if (pid > 0) kill(pid, SIGKILL);
  }
}

namespace {

// The command's process, started: its pid (the leader of a process group of its own) and the read
// ends of its stdout and stderr.
struct Child {
  pid_t pid = -1;
  int out = -1, err = -1;
};

// Forks and execs the command (execve, never a shell) with stdin from /dev/null, in a process group
// of its own that dies with batchwise. Throws Error when it cannot start, naming why.
Child start_child(const CommandResult& r, const std::vector<std::string>& env) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  const std::string program = resolve_program(r.argv[0], env);
  std::vector<char*> argv_ptrs, env_ptrs;
  for (const std::string& a : r.argv) argv_ptrs.push_back(const_cast<char*>(a.c_str()));
  argv_ptrs.push_back(nullptr);
  for (const std::string& e : env) env_ptrs.push_back(const_cast<char*>(e.c_str()));
  env_ptrs.push_back(nullptr);

  int out[2] = {-1, -1}, err[2] = {-1, -1}, status_pipe[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(status_pipe, O_CLOEXEC) != 0)
    throw Error(fmt::format("command: cannot create pipes: {}", std::strerror(errno)));
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int* fd : {&out[0], &out[1], &err[0], &err[1], &status_pipe[0], &status_pipe[1], &devnull})
    *fd = above_stdio(*fd);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    for (int* fd : {&out[0], &out[1], &err[0], &err[1], &status_pipe[0], &status_pipe[1], &devnull}) close_fd(*fd);
    throw Error(fmt::format("command: cannot start '{}': fork failed: {}", r.argv[0], std::strerror(error)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // batchwise dying must not leave a trainer behind
    if (getppid() != parent) _exit(127);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);  // ignored signals survive exec
    // execve, not execvp: execvp runs a file without a #! line through /bin/sh.
    execve(program.c_str(), argv_ptrs.data(), env_ptrs.data());
    const int error = errno;
    ssize_t written = write(status_pipe[1], &error, sizeof(error));
    (void)written;
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so killpg works before the child gets to it
  active_group.store(pid);
  for (int* fd : {&out[1], &err[1], &status_pipe[1], &devnull}) close_fd(*fd);
  int exec_error = 0;
  ssize_t got;
  do got = read(status_pipe[0], &exec_error, sizeof(exec_error));
  while (got < 0 && errno == EINTR);
  close_fd(status_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof(exec_error))) {
    waitpid(pid, nullptr, 0);
    active_group.store(0);
    close_fd(out[0]);
    close_fd(err[0]);
    throw Error(exec_failure(r.argv[0], exec_error));
  }
  return {pid, out[0], err[0]};
}

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
    active_group.store(0);
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
      r_.timed_out = true;
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
    if (parser_.line(line, at) && o_.stop_after_steps() && r_.steps_seen >= total_steps_ && !r_.timed_out) {
      r_.stopped_after_steps = true;
      stop(at);
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
  bool kill_sent_ = false, stragglers_killed_ = false;
};

}  // namespace

CommandResult run_command(const CommandOptions& options) {
  BATCHWISE_CHECK(options.batch() >= 1, ConfigError, "command: batch size {} is below 1", options.batch());
  BATCHWISE_CHECK(options.steps() >= 1, ConfigError, "command: steps {} is below 1", options.steps());
  BATCHWISE_CHECK(options.warmup() >= 0, ConfigError, "command: warm-up {} is below 0", options.warmup());
  BATCHWISE_CHECK(options.timeout_s() >= 0, ConfigError, "command: timeout {} s is negative", options.timeout_s());
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
      active_group.store(0);
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

// ---- classify ----------------------------------------------------------------------------------

CommandVerdict classify(const CommandResult& r) {
  CommandVerdict v;
  const int total = r.warmup + r.steps;
  const std::string steps = fmt::format("after {} of {} steps", r.steps_seen, total);
  const std::string ended = r.signal             ? "killed by " + signal_text(r.signal)
                            : r.exit_status >= 0 ? fmt::format("exit status {}", r.exit_status)
                                                 : "ended with an unknown status (reaped elsewhere in this process)";
  std::string last_line;  // the last line with text, for the error message
  std::istringstream lines(r.output_tail);
  for (std::string line; std::getline(lines, line);)
    if (line.find_first_not_of(" \t") != std::string::npos && line.compare(0, 10, "batchwise:") != 0) last_line = line;
  const bool clean_exit = r.exit_status == 0 && r.steps_seen >= total;

  if (r.killed_over_memory_limit) {
    v.outcome = Outcome::Oom;
    v.message = fmt::format("resident memory reached {}, over the {} budget: stopped by batchwise {}",
                            format_bytes(r.peak_rss_bytes), format_bytes(r.memory_limit_bytes), steps);
  } else if (r.oom_killer) {
    v.outcome = Outcome::Oom;
    v.message = fmt::format("killed by the kernel's OOM killer (SIGKILL) {}; resident memory peaked at {}", steps,
                            format_bytes(r.peak_rss_bytes));
  } else if (!r.oom_message.empty() && !clean_exit) {
    v.outcome = Outcome::Oom;
    const std::string how =
        r.timed_out ? fmt::format("stopped by batchwise at the {:g} s timeout", r.timeout_s) : ended;
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
        r.stopped_after_steps ? "stopped by batchwise, as asked," : ended, steps, r.non_finite_loss_text,
        r.non_finite_loss_step);
  } else if (r.stopped_after_steps || r.exit_status == 0) {
    v.outcome = Outcome::Ok;
    const std::string how = r.stopped_after_steps ? "stopped by batchwise, as asked," : ended;
    const double measured_s = std::accumulate(r.step_times_s.begin(), r.step_times_s.end(), 0.0);
    const double measured = std::accumulate(r.step_samples.begin(), r.step_samples.end(), 0.0);  // no overflow
    v.step_times_s = r.step_times_s;
    if (r.reported_samples_per_s) {
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
    } else {
      const int ran = r.steps_seen > 0 ? r.steps_seen : total;
      v.wall_timing = true;
      v.step_times_s.assign(static_cast<size_t>(ran), r.wall_s / ran);
      v.samples_per_s = r.wall_s > 0 ? static_cast<double>(r.batch) * ran / r.wall_s : 0;
      v.message = fmt::format(
          "{} {}: {:.1f} samples/s from wall time, a fallback ({:.3g} s for {} steps, start-up "
          "included; print 'batchwise: step' lines to time steps)",
          how, r.steps_seen > 0 ? steps : "without step lines", v.samples_per_s, r.wall_s, ran);
    }
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

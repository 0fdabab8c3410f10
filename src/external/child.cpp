// Starting the command's process and stopping it (external/child.h): the argv substituted, the
// environment, the program looked up on PATH, fork + execve in a process group of its own, and
// stop_running_command's signal-safe kill of that group and its published members.
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
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "batchwise/units.h"
#include "check.h"
#include "external/child.h"

extern char** environ;  // copied into the child's environment

namespace batchwise {

namespace {

// ---- starting the child ------------------------------------------------------------------------

// Moves fd above stderr, so that the child's dup2 onto 0, 1 and 2 cannot clobber another source.
int above_stdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return moved;
}

}  // namespace

namespace detail {

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

}  // namespace detail

namespace {

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

// The process group of the command running now (0: none), and the members of its tree outside
// that group as last scanned, for stop_running_command (a signal handler: no /proc walk there).
std::atomic<pid_t> active_group{0};
constexpr size_t kMaxPublished = 256;
std::atomic<pid_t> active_members[kMaxPublished];

}  // namespace

namespace detail {

void publish_members(const std::vector<int>& members) {
  const pid_t group = active_group.load();
  size_t n = 0;
  for (const int pid : members)
    if (pid != group && n < kMaxPublished) active_members[n++].store(pid);
  for (; n < kMaxPublished && active_members[n].load() != 0; ++n) active_members[n].store(0);
}

}  // namespace detail

void check_program(const std::string& program) {
  if (program.empty() || program.find('{') != std::string::npos) return;
  std::vector<std::string> env;  // the child's PATH is this process's (run_command passes it on)
  if (const char* path = std::getenv("PATH")) env.push_back(std::string("PATH=") + path);
  try {
    const std::string file = resolve_program(program, env);  // a name: looked for on PATH
    struct stat info {};
    if (stat(file.c_str(), &info) != 0) throw Error(exec_failure(program, ENOENT));  // a path: is it there?
    if (S_ISDIR(info.st_mode)) throw Error(fmt::format("command: '{}' is a folder, not a program", program));
    if (!S_ISREG(info.st_mode)) throw Error(exec_failure(program, EACCES));
    if (access(file.c_str(), X_OK) != 0) throw Error(exec_failure(program, EACCES));
    // What execve would refuse in the first trial, refused now (they had ended the run there, exit 1): a text file
    // without a #! line, and a #! line whose interpreter is not there
    std::ifstream in(file, std::ios::binary);
    if (!in.is_open()) return;  // executable, not readable: execve alone says
    std::string head(256, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    if (head.compare(0, 2, "#!") == 0) {
      const std::string line =
          head.substr(2, head.find('\n') == std::string::npos ? std::string::npos : head.find('\n') - 2);
      const size_t from = line.find_first_not_of(" \t");
      const std::string interpreter =
          from == std::string::npos ? "" : line.substr(from, line.find_first_of(" \t", from) - from);
      if (!interpreter.empty() && access(interpreter.c_str(), X_OK) != 0) {
        const bool crlf = interpreter.back() == '\r';  // the kernel reads the \r as the name's: Windows line ends
        throw Error(fmt::format(
            "command: '{}' names {} on its #! line, which is not there (or not executable){}; fix the #! line or run "
            "it through its interpreter, e.g. python3 {}",
            program, crlf ? interpreter.substr(0, interpreter.size() - 1) + "\\r" : interpreter,
            crlf ? ": the line ends in a carriage return (Windows line ends: convert them with dos2unix)" : "",
            program));
      }
    } else if (head.find('\0') == std::string::npos) {  // text without #! (a binary the kernel runs another way,
      throw Error(exec_failure(program, ENOEXEC));      // binfmt_misc's, holds a zero byte: left to it)
    }
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw ConfigError(e.what());
  }
}

namespace {

// A brace group at `at` in `arg` that reads as {batch} or {steps} written otherwise ("{ batch }", "{batch:d}",
// "{BATCH}"): refused, as an unknown placeholder is; passed through it had run every trial at the script's default.
// A quoted name ('{"batch": 32}', a JSON argument) is not one.
void near_miss_placeholder(const std::string& arg, size_t at) {
  const size_t close = arg.find('}', at + 1);
  if (close == std::string::npos || arg.find('{', at + 1) < close) return;
  std::string name = arg.substr(at + 1, close - at - 1);
  const size_t spec = name.find_first_of(":!");  // a format spec ({batch:d}); a space after it is a mapping's value
  if (spec != std::string::npos && name.find_first_of(" \t", spec) != std::string::npos) return;  // {batch: 32}
  name = name.substr(0, spec);
  const size_t first = name.find_first_not_of(" \t"), last = name.find_last_not_of(" \t");
  name = first == std::string::npos ? "" : name.substr(first, last - first + 1);
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  BATCHWISE_CHECK(name != "batch" && name != "steps", ConfigError,
                  "command argument '{}': '{}' is not a placeholder; write {{{}}} exactly (no spaces, format or "
                  "capitals), or {{{{ and }}}} for literal braces",
                  arg, arg.substr(at, close - at + 1), name);
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
        near_miss_placeholder(arg, i);
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

void stop_running_command() {
  const pid_t group = active_group.load();
  if (group <= 0) return;
  killpg(group, SIGKILL);
  for (auto& member : active_members) {  // NOTE: as of the last scan, at most 100 ms old
    const pid_t pid = member.load();
    if (pid > 0) kill(pid, SIGKILL);
  }
}

namespace detail {

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

void clear_active_group() { active_group.store(0); }

}  // namespace detail

}  // namespace batchwise

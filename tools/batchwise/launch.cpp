#include "launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace batchwise::cli {

namespace {

std::vector<pid_t> g_children;  // for the signal handler

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

int launch_ranks(int nproc, int argc, char** argv, double grace_s, int failed_code) {
  const std::string port = std::to_string(free_port());
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const std::string threads = std::to_string(std::max(1L, cores / nproc));
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      fmt::print(stderr, "batchwise: could not start rank {}: {}\n", rank, std::strerror(errno));
      for (const pid_t child : g_children) kill(child, SIGKILL);
      return failed_code;
    }
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("OMP_NUM_THREADS", threads.c_str(), 0);  // as torchrun: the cores shared, unless set
      setenv("BATCHWISE_LAUNCHED", "1", 1);
      execv("/proc/self/exe", args.data());
      fmt::print(stderr, "batchwise: rank {}: could not start {}: {}\n", rank, argv[0], std::strerror(errno));
      _exit(127);
    }
    g_children.push_back(pid);
  }
  // A signal to the launcher (Ctrl-C, a scheduler's SIGTERM) goes to every rank, then ends it.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction action {};
    action.sa_handler = [](int signo) {
      for (const pid_t child : g_children) kill(child, signo);
      signal(signo, SIG_DFL);
      raise(signo);
    };
    sigaction(sig, &action, nullptr);
  }

  std::vector<int> status(static_cast<size_t>(nproc), -1);
  int running = nproc;
  std::optional<std::chrono::steady_clock::time_point> give_up;
  while (running > 0) {
    int st = 0;
    const pid_t pid = waitpid(-1, &st, give_up ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    if (pid == 0) {  // a rank failed earlier: the others get until give_up to end on their own
      if (std::chrono::steady_clock::now() < *give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      for (int r = 0; r < nproc; ++r)
        if (status[static_cast<size_t>(r)] < 0) {
          fmt::print(stderr, "batchwise: rank {} of {} did not end {:.0f} s after another rank failed; killing it\n", r,
                     nproc, grace_s);
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
    if (WIFSIGNALED(st) || rank != 0)
      fmt::print(stderr, "batchwise: rank {} of {} (pid {}) {}\n", rank, nproc, pid, describe(st));
    if (!give_up) {
      // Usage and input errors end every rank alike and at once; otherwise the others first see
      // the failure through their collectives (a broken connection at once, a hang at the timeout).
      // A rank that saw a collective fail (failed_code) leaves the others dead or hung.
      const bool input_error = WIFEXITED(st) && ((WEXITSTATUS(st) >= 2 && WEXITSTATUS(st) <= 5) ||
                                                 WEXITSTATUS(st) == failed_code);
      give_up = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(input_error ? 2.0 : grace_s));
    }
  }
  const int zero = status[0];
  if (zero >= 0 && WIFEXITED(zero) && WEXITSTATUS(zero) != 0) return WEXITSTATUS(zero);
  for (const int st : status)
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return failed_code;
  return 0;
}

}  // namespace batchwise::cli

#pragma once
// Running the batchwise binary as a user does, for the CLI tests: exit code, stdout, stderr.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace cli {

namespace fs = std::filesystem;

struct Outcome {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline fs::path scratch_dir() { return fs::temp_directory_path() / ("batchwise-cli-" + std::to_string(::getpid())); }

inline fs::path scratch() {
  const fs::path dir = scratch_dir();
  fs::create_directories(dir);
  return dir;
}

// The scratch folder goes with the test process, unless a test failed: its files say what the
// binary wrote (ctest runs each test in a process of its own, and /tmp had kept one folder each).
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;
    if (::testing::UnitTest::GetInstance()->Passed()) fs::remove_all(scratch_dir(), ignored);
  }
};
inline ::testing::Environment* const kScratchCleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

// `env`: what goes before the binary in its shell command: more VAR=value assignments for its
// environment ("CUDA_VISIBLE_DEVICES=1"), or a wrapper that runs what follows it ("taskset -c 0 env").
inline Outcome batchwise(const std::string& args, const std::string& env = "") {
  const fs::path dir = scratch();
  // The run history goes to the scratch folder, not the user's data directory.
  const std::string cmd = env + " XDG_DATA_HOME=" + (dir / "xdg").string() + " " + std::string(BATCHWISE_TEST_BINARY) +
                          " " + args + " >" + (dir / "out").string() + " 2>" + (dir / "err").string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  Outcome r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  return r;
}

// Runs batchwise as `batchwise(args)` does, calls `act(pid)` once its stderr holds `when`, and waits
// for it to end. `code`: its exit code, or 128 + the signal that ended it (as a shell reads it); -1
// when `when` never came within `wait_s` (a loaded machine starts batchwise slowly) or it still ran
// 60 s after the act (then it is killed).
template <class Act>
Outcome acted_when(const std::string& args, const std::string& when, Act act, int wait_s = 180) {
  const fs::path dir = scratch();
  const std::string cmd = "XDG_DATA_HOME=" + (dir / "xdg").string() + " exec " + std::string(BATCHWISE_TEST_BINARY) +
                          " " + args + " >" + (dir / "out").string() + " 2>" + (dir / "err").string() + " </dev/null";
  fs::remove(dir / "err");
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  Outcome r;
  int status = 0;
  bool ended = false, sent = false;
  for (int i = 0; i < 10 * wait_s && !ended && !sent; ++i) {
    ended = waitpid(pid, &status, WNOHANG) == pid;
    if (!ended && slurp(dir / "err").find(when) != std::string::npos) sent = act(pid);
    if (!ended && !sent) ::usleep(100000);
  }
  for (int i = 0; i < 600 && sent && !ended; ++i) {
    ended = waitpid(pid, &status, WNOHANG) == pid;
    if (!ended) ::usleep(100000);
  }
  if (!ended) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  r.code = !sent || !ended ? -1 : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  return r;
}

// acted_when, sending `signo` (Ctrl-C's SIGINT, a scheduler's SIGTERM).
inline Outcome signalled_when(const std::string& args, const std::string& when, int signo, int wait_s = 180) {
  return acted_when(
      args, when, [signo](pid_t pid) { return kill(pid, signo) == 0; }, wait_s);
}

// A bad input: the exit code, one line on stderr containing `message`, and no trace.
inline void expect_clean_error(const std::string& args, int code, const std::string& message) {
  const Outcome r = batchwise(args);
  EXPECT_EQ(r.code, code) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << args << "\nstderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not one line: " << r.err;
  for (const char* trace : {"terminate called", "Exception raised from", "frame #", "what():"})
    EXPECT_EQ(r.err.find(trace), std::string::npos) << args << "\n" << r.err;
}

}  // namespace cli

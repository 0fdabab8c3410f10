#pragma once
// Running the batchwise binary as a user does, for the CLI tests: exit code, stdout, stderr.
#include <gtest/gtest.h>
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

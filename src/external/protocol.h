#pragma once
// The `--cmd` line protocol (docs/cmd.md): `batchwise: step samples=256 loss=0.5` lines read into a
// CommandResult as they arrive. Apart from the process runner (command.cpp) so that it can be
// tested and fuzzed on text alone (fuzz/targets.cpp).
#include <chrono>
#include <optional>
#include <string>

#include "batchwise/command.h"

namespace batchwise::detail {

/// Reads a child's output lines into `result`: protocol lines (`batchwise:` then tokens; `step`
/// marks a step, `samples=`, `loss=`, `samples_per_s=`, `peak_bytes=` carry values), and the first
/// line that reads as out of memory. Malformed values are ignored: the output is the user's, and a
/// typo must not stop a run.
class ProtocolParser {
 public:
  using Clock = std::chrono::steady_clock;
  ProtocolParser(CommandResult& result, Clock::time_point start) : r_(result), last_step_(start) {}

  /// Takes one line (without its line break) read at `at`; returns true when it was a step line.
  bool line(const std::string& text, Clock::time_point at);

 private:
  CommandResult& r_;
  Clock::time_point last_step_;
};

}  // namespace batchwise::detail

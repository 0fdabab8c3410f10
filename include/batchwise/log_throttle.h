#pragma once
/// The rule by which a log (a file, a pipe, a Python callback) gets the lines a long training pass
/// sends about once a second, where a terminal rewrites one live line in place: a key's first line,
/// then one every period while the key stays the same. The key names what the lines are about: a
/// validation run, a race entry, a compressed run (compressed_run_key, run_race.h).
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>

namespace batchwise {

class LogThrottle {
 public:
  /// `clock`: seconds on a monotonic clock; unset, std::chrono::steady_clock. Tests inject one, so
  /// that what a log gets does not rest on this machine's speed.
  explicit LogThrottle(double period_s = 10, std::function<double()> clock = {})
      : period_s_(period_s), clock_(std::move(clock)) {}

  /// Whether a line about `key` goes to the log now: the first line of a key that differs from the
  /// last one passed, or the first `period_s` or more after the last one passed. A line that passes
  /// starts the period again.
  bool pass(const std::string& key) {
    const double now =
        clock_ ? clock_() : std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    if (last_key_ && *last_key_ == key && now - last_s_ < period_s_) return false;
    last_key_ = key;
    last_s_ = now;
    return true;
  }

 private:
  double period_s_;
  std::function<double()> clock_;
  std::optional<std::string> last_key_;
  double last_s_ = 0;
};

}  // namespace batchwise

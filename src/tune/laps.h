// tune's phases timed as each ends, against what the plan stated for them (report.timing).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "batchwise/error.h"
#include "batchwise/tune.h"

namespace batchwise::detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// tune's phases timed as each ends (report.timing); a phase that did nothing is left out. Where
// `should_stop` says so as a phase ends (TuneOptions::should_stop), no phase follows it.
class Laps {
 public:
  explicit Laps(Clock::time_point start, std::function<bool()> should_stop = {})
      : start_(start), mark_(start), should_stop_(std::move(should_stop)) {}
  void operator()(const char* phase, bool ran = true) {
    if (ran) timing_.phases.push_back({phase, seconds_since(mark_), expected(phase)});
    mark_ = Clock::now();
    if (should_stop_ && should_stop_()) throw Error(fmt::format("tune: stopped after its {} phase, as asked", phase));
  }
  // What a phase is expected to take, as stated to the user; and the whole run's, once.
  void expect(const std::string& phase, double s) { expected_[phase] = s; }
  void expect_total(double expected_s, double at_most_s) {
    planned_at_ = timing_.phases.size();
    timing_.expected_s = expected_s;
    timing_.at_most_s = at_most_s;
  }
  double expected(const std::string& phase) const {
    const auto at = expected_.find(phase);
    return at == expected_.end() ? 0 : at->second;
  }
  double elapsed_s() const { return seconds_since(start_); }
  const TuneTiming& timing() const { return timing_; }
  // The phases timed since the plan was stated (expect_total); those without a figure of their own
  // (the profile) were not in it.
  std::vector<PhaseTime> since_plan() const {
    return {timing_.phases.begin() + static_cast<std::ptrdiff_t>(std::min(planned_at_, timing_.phases.size())),
            timing_.phases.end()};
  }
  void restated(double expected_s) { timing_.restated_s = expected_s; }
  // True the first time only: tune states its plan again at most once (restate_the_plan).
  bool first_restatement() { return !std::exchange(restated_, true); }
  TuneTiming done() {
    timing_.total_s = seconds_since(start_);
    return timing_;
  }

 private:
  Clock::time_point start_, mark_;
  std::function<bool()> should_stop_;
  TuneTiming timing_;
  std::map<std::string, double> expected_;
  bool restated_ = false;
  size_t planned_at_ = 0;
};

}  // namespace batchwise::detail

#pragma once
// What /proc and the cgroup files say about a child's process group: its members, their resident
// memory, and the kernel's OOM kill counter. Linux only; torch-free.
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace batchwise::detail {

/// Resident memory of one process group. A group of one process is its RSS, read on every sample;
/// a group of several (forked data-loader workers) is the sum of their proportional set sizes
/// (PSS: a page shared by k processes counts 1/k in each), read when /proc is rescanned for
/// members, every `rescan_interval`.
class GroupSampler {
 public:
  using Clock = std::chrono::steady_clock;

  explicit GroupSampler(int pgid, Clock::duration rescan_interval = std::chrono::milliseconds(100));

  /// Resident bytes of the group now.
  int64_t sample(Clock::time_point now);
  /// Whether any live member other than the group leader remains (a fresh scan; zombies, whose
  /// memory is already freed, do not count).
  bool others_alive();
  /// The live members found by the last scan.
  const std::vector<int>& members() const { return members_; }
  /// The group leader's own high-water resident memory (VmHWM) as last read by sample(): exact
  /// for the leader between samples, where the group sum can miss a short spike.
  /// NOTE: wait4's ru_maxrss cannot serve: it keeps the high-water mark of the memory the child
  /// had before exec, which is a copy of batchwise's own.
  int64_t leader_peak_bytes() const { return leader_peak_bytes_; }

 private:
  void read_leader_peak();
  int64_t pss_bytes() const;  // of members_; -1 when unreadable
  int64_t rescan();  // finds the live members; returns their resident pages

  int pgid_;
  Clock::duration rescan_interval_;
  int64_t page_bytes_;
  std::vector<int> members_;
  Clock::time_point last_scan_;
  int64_t leader_peak_bytes_ = 0;
  int64_t group_pss_bytes_ = -1;
};

/// The kernel's OOM kill counter of this process's cgroup (children inherit it): cgroup v2
/// memory.events or v1 memory.oom_control, both "oom_kill N". nullopt when neither is readable.
std::optional<int64_t> read_oom_kill_count();

}  // namespace batchwise::detail

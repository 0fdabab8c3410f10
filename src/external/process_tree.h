#pragma once
// What /proc and the cgroup files say about a child's process tree: its members, their resident
// memory, signals to all of them, and the kernel's OOM kill counter. Linux only; torch-free.
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace batchwise::detail {

/// The processes a child started, however they left its process group: the child, every process in
/// its group, and every descendant found by parent pid, those that called setsid (torchrun's
/// workers) included. A descendant is remembered once seen (by pid and start time), so it stays a
/// member after its parent exits and it is reparented. Resident memory: a tree of one process is its
/// RSS, read on every sample; a tree of several (forked data-loader workers, torchrun's ranks) is the
/// sum of their proportional set sizes (PSS: a page shared by k processes counts 1/k in each), read
/// when /proc is rescanned for members, every `rescan_interval`.
/// NOTE: a process that is started and orphaned between two scans (by a parent that exits within
/// `rescan_interval`) is not found; a cgroup of the command's own would catch it.
class ProcessTree {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ProcessTree(int root, Clock::duration rescan_interval = std::chrono::milliseconds(100));

  /// Resident bytes of the tree now.
  int64_t sample(Clock::time_point now);
  /// Whether any live member other than the root remains (a fresh scan; zombies, whose memory is
  /// already freed, do not count).
  bool others_alive();
  /// Sends `sig` to the root's process group and, after a fresh scan, to every live member and to
  /// the process groups members lead (so a member's child started since the scan gets it too).
  void signal_all(int sig);
  /// The live members found by the last scan.
  const std::vector<int>& members() const { return member_pids_; }
  /// The root's own high-water resident memory (VmHWM) as last read by sample(): exact for the root
  /// between samples, where the tree's sum can miss a short spike.
  /// NOTE: wait4's ru_maxrss cannot serve: it keeps the high-water mark of the memory the child
  /// had before exec, which is a copy of batchwise's own.
  int64_t leader_peak_bytes() const { return leader_peak_bytes_; }

 private:
  struct Member {
    int pid = 0, pgrp = 0;
    uint64_t start_ticks = 0;  // since boot: with the pid, names the process (pids are reused)
  };
  void read_leader_peak();
  int64_t pss_bytes() const;  // of the members; -1 when unreadable
  int64_t rescan();           // finds the live members; returns their resident pages

  int root_;
  Clock::duration rescan_interval_;
  int64_t page_bytes_;
  std::vector<Member> members_;
  std::vector<int> member_pids_;
  std::set<std::pair<int, uint64_t>> seen_;  // every member ever found
  Clock::time_point last_scan_;
  int64_t leader_peak_bytes_ = 0;
  int64_t tree_pss_bytes_ = -1;
};

/// The kernel's OOM kill counter of this process's cgroup (children inherit it): cgroup v2
/// memory.events or v1 memory.oom_control, both "oom_kill N". nullopt when neither is readable.
std::optional<int64_t> read_oom_kill_count();

}  // namespace batchwise::detail

#include "external/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <unordered_map>

namespace batchwise::detail {

namespace {

struct ProcStat {
  char state = '?';  // 'Z': a zombie, whose memory is already freed
  int ppid = 0, pgrp = 0;
  uint64_t start_ticks = 0;
  int64_t rss_pages = 0;
};

// The fields of /proc/<pid>/stat that batchwise reads, or nullopt (the process is gone). Plain
// open/read: this runs for every process on the machine every 100 ms.
std::optional<ProcStat> read_stat(int pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  if (!p) return std::nullopt;
  // Fields after the name: state(3) ppid(4) pgrp(5) ... starttime(22) vsize(23) rss(24).
  ProcStat stat;
  int field = 3;
  for (++p; *p && field <= 24; ++field) {
    while (*p == ' ') ++p;
    if (field == 3) stat.state = *p;
    if (field == 4) stat.ppid = static_cast<int>(std::strtol(p, nullptr, 10));
    if (field == 5) stat.pgrp = static_cast<int>(std::strtol(p, nullptr, 10));
    if (field == 22) stat.start_ticks = std::strtoull(p, nullptr, 10);
    if (field == 24) stat.rss_pages = std::strtoll(p, nullptr, 10);
    while (*p && *p != ' ') ++p;
  }
  if (field <= 24) return std::nullopt;
  return stat;
}

bool dead(const ProcStat& stat) { return stat.state == 'Z' || stat.state == 'X'; }

}  // namespace

ProcessTree::ProcessTree(int root, Clock::duration rescan_interval)
    : root_(root), rescan_interval_(rescan_interval), page_bytes_(sysconf(_SC_PAGESIZE)) {}

void ProcessTree::read_leader_peak() {
  const std::string path = "/proc/" + std::to_string(root_) + "/status";
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return;
  char line[256];
  while (std::fgets(line, sizeof(line), f)) {
    long long kib = 0;
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) {
      leader_peak_bytes_ = std::max<int64_t>(leader_peak_bytes_, kib * 1024);
      break;
    }
  }
  std::fclose(f);
}

int64_t ProcessTree::sample(Clock::time_point now) {
  read_leader_peak();
  if (members_.empty() || now - last_scan_ >= rescan_interval_) {
    last_scan_ = now;
    const int64_t rss = rescan() * page_bytes_;
    // Forked workers share the leader's pages copy-on-write, and RSS counts a shared page once per
    // process: 8 DataLoader workers would read as 9 copies. With more than one member the tree's
    // figure is the sum of proportional set sizes (each shared page divided among its sharers),
    // read at this slower rescan pace, since smaps_rollup walks every mapping.
    tree_pss_bytes_ = members_.size() > 1 ? pss_bytes() : -1;
    return tree_pss_bytes_ >= 0 ? tree_pss_bytes_ : rss;
  }
  if (tree_pss_bytes_ >= 0 && members_.size() > 1) return tree_pss_bytes_;
  int64_t pages = 0;
  for (const Member& m : members_) {
    const std::optional<ProcStat> stat = read_stat(m.pid);
    if (stat && stat->start_ticks == m.start_ticks) pages += stat->rss_pages;  // the pid may be reused
  }
  return pages * page_bytes_;
}

int64_t ProcessTree::pss_bytes() const {
  // A member that exited since the rescan has no smaps_rollup (or, as a zombie, an empty one): it
  // holds no memory any more and is skipped. Only when no member can be read (no smaps_rollup
  // before Linux 4.14) is the answer "unknown", and the caller uses RSS.
  int64_t total = 0;
  bool any = false;
  for (const Member& m : members_) {
    const std::string path = "/proc/" + std::to_string(m.pid) + "/smaps_rollup";
    std::FILE* f = std::fopen(path.c_str(), "re");
    if (!f) continue;
    char line[256];
    while (std::fgets(line, sizeof(line), f)) {
      long long kib = 0;
      if (std::sscanf(line, "Pss: %lld kB", &kib) == 1) {
        total += kib * 1024;
        any = true;
        break;
      }
    }
    std::fclose(f);
  }
  return any ? total : -1;
}

bool ProcessTree::others_alive() {
  rescan();
  return std::any_of(members_.begin(), members_.end(), [&](const Member& m) { return m.pid != root_; });
}

void ProcessTree::signal_all(int sig) {
  killpg(root_, sig);
  rescan();
  for (const Member& m : members_) {
    if (m.pid == root_) continue;
    kill(m.pid, sig);
    if (m.pgrp == m.pid) killpg(m.pid, sig);  // a group it leads: its children started since the scan
  }
}

int64_t ProcessTree::rescan() {
  // Every process on the machine, then the tree: the root, its process group and every member
  // seen before are the seeds; a process whose parent is in the tree is in it.
  struct Entry {
    int pid;
    ProcStat stat;
  };
  std::vector<Entry> all;
  if (DIR* dir = opendir("/proc")) {
    while (const dirent* entry = readdir(dir)) {
      if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
      const int pid = std::atoi(entry->d_name);
      if (const std::optional<ProcStat> stat = read_stat(pid)) all.push_back({pid, *stat});
    }
    closedir(dir);
  }
  std::vector<bool> in_tree(all.size(), false);
  std::vector<size_t> todo;
  std::unordered_map<int, std::vector<size_t>> children;  // parent pid -> indices into all
  for (size_t i = 0; i < all.size(); ++i) {
    const Entry& e = all[i];
    children[e.stat.ppid].push_back(i);
    if (e.pid == root_ || e.stat.pgrp == root_ || seen_.count({e.pid, e.stat.start_ticks})) {
      in_tree[i] = true;
      todo.push_back(i);
    }
  }
  while (!todo.empty()) {
    const size_t i = todo.back();
    todo.pop_back();
    const auto kids = children.find(all[i].pid);
    if (kids == children.end()) continue;
    for (const size_t k : kids->second)
      if (!in_tree[k]) {
        in_tree[k] = true;
        todo.push_back(k);
      }
  }
  members_.clear();
  member_pids_.clear();
  int64_t pages = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!in_tree[i] || dead(all[i].stat)) continue;
    const Entry& e = all[i];
    members_.push_back({e.pid, e.stat.pgrp, e.stat.start_ticks});
    member_pids_.push_back(e.pid);
    seen_.insert({e.pid, e.stat.start_ticks});
    pages += e.stat.rss_pages;
  }
  return pages;
}

std::optional<int64_t> read_oom_kill_count() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::vector<std::string> files;
  for (std::string line; std::getline(cgroups, line);) {  // "id:controllers:path"
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      files.push_back("/sys/fs/cgroup" + path + "/memory.events");
      files.push_back("/sys/fs/cgroup/unified" + path + "/memory.events");
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      files.push_back("/sys/fs/cgroup/memory" + path + "/memory.oom_control");
    }
  }
  for (const std::string& file : files) {
    std::ifstream in(file);
    std::string key;
    int64_t value = 0;
    while (in >> key >> value)
      if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

}  // namespace batchwise::detail

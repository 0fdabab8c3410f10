#pragma once
// What else bounds the memory a CPU run may take, beside the machine's RAM: the cgroup its process is
// in (a container's, a Kubernetes pod's or a systemd unit's memory limit, which the kernel enforces by
// killing a process of the group). A default budget past it would not stop a trial at the budget: the
// run would be killed. (An address-space limit, ulimit -v, is not read: a process's VmSize moves by
// tens of MiB with its threads' arenas and stacks, so the room it leaves is no budget.)
#include <cstdint>
#include <optional>
#include <string>

namespace batchwise::detail {

/// The memory the cgroup of this process (read from `proc_cgroup`, as /proc/self/cgroup says it) still
/// lets its group take: its limit less its usage, page cache it can reclaim (its file pages) not
/// counted, the least over the group and its ancestors, from cgroup v2's memory.max / memory.current and
/// v1's memory.limit_in_bytes / memory.usage_in_bytes under `root`. nullopt where none sets a limit.
std::optional<int64_t> cgroup_headroom_bytes(const std::string& proc_cgroup = "/proc/self/cgroup",
                                             const std::string& root = "/sys/fs/cgroup");

}  // namespace batchwise::detail

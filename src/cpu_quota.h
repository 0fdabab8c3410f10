#pragma once
// The CPUs this process's threads can keep busy: the ones its affinity mask lets it run on (taskset, a
// container's cpuset), and the CPU time its cgroup lets its group use (a container's --cpus, a Kubernetes
// pod's CPU limit: cgroup v2's cpu.max, v1's CFS quota), which no affinity mask shows. Threads past the
// quota do not run faster: the kernel pauses the whole group for the rest of each period once it has used
// its share, so a step that spans a pause takes tens of milliseconds longer, at random.
#include <optional>
#include <string>

namespace batchwise::detail {

/// The logical CPUs in this process's affinity mask (the online CPUs where Linux cannot say).
int usable_cpus();

/// The cores' worth of CPU time the cgroup of this process (read from `proc_cgroup`, as /proc/self/cgroup
/// says it) lets its group use: quota over period, the least over the group and its ancestors, from cgroup
/// v2's cpu.max and v1's cpu.cfs_quota_us / cpu.cfs_period_us under `root`. nullopt where none sets one.
std::optional<double> cgroup_cpu_quota(const std::string& proc_cgroup = "/proc/self/cgroup",
                                       const std::string& root = "/sys/fs/cgroup");

/// "1 core", "2.5 cores": a quota as text.
std::string quota_text(double quota);

/// The intra-op threads a quota keeps busy: its whole cores, at least one.
int threads_for_quota(double quota);

/// The context's warnings on `threads` intra-op threads against `cores` usable CPUs and a CPU `quota`
/// (0: none): more threads than either distorts every timing.
std::optional<std::string> threads_warning(int threads, int cores, double quota);

}  // namespace batchwise::detail

// The control groups a limit of this process's can be set in: its own group and each ancestor up to the
// root, under cgroup v2's unified hierarchy or v1's hierarchy of one controller. The memory headroom
// (memory.cpp) and the CPU quota (device.cpp) each read the tightest limit over them.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace batchwise::detail {

/// Calls `visit(dir, v2)` for every group that can limit `controller` ("memory", "cpu") for the process
/// whose /proc/<pid>/cgroup is `proc_cgroup`: the group, then its ancestors, under `root` (v2: root itself;
/// v1: the controller's mount, root/<controller>, else the mount its line names, root/cpu,cpuacct). A path
/// without a '/' (a malformed line) is visited once, not walked for ever.
template <typename Visit>
void for_each_cgroup(const std::string& proc_cgroup, const std::string& root, const std::string& controller,
                     Visit&& visit) {
  std::ifstream in(proc_cgroup);
  for (std::string line; std::getline(in, line);) {  // "id:controllers:path"
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    const bool v2 = id == "0" && controllers.empty();
    if (!v2 && ("," + controllers + ",").find("," + controller + ",") == std::string::npos) continue;
    std::error_code none;
    const std::string base = v2                                                       ? root
                             : std::filesystem::exists(root + "/" + controller, none) ? root + "/" + controller
                                                                                      : root + "/" + controllers;
    for (std::string path = line.substr(b + 1);; path = path.substr(0, path.rfind('/'))) {
      visit(base + path, v2);
      if (path.empty() || path == "/" || path.rfind('/') == std::string::npos) break;
    }
  }
}

}  // namespace batchwise::detail

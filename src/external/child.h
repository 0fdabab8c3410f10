#pragma once
// Starting the command's process and stopping it: its argv and environment, fork and execve in a
// process group of its own, and the group published for stop_running_command (a signal handler).
// Private to src/external/.
#include <sys/types.h>

#include <string>
#include <vector>

#include "batchwise/command.h"

namespace batchwise::detail {

// The command's process, started: its pid (the leader of a process group of its own) and the read
// ends of its stdout and stderr.
struct Child {
  pid_t pid = -1;
  int out = -1, err = -1;
};

/// The child's environment: batchwise's own, with the protocol's variables (the batch, the steps) set.
std::vector<std::string> child_environment(const CommandOptions& options, int total_steps);

/// Forks and execs the command (execve, never a shell) with stdin from /dev/null, in a process group
/// of its own that dies with batchwise, and publishes that group for stop_running_command. Throws
/// Error when it cannot start, naming why.
Child start_child(const CommandResult& r, const std::vector<std::string>& env);

/// Closes fd when open, and marks it closed (-1).
void close_fd(int& fd);

/// The members of the running command's tree outside its process group, as last scanned, for
/// stop_running_command; an empty list clears them.
void publish_members(const std::vector<int>& members);

/// The command has ended: stop_running_command has nothing left to stop.
void clear_active_group();

}  // namespace batchwise::detail

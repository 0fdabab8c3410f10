#pragma once
/// Writing a file a person names (a report, a trace): where its symbolic links lead, whether it names a
/// descriptor of this process or a device, and its new contents put in place whole, so that a reader never
/// sees half a file and two runs writing one path leave one run's file.
#include <optional>
#include <string>

namespace batchwise {

/// The descriptor `path` names in this process: /dev/stdout 1, /dev/stderr 2, /dev/fd/N and
/// /proc/self/fd/N N; none for any other path.
std::optional<int> own_descriptor(const std::string& path);

/// What `path` names once its symbolic links are followed (a dangling link's target too: it is what a
/// write makes, the link kept). Not into a descriptor's name or /proc, whose links name descriptors
/// ("pipe:[N]"), not files.
std::string followed(const std::string& path);

/// A file's new contents, made beside it under a name of this object's own and renamed onto it by
/// commit(): the file at `target` is replaced whole or not at all. Destroyed uncommitted, the temporary
/// file goes. `what` names the input in errors ("--json report.json").
class FileReplacement {
 public:
  /// Throws ConfigError naming `what` where no file can be made beside `target`.
  FileReplacement(const std::string& target, std::string what);
  ~FileReplacement();
  FileReplacement(const FileReplacement&) = delete;
  FileReplacement& operator=(const FileReplacement&) = delete;

  /// The temporary file's path, for a writer that opens a path itself (LibTorch's profiler).
  const std::string& temporary() const { return temporary_; }
  /// Writes `text` to the temporary file. Throws ConfigError naming `what` on a failure (a full disk).
  void write(const std::string& text);
  /// Renames the temporary file onto the target, with the replaced file's mode, or a new file's (0666
  /// less the umask). Throws ConfigError naming `what` where that fails; the temporary file goes then.
  void commit();

 private:
  void close();
  std::string target_, what_, temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

/// `text` written to `target` whole (a FileReplacement). Throws ConfigError naming `what`.
void write_whole(const std::string& target, const std::string& text, const std::string& what);

/// Writes all of `text` to the descriptor `fd` (an interrupted write goes on); false on an error (a full
/// device, a pipe whose reader is gone), with errno saying which.
bool write_all(int fd, const std::string& text);

/// Whether `path` names something there that is not a file: a descriptor of this process, a FIFO, a device
/// (a socket). It is written into, never replaced by a file of its name.
bool special_file(const std::string& path);

/// `text` written where `path` leads once its links are followed: into a descriptor of this process, a FIFO or
/// a device (a FIFO no process reads is refused, not waited on), or to a file replaced whole (write_whole).
/// Throws ConfigError naming `what` ("--json report.json").
void write_output(const std::string& path, const std::string& text, const std::string& what);

}  // namespace batchwise

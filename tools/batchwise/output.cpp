// Where a CLI report goes: a file written whole (a temporary file of its own, renamed into place), a
// descriptor, FIFO or device written into, a symbolic link's target; and the checks before a run that
// it can be written there.
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "batchwise/error.h"
#include "batchwise/files.h"
#include "cli.h"

namespace batchwise::cli {

namespace {

// Something there that is not a file (a device, a FIFO, a descriptor of this process): written into,
// never replaced by a file of the same name.
bool special(const std::string& path) {
  if (own_descriptor(path)) return true;
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  return !error && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status) &&
         !std::filesystem::is_directory(status);
}

// Writes all of `text` to `fd`; false on an error (a full device, a pipe whose reader is gone).
bool write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Into a device, a FIFO or a descriptor: a FIFO without a reader is no wait (ENXIO), the report rescued.
void write_special(const std::string& given, const std::string& path, const std::string& text, const char* flag) {
  if (const auto fd = own_descriptor(path)) {
    if (!write_all(*fd, text))
      throw ConfigError(fmt::format("{} {}: writing failed ({})", flag, given, std::strerror(errno)));
    return;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw ConfigError(fmt::format("{} {}: cannot write there ({})", flag, given,
                                  errno == ENXIO ? "a FIFO no process reads" : std::strerror(errno)));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // then as a reader takes it
  const bool written = write_all(fd, text);
  const int error = errno;
  ::close(fd);
  if (!written) throw ConfigError(fmt::format("{} {}: writing failed ({})", flag, given, std::strerror(error)));
}

}  // namespace

bool names_stdout(const std::string& path) { return own_descriptor(followed(path)) == 1; }  // a link to it too

void write_file(const std::string& given, const std::string& text, const char* flag) {
  const std::string path = followed(given);
  if (special(path)) return write_special(given, path, text, flag);
  // A temporary file of this write's own beside the link's target, renamed into place whole: two runs writing one
  // report each leave the last one's (a shared "PATH.tmp" had left one's text under the other's tail)
  write_whole(path, text, fmt::format("{} {}", flag, given));
}

void check_writable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw ConfigError(fmt::format("{} {}: is a folder; give a file's path (e.g. {}/{})", flag, path,
                                  path.substr(0, path.find_last_not_of('/') + 1),
                                  std::string(flag) == "--html"    ? "report.html"
                                  : std::string(flag) == "--trace" ? "trace.json"
                                                                   : "report.json"));
  const std::string target = followed(path);     // a link's target is what is written, the link kept
  if (const auto fd = own_descriptor(target)) {  // this process's own: open for writing
    const int mode = ::fcntl(*fd, F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) == O_RDONLY)
      throw ConfigError(fmt::format("{} {}: descriptor {} is not open for writing", flag, path, *fd));
    return;
  }
  if (special(target)) {  // opening a FIFO would wait for its reader: asked, not opened
    if (::access(target.c_str(), W_OK) != 0)
      throw ConfigError(fmt::format("{} {}: cannot write there ({})", flag, path, std::strerror(errno)));
    return;
  }
  const bool existed = std::filesystem::exists(target);
  if (!std::ofstream(target, std::ios::app))
    throw ConfigError(fmt::format("{} {}: cannot write there; check the folder exists and is writable", flag, path));
  if (!existed) std::filesystem::remove(target);
  // and a file of its own beside it, as the write will make one (a writable file in a folder that is not had
  // passed, and its report gone to the temp folder at the run's end)
  (void)FileReplacement(target, fmt::format("{} {}", flag, path));
}

}  // namespace batchwise::cli

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

bool names_stdout(const std::string& path) { return own_descriptor(followed(path)) == 1; }  // a link to it too

void write_file(const std::string& given, const std::string& text, const char* flag) {
  write_output(given, text, fmt::format("{} {}", flag, given));
}

namespace {

std::string g_stdout_failure;  // the first failure to write stdout, its reason
bool g_stdout_closed = false;  // the caller closed it (>&-): a failure once something is shown there

}  // namespace

void tell_text(const std::string& text) noexcept {
  (void)std::fwrite(text.data(), 1, text.size(), stderr);  // a failure lost: see cli.h
  std::clearerr(stderr);
}

void show(const std::string& text, bool to_stderr) {
  if (to_stderr) return tell_text(text);
  if (g_stdout_closed && !text.empty() && g_stdout_failure.empty()) g_stdout_failure = "closed when batchwise started";
  // Written and flushed at once: a buffer's failure comes out at its flush, and glibc forgets it there
  const bool written = std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0;
  if (!written && g_stdout_failure.empty()) g_stdout_failure = std::strerror(errno);
  std::clearerr(stdout);
}

std::string stdout_failure() {
  errno = 0;
  if (std::fflush(stdout) != 0 && g_stdout_failure.empty())
    g_stdout_failure = errno != 0 ? std::strerror(errno) : "a write failed";
  return g_stdout_failure;
}

void fill_closed_standard_streams() {
  for (const int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    const int null = ::open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);  // the lowest free: fd
    if (null >= 0 && null != fd) {
      ::dup2(null, fd);
      ::close(null);
    }
    if (fd == STDOUT_FILENO) g_stdout_closed = true;
  }
}

void check_writable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw ConfigError(fmt::format("{} {}: is a folder; give a file's path (e.g. {}/{})", flag, path,
                                  path.substr(0, path.find_last_not_of('/') + 1),
                                  std::string(flag) == "--html" || std::string(flag) == "-o" ? "report.html"
                                  : std::string(flag) == "--trace"                           ? "trace.json"
                                                                                             : "report.json"));
  const std::string target = followed(path);     // a link's target is what is written, the link kept
  if (const auto fd = own_descriptor(target)) {  // this process's own: open for writing
    const int mode = ::fcntl(*fd, F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) == O_RDONLY)
      throw ConfigError(fmt::format("{} {}: descriptor {} is not open for writing", flag, path, *fd));
    return;
  }
  if (special_file(target)) {  // opening a FIFO would wait for its reader: asked, not opened
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

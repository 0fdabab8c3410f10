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

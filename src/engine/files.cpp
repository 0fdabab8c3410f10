#include "batchwise/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "check.h"

namespace batchwise {

namespace fs = std::filesystem;

std::optional<int> own_descriptor(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const std::string prefix : {"/dev/fd/", "/proc/self/fd/"})
    if (path.rfind(prefix, 0) == 0 && path.size() > prefix.size() && path.size() - prefix.size() <= 9 &&
        path.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
      return std::stoi(path.substr(prefix.size()));
  return std::nullopt;
}

std::string followed(const std::string& path) {
  fs::path at = path;
  std::error_code error;
  for (int hops = 0; hops < 40 && !own_descriptor(at.string()) && at.string().rfind("/proc/", 0) != 0 &&
                     fs::is_symlink(fs::symlink_status(at, error));
       ++hops) {
    const fs::path target = fs::read_symlink(at, error);
    if (error) break;
    at = target.is_absolute() ? target : at.parent_path() / target;
  }
  return at.string();
}

namespace {

// The process's umask, read without setting it: umask(2) sets it process-wide, if only for an instant in which
// another thread's new file would get 0666.
mode_t process_umask() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Umask:", 0) == 0) {
      try {
        return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
      } catch (const std::exception&) {
        break;
      }
    }
  const mode_t mask = ::umask(0);  // no /proc
  ::umask(mask);
  return mask;
}

}  // namespace

FileReplacement::FileReplacement(const std::string& target, std::string what)
    : target_(target), what_(std::move(what)), temporary_(target + ".XXXXXX") {
  fd_ = ::mkostemp(temporary_.data(), O_CLOEXEC);
  BATCHWISE_CHECK(fd_ >= 0, ConfigError, "{}: cannot write there ({}); check the folder exists and is writable", what_,
                  std::strerror(errno));
}

FileReplacement::~FileReplacement() {
  close();
  if (committed_) return;
  std::error_code ignored;
  fs::remove(temporary_, ignored);
}

void FileReplacement::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void FileReplacement::write(const std::string& text) {
  BATCHWISE_CHECK(fd_ >= 0, ConfigError, "{}: written after it was put in place", what_);
  BATCHWISE_CHECK(write_all(fd_, text), ConfigError, "{}: writing failed ({})", what_, std::strerror(errno));
}

void FileReplacement::commit() {
  const bool synced = fd_ < 0 || ::fsync(fd_) == 0 || errno == EINVAL;
  const int sync_error = errno;
  close();
  BATCHWISE_CHECK(synced, ConfigError, "{}: writing failed ({})", what_, std::strerror(sync_error));
  // The replaced file's mode (it had been written in place), or a new file's: mkostemp's is the owner's alone
  struct stat replaced {};
  mode_t mode = 0;
  if (::stat(target_.c_str(), &replaced) == 0) {
    mode = replaced.st_mode & 07777;
  } else {
    mode = 0666 & ~process_umask();
  }
  BATCHWISE_CHECK(::chmod(temporary_.c_str(), mode) == 0, ConfigError, "{}: cannot write there ({})", what_,
                  std::strerror(errno));
  std::error_code error;
  fs::rename(temporary_, target_, error);
  BATCHWISE_CHECK(!error, ConfigError, "{}: cannot write there ({}); check the folder exists and is writable", what_,
                  error.message());
  committed_ = true;
}

void write_whole(const std::string& target, const std::string& text, const std::string& what) {
  FileReplacement file(target, what);
  file.write(text);
  file.commit();
}

bool write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = ENOSPC;  // nothing taken, and no error said
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool special_file(const std::string& path) {
  if (own_descriptor(path)) return true;
  std::error_code error;
  const auto status = fs::status(path, error);
  return !error && fs::exists(status) && !fs::is_regular_file(status) && !fs::is_directory(status);
}

void write_output(const std::string& path, const std::string& text, const std::string& what) {
  const std::string at = followed(path);
  // A temporary file of this write's own beside the link's target, renamed into place whole: two runs writing one
  // report each leave the last one's (a shared "PATH.tmp" had left one's text under the other's tail)
  if (!special_file(at)) return write_whole(at, text, what);
  // Replaced by a file, a device or /dev/stdout had become one, for every process after (as root)
  if (const auto fd = own_descriptor(at)) {
    BATCHWISE_CHECK(write_all(*fd, text), ConfigError, "{}: writing failed ({})", what, std::strerror(errno));
    return;
  }
  const int fd = ::open(at.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  const int refused = errno;
  std::error_code ignored;
  BATCHWISE_CHECK(fd >= 0, ConfigError, "{}: cannot write there ({})", what,
                  refused != ENXIO                       ? std::strerror(refused)
                  : fs::is_fifo(fs::status(at, ignored)) ? "a FIFO no process reads"
                                                         : "a socket, which takes no file");
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // then as a reader takes it
  const bool written = write_all(fd, text);
  const int error = errno;
  ::close(fd);
  BATCHWISE_CHECK(written, ConfigError, "{}: writing failed ({})", what, std::strerror(error));
}

}  // namespace batchwise

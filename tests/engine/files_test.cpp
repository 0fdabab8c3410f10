// A file a person names: where its links lead, the descriptors it may name, and its new contents put in place
// whole, with the mode it had.
#include "batchwise/files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "batchwise/error.h"

namespace batchwise {
namespace {

namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("batchwise-files-test-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Only a descriptor's own names are descriptors; a number too long for one is none (std::stoi's out_of_range had
// ended `doctor --json /dev/fd/99999999999` with "batchwise doctor: stoi").
TEST(Files, DescriptorsAreNamedOnlyByTheirOwnPaths) {
  EXPECT_EQ(own_descriptor("/dev/stdout"), 1);
  EXPECT_EQ(own_descriptor("/dev/stderr"), 2);
  EXPECT_EQ(own_descriptor("/dev/fd/7"), 7);
  EXPECT_EQ(own_descriptor("/proc/self/fd/12"), 12);
  EXPECT_FALSE(own_descriptor("/dev/fd/"));
  EXPECT_FALSE(own_descriptor("/dev/fd/1x"));
  EXPECT_FALSE(own_descriptor("/dev/fd/99999999999"));
  EXPECT_FALSE(own_descriptor("report.json"));
}

// A link's target is what is written, a dangling one's too; a chain is followed to its end.
TEST(Files, LinksAreFollowedToTheFileTheyName) {
  const fs::path dir = fresh("links");
  fs::create_symlink("b.json", dir / "a.json");
  fs::create_symlink(dir / "c.json", dir / "b.json");  // dangling
  EXPECT_EQ(followed((dir / "a.json").string()), (dir / "c.json").string());
  EXPECT_EQ(followed("/dev/stdout"), "/dev/stdout");
  EXPECT_EQ(followed((dir / "plain.json").string()), (dir / "plain.json").string());
  fs::remove_all(dir);
}

// The file is replaced whole by commit() and keeps the mode it had; a new file gets a new file's (the umask's);
// uncommitted, the target is untouched and no temporary file stays.
TEST(Files, AReplacementIsWholeKeepsTheModeAndLeavesNothingBehind) {
  const fs::path dir = fresh("whole");
  const fs::path target = dir / "report.json";
  std::ofstream(target) << "old";
  const fs::perms mine = fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read;  // not mkostemp's
  fs::permissions(target, mine);
  {
    FileReplacement file(target.string(), "--json report.json");
    file.write("half");
  }
  EXPECT_EQ(slurp(target), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  write_whole(target.string(), "new", "--json report.json");
  EXPECT_EQ(slurp(target), "new");
  EXPECT_EQ(fs::status(target).permissions(), mine);

  const mode_t mask = ::umask(022);
  write_whole((dir / "fresh.json").string(), "{}", "--json fresh.json");
  ::umask(mask);
  EXPECT_EQ(fs::status(dir / "fresh.json").permissions(),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2);

  try {
    write_whole((dir / "gone" / "r.json").string(), "{}", "--json gone/r.json");
    FAIL() << "wrote into a folder that is not there";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--json gone/r.json: cannot write there (No such file or directory); check the folder exists and is "
              "writable");
  }
  fs::remove_all(dir);
}

// A FIFO, a device or a descriptor of this process is written into, never replaced by a file of its name (the
// Python API's Report.html("/dev/null") had renamed a page onto the device, as root); a FIFO no process reads is
// refused by name, not waited on.
TEST(Files, AnOutputThatIsNoFileIsWrittenIntoAsItIs) {
  const fs::path dir = fresh("special");
  const fs::path fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(special_file(fifo.string()));
  EXPECT_TRUE(special_file("/dev/null"));
  EXPECT_TRUE(special_file("/dev/stdout"));
  EXPECT_FALSE(special_file((dir / "report.json").string()));
  try {
    write_output(fifo.string(), "{}", "Report.html('pipe')");
    FAIL() << "waited on, or replaced, a FIFO no process reads";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "Report.html('pipe'): cannot write there (a FIFO no process reads)");
  }
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // a reader first: the text fits its buffer
  ASSERT_GE(reader, 0);
  write_output(fifo.string(), "the page", "Report.html('pipe')");
  char page[32] = {};
  EXPECT_EQ(::read(reader, page, sizeof page), 8);
  ::close(reader);
  EXPECT_EQ(std::string(page), "the page");
  EXPECT_TRUE(fs::is_fifo(fifo));

  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);  // a descriptor of this process, by its name
  write_output("/dev/fd/" + std::to_string(ends[1]), "into the pipe", "--json /dev/fd/N");
  ::close(ends[1]);
  char text[32] = {};
  EXPECT_EQ(::read(ends[0], text, sizeof text), 13);
  EXPECT_EQ(std::string(text), "into the pipe");
  ::close(ends[0]);
  write_output("/dev/null", "gone", "--json /dev/null");
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace batchwise

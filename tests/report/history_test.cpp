// The run history: transactions that survive a writer killed mid-write, and concurrent writers.
#include "batchwise/history.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "batchwise/error.h"

namespace batchwise {
namespace {

namespace fs = std::filesystem;

// This process's scratch folder; each test's database in a folder of its own, named by the test.
fs::path scratch_dir() { return fs::temp_directory_path() / ("batchwise-history-" + std::to_string(::getpid())); }

fs::path scratch_db() {
  const fs::path dir = scratch_dir() / ::testing::UnitTest::GetInstance()->current_test_info()->name();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir / "history.sqlite";
}

// The scratch folder goes when every test in the process passed; a failing test's stays, to be read.
// (ctest runs each test in a process of its own, so every run would otherwise leave one behind.)
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;
    if (::testing::UnitTest::GetInstance()->Passed()) fs::remove_all(scratch_dir(), ignored);
  }
};
::testing::Environment* const kScratchCleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

// A report as to_json writes it, with `padding` bytes of raw step times to make writes long.
std::string report(int64_t fit_batch, size_t padding = 0, const std::string& model = "lenet",
                   int64_t budget_bytes = 64 << 20) {
  nlohmann::json r = {
      {"schema_version", "1"},
      {"context",
       {{"batchwise_version", "0.1.0"},
        {"build_commit", "abc1234"},
        {"torch_version", "2.15.0"},
        {"date", "2026-11-21T12:00:00Z"},
        {"host", "testhost"},
        {"device", {{"type", "cpu"}, {"name", "Test CPU"}, {"total_bytes", 1 << 30}}}}},
      {"workload", {{"model", model}, {"dataset", "fashion-mnist"}, {"optimizer", "sgd"}, {"lr", 0.01}}},
      {"budget_bytes", budget_bytes},
      {"target", 0.9},
      {"fit", {{"outcome", "fits"}, {"batch", fit_batch}}},
      {"padding", std::string(padding, 'x')}};
  return r.dump();
}

TEST(History, StoresListsAndFindsARecentFitForTheSameKeys) {
  const fs::path db = scratch_db();
  History h(db.string());
  const int64_t first = h.add("fit", report(512));
  const int64_t second = h.add("tune", report(600, 0, "mlp"));
  EXPECT_LT(first, second);
  const auto runs = h.list();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].id, second);  // newest first
  EXPECT_EQ(runs[0].command, "tune");
  EXPECT_EQ(runs[1].fit_batch, 512);
  EXPECT_NE(runs[1].workload.find("lenet on fashion-mnist"), std::string::npos) << runs[1].workload;
  const auto found = h.find_fit(report(0), 3600);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->id, first);  // the lenet one, not the newer mlp one
  EXPECT_FALSE(h.find_fit(report(0, 0, "resnet18"), 3600).has_value());
  // A budget a little apart (a CPU's default, 80 % of the RAM available at the start, moves by a few
  // MiB between runs: before, --reuse never matched it) is the same budget; 2 % apart is another.
  const int64_t budget = 64 << 20;
  EXPECT_TRUE(h.find_fit(report(0, 0, "lenet", budget + budget / 200), 3600).has_value());
  // A stored budget above this run's only where the stored fit's peak is within this run's target:
  // this report keeps no fit trials, so its peak is unknown.
  EXPECT_FALSE(h.find_fit(report(0, 0, "lenet", budget - budget / 200), 3600).has_value());
  EXPECT_FALSE(h.find_fit(report(0, 0, "lenet", budget - budget / 50), 3600).has_value());
  EXPECT_FALSE(h.find_fit(report(0, 0, "lenet", budget + budget / 50), 3600).has_value());
}

// A stored fit answers for the same model only (a TorchScript file replaced at the same path has the same
// key, and other parameters), and for this run's search: a batch within its bounds, a multiple of its
// --multiple-of found among batches at least as fine, and not the stored run's own --max unless that is
// this run's (tune --reuse --multiple-of 32 had taken another run's 48 from its --max 48).
TEST(History, AReusedFitIsTheSameModelsAndAnswersThisRunsSearch) {
  const fs::path db = scratch_db();
  History h(db.string());
  const auto with = [](int64_t batch, int64_t parameters, int64_t multiple_of, bool limited,
                       const char* mode = "binsearch") {
    nlohmann::json r = nlohmann::json::parse(report(batch));
    r["workload"]["parameter_count"] = parameters;
    r["workload"]["trainable_parameter_count"] = parameters;
    r["workload"]["parameter_bytes"] = 4 * parameters;
    r["fit"]["multiple_of"] = multiple_of;
    r["fit"]["limited_by_max"] = limited;
    r["fit"]["mode"] = mode;
    return r.dump();
  };
  const int64_t capped = h.add("fit", with(48, 7850, 1, /*limited=*/true));
  const auto found = [&](int64_t parameters, FitBounds bounds) {
    const auto e = h.find_fit(with(0, parameters, 1, false), 3600, bounds);
    return e ? e->id : int64_t{0};
  };
  EXPECT_EQ(found(7850, {1, 48, 1}), capped);
  EXPECT_EQ(found(20037642, {1, 48, 1}), 0) << "another model at the same path";
  EXPECT_EQ(found(7850, {1, 4096, 1}), 0) << "48 was that run's --max: larger batches may fit";
  EXPECT_EQ(found(7850, {1, 0, 1}), 0);
  EXPECT_EQ(found(7850, {1, 48, 32}), 0) << "48 is no multiple of 32";
  const int64_t fitted = h.add("fit", with(512, 7850, 64, /*limited=*/false));
  EXPECT_EQ(found(7850, {1, 4096, 128}), fitted);
  EXPECT_EQ(found(7850, {1, 0, 64}), fitted);
  EXPECT_EQ(found(7850, {1, 4096, 32}), 0) << "a multiple of 32 between 512 and 576 was never tried";
  EXPECT_EQ(found(7850, {1, 256, 64}), 0) << "512 is past this run's --max";
  EXPECT_EQ(found(7850, {1024, 4096, 64}), 0) << "512 is below this run's --min";
  // A search stops at its --max rounded down to its multiple: --max 50 --multiple-of 16 stops at 48, as the
  // stored one did (the same command with --reuse had fitted again).
  const int64_t at_48 = h.add("fit", with(48, 7850, 16, /*limited=*/true));
  EXPECT_EQ(found(7850, {1, 50, 16}), at_48);
  // A search that doubles finds another batch than the exact ones: neither answers the other.
  const int64_t doubled = h.add("fit", with(2048, 7850, 1, /*limited=*/false, "power"));
  EXPECT_EQ(found(7850, {1, 4096, 1, /*doubling=*/true}), doubled);
  EXPECT_EQ(found(7850, {1, 4096, 128}), fitted) << "the power search's 2048 is no exact search's answer";
  // Layers frozen hold no gradients or optimizer state: another model's memory. A fit stored before the
  // trainable count was kept (null) answers for the same model with none frozen.
  nlohmann::json frozen = nlohmann::json::parse(with(0, 7850, 1, false));
  frozen["workload"]["trainable_parameter_count"] = 850;
  EXPECT_FALSE(h.find_fit(frozen.dump(), 3600, {1, 48, 1}).has_value()) << "the same model with layers frozen";
  nlohmann::json older = nlohmann::json::parse(with(4096, 7850, 1, /*limited=*/true));
  older["workload"]["trainable_parameter_count"] = nullptr;
  const int64_t stored_before = h.add("fit", older.dump());
  EXPECT_EQ(found(7850, {1, 4096, 1}), stored_before) << "a fit stored before the count, none frozen now";
  EXPECT_FALSE(h.find_fit(frozen.dump(), 3600, {1, 4096, 1}).has_value()) << "none frozen then, some now";
}

// The keys a run is stored under are what --reuse matches on: a run stored by an earlier version must
// keep matching, so they are pinned here for the golden report.
// Without HOME (a cron job, a service) the default history is the user's own, from the password database:
// it was ./.local/share/..., under whatever folder the run started in. XDG_DATA_HOME still wins.
TEST(History, WithoutHomeTheDefaultIsTheUsersOwn) {
  const auto saved = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  const std::optional<std::string> home = saved("HOME"), xdg = saved("XDG_DATA_HOME");
  unsetenv("HOME");
  unsetenv("XDG_DATA_HOME");
  const std::string path = default_history_path();
  setenv("XDG_DATA_HOME", "/data/x", 1);
  const std::string given = default_history_path();
  home ? setenv("HOME", home->c_str(), 1) : unsetenv("HOME");
  xdg ? setenv("XDG_DATA_HOME", xdg->c_str(), 1) : unsetenv("XDG_DATA_HOME");
  const passwd* user = getpwuid(getuid());
  if (user == nullptr) GTEST_SKIP() << "no password entry for uid " << getuid() << " (docker run -u N)";
  EXPECT_EQ(path, std::string(user->pw_dir) + "/.local/share/batchwise/history.sqlite");
  EXPECT_EQ(given, "/data/x/batchwise/history.sqlite");
}

TEST(History, KeysOfAReportAreStable) {
  std::ifstream in(std::string(BATCHWISE_TEST_GOLDEN_DIR) + "/report.json", std::ios::binary);
  const std::string golden{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  History h(scratch_db().string());
  h.add("tune", golden);
  const auto runs = h.list();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].workload, "lenet on fashion-mnist, sgd lr 0.01, fp32, loss cross-entropy, input [1,28,28]");
  EXPECT_EQ(runs[0].device, "cpu: Test CPU <8 cores> & \"quotes\" on testhost");
  EXPECT_EQ(runs[0].versions, "batchwise 0.1.0 (abc1234), torch 2.15.0");
  EXPECT_EQ(runs[0].date, "2026-11-21T12:00:00Z");
  EXPECT_EQ(runs[0].budget_bytes, 64 << 20);
  EXPECT_DOUBLE_EQ(runs[0].target, 0.9);
  EXPECT_EQ(runs[0].fit_batch, 192);
  EXPECT_EQ(runs[0].recommended_batch, 128);
  EXPECT_EQ(runs[0].report_json, golden);
  EXPECT_TRUE(h.find_fit(golden, 3600).has_value());
  // A budget 0.5 % below the stored one: its fit's batch 192 peaked at 57.0 MiB, within 90 % of it.
  auto smaller = nlohmann::json::parse(golden);
  smaller["budget_bytes"] = (64 << 20) - (64 << 20) / 200;
  EXPECT_TRUE(h.find_fit(smaller.dump(), 3600).has_value());
  // A training command's row names its words alone (it had read "python3 train.py on (the command's), (the
  // command's) lr 0.0, (the command's), loss (the command's), input []")
  auto command = nlohmann::json::parse(golden);
  command["workload"]["model"] = "python3 train.py --bs {batch}";
  command["workload"]["parameter_count"] = 0;
  command["workload"]["dataset_size"] = 0;
  command["workload"]["dataset"] = "(the command's)";
  h.add("sweep", command.dump());
  EXPECT_EQ(h.list().at(0).workload, "python3 train.py --bs {batch} (a training command)");
}

TEST(History, AWriterKilledMidWriteLeavesEveryEarlierRunIntact) {
  const fs::path db = scratch_db();
  { History(db.string()).add("fit", report(1)); }
  int stored[2];
  ASSERT_EQ(pipe(stored), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // writes large runs until killed, a byte down the pipe after each
    close(stored[0]);
    try {
      History h(db.string());
      for (int64_t i = 2;; ++i) {
        h.add("fit", report(i, 1 << 20));
        if (write(stored[1], "s", 1) != 1) _exit(1);
      }
    } catch (...) {
      _exit(1);
    }
  }
  close(stored[1]);
  // Killed once it has stored two runs, so in the middle of its third (a wait of fixed length had
  // let a slow machine kill it before its first was stored)
  char byte = 0;
  for (int n = 0; n < 2;) {
    const ssize_t got = ::read(stored[0], &byte, 1);
    if (got == 1) ++n;
    if (got == 0 || (got < 0 && errno != EINTR)) break;  // the writer died: the assert below says so
  }
  kill(child, SIGKILL);
  close(stored[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer failed before it was killed";

  History h(db.string());
  const auto runs = h.list(100000);
  ASSERT_GE(runs.size(), 3u) << "a run the writer had stored before it was killed is gone";
  // Every stored run is whole (its report parses) and the ids run without gaps from 1: the run
  // being written when the kill came is either all there or not there at all.
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].id, static_cast<int64_t>(runs.size() - i));
    EXPECT_EQ(runs[i].fit_batch, runs[i].id);
    EXPECT_TRUE(nlohmann::json::accept(runs[i].report_json)) << "run " << runs[i].id << " is not whole";
  }
  EXPECT_NO_THROW(h.add("fit", report(7)));  // and it takes new writes
}

TEST(History, TwoConcurrentWritersBothLand) {
  const fs::path db = scratch_db();
  { History init(db.string()); }
  pid_t writers[2];
  for (int w = 0; w < 2; ++w) {
    writers[w] = fork();
    ASSERT_GE(writers[w], 0);
    if (writers[w] == 0) {
      try {
        History h(db.string());
        for (int i = 0; i < 50; ++i) h.add(w == 0 ? "fit" : "sweep", report(1000 * (w + 1) + i, 4096));
      } catch (...) {
        _exit(1);
      }
      _exit(0);
    }
  }
  for (pid_t p : writers) {
    int status = 0;
    waitpid(p, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const auto runs = History(db.string()).list(1000);
  EXPECT_EQ(runs.size(), 100u);
  int fits = 0;
  for (const auto& r : runs) fits += r.command == "fit";
  EXPECT_EQ(fits, 50);
}

// A stored report this batchwise cannot read answers nothing, and the rows after it still do (one such row had
// ended every later tune --reuse of its workload, exit 3).
TEST(History, ARowThatCannotBeReadAnswersNothing) {
  const fs::path db = scratch_db();
  History h(db.string());
  const int64_t good = h.add("fit", report(512));
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw,
                         "INSERT INTO runs (created_unix, date, command, workload, device, versions, budget_bytes, "
                         "target, fit_batch, recommended_batch, report) SELECT created_unix, date, command, workload, "
                         "device, versions, budget_bytes, target, 640, recommended_batch, '{\"context\": 5}' FROM runs",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  const auto found = h.find_fit(report(0), 3600);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->id, good);
  EXPECT_EQ(h.list().size(), 2u);

  sqlite3_close(raw);
}

// Read only, a history in a folder that takes no new file (another user's, a read-only disk; here an immutable
// folder) is read as it is on disk: WAL mode reads through a -shm beside it, and `batchwise history` had refused
// it ("attempt to write a readonly database").
TEST(History, AHistoryInAFolderThatTakesNoFileIsStillRead) {
  const fs::path db = scratch_db();
  { History(db.string()).add("fit", report(512)); }
  const std::string folder = db.parent_path().string();
  if (std::system(("chattr +i " + folder + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "chattr +i needs root and a file system that keeps the flag";
  struct Mutable {
    std::string folder;
    ~Mutable() { (void)std::system(("chattr -i " + folder).c_str()); }
  } back{folder};
  std::ofstream probe(db.parent_path() / "probe");
  ASSERT_FALSE(probe) << "the folder still takes a new file";
  const auto runs = History(db.string(), /*read_only=*/true).list();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].fit_batch, 512);
}

TEST(History, AFileThatIsNotADatabaseIsAConfigError) {
  const fs::path db = scratch_db();
  std::ofstream(db) << "this is not sqlite, it is a note to self";
  EXPECT_THROW(History h(db.string()), ConfigError);
}

// Another program's database is refused, and its tables are left as they were: batchwise adds none.
// Read only (batchwise history), a history must be there, and nothing is written to it.
TEST(History, AnotherProgramsDatabaseIsLeftAsItWas) {
  const fs::path db = scratch_db();
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE foo (x INTEGER); INSERT INTO foo VALUES (1);", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  const auto table_names = [&] {
    sqlite3* d = nullptr;
    sqlite3_open_v2(db.c_str(), &d, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(d, "SELECT group_concat(name) FROM sqlite_master", -1, &s, nullptr);
    sqlite3_step(s);
    const auto* text = sqlite3_column_text(s, 0);
    std::string names = text ? reinterpret_cast<const char*>(text) : "";
    sqlite3_finalize(s);
    sqlite3_close(d);
    return names;
  };
  try {
    History h(db.string());
    ADD_FAILURE() << "opened another program's database";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not a usable batchwise history (it holds another program's tables)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(History(db.string(), /*read_only=*/true), ConfigError);
  EXPECT_EQ(table_names(), "foo");

  const fs::path missing = db.parent_path() / "typo.sqlite";
  try {
    History h(missing.string(), /*read_only=*/true);
    ADD_FAILURE() << "read a history that is not there";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string() + ": no such file"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(missing));
  const fs::path ours = db.parent_path() / "ours.sqlite";
  { History h(ours.string()); }  // a history batchwise made, with no run yet, reads as none
  EXPECT_TRUE(History(ours.string(), /*read_only=*/true).list().empty());

  // Another program's table named runs: refused as such, read or written, and its journal mode kept
  // (before, a write switched it to WAL, and a read failed on "no such column: date").
  const fs::path theirs = db.parent_path() / "theirs.sqlite";
  ASSERT_EQ(sqlite3_open(theirs.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE runs (id INTEGER, x TEXT);", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  for (const bool read_only : {true, false}) {
    try {
      History h(theirs.string(), read_only);
      ADD_FAILURE() << "opened another program's runs table";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("not a usable batchwise history (its table runs is another program's"),
                std::string::npos)
          << e.what();
    }
  }
  ASSERT_EQ(sqlite3_open(theirs.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* mode = nullptr;
  sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &mode, nullptr);
  sqlite3_step(mode);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sqlite3_column_text(mode, 0))), "delete");
  sqlite3_finalize(mode);
  sqlite3_close(raw);
}

}  // namespace
}  // namespace batchwise

#include "batchwise/history.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pwd.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "batchwise/report.h"
#include "check.h"

namespace batchwise {
namespace {

using nlohmann::json;

constexpr int kBusyTimeoutMs = 30000;  // concurrent writers wait for each other this long

// A figure as the JSON report writes it (0.01, [1,28,28]): the keys stored by earlier versions used
// the JSON's text, so a run stored then still matches one stored now.
template <class T>
std::string json_text(const T& value) {
  return json(value).dump();
}

struct Keys {
  std::string workload, device, versions;
};

Keys keys_of(const Report& r) {
  const WorkloadInfo& w = r.workload;
  const Context& c = r.context;
  Keys k;
  // A training command's model, data and rate are its own: its words alone (its row had read "python3 train.py on
  // (the command's), (the command's) lr 0.0, ..., input []"; runs stored so before match no new one)
  k.workload = w.is_command() && w.dataset == "(the command's)"  // CommandRunner's info
                   ? fmt::format("{} (a training command)", w.model)
                   : fmt::format("{} on {}, {} lr {}, {}, loss {}, input {}", w.model, w.dataset, w.optimizer,
                                 json_text(w.lr), w.precision, w.loss, json_text(w.input_shape));
  // Not the device's total bytes: on CPU that is the RAM available at the moment, which moves.
  k.device = fmt::format("{}: {} on {}", c.device_type, c.device_name, c.host);
  k.versions = fmt::format("batchwise {} ({}), torch {}", c.batchwise_version, c.build_commit, c.torch_version);
  return k;
}

Report parse_report(const std::string& report_json) { return report_from_json(report_json, "history: the report"); }

// The device and inode of the file at `path`; zeros where there is none.
std::pair<uint64_t, uint64_t> file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {0, 0};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

// What to do about SQLite's error `code` (its primary one): a damaged file, one another process holds, a full disk.
// `storing`: the run is to store itself there, so --no-history is a way out (not for `batchwise history` or compare,
// which only read it).
std::string fix_for(int code, bool storing = true) {
  switch (code & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return "; the file is damaged: move it away to start anew, or give --history another path";
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return fmt::format("; another process held it past {} s: run again once it ends{}", kBusyTimeoutMs / 1000,
                         storing ? ", or give --no-history" : "");
    case SQLITE_FULL:
      return "; the disk that holds it is full: free some space, or give --history another path";
    default:
      return "";
  }
}

// Whether the file at `path` is another kind of file than SQLite's (a JSON report given as --history),
// by SQLite's own header: not a damaged history, and not to be moved away.
bool another_kind_of_file(const char* path) {
  static const char kHeader[] = "SQLite format 3";  // and its NUL: 16 bytes
  std::string head(sizeof kHeader, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return !head.empty() && head.compare(0, std::string::npos, kHeader, head.size()) != 0;
}

// SQLite's last error on `db`, with the file it is about and what to do.
std::string sqlite_error(sqlite3* db) {
  const char* file = sqlite3_db_filename(db, "main");
  const int code = sqlite3_extended_errcode(db);
  const bool other = (code & 0xff) == SQLITE_NOTADB && file && *file && another_kind_of_file(file);
  return fmt::format("history{}{}: {}{}", file && *file ? " " : "", file ? file : "", sqlite3_errmsg(db),
                     other ? "; it is no SQLite database at all (another kind of file), so no history batchwise "
                             "wrote"
                           : fix_for(code, /*storing=*/sqlite3_db_readonly(db, "main") != 1));
}

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    BATCHWISE_CHECK(sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) == SQLITE_OK, Error, "{}", sqlite_error(db));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Statement& bind(int i, std::optional<int64_t> v) {
    if (v) return bind(i, *v);
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  bool step() {
    const int rc = sqlite3_step(stmt_);
    BATCHWISE_CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE, Error, "{}", sqlite_error(db_));
    return rc == SQLITE_ROW;
  }
  std::string column_text(int i) const {
    const auto* t = sqlite3_column_text(stmt_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  std::optional<int64_t> column_int(int i) const {
    if (sqlite3_column_type(stmt_, i) == SQLITE_NULL) return std::nullopt;
    return sqlite3_column_int64(stmt_, i);
  }
  double column_double(int i) const { return sqlite3_column_double(stmt_, i); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

void exec(sqlite3* db, const char* sql, const std::string& path) {
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
  const std::string why = error ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  BATCHWISE_CHECK(rc == SQLITE_OK, Error, "history {}: {}{}", path, why, fix_for(sqlite3_extended_errcode(db)));
}

// The runs table as batchwise creates it, in one list: its CREATE, the check that a table named runs
// is ours, and the insert are written from it.
struct Column {
  const char *name, *type;
};
constexpr std::array<Column, 12> kTable = {{{"id", "INTEGER PRIMARY KEY AUTOINCREMENT"},
                                            {"created_unix", "INTEGER NOT NULL"},
                                            {"date", "TEXT"},
                                            {"command", "TEXT"},
                                            {"workload", "TEXT"},
                                            {"device", "TEXT"},
                                            {"versions", "TEXT"},
                                            {"budget_bytes", "INTEGER"},
                                            {"target", "REAL"},
                                            {"fit_batch", "INTEGER"},
                                            {"recommended_batch", "INTEGER"},
                                            {"report", "TEXT NOT NULL"}}};

// "name type, ..." (with_types), "'name', ..." (quoted) or "name, ...", from the first'th column on.
std::string table_columns(bool with_types, bool quoted = false, size_t first = 0) {
  std::vector<std::string> out;
  for (size_t i = first; i < kTable.size(); ++i)
    out.push_back(with_types ? fmt::format("{} {}", kTable[i].name, kTable[i].type)
                  : quoted   ? fmt::format("'{}'", kTable[i].name)
                             : std::string(kTable[i].name));
  return fmt::format("{}", fmt::join(out, ", "));
}

// What a listing reads, in entry_of's order: every column but created_unix
const std::string kColumns = "id, " + table_columns(false, false, 2);

HistoryEntry entry_of(const Statement& s) {
  HistoryEntry e;
  e.id = s.column_int(0).value_or(0);
  e.date = s.column_text(1);
  e.command = s.column_text(2);
  e.workload = s.column_text(3);
  e.device = s.column_text(4);
  e.versions = s.column_text(5);
  e.budget_bytes = s.column_int(6).value_or(0);
  e.target = s.column_double(7);
  e.fit_batch = s.column_int(8);
  e.recommended_batch = s.column_int(9);
  e.report_json = s.column_text(10);
  return e;
}

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string default_history_path() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  const char* home = std::getenv("HOME");
  if (!(home && *home)) {  // HOME unset (a cron job, a service): the user's own, not the current folder
    const passwd* user = getpwuid(getuid());
    home = user && user->pw_dir && *user->pw_dir ? user->pw_dir : ".";
  }
  const std::string base = xdg && *xdg ? xdg : std::string(home) + "/.local/share";
  return base + "/batchwise/history.sqlite";
}

namespace {

// What keeps the history at `path` from being written, where a write failed: the file, SQLite's -wal and
// -shm beside it, or its folder, each that this user cannot write. A run on a read-only history leaves
// its -shm with the file's mode, and SQLite refuses writes through it after the file is writable again;
// "attempt to write a readonly database" then named only the file.
std::string unwritable_parts(const std::string& path) {
  std::vector<std::string> parts;
  bool creates = false;  // SQLite makes a -wal or -shm there: the folder must take it
  for (const std::string& p : {path, path + "-wal", path + "-shm"})
    if (::access(p.c_str(), F_OK) != 0)
      creates = true;
    else if (::access(p.c_str(), W_OK) != 0)
      parts.push_back(p);
  const std::string folder = std::filesystem::path(path).parent_path().string();
  if (creates && ::access(folder.empty() ? "." : folder.c_str(), W_OK) != 0)
    parts.push_back(folder.empty() ? "." : folder);
  if (parts.empty()) return "";
  return fmt::format(
      "; not writable by this user: {} (make {} writable; a -shm or -wal file left read-only by a "
      "run on a read-only history may be deleted while no batchwise runs)",
      fmt::join(parts, ", "), parts.size() == 1 ? "it" : "them");
}

}  // namespace

History::History(const std::string& path, bool read_only) : path_(path) {
  const auto folder = std::filesystem::path(path).parent_path();
  // The user may have given no --history: the default's path is named as such
  const std::string named =
      fmt::format("{} {}", path == default_history_path() ? "the default history," : "--history", path);
  const std::string no_history = read_only ? "" : ", or --no-history not to store the run";
  std::error_code ec;
  BATCHWISE_CHECK(!std::filesystem::is_directory(path, ec), ConfigError,
                  "{}: is a folder; give --history a file's path (e.g. {}/history.sqlite){}", named, path, no_history);
  if (read_only)
    BATCHWISE_CHECK(std::filesystem::exists(path, ec), ConfigError,
                    "--history {}: no such file; give the path of a history batchwise wrote (the default is {})", path,
                    default_history_path());
  BATCHWISE_CHECK(
      !std::filesystem::exists(path, ec) || std::filesystem::is_regular_file(path, ec), ConfigError,
      "{}: not a regular file (a pipe, a socket or a device); give --history a file's path{}", named,
      path == default_history_path() ? no_history : fmt::format(" (the default is {})", default_history_path()));
  if (!read_only && !folder.empty()) std::filesystem::create_directories(folder, ec);
  const int rc = sqlite3_open_v2(
      path.c_str(), &db_, read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    // The default's folder unwritable (a read-only HOME): the user gave no --history, so the fix names both ways
    BATCHWISE_CHECK(false, ConfigError, "{} {}: cannot open it ({}); give --history a writable path{}",
                    path == default_history_path() ? "the default history," : "--history", path, why,
                    read_only ? "" : ", or --no-history not to store the run");
  }
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  // Read only, a history in a folder this user cannot write, or on a read-only disk, is read as it is on disk: WAL
  // mode reads through a -shm file beside it, which such a folder cannot take (`batchwise history` had refused it)
  const auto open_as_it_is = [&] {
    sqlite3_close(db_);
    db_ = nullptr;
    std::string uri = "file:";
    for (const char c : std::filesystem::absolute(path, ec).string())
      uri +=
          c == '%' || c == '?' || c == '#' ? fmt::format("%{:02X}", static_cast<unsigned char>(c)) : std::string(1, c);
    return sqlite3_open_v2((uri + "?immutable=1").c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) ==
           SQLITE_OK;
  };
  for (bool as_it_is = false;; as_it_is = true) {
    try {
      // Another program's database keeps its tables as they are: batchwise adds none to it.
      const auto tables = [this](const char* which) {
        Statement s(db_, fmt::format("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND {}", which).c_str());
        s.step();
        return s.column_int(0).value_or(0);
      };
      // A table named runs is ours only with our columns (another program may name a table so): checked
      // before anything is written, the journal mode included.
      const bool ours = tables("name = 'runs'") > 0;
      if (ours) {
        Statement s(db_, fmt::format("SELECT count(*) FROM pragma_table_info('runs') WHERE name IN ({})",
                                     table_columns(false, true))
                             .c_str());
        s.step();
        BATCHWISE_CHECK(s.column_int(0).value_or(0) == static_cast<int64_t>(kTable.size()), Error,
                        "its table runs is another program's: it lacks batchwise's columns");
      }
      BATCHWISE_CHECK(ours || tables("name NOT LIKE 'sqlite_%'") == 0, Error, "it holds another program's tables");
      BATCHWISE_CHECK(ours || !read_only, Error, "it holds no runs");
      if (!read_only) {
        exec(db_, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", path);
        exec(db_,
             fmt::format("CREATE TABLE IF NOT EXISTS runs ({}); "
                         "CREATE INDEX IF NOT EXISTS runs_key ON runs (workload, device, versions);",
                         table_columns(true))
                 .c_str(),
             path);
      }
      file_ = file_id(path);
      return;
    } catch (const Error& e) {
      const int code = sqlite3_extended_errcode(db_) & 0xff;
      // only where no write is under way: an immutable read ignores the -wal's runs, and a checkpoint while it
      // reads would look like damage
      std::error_code none;
      const bool writing = std::filesystem::file_size(path + "-wal", none) > 0 && !none;
      if (read_only && !as_it_is && !writing && (code == SQLITE_READONLY || code == SQLITE_CANTOPEN) && open_as_it_is())
        continue;
      sqlite3_close(db_);
      db_ = nullptr;
      // A history that is whole but cannot be used now is not to be moved away: locked, on a full disk, read-only
      if (code == SQLITE_BUSY || code == SQLITE_LOCKED || code == SQLITE_FULL)
        throw ConfigError(fmt::format("{}: {}{}", named, sqlite3_errstr(code), fix_for(code, !read_only)));
      if (read_only && (code == SQLITE_READONLY || code == SQLITE_CANTOPEN))
        throw ConfigError(
            fmt::format("{}: cannot be read here ({}){}", named, sqlite3_errstr(code),
                        writing ? "; another process is writing it: run again once it ends" : unwritable_parts(path)));
      if (code == SQLITE_READONLY || code == SQLITE_CANTOPEN || code == SQLITE_IOERR || code == SQLITE_PERM)
        throw ConfigError(fmt::format("{}: cannot be used here ({}){}; give --history a writable path{}", named,
                                      sqlite3_errstr(code), unwritable_parts(path), no_history));
      // Why, without the path said again nor the fix the open's error gave (it had been said twice); a damaged
      // file, or the default in the way, may be moved away; a file the user named that is not SQLite's (a report
      // given as --history) is kept
      std::string why = e.what();
      // (the open's error names the file as SQLite does, an absolute path where the user gave a relative one)
      if (const size_t lead = why.find(": "); why.rfind("history ", 0) == 0 && lead != std::string::npos)
        why.erase(0, lead + 2);
      if (const size_t fix = why.find("; the file is damaged"); fix != std::string::npos) why.erase(fix);
      const bool kept = path != default_history_path() && another_kind_of_file(path.c_str());
      const bool move = !kept && (code == SQLITE_CORRUPT || code == SQLITE_NOTADB || path == default_history_path());
      BATCHWISE_CHECK(false, ConfigError, "{}: not a usable batchwise history ({}); {}give --history another path{}",
                      named, why, move ? "move it away to start anew, or " : "", no_history);
    }
  }
}

History::~History() { sqlite3_close(db_); }

bool History::moved() const { return file_ != file_id(path_); }

int64_t History::add(const std::string& command, const std::string& report_json) {
  try {
    return insert(command, report_json);
  } catch (const Error& e) {
    const std::string why = unwritable_parts(path_);
    if (why.empty()) throw;
    throw Error(e.what() + why);
  }
}

int64_t History::insert(const std::string& command, const std::string& report_json) {
  const Report r = parse_report(report_json);
  const Keys k = keys_of(r);
  // BEGIN IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so two
  // writers queue instead of failing on a lock upgrade.
  exec(db_, "BEGIN IMMEDIATE", path_);
  try {
    std::vector<std::string> marks(kTable.size() - 1, "?");  // every column but the id
    Statement insert(
        db_, fmt::format("INSERT INTO runs ({}) VALUES ({})", table_columns(false, false, 1), fmt::join(marks, ","))
                 .c_str());
    insert.bind(1, now_unix())
        .bind(2, r.context.date)
        .bind(3, command)
        .bind(4, k.workload)
        .bind(5, k.device)
        .bind(6, k.versions)
        .bind(7, r.budget_bytes)
        .bind(8, r.target)
        .bind(9, r.fit ? r.fit->batch : std::nullopt)
        .bind(10, r.recommendation ? std::optional<int64_t>(r.recommendation->batch) : std::nullopt)
        .bind(11, report_json);
    insert.step();
    exec(db_, "COMMIT", path_);
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  return sqlite3_last_insert_rowid(db_);
}

std::vector<HistoryEntry> History::list(int limit) const {
  Statement s(db_, fmt::format("SELECT {} FROM runs ORDER BY id DESC LIMIT ?", kColumns).c_str());
  s.bind(1, static_cast<int64_t>(limit));
  std::vector<HistoryEntry> out;
  while (s.step()) out.push_back(entry_of(s));
  return out;
}

std::optional<HistoryEntry> History::find_fit(const std::string& report_json, double max_age_s,
                                              const FitBounds& bounds) const {
  const Report r = parse_report(report_json);
  const Keys k = keys_of(r);
  // The key names a TorchScript model by its path: a file replaced there is another model, told by its
  // parameters (a stored fit of a 7,850-parameter model had answered for a 20-million one).
  const auto same_model = [&](const Report& stored) {
    return stored.workload.parameter_count == r.workload.parameter_count &&
           // frozen layers hold no gradients or optimizer state; a fit stored before the count was kept answers
           // for a model with none frozen
           stored.workload.trainable_parameter_count.value_or(stored.workload.parameter_count) ==
               r.workload.trainable_parameter_count.value_or(r.workload.parameter_count) &&
           stored.workload.parameter_bytes == r.workload.parameter_bytes &&
           stored.workload.num_classes == r.workload.num_classes;
  };
  // The stored fit answers this run's search only where its batch is the largest this run's bounds would
  // find: within them, a multiple of this run's --multiple-of, found among batches at least as fine, and
  // not cut short by a --max of its own below what this run would try.
  const auto answers_this_search = [&](const Report& stored, int64_t batch) {
    if (!stored.fit) return false;
    const int64_t stored_multiple = std::max<int64_t>(1, stored.fit->multiple_of);
    const int64_t multiple = std::max<int64_t>(1, bounds.multiple_of);
    const int64_t top = bounds.max / multiple * multiple;  // where this search stops: --max at its multiple
    return batch >= bounds.min && (bounds.max <= 0 || batch <= bounds.max) && batch % multiple == 0 &&
           multiple % stored_multiple == 0 && (stored.fit->mode == FitMode::Power) == bounds.doubling &&
           (!stored.fit->limited_by_max || batch == top);
  };
  // A budget within kReuseBudgetTolerance of the stored one: a CPU's default, 80 % of the RAM
  // available when the run starts, moves by a few MiB between runs and would never match exactly. A
  // stored budget at most this run's keeps its batch within the target; a larger one only where the
  // stored fit's measured peak at its batch is within this run's target too.
  const auto budget = static_cast<double>(r.budget_bytes);
  const auto within_target = [&](const HistoryEntry& e) {
    Report stored;
    try {
      stored = parse_report(e.report_json);
    } catch (const Error&) {  // a row an older or newer batchwise wrote, unread here: it answers nothing
      return false;
    }
    if (!same_model(stored) || !answers_this_search(stored, *e.fit_batch)) return false;
    if (e.budget_bytes <= r.budget_bytes) return true;
    for (const Trial& t : stored.fit->trials)
      if (t.batch == e.fit_batch && t.outcome == Outcome::Ok)
        return static_cast<double>(t.peak_bytes) <= r.target * budget;
    return false;  // a reused fit keeps no trials: its peak is unknown
  };
  Statement s(db_, fmt::format("SELECT {} FROM runs WHERE workload = ? AND device = ? AND versions = ? AND "
                               "budget_bytes BETWEEN ? AND ? AND target = ? AND fit_batch IS NOT NULL AND "
                               "created_unix >= ? ORDER BY id DESC LIMIT 16",
                               kColumns)
                       .c_str());
  s.bind(1, k.workload)
      .bind(2, k.device)
      .bind(3, k.versions)
      .bind(4, static_cast<int64_t>(std::floor(budget * (1 - kReuseBudgetTolerance))))
      .bind(5, static_cast<int64_t>(std::ceil(budget * (1 + kReuseBudgetTolerance))))
      .bind(6, r.target)
      .bind(7, now_unix() - static_cast<int64_t>(max_age_s));
  while (s.step())
    if (HistoryEntry e = entry_of(s); within_target(e)) return e;  // (each row a fitted batch: IS NOT NULL)
  return std::nullopt;
}

std::vector<HistoryEntry> History::find_runs(const std::string& command, const std::string& report_json,
                                             int limit) const {
  const Keys k = keys_of(parse_report(report_json));
  Statement s(db_, fmt::format("SELECT {} FROM runs WHERE command = ? AND workload = ? AND device = ? ORDER BY id "
                               "DESC LIMIT ?",
                               kColumns)
                       .c_str());
  s.bind(1, command).bind(2, k.workload).bind(3, k.device).bind(4, static_cast<int64_t>(limit));
  std::vector<HistoryEntry> out;
  while (s.step()) out.push_back(entry_of(s));
  return out;
}

}  // namespace batchwise

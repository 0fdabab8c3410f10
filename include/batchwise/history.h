#pragma once
/// A history of runs in a SQLite database: every fit, sweep and tune report, keyed by workload,
/// device and software versions, so runs can be listed, compared and a recent fit reused.
/// Writes are transactions in WAL mode: a writer killed mid-write loses only its own run, the
/// database stays readable, and concurrent writers wait for each other (busy timeout) and all land.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

struct sqlite3;

namespace batchwise {

/// One stored run.
struct HistoryEntry {
  int64_t id = 0;
  std::string date;      ///< the report's context.date (UTC, ISO 8601)
  std::string command;   ///< "fit", "sweep", "tune"
  std::string workload;  ///< "lenet on fashion-mnist, sgd lr 0.01, fp32 ..." (the key, readable)
  std::string device;    ///< "cpu: Intel(R) Xeon(R) ... on host"
  std::string versions;  ///< "batchwise 0.1.0 (abc1234), torch 2.15.0"
  int64_t budget_bytes = 0;
  double target = 0;
  std::optional<int64_t> fit_batch;
  std::optional<int64_t> recommended_batch;
  std::string report_json;  ///< the whole report, as written with --json
};

/// $XDG_DATA_HOME/batchwise/history.sqlite, else ~/.local/share/batchwise/history.sqlite.
std::string default_history_path();

/// The search a reused fit must answer: this run's --min, --max (0: no bound), --multiple-of, and
/// whether it doubles only (--mode power), which finds another batch than the exact searches.
struct FitBounds {
  int64_t min = 1, max = 0, multiple_of = 1;
  bool doubling = false;
};

/// How far a stored fit's budget may lie from the run's for `tune --reuse` to take it (a share).
inline constexpr double kReuseBudgetTolerance = 0.01;

class History {
 public:
  /// Opens the database at `path`, creating it (and its folder) if needed; `read_only`: only to
  /// read, an existing one, which nothing is written to. Throws ConfigError naming the path when it
  /// cannot be opened, is missing (read_only), or is not a batchwise history (another program's
  /// tables are left as they are).
  explicit History(const std::string& path, bool read_only = false);
  ~History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  /// Stores a report (the JSON to_json writes) in one transaction; returns its id. Throws Error
  /// when the write fails (disk full, the database locked for longer than the busy timeout), naming
  /// the file, -wal, -shm or folder this user cannot write, where one is why.
  int64_t add(const std::string& command, const std::string& report_json);
  /// Whether the file at the path is no longer the one opened: removed (its folder with it) or replaced since. A run
  /// stored then would go to a file nothing can find (make a new History for the path).
  bool moved() const;
  /// The newest runs first.
  std::vector<HistoryEntry> list(int limit = 50) const;
  /// The newest run no older than `max_age_s` with a fitted batch for the same workload, device,
  /// versions and target as `report_json` (a report of the run about to start), the same model (its
  /// parameters: a file replaced at the same path is another), and a budget within
  /// kReuseBudgetTolerance of its budget: at most it, or above it where the stored fit's measured peak
  /// at its batch is within this run's target x budget; and whose batch is the one `bounds` would find:
  /// within them, a multiple of its multiple_of (the stored search's a divisor of it), by a search that
  /// doubles as this one does or not, and not the stored search's own --max unless this one stops there
  /// too (its --max rounded down to its multiple).
  std::optional<HistoryEntry> find_fit(const std::string& report_json, double max_age_s,
                                       const FitBounds& bounds = {}) const;
  /// The newest runs of `command` (at most `limit`) for the same workload and device as
  /// `report_json`, any version: what such a run took before.
  std::vector<HistoryEntry> find_runs(const std::string& command, const std::string& report_json, int limit = 20) const;

 private:
  int64_t insert(const std::string& command, const std::string& report_json);  // add's transaction
  sqlite3* db_ = nullptr;
  std::string path_;
  std::pair<uint64_t, uint64_t> file_{0, 0};  // the device and inode opened (moved)
};

}  // namespace batchwise

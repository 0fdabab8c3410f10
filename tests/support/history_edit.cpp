#include "support/history_edit.h"

#include <sqlite3.h>

#include <memory>
#include <stdexcept>

namespace support {

void edit_history_report(const std::string& db, int64_t id, const std::function<void(nlohmann::json&)>& edit) {
  sqlite3* raw = nullptr;
  if (sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    sqlite3_close(raw);
    throw std::runtime_error("cannot open the history " + db);
  }
  const std::unique_ptr<sqlite3, int (*)(sqlite3*)> handle(raw, sqlite3_close);
  const auto statement = [&](const char* sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(raw, sql, -1, &s, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string("history: ") + sqlite3_errmsg(raw));
    return std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)>(s, sqlite3_finalize);
  };
  const auto check = [&](int code, int expected) {
    if (code != expected) throw std::runtime_error(std::string("history ") + db + ": " + sqlite3_errmsg(raw));
  };
  sqlite3_busy_timeout(raw, 5000);
  nlohmann::json report;
  {
    const auto read = statement("SELECT report FROM runs WHERE id = ?");
    check(sqlite3_bind_int64(read.get(), 1, id), SQLITE_OK);
    const int found = sqlite3_step(read.get());
    if (found == SQLITE_DONE) throw std::runtime_error("history " + db + ": no run " + std::to_string(id));
    check(found, SQLITE_ROW);
    const unsigned char* text = sqlite3_column_text(read.get(), 0);
    if (text == nullptr) throw std::runtime_error("history " + db + ": run " + std::to_string(id) + " has no report");
    report = nlohmann::json::parse(reinterpret_cast<const char*>(text));
  }  // the read statement finalized before the write
  edit(report);
  const std::string text = report.dump(2);
  const auto write = statement("UPDATE runs SET report = ? WHERE id = ?");
  check(sqlite3_bind_text(write.get(), 1, text.c_str(), -1, SQLITE_TRANSIENT), SQLITE_OK);
  check(sqlite3_bind_int64(write.get(), 2, id), SQLITE_OK);
  check(sqlite3_step(write.get()), SQLITE_DONE);
}

}  // namespace support

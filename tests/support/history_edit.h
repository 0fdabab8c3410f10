#pragma once
// Edits a run stored in a batchwise history, for the CLI tests, which include no library header
// (support/history_edit.cpp opens the database): a run as another machine or a slowed one left it.
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace support {

// Rewrites the report of run `id` in the history at `db` with `edit`; throws where there is no
// such run.
void edit_history_report(const std::string& db, int64_t id, const std::function<void(nlohmann::json&)>& edit);

}  // namespace support

// batchwise history: the runs stored in the history, newest first, as a table or JSON.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "../cli.h"
#include "batchwise/history.h"
#include "batchwise/report.h"

namespace batchwise::cli {
namespace {

class HistoryList : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand("history", "List the runs stored in the history, newest first");
    cmd->add_option("--history", history_, "the history database (default: $XDG_DATA_HOME/batchwise/history.sqlite)");
    cmd->add_option("--limit", limit_, "runs to list")->capture_default_str();
    cmd->add_flag("--json", json_, "print the runs as JSON");
    cmd->footer("Example:\n  batchwise history --limit 5\n  batchwise tune --reuse   # reuses a matching fit from it");
    return cmd;
  }

  int run() override {
    // Read, not written: a history that is not there yet (the default, before any run) holds no runs;
    // one named that is not there is a mistyped path.
    const std::string path = history_path(history_);
    const bool none_yet = history_.empty() && !std::filesystem::exists(path);
    const auto runs = none_yet ? std::vector<HistoryEntry>{} : History(path, /*read_only=*/true).list(limit_);
    // The run each answered for, from its stored report (compare lists the same field).
    const auto run_of = [](const HistoryEntry& r) {
      try {
        return answered_run(report_from_json(r.report_json, fmt::format("history run {}", r.id)));
      } catch (const std::exception&) {  // a row an older or newer batchwise wrote: its report unread here
        return std::string("?");
      }
    };
    if (json_) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& r : runs)
        j.push_back({{"id", r.id},
                     {"date", r.date},
                     {"command", r.command},
                     {"workload", r.workload},
                     {"device", r.device},
                     {"versions", r.versions},
                     {"budget_bytes", r.budget_bytes},
                     {"run", run_of(r)},
                     {"fit_batch", r.fit_batch ? nlohmann::json(*r.fit_batch) : nlohmann::json(nullptr)},
                     {"recommended_batch",
                      r.recommended_batch ? nlohmann::json(*r.recommended_batch) : nlohmann::json(nullptr)}});
      show(j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");  // a path's bytes may not be UTF-8
      return kExitOk;
    }
    std::string table = fmt::format("{} ({} shown, newest first)\n", history_path(history_), runs.size());
    size_t run_width = 24;  // as wide as the longest run shown ("2 epochs, constant rate, interrupted")
    for (const auto& r : runs) run_width = std::max(run_width, run_of(r).size());
    table += fmt::format("{:>5}  {:<20}  {:<8}  {:>7}  {:>7}  {:<{}}  {}\n", "id", "date", "cmd", "fit", "batch", "run",
                         run_width, "workload | device | versions");
    for (const auto& r : runs)
      table += fmt::format("{:>5}  {:<20}  {:<8}  {:>7}  {:>7}  {:<{}}  {} | {} | {}\n", r.id, r.date, r.command,
                           r.fit_batch ? std::to_string(*r.fit_batch) : "-",
                           r.recommended_batch ? std::to_string(*r.recommended_batch) : "-", run_of(r), run_width,
                           r.workload, r.device, r.versions);
    show(table);
    return kExitOk;
  }

 private:
  std::string history_;
  int limit_ = 20;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> history_command() { return std::make_unique<HistoryList>(); }

}  // namespace batchwise::cli

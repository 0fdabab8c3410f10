// batchwise compare: two reports side by side, batch by batch, with ratios.

#include "batchwise/compare.h"
#include "../cli.h"

namespace batchwise::cli {
namespace {

class Compare : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand(
        "compare", "Two reports side by side, batch by batch, with ratios (their sweeps, and their validations' runs)");
    cmd->add_option("reports", files_, "two JSON reports written with --json: A, then B")->required()->expected(2);
    cmd->add_option("--json", json_, "write the comparison as JSON to FILE");
    cmd->footer(
        "Example:\n  batchwise tune --json laptop.json   # on one machine\n"
        "  batchwise tune --json server.json   # on another\n"
        "  batchwise compare laptop.json server.json\n"
        "  batchwise compare validate-a.json validate-b.json   # two validations: each run's time and final "
        "quality");
    return cmd;
  }

  int run() override {
    check_apart({{"--json", json_}}, {{"the first report", files_.at(0)}, {"the second report", files_.at(1)}});
    check_writable(json_, "--json");
    const Comparison c = compare_reports(files_.at(0), files_.at(1));
    // The file first, as every subcommand's: a reader of stdout that is gone (| head) ends batchwise at the table
    if (!json_.empty()) write_file(json_, to_json(c));
    show(to_table(c), names_stdout(json_));  // `--json /dev/stdout | jq`
    return kExitOk;
  }

 private:
  std::vector<std::string> files_;
  std::string json_;
};

}  // namespace

std::unique_ptr<Command> compare_command() { return std::make_unique<Compare>(); }

}  // namespace batchwise::cli

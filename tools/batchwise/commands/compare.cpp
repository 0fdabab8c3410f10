// batchwise compare: two reports side by side, batch by batch, with ratios.
#include <iostream>

#include "../cli.h"
#include "batchwise/compare.h"

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
    (names_stdout(json_) ? std::cerr : std::cout) << to_table(c) << std::flush;  // `--json /dev/stdout | jq`
    if (!json_.empty()) write_file(json_, to_json(c));
    return kExitOk;
  }

 private:
  std::vector<std::string> files_;
  std::string json_;
};

}  // namespace

std::unique_ptr<Command> compare_command() { return std::make_unique<Compare>(); }

}  // namespace batchwise::cli

// The one table of subcommands: main.cpp adds them in this order (that of `batchwise --help`), and the
// tests read them back from `batchwise --help`. To add a subcommand, write its unit in
// this folder (a Command, made by a function like those below) and add its line here.
#include <memory>
#include <vector>

#include "../cli.h"

namespace batchwise::cli {

std::unique_ptr<Command> fit_command();
std::unique_ptr<Command> sweep_command();
std::unique_ptr<Command> tune_command();
std::unique_ptr<Command> validate_command();
std::unique_ptr<Command> loader_command();
std::unique_ptr<Command> doctor_command();
std::unique_ptr<Command> plan_command();
std::unique_ptr<Command> noise_command();
std::unique_ptr<Command> history_command();
std::unique_ptr<Command> compare_command();
std::unique_ptr<Command> report_command();

std::vector<std::unique_ptr<Command>> all_commands() {
  std::vector<std::unique_ptr<Command>> commands;
  for (auto make : {fit_command, sweep_command, tune_command, validate_command, loader_command, doctor_command,
                    plan_command, noise_command, history_command, compare_command, report_command})
    commands.push_back(make());
  return commands;
}

}  // namespace batchwise::cli

// The batchwise command line: each subcommand is a unit under commands/ (its flags, its checks, its
// run); this file only parses, dispatches, starts data-parallel ranks, and maps errors to exit
// codes. The library never prints or exits; the subcommands and this file do both.
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <new>
#include <sstream>
#include <string>
#include <system_error>

#include "batchwise/command.h"
#include "batchwise/device.h"
#include "batchwise/distributed.h"
#include "batchwise/error.h"
#include "batchwise/error_text.h"
#include "batchwise/memory.h"
#include "batchwise/version.h"
#include "cli.h"
#include "launch.h"

namespace {

using namespace batchwise;
using namespace batchwise::cli;

// This process's rank in a data-parallel run (0 otherwise), for its messages.
int env_rank() {
  const char* rank = std::getenv("RANK");
  return rank && std::getenv("WORLD_SIZE") ? std::atoi(rank) : 0;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// Ctrl-C or a kill: a running --cmd trial's process group (its own, out of the terminal's reach)
// goes too, then batchwise ends as the signal says.
void forward_signals_to_the_command() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    if (ignored_signal(sig)) continue;  // started ignored (nohup): it stays so
    struct sigaction action {};
    action.sa_handler = [](int signo) {
      stop_running_command();
      signal(signo, SIG_DFL);
      raise(signo);
    };
    sigaction(sig, &action, nullptr);
  }
}

// Runs the parsed subcommand; every error becomes one line and its exit code (docs/cli.md).
int run_mapping_errors(Command& command, const std::string& who) {
  auto say = [&](const std::string& text) { tell("{}: {}\n", who, text); };
  try {
    return command.run();
  } catch (const ConfigError& e) {
    say(e.what());
    return kExitUsage;
  } catch (const DataError& e) {
    say(e.what());
    return kExitData;
  } catch (const ModelError& e) {
    say(e.what());
    return kExitModel;
  } catch (const DeviceError& e) {
    say(e.what());
    return kExitDevice;
  } catch (const DistributedError& e) {
    say(e.what());
    return kExitDistributed;
  } catch (const Error& e) {
    say(e.what());
    return kExitFailed;
  } catch (const c10::Error& e) {
    say("torch: " + error_text(e));
    return kExitFailed;
  } catch (const std::bad_alloc&) {
    say("out of memory outside any trial (std::bad_alloc): the machine's memory, or a limit on this process's "
        "(ulimit -v), ran out; give a smaller --memory-budget or --max, or more memory");
    return kExitFailed;
  } catch (const std::system_error& e) {
    if (e.code() != std::errc::resource_unavailable_try_again) {
      say(first_line(e.what()));
    } else {  // std::thread's, most often
      say(first_line(e.what()) +
          " (this process could not start a thread: a limit on its memory, ulimit -v, leaves no room for a thread's "
          "stack, or one on its processes, ulimit -u or a container's pids.max, is reached; raise it)");
    }
    return kExitFailed;
  } catch (const std::exception& e) {
    // an error in a TorchScript model outside a trial (noise's steps, validate's runs) had said only the interpreter's
    // preamble, "The following operation failed in the TorchScript interpreter."
    const std::string what = error_text(e);
    // oneDNN's error type carries no more than this; a kernel it could not set up is most often memory it could not get
    say(what == "could not create a primitive"
            ? what +
                  " (oneDNN could not set up a CPU kernel, most often for memory it could not get: a limit on this "
                  "process's memory, ulimit -v, or a container's)"
            : what);
    return kExitFailed;
  }
}

}  // namespace

int main(int argc, char** argv) {
  batchwise::cli::note_ignored_signals();          // before any handler: what the caller ignored (nohup) stays ignored
  batchwise::cli::fill_closed_standard_streams();  // before any file is opened
  keep_freed_host_memory();                        // before the first allocation worth keeping: see memory.h
  // A data-parallel rank (--nproc's, torchrun's) words c10d's failures as one error line: c10d's own log of them, with
  // C++ frames, would bury it. A TORCH_CPP_LOG_LEVEL the user set is kept; Python's torch reads it so too.
  if (std::getenv("WORLD_SIZE") != nullptr) setenv("TORCH_CPP_LOG_LEVEL", "FATAL", /*overwrite=*/0);
  c10::initLogging();
  CLI::App app{
      "batchwise: which batch size should I train with on this hardware, and why?\n"
      "Trains the real model on real data at candidate batch sizes and measures what happens."};
  app.set_version_flag("--version",
                       std::string("batchwise ") + BATCHWISE_VERSION + " (" + BATCHWISE_BUILD_COMMIT + ")");
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok, 1 run failed, 2 bad options, 3 bad dataset, 4 bad model, 5 bad device, "
      "6 no batch fits, 7 a data-parallel rank died or hung.\nExamples:\n"
      "  batchwise tune                                   # lenet on Fashion-MNIST, best device: the answer\n"
      "  batchwise tune --verbose --html report.html      # every table, and the report with charts\n"
      "  batchwise tune --epochs 10 --lr-schedule cosine  # the batch for your 10-epoch cosine run\n"
      "  batchwise tune --model model.pt --input-shape 3x32x32 --dataset synthetic   # your TorchScript model\n"
      "  batchwise tune --cmd --device cuda -- python3 train.py --batch-size {batch} --steps {steps}\n"
      "  batchwise fit --model resnet18 --memory-budget 4GiB --json fit.json   # the largest batch that fits\n"
      "  batchwise compare old.json new.json              # two reports side by side\n"
      "Each subcommand's --help lists its options by section, with examples.");
  const std::vector<std::unique_ptr<Command>> commands = all_commands();
  std::vector<std::pair<CLI::App*, Command*>> by_app;
  for (auto& c : commands) by_app.emplace_back(c->add(app), c.get());
  bound_numeric_flags(app);
  group_options(app);
  app.add_flag_callback(
      "--list-options",
      [&app] {
        show(list_options(app));
        throw CLI::Success();
      },
      "print every option each subcommand accepts, one \"subcommand --flag\" per line (for shell completion)");

  batchwise::cli::note_command_separator(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    // --help, --version, --list-options: what they print is all they do, shown as every answer is
    std::ostringstream out, err;
    const int code = app.exit(e, out, err);
    show(out.str());
    tell_text(err.str());
    if (const std::string failure = stdout_failure(); !failure.empty()) {
      tell("batchwise: error: standard output: writing failed ({}); what it showed is lost\n", failure);
      return kExitUsage;
    }
    return code;
  } catch (const CLI::ParseError& e) {  // one line, as every other usage error
    const auto parsed = app.get_subcommands();
    const std::string name = parsed.empty() ? "" : " " + parsed.front()->get_name();
    if (parsed.empty() && argc > 1 && argv[1][0] != '-') {  // CLI11 says only "A subcommand is required"
      std::vector<std::string> names;
      for (const auto& [sub, c] : by_app) names.push_back(sub->get_name());
      tell("batchwise: '{}' is not a subcommand; use one of {}; see batchwise --help\n", argv[1],
           fmt::join(names, ", "));
      return kExitUsage;
    }
    tell("batchwise{}: {}; see batchwise{} --help\n", name,
         usage_error_text(e.what(), parsed.empty() ? nullptr : parsed.front()), name);
    return kExitUsage;
  }

  for (const std::string& warning : renamed_warnings()) tell("{}\n", warning);
  CLI::App* parsed = app.get_subcommands().front();
  Command* command = nullptr;
  for (const auto& [sub, c] : by_app)
    if (sub == parsed) command = c;
  const std::string name = parsed->get_name();
  if (command->nproc() > 1 && !launched_rank()) {
    // Refused once, before any rank starts, what every rank would refuse: too few GPUs for the ranks.
    GroupAddress host;
    host.world_size = host.local_world_size = command->nproc();
    try {
      // Under a launcher's group (torchrun's WORLD_SIZE) --nproc had started a group of its own in each rank: N x M
      // processes, each rank's report written over the others'
      if (const char* world = std::getenv("WORLD_SIZE"); world && std::atoi(world) > 1)
        throw ConfigError(fmt::format(
            "--nproc {}: WORLD_SIZE={} is set, so a launcher (torchrun) started this process as one of its ranks; "
            "drop --nproc, or run without the launcher",
            command->nproc(), world));
      command->refuse_for_ranks(command->nproc());  // what every rank would refuse, said once
      const std::string device =
          command->device() == "cpu" ? "cpu" : rank_device(command->device(), host, visible_cuda_devices());
      // Ranks on the CPU share its cores: past one each, a rank's step times the others' (1,000 ranks hung
      // a 2-core machine forming the group)
      if (const int cores = usable_cpu_cores(); device == "cpu" && command->nproc() > cores)
        throw ConfigError(
            fmt::format("--nproc {}: more ranks than the {} CPUs this process may keep busy (its affinity mask, "
                        "and its cgroup's CPU quota where one is set); on the CPU each rank needs one of its "
                        "own, or its steps time the others' work: use --nproc {} or fewer",
                        command->nproc(), cores, cores));
    } catch (const ConfigError& e) {
      tell("batchwise {}: {}\n", name, e.what());
      return kExitUsage;
    } catch (const DeviceError& e) {
      tell("batchwise {}: {}\n", name, e.what());
      return kExitDevice;
    }
    return launch_ranks(command->nproc(), argc, argv, command->dist_timeout_s() + 10, kExitDistributed);
  }
  // A rank other than 0 of a data-parallel run says which it is (its input may differ: its device).
  const int rank = env_rank();
  forward_signals_to_the_command();
  const std::string who = rank > 0 ? fmt::format("batchwise {} (rank {})", name, rank) : "batchwise " + name;
  const int code = run_mapping_errors(*command, who);
  // What went to stdout is the answer: lost there, it is an error, as a report that could not be written is
  if (const std::string failure = stdout_failure(); !failure.empty()) {
    tell(
        "{}: error: standard output: writing failed ({}); what it showed is lost: give it a file with room, or a "
        "pipe that is read\n",
        who, failure);
    return code == kExitOk ? kExitUsage : code;
  }
  return code;
}

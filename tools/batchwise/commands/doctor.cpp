// batchwise doctor: the set-up's findings (LibTorch build, BLAS, a GEMM against the CPU's peak,
// threads, CUDA), as a table and JSON.
#include <torch/utils.h>

#include "../cli.h"
#include "batchwise/doctor.h"
#include "batchwise/error.h"

namespace batchwise::cli {
namespace {

class Doctor : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand(
        "doctor", "Check the set-up: LibTorch build, BLAS, a GEMM rate against the CPU's peak, threads, CUDA");
    cmd->add_option("--threads", threads_, "intra-op threads (default: torch's choice)");
    cmd->add_option("--json", json_, "write the findings as JSON to FILE");
    cmd->footer("Example:\n  batchwise doctor\n  batchwise doctor --threads 1   # see what one thread costs");
    cmd_ = cmd;
    return cmd;
  }

  int run() override {
    if (json_.empty() && cmd_->count("--json") > 0)  // it had written nothing, exit 0
      throw ConfigError("--json '': an empty path; give a file's path");
    check_writable(json_, "--json");
    if (threads_ > 0) torch::set_num_threads(threads_);
    const DoctorReport d = run_doctor();
    // The file first, as every subcommand's: a reader of stdout that is gone (| head) ends batchwise at the table
    if (!json_.empty()) write_file(json_, to_json(d));
    show(to_table(d), names_stdout(json_));  // `--json /dev/stdout | jq`
    return kExitOk;
  }

 private:
  CLI::App* cmd_ = nullptr;
  int threads_ = 0;
  std::string json_;
};

}  // namespace

std::unique_ptr<Command> doctor_command() { return std::make_unique<Doctor>(); }

}  // namespace batchwise::cli

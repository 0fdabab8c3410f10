// batchwise report: a saved JSON report drawn as the self-contained HTML page.
#include <fmt/format.h>

#include <filesystem>

#include "../cli.h"
#include "batchwise/error.h"
#include "batchwise/files.h"
#include "batchwise/html.h"

namespace batchwise::cli {
namespace {

class ReportPage : public Command {
 public:
  CLI::App* add(CLI::App& app) override {
    auto* cmd = app.add_subcommand("report", "Draw a JSON report as a self-contained HTML page with charts");
    cmd->add_option("report", report_, "a JSON report written with --json")->required();
    output_ = cmd->add_option("-o,--output", html_, "the HTML file to write (default: the report's name with .html)");
    cmd->footer(
        "Example:\n  batchwise tune --json run.json\n  batchwise report run.json -o report.html   # open it in a "
        "browser");
    return cmd;
  }

  int run() override {
    if (html_.empty() && output_->count() > 0)  // -o '' had written the default file
      throw ConfigError("-o '': an empty path; give a file's path, or leave -o out for the report's name with .html");
    namespace fs = std::filesystem;
    std::error_code error;
    // A pipe or a device, or a descriptor's name (/dev/stdin redirected from a file is one): no name to write beside
    if (html_.empty() && ((fs::exists(report_, error) && !fs::is_regular_file(report_, error) &&
                           !fs::is_directory(report_, error)) ||  // a folder is named as one below, exit 3
                          own_descriptor(followed(report_))))
      throw ConfigError(fmt::format(
          "{}: a stream (a pipe, a device or a descriptor), so it has no name to write the page beside; give -o "
          "FILE (or -o /dev/stdout)",
          report_));  // "/dev/stdin.html" had been written, and "-o /dev/fd/63.html" blamed for what -o never said
    const std::string out = html_.empty() ? fs::path(report_).replace_extension(".html").string() : html_;
    // The page's default name is the report's own (a report named .html): -o was not given, so it is not -o's fault
    if (html_.empty() && fs::path(report_).extension() == ".html")
      throw ConfigError(fmt::format(
          "{}: the page is written beside the report with .html, which is the report's own name here; it would "
          "overwrite what this run reads: give -o FILE",
          report_));
    check_apart({{"-o", out}}, {{"the JSON report", report_}});
    const std::string page = html_from_file(report_);  // a report it cannot read is exit 3, before -o is judged
    // a folder is named as one ("cannot write there (Not a directory)" had been said of /tmp/)
    check_writable(out, "-o");
    write_file(out, page, "-o");
    if (!names_stdout(out)) show(out + "\n");  // the page alone on stdout
    return kExitOk;
  }

 private:
  std::string report_, html_;
  CLI::Option* output_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> report_command() { return std::make_unique<ReportPage>(); }

}  // namespace batchwise::cli

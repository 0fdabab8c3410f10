#pragma once
/// The HTML report: one self-contained page, drawn from a JSON report (docs/report-schema.md), that
/// opens offline. A short answer box comes first (the batch, its confidence, three bullets linking to
/// their evidence); then charts of what the run measured (samples/s with its spread band, the pick and
/// the knee; utilisation over the sweep; peak memory on a log scale with the budget, target and
/// memory-model lines; the memory breakdown), each present only when the report has its data
/// (docs/cli.md says how to read each); then the trial tables and where the run was measured.
/// Chart.js (Debian's libjs-chart.js) is inlined; every string from the report is escaped, so a model
/// or device name cannot inject markup or script.
#include <string>

namespace batchwise {

/// The version of Chart.js inlined into reports, "" when this batchwise was built without it.
std::string chartjs_version();

/// Renders a JSON report (schema "1", as to_json writes it) as an HTML page, from the record
/// report_from_json reads. `source` names the report in error messages. Throws DataError when the
/// text is not a batchwise report or a field has the wrong type, ConfigError when this batchwise was
/// built without Chart.js (saying what to install).
std::string to_html(const std::string& report_json, const std::string& source = "the report");

/// Reads a JSON report from `path` and renders it; DataError names the file when it is missing,
/// unreadable or not a report.
std::string html_from_file(const std::string& path);

}  // namespace batchwise

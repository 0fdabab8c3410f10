#pragma once
/// Reports read the measurement records and never change them (google/benchmark's reporters):
/// one JSON document for programs, one console table for people, from the same Report. The JSON
/// schema is declared once, as the field lists beside the records (fields.h), and documented in
/// docs/report-schema.md.
#include <string>
#include <vector>

#include "batchwise/record.h"

namespace batchwise {

/// The JSON report (schema_version "1"), pretty-printed.
std::string to_json(const Report& report);

/// The inverse of to_json: the record a JSON report holds, for the readers of reports (the HTML page,
/// compare, the history). Lenient about what is missing (a field absent or null keeps its default, so
/// reports from older versions load); members the JSON does not hold keep their defaults, except the
/// fit's and the sweep's budget and target, which are the report's. Throws DataError naming `name`
/// when the text is not JSON, not a batchwise report of schema "1", or has a field of the wrong type
/// (naming the field: "fit.trials[2].batch: expected an integer").
Report report_from_json(const std::string& text, const std::string& name);

/// The console view: a header line, a table per fit and sweep, and the recommendation.
std::string to_table(const Report& report);

/// The short console view (tune without --verbose): the header and its warnings, at most five lines
/// of why (the fit, the knee, the noise scale, what decided, the confidence), then closing_line.
std::string to_summary(const Report& report);

/// The run `report` answered for: "2 epochs, cosine rate" for tune --epochs's run race or validate's
/// full runs ("..., interrupted" where validate was stopped: history and compare show it); "-" where
/// it names none (a batch race answers for its own horizon).
std::string answered_run(const Report& report);
/// Under a stopped validation's table (the console's and the HTML's): what it did not train, "stopped:
/// not trained: 100, 200, the schedule" (its table may have no row at all); "" where it was not stopped.
std::string stopped_line(const ValidationResult& validation);

/// One line with the answer, fields joined by " | ": "answer: batch 64 | lr 0.02, warm-up 937 steps
/// (1 epoch) from 0.01 | batches 16 to 128 about as good | confidence medium"; the lr, range and
/// confidence only where the report has them. Without a recommendation: "answer: none: " and why.
std::string closing_line(const Report& report);

/// A part of a report in which nothing trained: a sweep with no batch that ran to the end, a loader
/// search with no setting that did, or a validation with no run that did (not a stopped one).
struct NothingTrained {
  enum class Part { Sweep, Loader, Validation, RunRace };
  Part part = Part::Sweep;
  bool out_of_memory = false;  ///< every one ran out of memory (the CLI's exit 6; else 1)
  /// The report's warning, naming how many ended how ("" for a loader search: its advice says so).
  std::string warning;
};
/// The parts of `report` in which nothing trained, in the order above: the CLI's exit code and the
/// Python API's warnings read them, so that both say the same. The run race's where its reference
/// diverged (RunRace::reference_diverged) and tune answered none for it.
std::vector<NothingTrained> nothing_trained(const Report& report);

}  // namespace batchwise

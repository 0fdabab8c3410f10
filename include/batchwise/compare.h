#pragma once
/// Two reports of the same workload side by side (two machines, versions or settings), batch by
/// batch with ratios, in the spirit of google/benchmark's compare.py: `batchwise compare a.json b.json`.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace batchwise {

/// One batch size as each report measured it; a side is empty when that report has no such point.
struct ComparedPoint {
  int64_t batch = 0;
  std::string outcome_a, outcome_b;                        ///< "" when the report has no point at this batch
  std::optional<double> samples_per_s_a, samples_per_s_b;  ///< set for "ok" points
  std::optional<int64_t> peak_bytes_a, peak_bytes_b;
  /// Each side's spread at this batch: its step times' interquartile range over their median.
  std::optional<double> spread_a, spread_b;
  /// samples_per_s_b / samples_per_s_a, when both ran ok; above 1: B is faster.
  std::optional<double> speed_ratio() const;
  /// The ratio, or its inverse, is within 1 + the larger of the two spreads: what the two runs
  /// measured cannot tell them apart (the same verdict whichever report is A).
  bool within_noise() const;
};

/// One run of two validations (validate, tune --validate) at the same batch, or the same batch-size
/// schedule: its training time and final quality in each; a side is empty where that validation
/// did not train it.
struct ComparedRun {
  int64_t batch = 0;
  std::string schedule;  ///< a batch-size schedule's run ("64:0,256:2"); "" for a fixed batch
  /// The training time of a full run that finished, or of a run that reached the target.
  std::optional<double> train_s_a, train_s_b;
  /// A full run's final quality; a target's run's last evaluation (where it reached the target or stopped).
  std::optional<double> final_accuracy_a, final_accuracy_b, final_loss_a, final_loss_b;
  /// How its validation judged it: "best", "good", "worse" (full runs), "reached", "not reached"
  /// (a target), "not finished", "failed", "not trained" (stopped first); "" where it was not a candidate.
  std::string verdict_a, verdict_b;
  /// train_s_a / train_s_b, where both are set: above 1, B trained the run faster (as speed_ratio).
  std::optional<double> speed_ratio() const;
};

/// A context or workload field that differs between the reports (model, device, torch, threads...).
struct ComparedField {
  std::string name, a, b;
};

struct Comparison {
  std::string name_a, name_b;              ///< the files
  std::vector<ComparedField> differences;  ///< only the fields that differ
  std::optional<int64_t> fit_batch_a, fit_batch_b;
  /// Each report's fit's outcome (fit.outcome's spelling), where it has a fit: one without a batch found none that
  /// fits ("does_not_fit"), or none that trained ("error").
  std::optional<std::string> fit_outcome_a, fit_outcome_b;
  /// The fit's batch is the --max it searched up to (FitResult::limited_by_max), not the largest that fits.
  bool fit_limited_a = false, fit_limited_b = false;
  std::optional<int64_t> recommended_a, recommended_b;
  /// The answers of a noise or loader report, as text ("-" for a report without one; both empty where neither
  /// has one): the critical batch with its band and where it was measured, or the pipeline setting chosen.
  std::string noise_a, noise_b, loader_a, loader_b;
  std::vector<ComparedPoint> points;  ///< every batch either sweep measured, ascending
  /// Geometric mean of speed_ratio() over the batches both ran ok; none without such a batch.
  std::optional<double> geomean_speed_ratio;
  /// The validations' runs, fixed batches ascending, then a schedule's; empty where neither report
  /// has a validation. And each validation's answer: its fastest good batch (its fastest to the target).
  std::vector<ComparedRun> runs;
  std::optional<int64_t> validated_a, validated_b;
  /// Where the comparison may mislead: the reports train different workloads, every ratio is within
  /// the runs' noise, or the validations trained different runs or time each run once.
  std::vector<std::string> warnings;
};

/// Reads two JSON reports (schema "1", through report_from_json) and compares them. Throws DataError
/// naming the file that is missing, not JSON, not a batchwise report, or has a field of the wrong type.
Comparison compare_reports(const std::string& path_a, const std::string& path_b);

/// The comparison as a table for people.
std::string to_table(const Comparison& comparison);
/// The comparison as JSON for programs (documented in docs/report-schema.md).
std::string to_json(const Comparison& comparison);

}  // namespace batchwise

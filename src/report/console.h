#pragma once
// The console reports' shared parts (report.cpp's tables, summary.cpp's short answer).
#include <fmt/format.h>

#include <string>
#include <utility>

#include "batchwise/record.h"
#include "batchwise/units.h"

namespace batchwise::detail {

/// A console report's lines, trailing spaces trimmed (an empty note column leaves none).
class Lines {
 public:
  void operator()(std::string s) {
    s.erase(s.find_last_not_of(' ') + 1);
    out_ += s + "\n";
  }
  std::string text() && { return std::move(out_); }

 private:
  std::string out_;
};

/// "the N training samples" a trial's batch draws from without repeating (per_device_training_samples), data-parallel
/// "the N training samples a rank takes (of M over W ranks)".
inline std::string training_set_text(const Report& r) {
  const int64_t n = per_device_training_samples(r);
  return r.distributed && r.distributed->world_size > 1
             ? fmt::format("the {} training samples a rank takes (of {} over {} ranks)", n, r.workload.dataset_size,
                           r.distributed->world_size)
             : fmt::format("the {} training samples", n);
}

/// The header: version and device, the workload, the budget, data-parallel ranks, and every warning.
void header_table(Lines& line, const Report& r);

/// The tables a flag asked for (--compare-precision, --profile, --validate, --plan-for), and the
/// loader search (it runs only when the answer waits for its data): the short answer prints them too.
void requested_tables(Lines& line, const Report& r);

/// A loader search's row note, for the console's table and the HTML's: "given" (the setting given),
/// "input-bound", `use` at the setting chosen, and the message of one that did not train.
std::string loader_note(const LoaderSearch& l, const LoaderTrial& t, bool given, const std::string& use);

/// The workload's precision as trained: "fp32", or "fp32, parameters in bfloat16" for a model built in
/// another type (it trains in it whatever the autocast precision), for the console's header and the HTML.
inline std::string precision_text(const WorkloadInfo& w) {
  return w.parameter_dtype.empty() || w.parameter_dtype == "float32"
             ? w.precision
             : w.precision + ", parameters in " + w.parameter_dtype;
}

/// "650 trainable" where some of the workload's parameters are frozen, else "": for the console's header
/// ("3,786 parameters (14.8 KiB), 650 trainable") and the HTML ("3,786 (650 trainable)").
inline std::string trainable_text(const WorkloadInfo& w) {
  return w.trainable_parameter_count && *w.trainable_parameter_count != w.parameter_count
             ? format_grouped(static_cast<double>(*w.trainable_parameter_count)) + " trainable"
             : std::string();
}

/// "time: 28 s in all: fit 1.8 s, sweep 4.9 s, noise scale 1.3 s, race 19.7 s" (tune's timing).
std::string timing_line(const TuneTiming& t);
/// What a tune that took longer than the most it stated says of it (the text and the HTML), "" where it did not: the
/// most is a ceiling only while the machine trains as fast as the fit's steps said, and another process on the cores
/// passes it. Past it by 1 % at least, so that the ratio beside it, to two decimals, reads above 1.00.
inline std::string past_the_most(const TuneTiming& t) {
  return t.at_most_s > 0 && t.total_s >= 1.01 * t.at_most_s
             ? "past the most stated, which holds while the machine trains as fast as the fit's steps measured"
             : "";
}

}  // namespace batchwise::detail

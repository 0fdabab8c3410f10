// tune's phases after the answer (follow_ups.cpp), each reading what the report holds and adding its
// own record; tune() (tune.cpp) calls them in this order.
#pragma once

#include "batchwise/tune.h"

namespace batchwise::detail {

/// The recommended batch waits for its input: the loader setting that feeds it (report.loader), and
/// a warning naming it; data-parallel, only the warning (each rank's pipeline is its own).
void follow_loader(const TuneSubject& subject, const TuneOptions& o, Report& report);

/// The recommendation, the knee, and half and twice the recommendation trained to the target (or
/// for the run, with halvings below the best), and the recommendation confirmed by what they show.
void validate_around(const TuneSubject& subject, const TuneOptions& o, Report& report);

/// A stop asked in the validation (the CLI's Ctrl-C): no phase trains after it.
bool stop_asked(const TuneOptions& o, const Report& report);

/// The learning rate at the recommended batch: the one a validation or a race trained it with, else
/// a range test's, else the rule's; fitted to the run where --epochs names one.
void learning_rate(const TuneSubject& subject, const TuneOptions& o, Report& report);

/// The run plan: the base setting, the batch to train with, and the others as good as it.
void plan_the_run(const TuneSubject& subject, const TuneOptions& o, Report& report);

/// Every precision this device trains in, at the recommended batch; releases the subject's workload.
void compare_precisions(TuneSubject& subject, const TuneOptions& o, Report& report);

}  // namespace batchwise::detail

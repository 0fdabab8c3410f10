#pragma once
/// The whole public API in one include. Layered bottom-up: the engine (a workload, one trial, its
/// memory, devices, data, models), the searches over it (fit, sweep, tune), the advice (noise scale,
/// goodput, learning rate, the batch race, validation, the doctor, the input-pipeline search), the
/// other trial runners (a user's command, data-parallel ranks), and the reports that read them all.
/// Example: `#include <batchwise/batchwise.h>` then
/// `batchwise::tune(batchwise::TuneSubject(*workload), batchwise::TuneOptions())`.

// engine
#include "batchwise/choices.h"
#include "batchwise/context.h"
#include "batchwise/data.h"
#include "batchwise/device.h"
#include "batchwise/error.h"
#include "batchwise/error_text.h"
#include "batchwise/files.h"
#include "batchwise/memory.h"
#include "batchwise/models.h"
#include "batchwise/noise.h"
#include "batchwise/outcome.h"
#include "batchwise/trial.h"
#include "batchwise/units.h"
#include "batchwise/utilisation.h"
#include "batchwise/workload.h"
// searches
#include "batchwise/fit.h"
#include "batchwise/sweep.h"
// advice
#include "batchwise/accumulation.h"
#include "batchwise/advice.h"
#include "batchwise/convergence.h"
#include "batchwise/doctor.h"
#include "batchwise/loader.h"
#include "batchwise/recommend.h"
#include "batchwise/validate.h"
// the whole tune, and the record it returns
#include "batchwise/record.h"
#include "batchwise/tune.h"
// other runners
#include "batchwise/command.h"
#include "batchwise/command_runner.h"
#include "batchwise/distributed.h"
// reports
#include "batchwise/compare.h"
#include "batchwise/history.h"
#include "batchwise/html.h"
#include "batchwise/report.h"
#include "batchwise/trace.h"
// progress for a caller that logs it
#include "batchwise/log_throttle.h"

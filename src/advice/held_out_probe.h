// The held-out set's first samples through the model before a race or a validation trains: data the
// model cannot take is a DataError naming the set, at once (a library caller's held-out data of another
// width had surfaced as torch's "mat1 and mat2 shapes cannot be multiplied" from inside validate).
#pragma once

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include "batchwise/data.h"
#include "batchwise/error.h"
#include "batchwise/workload.h"
#include "check.h"
#include "torch_error.h"

namespace batchwise::detail {

inline void probe_held_out(ModuleWorkload& w, const Dataset& held_out) {
  if (held_out.size() == 0) return;  // refused by name where it is needed
  try {
    (void)w.evaluate(head(held_out, 2));  // eval mode, no gradient: nothing trains
  } catch (const c10::OutOfMemoryError&) {
    throw;                         // the device's memory, not the samples' kind
  } catch (const c10::Error& e) {  // torch's checks of shapes and types; not oneDNN's nor an allocator's failures
    throw DataError(
        fmt::format("{}: the model cannot evaluate its first samples ({}); give held-out data of the "
                    "kind the training data is",
                    held_out.name, error_line(plain_what(e))));
  }
}

}  // namespace batchwise::detail

// The held-out set's first samples through the model before anything is judged on them: data the
// model cannot take is said at once, naming the set (a library caller's held-out data of another width
// had surfaced as torch's "mat1 and mat2 shapes cannot be multiplied" from inside validate). The CLI's
// test split (check_held_out), validate and both races ask it.
#pragma once

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <optional>
#include <string>

#include "batchwise/data.h"
#include "batchwise/error.h"
#include "batchwise/workload.h"
#include "check.h"
#include "engine/data_readers.h"
#include "torch_error.h"

namespace batchwise::detail {

/// Why the model cannot evaluate `held_out`'s first two samples (torch's own checks of shapes and
/// types), or nullopt where it can, or the set is empty. Out of memory, and a failure that is not
/// torch's check (oneDNN's "could not create a primitive", an allocator's), go on to the caller: they
/// are not the samples' kind.
inline std::optional<std::string> held_out_refusal(ModuleWorkload& w, const Dataset& held_out) {
  if (held_out.size() == 0) return std::nullopt;  // refused by name where it is needed
  try {
    (void)w.evaluate(head(held_out, 2));  // eval mode, no gradient: nothing trains
    return std::nullopt;
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::Error& e) {
    return error_line(plain_what(e));
  }
}

/// held_out_refusal as validate and the races say it: a DataError naming the set; and its values that are not finite
/// numbers where the loss on them is not (every evaluation that met them had read NaN).
inline void probe_held_out(ModuleWorkload& w, const Dataset& held_out) {
  if (const auto why = held_out_refusal(w, held_out))
    throw DataError(
        fmt::format("{}: the model cannot evaluate its first samples ({}); give held-out data of the "
                    "kind the training data is",
                    held_out.name, *why));
  if (held_out.size() > 0)
    refuse_values_the_loss_cannot_take(w, held_out, held_out.name.empty() ? "the held-out data" : held_out.name,
                                       cpp_repair);
}

}  // namespace batchwise::detail

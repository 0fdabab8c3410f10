#pragma once
/// How a trial ended, whoever ran it: this process (run_trial), a user's command (CommandRunner) or
/// every rank of a data-parallel group (DistributedRunner). Out of memory and a timeout are
/// results, not exceptions.
#include <array>

namespace batchwise {

enum class Outcome { Ok, Oom, Error, Timeout };

/// "ok", "oom", "error", "timeout" (the JSON spelling).
const char* to_string(Outcome outcome);
/// Every Outcome, for readers that parse the spelling back (the report reader).
constexpr std::array<Outcome, 4> enum_values(Outcome) {
  return {Outcome::Ok, Outcome::Oom, Outcome::Error, Outcome::Timeout};
}

}  // namespace batchwise

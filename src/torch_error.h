#pragma once
// Messages of exceptions thrown from inside torch, without the C++ stack trace c10::Error appends.
#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <utility>

#include "batchwise/trial.h"
#include "check.h"

namespace batchwise::detail {

inline std::string plain_what(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

/// What a failure inside a training step was, with its first line: out of memory when torch says so
/// by type (c10::OutOfMemoryError), or when cuDNN or cuBLAS report a failed workspace allocation
/// (a plain c10::Error; no type exists for it, so their status names are recognised); anything
/// else is an error. The one classifier of in-process trials, single-process and data-parallel.
/// A TorchScript model's out-of-memory reaches us as the interpreter's plain error around the
/// original's text, its type lost: the allocators' own messages are recognised in it.
inline std::pair<Outcome, std::string> classify_failure(const std::exception& e) {
  const std::string full = plain_what(e);
  std::string message = error_line(full);
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return {Outcome::Oom, std::move(message)};
  bool oom = false;
  for (const char* says : {"CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED", "CUDA error: out of memory",
                           "CUDA out of memory", "CPU memory budget exceeded", "host out of memory allocating"})
    oom = oom || full.find(says) != std::string::npos;
  return {oom ? Outcome::Oom : Outcome::Error, std::move(message)};
}

}  // namespace batchwise::detail

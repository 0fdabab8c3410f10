#pragma once
// Messages of exceptions thrown from inside torch, without the C++ stack trace c10::Error appends.
#include <c10/util/Exception.h>

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "batchwise/trial.h"
#include "check.h"

namespace batchwise::detail {

inline std::string plain_what(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

/// The number right after `after` in `text`, or "" (no <regex> in a header this widely included).
inline std::string number_after(const std::string& text, const std::string& after) {
  const size_t at = text.find(after);
  if (at == std::string::npos) return "";
  size_t end = at + after.size();
  while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
  return text.substr(at + after.size(), end - at - after.size());
}

/// What to do about two failures a new user meets first: a model whose first convolution takes
/// another number of channels than the data has, and BatchNorm at a batch of 1. "" otherwise.
inline std::string failure_hint(const std::string& full) {
  if (full.find("Expected more than 1 value per channel") != std::string::npos)
    return "; BatchNorm cannot train on one value per channel (a batch of 1): pass --min 2 or more";
  const std::string wants = number_after(full, "] to have "), has = number_after(full, " channels, but got ");
  if (!wants.empty() && !has.empty())
    return "; the model's first layer takes " + wants + " channels and the data has " + has +
           ": export the model for " + has + " (examples/export_torchscript.py --in-channels " + has +
           "), or give data with " + wants + " channels";
  return "";
}

/// What a failure inside a training step was, with its first line: out of memory when torch says so
/// by type (c10::OutOfMemoryError), or when cuDNN or cuBLAS report a failed workspace allocation
/// (a plain c10::Error; no type exists for it, so their status names are recognised); anything
/// else is an error. The one classifier of in-process trials, single-process and data-parallel.
/// A TorchScript model's out-of-memory reaches us as the interpreter's plain error around the
/// original's text, its type lost: the allocators' own messages are recognised in it. The message
/// ends with failure_hint's advice where there is some. says_out_of_memory: whether a message is one of
/// those allocators' (an exception from Python, a RuntimeError of cuBLAS's, is read by it too).
inline bool says_out_of_memory(const std::string& text) {
  for (const char* says : {"CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED", "CUDA error: out of memory",
                           "CUDA out of memory", "CPU memory budget exceeded", "host out of memory allocating"})
    if (text.find(says) != std::string::npos) return true;
  return false;
}

/// Whether a message is the tracking allocator's for an allocation the system refused below the budget.
inline bool says_host_refused(const std::string& text) {
  return text.find("host out of memory allocating") != std::string::npos;
}

inline std::pair<Outcome, std::string> classify_failure(const std::exception& e) {
  const std::string full = plain_what(e);
  std::string message = error_line(full) + failure_hint(full);
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return {Outcome::Oom, std::move(message)};
  // The process's own allocation failed (an address-space limit, ulimit -v; the machine's memory): no
  // budget stopped it, but it is out of memory all the same
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return {Outcome::Oom,
            "the process could not allocate memory (std::bad_alloc): the machine's memory, or a limit "
            "on the process's (ulimit -v), ran out before the budget"};
  return {says_out_of_memory(full) ? Outcome::Oom : Outcome::Error, std::move(message)};
}

/// Whether a failure outside a trial's own accounting is memory running out, for a phase that goes on without its
/// figure (tune's noise scale, the run race's): out of memory as classify_failure reads it, or oneDNN's "could not
/// create a primitive", a kernel it could not set up, most often for memory it could not get (ulimit -v).
inline bool ran_out_of_memory(const std::exception& e) {
  return classify_failure(e).first == Outcome::Oom || std::string(e.what()) == "could not create a primitive";
}

}  // namespace batchwise::detail

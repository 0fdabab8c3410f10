#pragma once
// What the CLI says on its standard streams: lines to stderr that never end a run, and text to stdout whose
// failure is kept and said at the end (a light header: launch.cpp includes it without the library's).
#include <fmt/format.h>

#include <string>
#include <utility>

namespace batchwise::cli {

/// A line (or a part of one) to standard error. A stderr that cannot be written (closed, on a full disk, a pipe
/// whose reader is gone) loses the text, never the run: fmt::print's throw had ended runs in std::terminate,
/// their reports and history unwritten.
void tell_text(const std::string& text) noexcept;
template <typename... T>
void tell(fmt::format_string<T...> format, T&&... args) {
  tell_text(fmt::format(format, std::forward<T>(args)...));
}

/// Text to standard output (a table, a listing), or to standard error where a report takes stdout (`--json
/// /dev/stdout | jq` reads the JSON alone). A failure to write stdout is kept with its reason for
/// stdout_failure(): an answer lost to a full disk or a closed stdout had ended in exit 0, unsaid.
void show(const std::string& text, bool to_stderr = false);
/// Why standard output could not be written, if it could not: flushes it first. "" where all went.
std::string stdout_failure();
/// Descriptors 0-2 the caller closed (`>&-`) opened on /dev/null, so that no file this run opens takes one's
/// number and gets the table written into it; standard output closed so is a failure once show() writes there.
void fill_closed_standard_streams();

}  // namespace batchwise::cli

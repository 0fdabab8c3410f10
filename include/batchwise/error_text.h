#pragma once
/// What an exception says, in one line, for a message to a person: the line of its message that names what
/// went wrong. An error raised inside the TorchScript interpreter opens with its preamble ("The following
/// operation failed in the TorchScript interpreter."); its cause is its last "...Error: ..." line. Torch's
/// backtrace is left out.
#include <exception>
#include <string>

namespace batchwise {

std::string error_text(const std::exception& e);

}  // namespace batchwise

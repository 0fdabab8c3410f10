// The `--cmd` line protocol and the out-of-memory texts of the frameworks a command may run. To
// recognise another framework's out-of-memory text, add it to kOomMarkers.
#include "protocol.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iterator>

#include "parse_number.h"

namespace batchwise {

namespace {

// A child's exceptions reach us only as text, so here (unlike in-process trials, which catch
// c10::OutOfMemoryError by type) out-of-memory is recognised by its message.
constexpr const char* kOomMarkers[] = {
    "DefaultCPUAllocator: can't allocate memory",  // PyTorch CPU
    "CUDA out of memory",                          // PyTorch CUDA
    "OutOfMemoryError",                            // torch.OutOfMemoryError, torch.cuda.OutOfMemoryError
    "MemoryError",                                 // Python
    "ResourceExhaustedError",                      // TensorFlow
    "OOM when allocating",                         // TensorFlow
    "RESOURCE_EXHAUSTED",                          // JAX / XLA
    "std::bad_alloc",                              // C++
    "Cannot allocate memory",                      // ENOMEM
};

bool integer(const std::string& value, int64_t& out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < 0) return false;
  out = v;
  return true;
}

// A finite number, locale-free ("1.5" under a comma-decimal locale too); with `positive`, above 0.
void real(const std::string& value, std::optional<double>& out, bool positive = false) {
  double v = 0;
  if (detail::parse_double(value, v) && (!positive || v > 0)) out = v;
}

// NaN or infinity as Python, NumPy and C print them ("nan", "inf", "-inf", "Infinity", "NaN").
bool not_finite(std::string value) {
  for (auto& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!value.empty() && (value[0] == '-' || value[0] == '+')) value.erase(0, 1);
  return value == "nan" || value == "inf" || value == "infinity";
}

}  // namespace

bool is_oom_message(const std::string& line) {
  return std::any_of(std::begin(kOomMarkers), std::end(kOomMarkers),
                     [&](const char* marker) { return line.find(marker) != std::string::npos; });
}

namespace detail {

bool ProtocolParser::line(const std::string& text, Clock::time_point at) {
  static const std::string kPrefix = "batchwise:";
  if (text.compare(0, kPrefix.size(), kPrefix) != 0) {
    // The first line that names an out-of-memory error; an indented one (a traceback's source line, such
    // as "    except torch.OutOfMemoryError:") gives way to a later one at the margin, the exception's.
    const auto indented = [](const std::string& t) { return !t.empty() && (t[0] == ' ' || t[0] == '\t'); };
    if ((r_.oom_message.empty() || (indented(r_.oom_message) && !indented(text))) && is_oom_message(text)) {
      r_.oom_message = text.substr(0, 300);
      r_.oom_message_step = r_.steps_seen;
    }
    return false;
  }
  ++r_.protocol_lines;
  bool step = false;
  int64_t samples = r_.batch, batch = 0;
  std::optional<std::string> bad_loss;  // a loss printed as nan or inf
  size_t pos = kPrefix.size();
  while (pos < text.size()) {
    const size_t begin = text.find_first_not_of(" \t", pos);
    if (begin == std::string::npos) break;
    const size_t end = std::min(text.find_first_of(" \t", begin), text.size());
    const std::string token = text.substr(begin, end - begin);
    pos = end;
    const size_t eq = token.find('=');
    if (eq == std::string::npos) {
      step = step || token == "step";
      continue;
    }
    const std::string key = token.substr(0, eq), value = token.substr(eq + 1);
    // A throughput or a step of no samples is no measurement (fuzzing found samples_per_s=-143e96
    // taken as the trial's figure): such values are malformed, and ignored as the others are.
    if (key == "samples") {
      int64_t n = 0;
      if (integer(value, n) && n > 0) samples = n;
    } else if (key == "batch") {
      int64_t n = 0;
      if (integer(value, n) && n > 0) batch = n;
    } else if (key == "uncounted") {
      if (!value.empty() && r_.uncounted_batch.empty()) r_.uncounted_batch = value.substr(0, 60);
    } else if (key == "reporter") {
      if (!value.empty()) r_.reporter = value.substr(0, 40);
    } else if (key == "loss") {
      real(value, r_.loss);
      if (!r_.first_loss) r_.first_loss = r_.loss;
      if (not_finite(value)) bad_loss = value;
    } else if (key == "samples_per_s") {
      real(value, r_.reported_samples_per_s, true);
    } else if (key == "peak_bytes") {
      int64_t bytes = -1;
      if (integer(value, bytes)) r_.reported_peak_bytes = std::max(bytes, r_.reported_peak_bytes.value_or(0));
    }
  }
  if (bad_loss && !r_.non_finite_loss) {  // the first one: the step it ends, or the last step before it
    r_.non_finite_loss = true;
    r_.non_finite_loss_text = *bad_loss;
    r_.non_finite_loss_step = r_.steps_seen + (step ? 1 : 0);
  }
  if (!step) return false;
  ++r_.steps_seen;
  if (r_.steps_seen > r_.warmup) {
    r_.step_times_s.push_back(std::chrono::duration<double>(at - last_step_).count());
    r_.step_samples.push_back(samples);
    r_.step_batches.push_back(batch);
  }
  last_step_ = at;
  return true;
}

}  // namespace detail
}  // namespace batchwise

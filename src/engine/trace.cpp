#include "batchwise/trace.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>

#include "batchwise/files.h"
#include "batchwise/workload.h"
#include "check.h"
#include "torch_error.h"

namespace batchwise {

namespace {

namespace prof = torch::profiler::impl;
namespace kineto = torch::autograd::profiler;

// Kineto's profiler for the scope of one step, turned off on every way out. Kineto, not the legacy
// profiler: the legacy one times operators as the host dispatches them, and on CUDA a launch
// returns long before its kernel has run, so its durations were the host's, not the device's.
// With CUDA activity Kineto adds each kernel and copy with its device time (through CUPTI).
class KinetoScope {
 public:
  explicit KinetoScope(bool cuda) {
    const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
    std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
    if (cuda) activities.insert(prof::ActivityType::CUDA);
    kineto::prepareProfiler(config, activities);  // CUPTI's set-up, outside the profiled step
    kineto::enableProfiler(config, activities);
    enabled_ = true;
  }
  std::unique_ptr<kineto::ProfilerResult> finish() {
    enabled_ = false;
    return kineto::disableProfiler();
  }
  ~KinetoScope() {
    if (!enabled_) return;
    try {
      (void)kineto::disableProfiler();
    } catch (const std::exception&) {  // the step's own failure is the one to report
    }
  }
  KinetoScope(const KinetoScope&) = delete;
  KinetoScope& operator=(const KinetoScope&) = delete;

 private:
  bool enabled_ = false;
};

}  // namespace

std::string trace_file(const std::string& path) {
  namespace fs = std::filesystem;
  // A descriptor's name (/dev/stdout, /dev/fd/1, /proc/self/fd/1) is no file to rename a trace onto: its link
  // names whatever the descriptor holds (a file the shell opened for stdout had been replaced by the trace)
  const std::string at = followed(path);
  const bool descriptor =
      own_descriptor(at) || at == "/dev/stdin" || at.rfind("/dev/fd/", 0) == 0 || at.rfind("/proc/", 0) == 0;
  std::error_code error;
  const auto status = fs::status(at, error);
  BATCHWISE_CHECK(!descriptor && (!fs::exists(status) || fs::is_regular_file(status)), ConfigError,
                  "--trace {}: not a file (a trace is read back once written, and renamed into place); give a "
                  "file's path, e.g. trace.json",
                  path);
  return at;
}

StepTrace write_step_trace(Workload& workload, int64_t batch, const std::string& path, int warmup) {
  BATCHWISE_CHECK(batch >= 1 && warmup >= 0, ConfigError, "--trace: batch {} and warm-up {} cannot be traced", batch,
                  warmup);
  // Saved under a name of this call's own beside it, its events counted there, and renamed into place whole: the
  // user's file is replaced by a whole trace only (a probe had truncated it first, and another run's trace at the
  // same path was read back as this one's)
  FileReplacement file(trace_file(path), "--trace " + path);
  // Kineto writes its own "<name>.tmp" and renames it onto the name: where a write failed (a full disk) it stays
  const std::string kineto_part = file.temporary() + ".tmp";
  struct RemovePart {
    const std::string& part;
    ~RemovePart() {
      std::error_code ignored;
      std::filesystem::remove(part, ignored);
    }
  } remove_part{kineto_part};
  const bool cuda = workload.device().is_cuda();
  const auto saved = workload.save_state();
  std::string failure;
  try {
    for (int i = 0; i < warmup; ++i) (void)workload.train_step(workload.next_batch(batch)).item<double>();
    std::unique_ptr<kineto::ProfilerResult> result;
    {
      KinetoScope scope(cuda);
      // item() waits for the device, so every kernel of the step has run before the profiler stops.
      (void)workload.train_step(workload.next_batch(batch)).item<double>();
      result = scope.finish();
    }
    result->save(file.temporary());
  } catch (const std::exception& e) {
    failure = detail::error_line(detail::plain_what(e));
  }
  workload.restore_state(*saved);
  BATCHWISE_CHECK(failure.empty(), Error, "--trace: the profiled step at batch {} failed: {}", batch, failure);

  // A part left behind, or a file cut short (its last flush failed after Kineto renamed it), is a write that did
  // not end: the disk, not Kineto (it had been "this build of torch may lack Kineto", exit 1, the part left beside
  // the trace's path)
  std::error_code error;
  std::ifstream in(file.temporary(), std::ios::binary);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  in.close();
  const nlohmann::json trace = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  // Kineto names the trace after the file it wrote, this call's own name beside the path: the path's, as the viewer
  // shows it (it had read "t.json.coCvum")
  const auto quoted = [](const std::string& s) {  // a path that is not UTF-8 written as Kineto would not: no match
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  const std::string named = "\"traceName\": " + quoted(file.temporary());
  bool renamed = true;
  if (const size_t at = text.rfind(named); !trace.is_discarded() && at != std::string::npos) {
    text.replace(at, named.size(), "\"traceName\": " + quoted(path));
    std::ofstream out(file.temporary(), std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    renamed = out.good();
  }
  const bool cut_short = trace.is_discarded() && std::filesystem::file_size(file.temporary(), error) > 0 && !error;
  BATCHWISE_CHECK(renamed && !cut_short && !std::filesystem::exists(kineto_part, error), ConfigError,
                  "--trace {}: writing the trace failed (is the disk full?); free some space, or give a path on "
                  "another disk",
                  path);
  const nlohmann::json* events =
      trace.is_object() && trace.contains("traceEvents") ? &trace.at("traceEvents") : nullptr;
  BATCHWISE_CHECK(events && events->is_array() && !events->empty(), Error,
                  "--trace {}: LibTorch's profiler wrote no events; this build of torch may lack Kineto", path);
  file.commit();
  StepTrace out;
  out.events = static_cast<int64_t>(events->size());
  for (const auto& e : *events)
    if (e.is_object() && e.value("cat", "") == "kernel") ++out.kernel_events;
  if (cuda && out.kernel_events == 0)
    out.note =
        "no GPU kernel in the trace: Kineto could not record CUDA activity (CUPTI missing or in use by "
        "another profiler), so it shows the host's dispatch of each operator only, not its time on the device";
  return out;
}

}  // namespace batchwise

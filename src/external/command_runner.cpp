#include "batchwise/command_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string_view>

#include "batchwise/memory.h"
#include "batchwise/units.h"
#include "check.h"
#include "nvml.h"

namespace batchwise {

std::string command_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) {
    if (!line.empty()) line += ' ';
    // Bare only where a shell reads the word as itself (shlex.quote's set, and braces without a comma, so
    // {batch} stays readable; {a,b} and {1..3} expand): `$`, `;`, `*`, `&` or a newline inside quotes, as a shell would
    // need them.
    const bool braces_expand = (a.find(',') != std::string::npos || a.find("..") != std::string::npos) &&
                               a.find_first_of("{}") != std::string::npos;
    const bool bare = !a.empty() && !braces_expand && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             std::string_view("_@%+=:,./-{}").find(c) != std::string_view::npos;
    });
    if (bare) {
      line += a;
      continue;
    }
    line += '\'';  // a ' inside ends the quotes, is escaped, and opens them again (it had ended them early)
    for (char c : a) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

CommandRunner::CommandRunner(std::vector<std::string> argv, const std::string& device, CommandEnvironment env)
    : argv_(std::move(argv)), env_(std::move(env)) {
  BATCHWISE_CHECK(!argv_.empty(), ConfigError,
                  "--cmd: no command; give it after --, e.g. --cmd -- python train.py --batch-size {{batch}}");
  (void)substitute(argv_, 1, 1);  // an unknown {placeholder} is a ConfigError now, not at the first trial
  const auto& nvml = detail::shared_nvml();
  const bool any_gpu = nvml.available() && nvml.index_of_cuda_device(0).has_value();
  const std::string wanted = device == "auto" ? (any_gpu ? "cuda" : "cpu") : device;
  if (wanted.rfind("cuda", 0) == 0) {
    cuda_ = true;
    const std::string index = wanted.size() > 5 && wanted[4] == ':' ? wanted.substr(5) : "";
    BATCHWISE_CHECK(wanted == "cuda" || (!index.empty() && index.size() <= 3 &&
                                         index.find_first_not_of("0123456789") == std::string::npos),
                    ConfigError, "--device {} with --cmd: choose cpu, cuda, cuda:N or auto", device);
    cuda_index_ = index.empty() ? 0 : std::stoi(index);
    BATCHWISE_CHECK(nvml.available() && nvml.device_count() > 0, DeviceError,
                    "--device {} with --cmd: the command's device memory is read through NVML, which {}; use "
                    "--device cpu, or run where the NVIDIA driver is installed",
                    device, nvml.available() ? fmt::format("finds {} device(s)", nvml.device_count()) : nvml.reason());
    const std::optional<int> mapped = nvml.index_of_cuda_device(cuda_index_);
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    BATCHWISE_CHECK(mapped.has_value(), DeviceError,
                    "--device {} with --cmd: NVML finds {} device(s), none of them the command's CUDA device {}{}; "
                    "give an index the command can see",
                    device, nvml.device_count(), cuda_index_,
                    visible ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", visible) : std::string());
    nvml_index_ = *mapped;
  } else {
    BATCHWISE_CHECK(wanted == "cpu", ConfigError, "--device {} with --cmd: choose cpu, cuda, cuda:N or auto", device);
  }
}

std::string CommandRunner::device_name() const {
  if (!cuda_) return "cpu";
  return detail::shared_nvml().name(nvml_index_).value_or(fmt::format("CUDA device {}", cuda_index_));
}

WorkloadInfo CommandRunner::info() const {
  WorkloadInfo info;
  info.model = command_line(argv_);
  info.dataset = "(the command's)";
  info.loss = "(the command's)";
  info.optimizer = "(the command's)";
  info.precision = "(the command's)";
  return info;
}

int64_t CommandRunner::device_total_bytes() {
  if (!cuda_) return available_ram_bytes();
  const auto memory = detail::shared_nvml().memory_info(nvml_index_);
  return memory ? memory->total_bytes : 0;
}

int64_t CommandRunner::default_budget_bytes() {
  const int64_t total = device_total_bytes();
  return cuda_ ? total : total / 10 * 8;
}

namespace {

// The figure of a trial whose step lines count their samples (`samples=`), as the command's own count, so that a
// sweep aggregates it rather than batch / median step. Steps of one size rescale it from the batch to their samples
// (an accumulated optimizer step). Steps of several sizes (an epoch's ragged end, in data of a few batches), or lines
// read together (a median step of 0 s: a buffered stdout, or steps too short to tell apart), are timed over their
// span: the samples the measured steps trained over the time they took (a median step had put 32 samples a step
// over 32- and 8-sample steps, 1.56x, and "0 samples/s" on lines read together), less the steps over 3x the median
// step's time (an epoch's end: its validation, checkpoint, loader restart), which the median leaves out too.
void count_the_samples(Trial& t, const CommandResult& result) {
  const std::vector<int64_t>& samples = result.step_samples;
  const bool one_size = std::all_of(samples.begin(), samples.end(), [&](int64_t n) { return n == samples.front(); });
  if (one_size && t.step_time_s_median > 0) {
    const double scale = static_cast<double>(samples.front()) / static_cast<double>(t.batch);
    if (scale != 1) {
      t.samples_per_s *= scale;
      t.samples_per_s_min *= scale;
      t.samples_per_s_max *= scale;
      t.throughput_reported = true;
    }
    return;
  }
  double span_s = 0, trained = 0;  // in double: no overflow
  for (size_t i = 0; i < samples.size() && i < result.step_times_s.size(); ++i)
    if (!(t.step_time_s_median > 0) || result.step_times_s[i] <= 3 * t.step_time_s_median)
      span_s += result.step_times_s[i], trained += static_cast<double>(samples[i]);
  if (!(span_s > 0)) return;
  t.samples_per_s = t.samples_per_s_min = t.samples_per_s_max = trained / span_s;
  for (size_t i = 0; i < samples.size() && i < result.step_times_s.size(); ++i)
    if (result.step_times_s[i] > 0) {  // a step's own rate, where it was timed apart from the one before
      const double rate = static_cast<double>(samples[i]) / result.step_times_s[i];
      t.samples_per_s_min = std::min(t.samples_per_s_min, rate);
      t.samples_per_s_max = std::max(t.samples_per_s_max, rate);
    }
  t.throughput_reported = true;
  const auto together = std::count(result.step_times_s.begin(), result.step_times_s.end(), 0.0);
  if (together > 0)
    t.message = fmt::format(
        "{} of its {} timed step lines were read together with the one before (flush stdout after each): timed over "
        "their span",
        together, result.step_times_s.size());
}

}  // namespace

Trial CommandRunner::run(const TrialOptions& o) {
  BATCHWISE_CHECK(o.batch() >= 1, ConfigError, "batch size {}: must be at least 1", o.batch());
  BATCHWISE_CHECK(o.steps() >= 1, ConfigError, "--steps {}: a trial must run at least one measured step", o.steps());
  const CommandResult result = run_command(CommandOptions(argv_, o.batch())
                                               .steps(o.steps())
                                               .warmup(o.warmup())
                                               .timeout_s(o.timeout_s())
                                               .memory_limit_bytes(cuda_ ? 0 : o.limit_bytes())
                                               .env(env_));
  const CommandVerdict verdict = classify(result);
  Trial t;
  t.batch = o.batch();
  t.warmup_steps = o.warmup();
  t.steps = o.steps();
  t.outcome = verdict.outcome;  // one Outcome: a command ends as a trial does
  t.steps_run = result.steps_seen;
  t.peak_bytes = cuda_ ? result.peak_device_bytes.value_or(0) : result.peak_rss_bytes;
  t.peak_allocated_bytes = t.peak_bytes;
  t.step_times_s = verdict.step_times_s;
  summarize_steps(t);
  if (t.outcome == Outcome::Ok && !verdict.wall_timing && !result.step_samples.empty()) count_the_samples(t, result);
  std::string own_figure;  // where the command's own figure is far from its step lines' timing
  if (t.outcome == Outcome::Ok && verdict.samples_per_s > 0 && result.reported_samples_per_s) {
    // The command's own figure wins over our step timing; the spread is the steps', about it (a min and max of
    // the steps' own rates had stood beside a figure 158x them)
    const double timed = t.samples_per_s, ratio = timed > 0 ? verdict.samples_per_s / timed : 1;
    t.samples_per_s = verdict.samples_per_s;
    t.samples_per_s_min = timed > 0 ? t.samples_per_s_min * ratio : t.samples_per_s;
    t.samples_per_s_max = timed > 0 ? t.samples_per_s_max * ratio : t.samples_per_s;
    t.throughput_reported = true;
    if (ratio > 1.5 || ratio < 1 / 1.5)
      own_figure = fmt::format(
          "its own samples_per_s ({:.0f}) is {:.3g}x what its step lines' times give ({:.0f}): the figure is the "
          "command's; check what it counts",
          t.samples_per_s, ratio, timed);
  }
  // The first and the last loss it printed; none printed, none said (NaN, which the JSON writes null: a 0.0 had
  // read as a loss, and the last loss had been given as the first too)
  t.loss_first = result.first_loss.value_or(std::numeric_limits<double>::quiet_NaN());
  t.loss_last = result.loss.value_or(std::numeric_limits<double>::quiet_NaN());
  t.wall_s = result.wall_s;
  // An ok trial's note says only what a reader must know: that its timing is the wall-time fallback.
  if (t.outcome != Outcome::Ok || verdict.wall_timing) t.message = verdict.message;
  if (!own_figure.empty()) t.message = t.message.empty() ? own_figure : t.message + "; " + own_figure;
  if (t.outcome == Outcome::Ok && !result.uncounted_batch.empty())  // a Lightning batch of a type it cannot read
    t.message = fmt::format(
        "{}its callback could not count the samples of a batch of type {} (no array in it), so its steps count as "
        "batch {} and batchwise cannot check that it trained it; return tensors, or a tuple, dict or dataclass of "
        "them, from its collate_fn",
        t.message.empty() ? "" : t.message + "; ", result.uncounted_batch, t.batch);
  const int asked = o.warmup() + o.steps();
  if (t.outcome == Outcome::Ok && !result.stopped_after_steps && result.steps_seen > 0 && result.steps_seen < asked)
    t.message = fmt::format("{}it exited after {} of the {} steps it was given ({} warm-up): fewer timed steps",
                            t.message.empty() ? "" : t.message + "; ", result.steps_seen, asked, o.warmup());
  if (t.outcome == Outcome::Ok && result.ran_on_past_steps)  // its steps count; the wait is the user's to save
    t.message = fmt::format("{}it ran on past the {} steps it was given and was stopped (stop after BATCHWISE_STEPS)",
                            t.message.empty() ? "" : t.message + "; ", asked);
  t.wall_timing = t.outcome == Outcome::Ok && verdict.wall_timing;
  t.non_finite = t.outcome == Outcome::Error && result.non_finite_loss;
  if (cuda_ && t.outcome == Outcome::Ok && !result.peak_device_bytes) {
    // Without a figure the trial says nothing about fitting; counting it as 0 bytes would let a
    // fit climb to --max.
    t.outcome = Outcome::Error;
    t.message =
        "no device memory figure: NVML saw none of the command's processes (a container with its own pid "
        "namespace?) and it printed no `batchwise: peak_bytes=` line; print torch.cuda.max_memory_reserved() "
        "that way (docs/cmd.md)";
  }
  return t;
}

}  // namespace batchwise

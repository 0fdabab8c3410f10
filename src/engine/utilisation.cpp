#include "batchwise/utilisation.h"

#include <dirent.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "nvml.h"
#include "utilisation_detail.h"

namespace batchwise {

namespace {

using Clock = std::chrono::steady_clock;
using detail::CpuTimes;

// The jiffies of each CPU in `mask`, from /proc/stat.
std::vector<CpuTimes> read_cpu_times(const cpu_set_t& mask) {
  std::vector<CpuTimes> out;
  std::FILE* f = std::fopen("/proc/stat", "re");
  if (!f) return out;
  char line[512];
  while (std::fgets(line, sizeof(line), f)) {
    if (std::strncmp(line, "cpu", 3) != 0) break;
    if (!std::isdigit(static_cast<unsigned char>(line[3]))) continue;  // the aggregate "cpu " line
    int cpu = -1;
    unsigned long long v[8] = {};
    if (std::sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2], &v[3], &v[4],
                    &v[5], &v[6], &v[7]) < 5)
      continue;  // the aggregate "cpu " line
    if (!CPU_ISSET(cpu, &mask)) continue;
    CpuTimes t;
    t.cpu = cpu;
    for (auto x : v) t.total += x;
    t.busy = t.total - v[3] - v[4];  // idle, iowait
    out.push_back(t);
  }
  std::fclose(f);
  return out;
}

int64_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "re");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * sysconf(_SC_PAGESIZE) : 0;
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Microseconds since the epoch on the wall clock. Only to place the trial on NVML's timeline: the
// driver stamps its utilisation samples with the wall clock, so the window they are matched against
// must be in it too. Durations are still measured on steady_clock.
uint64_t wall_clock_us() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

template <typename Get>
std::optional<UtilisationStat> stat_of(const std::vector<UtilisationSample>& samples, Get get) {
  UtilisationStat s;
  int n = 0;
  for (const auto& x : samples) {
    const std::optional<double> v = get(x);
    if (!v) continue;
    s.min = n == 0 ? *v : std::min(s.min, *v);
    s.max = n == 0 ? *v : std::max(s.max, *v);
    s.mean += *v;
    ++n;
  }
  if (n == 0) return std::nullopt;
  s.mean /= n;
  return s;
}

}  // namespace

std::optional<SchedulerTimes> scheduler_times() {
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return std::nullopt;
  unsigned long long ran_ns = 0, waited_ns = 0;
  bool read = false;
  while (const dirent* task = readdir(tasks)) {
    if (!std::isdigit(static_cast<unsigned char>(task->d_name[0]))) continue;
    const std::string path = fmt::format("/proc/self/task/{}/schedstat", task->d_name);
    std::FILE* f = std::fopen(path.c_str(), "re");
    if (!f) continue;  // a thread that ended since the listing
    unsigned long long on_cpu = 0, waiting = 0;
    if (std::fscanf(f, "%llu %llu", &on_cpu, &waiting) == 2) ran_ns += on_cpu, waited_ns += waiting, read = true;
    std::fclose(f);
  }
  closedir(tasks);
  if (!read) return std::nullopt;
  return SchedulerTimes{static_cast<double>(ran_ns) * 1e-9, static_cast<double>(waited_ns) * 1e-9};
}

std::optional<double> cpu_wait_share(const std::optional<SchedulerTimes>& before,
                                     const std::optional<SchedulerTimes>& after) {
  if (!before || !after) return std::nullopt;
  const double ran = after->running_s - before->running_s, waited = after->waiting_s - before->waiting_s;
  if (ran + waited <= 0) return std::nullopt;
  return std::clamp(waited / (ran + waited), 0.0, 1.0);
}

struct UtilisationMonitor::State {
  double interval_s;
  int gpu_index;
  cpu_set_t mask;
  Clock::time_point start = Clock::now();
  std::optional<detail::CpuShare> cpu;
  std::vector<UtilisationSample> samples;
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  bool between_steps = false;             // CPU: samples are taken at step boundaries when due
  Clock::time_point last_sample = start;  // when the latest sample was taken or tried (sample())
  int samples_between_steps = 0;          // of those recorded
  double between_steps_s = 0;             // wall time spent sampling at step boundaries
  double sampler_cpu_s = 0;
  // GPU: the driver's own utilisation samples over the monitor's lifetime, read at every sample.
  std::optional<detail::UtilisationWindow> window;
  std::thread thread;

  // Takes a sample; false when it is too soon after the last one for /proc/stat's tick counters
  // to give a share (CpuShare), and then its time counts in the next one.
  bool sample() {
    last_sample = Clock::now();
    std::optional<std::vector<double>> cores = cpu->since_last(read_cpu_times(mask));
    if (!cores) {
      if (window) window->poll();  // on schedule all the same: the driver keeps its latest samples only
      return false;
    }
    UtilisationSample s;
    s.t_s = std::chrono::duration<double>(last_sample - start).count();
    s.core_percent = std::move(*cores);
    double sum = 0;
    for (double percent : s.core_percent) sum += percent;
    s.cpu_percent = s.core_percent.empty() ? 0 : sum / static_cast<double>(s.core_percent.size());
    s.rss_bytes = rss_bytes();
    if (gpu_index >= 0) {
      if (const auto g = detail::shared_nvml().sample(gpu_index)) {
        s.gpu_sm_percent = g->sm_percent;
        s.gpu_memory_percent = g->memory_percent;
        s.gpu_memory_used_bytes = g->memory_used_bytes;
        s.gpu_power_w = g->power_w;
        s.gpu_sm_clock_mhz = g->sm_clock_mhz;
        s.gpu_temperature_c = g->temperature_c;
      }
      if (window) window->poll();
    }
    samples.push_back(std::move(s));
    return true;
  }

  // An exception out of a thread ends the process (std::terminate): a sample that could not be taken (no
  // memory left for it, under ulimit -v) ends the timeline there instead, and the trial goes on.
  void run() noexcept {
    try {
      sample_until_stopped();
    } catch (const std::exception&) {  // the samples taken stand
    }
  }

  void sample_until_stopped() {
    const double cpu_start = thread_cpu_s();
    std::unique_lock<std::mutex> lock(mutex);
    // Between steps, the training thread takes the due samples; this thread steps in for steps
    // longer than 1.5 intervals. Otherwise it samples every interval.
    const auto every = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(between_steps ? 1.5 * interval_s : interval_s));
    while (!stop) {
      const Clock::time_point due = last_sample + every;
      if (wake.wait_until(lock, due, [&] { return stop; })) break;
      if (Clock::now() >= last_sample + every) sample();
    }
    sample();  // one more at the end: the run's last stretch, unless shorter than a tick
    sampler_cpu_s = thread_cpu_s() - cpu_start;
  }
};

namespace detail {

std::optional<std::vector<double>> CpuShare::since_last(const std::vector<CpuTimes>& now) {
  std::vector<double> percent;
  for (size_t i = 0; i < now.size() && i < last_.size(); ++i) {
    const unsigned long long total = now[i].total - last_[i].total, busy = now[i].busy - last_[i].busy;
    // No tick on this CPU yet: its counters cannot tell busy from idle (reading 0 % here pulled
    // fully busy trials' means down). The reading is dropped and `last_` kept rather than moved on:
    // moving it would lose the ticks the other CPUs did count, and leave the next share covering
    // less time than the samples' t_s say. Kept, every share covers exactly the time since the
    // previous one, so the timeline still tiles the trial.
    if (total == 0) return std::nullopt;
    percent.push_back(100.0 * static_cast<double>(busy) / static_cast<double>(total));
  }
  last_ = now;
  return percent;
}

void summarise_gpu_percent(UtilisationSummary& u, const UtilisationWindow::Result& window, double wall_s) {
  const double settled_s = 2 * kNvmlLongestPeriod_s;
  std::vector<UtilisationSample> settled;
  for (const auto& s : u.timeline)
    if (s.t_s >= settled_s) settled.push_back(s);
  // What became of each figure: the driver's samples, the settled readings, or nothing.
  auto figure = [&](bool supported, const std::optional<UtilisationStat>& sampled,
                    std::optional<double> UtilisationSample::*member, std::optional<UtilisationStat>& out) {
    out = supported ? sampled : stat_of(settled, [&](const UtilisationSample& s) { return s.*member; });
    if (out) return supported ? std::string() : std::string("readings");
    return std::string(supported ? "no sample" : "no reading");
  };
  const std::string sm =
      figure(window.sm_supported, window.sm_percent, &UtilisationSample::gpu_sm_percent, u.gpu_sm_percent);
  const std::string memory = figure(window.memory_supported, window.memory_percent,
                                    &UtilisationSample::gpu_memory_percent, u.gpu_memory_percent);
  auto sentence = [&](const std::string& what, const std::string& fate) -> std::string {
    if (fate == "no sample")
      return fmt::format(
          "the trial's {:.2f} s held no NVML {} sample (the driver samples every 1/6 s to 1 s): no "
          "figure, as a reading would describe the time before the trial",
          wall_s, what);
    const std::string missing = fmt::format("NVML gives no {} samples here (nvmlDeviceGetSamples)", what);
    if (fate == "readings")
      return fmt::format(
          "{}: the figure is the mean of the readings taken {:g} s or more into the trial, whose "
          "sample periods lie inside it",
          missing, settled_s);
    if (fate == "no reading")
      return fmt::format(
          "{}, and the trial's {:.2f} s are too short for a reading whose sample period lies inside "
          "it (one taken {:g} s or more in): no figure",
          missing, wall_s, settled_s);
    return "";
  };
  if (sm == memory)
    u.gpu_percent_note = sentence("SM and memory utilisation", sm);
  else
    for (const std::string& part : {sentence("SM utilisation", sm), sentence("memory utilisation", memory)})
      if (!part.empty()) u.gpu_percent_note += (u.gpu_percent_note.empty() ? "" : "; ") + part;
}

}  // namespace detail

UtilisationMonitor::UtilisationMonitor(double interval_s, int gpu_index) : state_(std::make_unique<State>()) {
  state_->interval_s = interval_s;
  // NVML counts every GPU in PCI order, CUDA those CUDA_VISIBLE_DEVICES leaves: map by PCI location or UUID.
  state_->gpu_index = gpu_index >= 0 ? detail::shared_nvml().index_of_cuda_device(gpu_index).value_or(-1) : -1;
  CPU_ZERO(&state_->mask);
  if (sched_getaffinity(0, sizeof(state_->mask), &state_->mask) != 0)
    for (int i = 0; i < CPU_SETSIZE; ++i) CPU_SET(i, &state_->mask);
  state_->cpu.emplace(read_cpu_times(state_->mask));
  state_->between_steps = gpu_index < 0;
  if (state_->gpu_index >= 0) state_->window.emplace(detail::shared_nvml(), state_->gpu_index, wall_clock_us());
  try {
    state_->thread = std::thread([s = state_.get()] { s->run(); });
  } catch (const std::system_error&) {
    // No thread to be had (ulimit -v leaves no room for its stack, ulimit -u or a pids limit none for the thread):
    // the training thread samples between its steps alone, and the trial goes on without the monitor's thread.
    state_->between_steps = true;
  }
}

UtilisationMonitor::~UtilisationMonitor() {
  if (state_ && state_->thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stop = true;
    }
    state_->wake.notify_all();
    state_->thread.join();
  }
}

void UtilisationMonitor::step_boundary() {
  State& s = *state_;
  if (!s.between_steps) return;
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.stop || now - s.last_sample < std::chrono::duration<double>(s.interval_s)) return;
  if (s.sample()) ++s.samples_between_steps;
  s.between_steps_s += std::chrono::duration<double>(Clock::now() - now).count();
}

UtilisationSummary UtilisationMonitor::finish() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->wake.notify_all();
  if (state_->thread.joinable()) {
    state_->thread.join();
  } else {  // the last stretch's sample, the thread's own at its end
    std::lock_guard<std::mutex> lock(state_->mutex);
    try {
      state_->sample();
    } catch (const std::exception&) {  // the samples taken stand
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - state_->start).count();
  UtilisationSummary u;
  u.interval_s = state_->interval_s;
  u.timeline = std::move(state_->samples);
  u.samples = static_cast<int>(u.timeline.size());
  u.cpu_percent = stat_of(u.timeline, [](const UtilisationSample& s) {
                    return std::optional<double>(s.cpu_percent);
                  }).value_or(UtilisationStat{});
  for (const auto& s : u.timeline) {
    u.rss_bytes_max = std::max(u.rss_bytes_max, s.rss_bytes);
    if (u.core_percent_mean.size() < s.core_percent.size()) u.core_percent_mean.resize(s.core_percent.size());
    for (size_t i = 0; i < s.core_percent.size(); ++i) u.core_percent_mean[i] += s.core_percent[i] / u.samples;
    if (s.gpu_memory_used_bytes)
      u.gpu_memory_used_bytes_max = std::max(u.gpu_memory_used_bytes_max.value_or(0), *s.gpu_memory_used_bytes);
  }
  if (state_->window) {
    const detail::UtilisationWindow::Result r = state_->window->finish(wall_clock_us());
    detail::summarise_gpu_percent(u, r, wall);
  }
  u.gpu_power_w = stat_of(u.timeline, [](const UtilisationSample& s) { return s.gpu_power_w; });
  u.samples_between_steps = state_->samples_between_steps;
  u.overhead_percent = wall > 0 ? 100.0 * (state_->sampler_cpu_s + state_->between_steps_s) / wall : 0;
  return u;
}

}  // namespace batchwise

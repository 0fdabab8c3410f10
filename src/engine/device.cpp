#include "batchwise/device.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <sched.h>
#include <sys/utsname.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <thread>

#include "batchwise/version.h"
#include "check.h"
#include "compat.h"
#include "cpu_quota.h"
#include "device_detail.h"
#include "engine/cgroup.h"

namespace batchwise {

#ifndef BATCHWISE_WITH_CUDA
namespace detail {
const char* kNoCuda =
    "this batchwise was built against a Torch without CUDA; rebuild it against PyPI's CUDA torch wheel to use "
    "--device cuda";
std::unique_ptr<DeviceMemory> cuda_memory(int) { throw DeviceError(kNoCuda); }
std::string cuda_device_name(int) { throw DeviceError(kNoCuda); }
std::optional<PciLocation> cuda_pci_location(int) { return std::nullopt; }
bool built_with_cuda() { return false; }
}  // namespace detail
#endif

bool built_with_cuda() { return detail::built_with_cuda(); }

int visible_cuda_devices() {
  return built_with_cuda() && torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

std::string DeviceSpec::str() const { return type == "cuda" ? fmt::format("cuda:{}", index) : type; }

DeviceSpec resolve_device(const std::string& text) {
  DeviceSpec d;
  if (text == "cpu") return d;
  if (text == "auto") {
    if (built_with_cuda() && torch::cuda::is_available()) d.type = "cuda";
    return d;
  }
  BATCHWISE_CHECK(text.rfind("cuda", 0) == 0, ConfigError, "--device {}: unknown device; use cpu, cuda, cuda:N or auto",
                  text);
  d.type = "cuda";
  if (text.size() > 4) {
    const std::string idx = text.substr(5);
    BATCHWISE_CHECK(text[4] == ':' && !idx.empty() && idx.size() < 4 &&
                        std::all_of(idx.begin(), idx.end(), [](unsigned char c) { return std::isdigit(c); }),
                    ConfigError, "--device {}: write a CUDA device as cuda or cuda:N", text);
    d.index = std::stoi(idx);
  }
  BATCHWISE_CHECK(built_with_cuda(), DeviceError, "--device {}: {}", text,
                  "this batchwise was built against a Torch without CUDA; use --device cpu");
  BATCHWISE_CHECK(torch::cuda::is_available(), DeviceError,
                  "--device {}: no CUDA device is visible (no GPU, or no driver); use --device cpu or auto", text);
  BATCHWISE_CHECK(static_cast<int64_t>(d.index) < static_cast<int64_t>(torch::cuda::device_count()), DeviceError,
                  "--device {}: this machine has {} CUDA device(s)", text, torch::cuda::device_count());
  return d;
}

namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

}  // namespace

std::string detail::blas_name() {
  const std::string config = at::show_config();
  const auto pos = config.find("BLAS_INFO=");
  if (pos == std::string::npos) return "unknown";
  const auto start = pos + 10;
  std::string name = config.substr(start, config.find_first_of(", \n", start) - start);
  if (name == "open") return "openblas";
  return name;
}

namespace {

// One group's quota in cores: v2's cpu.max ("QUOTA PERIOD", or "max PERIOD" for none), v1's
// cpu.cfs_quota_us over cpu.cfs_period_us (-1 for none).
std::optional<double> group_quota(const std::string& dir, bool v2) {
  std::string quota;
  double period = 0;
  if (v2) {
    std::ifstream in(dir + "/cpu.max");
    if (!(in >> quota >> period)) return std::nullopt;
  } else {
    std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");
    if (!(q >> quota) || !(p >> period)) return std::nullopt;
  }
  char* end = nullptr;
  const double cores = std::strtod(quota.c_str(), &end) / period;
  if (end == quota.c_str() || *end != '\0' || !std::isfinite(cores) || cores <= 0) return std::nullopt;
  return cores;
}

}  // namespace

int detail::usable_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0 && CPU_COUNT(&mask) > 0) return CPU_COUNT(&mask);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::optional<double> detail::cgroup_cpu_quota(const std::string& proc_cgroup, const std::string& root) {
  std::optional<double> least;
  detail::for_each_cgroup(proc_cgroup, root, "cpu", [&](const std::string& dir, bool v2) {
    if (const auto cores = group_quota(dir, v2)) least = least ? std::min(*least, *cores) : *cores;
  });
  return least;
}

int usable_cpu_cores() {
  const int cpus = detail::usable_cpus();
  const std::optional<double> quota = detail::cgroup_cpu_quota();
  return quota ? std::min(cpus, detail::threads_for_quota(*quota)) : cpus;
}

std::string detail::quota_text(double quota) { return fmt::format("{:.3g} core{}", quota, quota == 1 ? "" : "s"); }

int detail::threads_for_quota(double quota) { return std::max(1, static_cast<int>(std::floor(quota + 1e-9))); }

std::optional<std::string> detail::threads_warning(int threads, int cores, double quota) {
  if (cores > 0 && threads > cores)
    return fmt::format("{} intra-op threads on {} core{}: oversubscription distorts timings", threads, cores,
                       cores == 1 ? "" : "s");
  if (quota > 0 && threads > threads_for_quota(quota))
    return fmt::format(
        "{} intra-op threads under a CPU quota of {} (its cgroup's CPU limit): once they have "
        "used it the kernel pauses them for the rest of each period, which stalls steps at random and distorts "
        "timings; set the threads to {} (--threads {}, or {}={})",
        threads, quota_text(quota), threads_for_quota(quota), threads_for_quota(quota),
        std::getenv("MKL_NUM_THREADS") ? "MKL_NUM_THREADS" : "OMP_NUM_THREADS",  // MKL's count wins where set
        threads_for_quota(quota));
  return std::nullopt;
}

Context make_context(const DeviceSpec& device) {
  Context c;
  c.batchwise_version = BATCHWISE_VERSION;
  c.build_commit = BATCHWISE_BUILD_COMMIT;
  c.build_type = BATCHWISE_BUILD_TYPE;
  c.torch_version = BATCHWISE_TORCH_VERSION_STRING;
  c.device_type = device.type;
  c.device_name = device.type == "cuda" ? detail::cuda_device_name(device.index) : cpu_model_name();
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) c.host = host;
  if (utsname u{}; uname(&u) == 0) c.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  c.date = date;
  c.threads = at::get_num_threads();
  c.cores = detail::usable_cpus();
  c.cpu_quota = detail::cgroup_cpu_quota().value_or(0);
  c.blas = detail::blas_name();
  if (c.build_type != "Release" && c.build_type != "RelWithDebInfo")
    c.warnings.push_back("batchwise was built as " + c.build_type + ": its own overhead may distort timings");
  if (auto warning = detail::threads_warning(c.threads, c.cores, c.cpu_quota))
    c.warnings.push_back(std::move(*warning));
  return c;
}

}  // namespace batchwise

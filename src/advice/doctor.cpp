// batchwise doctor: the machine's training set-up, checked, with fixes.
#include "batchwise/doctor.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <sched.h>
#include <torch/cuda.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "batchwise/device.h"
#include "check.h"
#include "compat.h"
#include "cpu_quota.h"
#include "device_detail.h"
#include "nvml.h"

namespace batchwise {

std::vector<Finding> DoctorReport::warnings() const {
  std::vector<Finding> out;
  for (const auto& f : findings)
    if (f.status == "warning") out.push_back(f);
  return out;
}

namespace {

// The variable that sets LibTorch's count: MKL's where it is set (it wins over OpenMP's), else OpenMP's
std::string threads_variable(const DoctorReport& r) {
  return r.mkl_num_threads.empty() ? "OMP_NUM_THREADS" : "MKL_NUM_THREADS";
}

// OpenMP's reading of OMP_NUM_THREADS (MKL's of MKL_NUM_THREADS): positive counts, comma-separated for nested
// levels ("4,2"); anything else is not the count it was meant to be (libgomp ignores it and says so once on stderr;
// LibTorch reads MKL_NUM_THREADS=abc as one thread).
bool thread_counts(const std::string& value) {
  std::istringstream items(value);
  std::string item;
  int n = 0;
  for (; std::getline(items, item, ','); ++n) {
    const auto first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    if (first == std::string::npos || item[first] == '0' ||
        !std::all_of(item.begin() + first, item.begin() + last + 1, [](char c) { return c >= '0' && c <= '9'; }))
      return false;
  }
  return n > 0 && value.back() != ',';
}

// " its CPU quota allows" where a cgroup's quota leaves fewer whole cores than the CPU has, else "".
std::string quota_note(const DoctorReport& r) {
  return r.cpu.usable_cores() < r.cpu.physical_cores ? " its CPU quota (" + detail::quota_text(r.cpu.quota) + ") allows"
                                                     : "";
}

// How to use every core: where MKL_NUM_THREADS or OMP_NUM_THREADS set the count, it; else --threads (a user
// who passed none is not told to drop it).
std::string every_core_fix(const DoctorReport& r) {
  const int n = r.cpu.usable_cores();
  const std::string all = n < r.cpu.physical_cores ? "the" : "all";
  // MKL_NUM_THREADS sets MKL's count over OMP_NUM_THREADS, and LibTorch takes MKL's: with OMP_NUM_THREADS=2
  // MKL_NUM_THREADS=1 the fix had been "set OMP_NUM_THREADS=2", which was set
  // MKL_NUM_THREADS=abc is no count, and LibTorch then runs one thread: it is the one to set
  if (!r.mkl_num_threads.empty() &&
      (r.mkl_num_threads == std::to_string(r.intra_op_threads) || !thread_counts(r.mkl_num_threads)))
    return fmt::format(
        "{} {} cores{}: set MKL_NUM_THREADS={} (it is {}, and it wins over OMP_NUM_THREADS), or pass "
        "--threads {}",
        all, n, quota_note(r), n, r.mkl_num_threads, n);
  if (!r.omp_num_threads.empty() && r.omp_num_threads == std::to_string(r.intra_op_threads))
    return fmt::format("{} {} cores{}: set OMP_NUM_THREADS={} (it is {}), or pass --threads {}", all, n, quota_note(r),
                       n, r.omp_num_threads, n);
  return fmt::format("{} {} cores{}: pass --threads {}, or set OMP_NUM_THREADS={}", all, n, quota_note(r), n, n);
}

// "1 core", "2 cores"
std::string counted(int64_t n, const char* noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); }

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

CpuPeak cpu_peak() {
  CpuPeak p;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const bool have_mask = sched_getaffinity(0, sizeof(mask), &mask) == 0;
  p.logical_cpus = have_mask ? CPU_COUNT(&mask) : 1;
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<int, int>> cores;  // (physical id, core id) of the CPUs this process may use
  int processor = -1, physical = 0;
  std::string flags;
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "processor")
      processor = std::atoi(value.c_str());
    else if (key == "physical id")
      physical = std::atoi(value.c_str());
    else if (key == "core id" && (!have_mask || (processor >= 0 && CPU_ISSET(processor, &mask))))
      cores.insert({physical, std::atoi(value.c_str())});
    else if (key == "model name" && p.model.empty())
      p.model = value;
    else if (key == "cpu MHz" && p.ghz == 0)
      p.ghz = std::atof(value.c_str()) / 1000.0;
    else if (key == "flags" && flags.empty())
      flags = " " + value + " ";
  }
  p.physical_cores = cores.empty() ? p.logical_cpus : std::min<int>(static_cast<int>(cores.size()), p.logical_cpus);
  auto has = [&](const char* flag) { return flags.find(std::string(" ") + flag + " ") != std::string::npos; };
  // fp32 FLOP per cycle per core: 2 (a fused multiply-add) x vector lanes x 2 FMA units, the
  // server-class count; with one unit the real peak is half, so this estimate errs high.
  if (has("avx512f"))
    p.flops_per_cycle = 64, p.isa = "AVX-512";
  else if (has("avx2") && has("fma"))
    p.flops_per_cycle = 32, p.isa = "AVX2+FMA";
  else if (has("avx"))
    p.flops_per_cycle = 16, p.isa = "AVX";
  else
    p.flops_per_cycle = 8, p.isa = "SSE";
  p.quota = detail::cgroup_cpu_quota().value_or(0);
  p.gflops = (p.quota > 0 ? std::min<double>(p.physical_cores, p.quota) : p.physical_cores) * p.flops_per_cycle * p.ghz;
  return p;
}

// The BLAS shared library this process has loaded, if any (PyPI's torch links MKL statically).
std::string loaded_blas() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("libblas.so") != std::string::npos || path.find("libopenblas") != std::string::npos ||
        path.find("libmkl_rt") != std::string::npos || path.find("libblis") != std::string::npos)
      return path;
  }
  return "";
}

double gemm_gflops(const DoctorOptions& o) {
  const int64_t n = o.gemm_size();
  // Its own generator: the doctor runs inside tune, and the global one is the user's training's.
  at::Generator rng = at::detail::createCPUGenerator(/*seed_val=*/0);
  const at::Tensor a = at::randn({n, n}, rng), b = at::randn({n, n}, rng);
  at::Tensor c = at::empty({n, n});
  for (int i = 0; i < 2; ++i) at::mm_out(c, a, b);
  double best = 0;
  for (int i = 0; i < o.gemm_repetitions(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / s / 1e9);
  }
  return best;
}

}  // namespace

int CpuPeak::usable_cores() const {
  return quota > 0 ? std::min(physical_cores, detail::threads_for_quota(quota)) : physical_cores;
}

DoctorReport run_doctor(const DoctorOptions& o) {
  DoctorReport r;
  r.torch_version = BATCHWISE_TORCH_VERSION_STRING;
  r.build_config = at::show_config();
  r.blas = detail::blas_name();
  r.blas_library = loaded_blas();
  r.reference_blas = r.blas_library.find("/blas/libblas.so") != std::string::npos;
  r.intra_op_threads = at::get_num_threads();
  r.inter_op_threads = static_cast<int>(at::get_num_interop_threads());
  r.omp_num_threads = env("OMP_NUM_THREADS");
  r.mkl_num_threads = env("MKL_NUM_THREADS");
  r.mkl_enable_instructions = env("MKL_ENABLE_INSTRUCTIONS");
  r.cpu = cpu_peak();
  auto add = [&](std::string check, std::string status, std::string detail, std::string fix = "") {
    r.findings.push_back({std::move(check), std::move(status), std::move(detail), std::move(fix)});
  };

  add("torch", "ok",
      fmt::format("LibTorch {}, BLAS {}{}", r.torch_version, r.blas,
                  r.blas_library.empty() ? " (linked in)" : " (" + r.blas_library + ")"));
  if (r.reference_blas)
    add("blas", "warning",
        fmt::format("libblas.so.3 resolves to the netlib reference BLAS ({}): unoptimised, measured ~28x slower than "
                    "OpenBLAS for training on this kind of machine",
                    r.blas_library),
        "apt-get install libopenblas0-pthread (update-alternatives then points libblas.so.3 at OpenBLAS)");
  else
    add("blas", "ok",
        r.blas_library.empty() ? fmt::format("{} is linked into LibTorch", r.blas)
                               : fmt::format("an optimised BLAS is loaded: {}", r.blas_library));

  // Threads against cores.
  const std::string threads_env =
      (r.omp_num_threads.empty() ? "OMP_NUM_THREADS unset" : "OMP_NUM_THREADS=" + r.omp_num_threads) +
      (r.mkl_num_threads.empty() ? "" : ", MKL_NUM_THREADS=" + r.mkl_num_threads);
  for (const auto& [name, value] :
       {std::pair{"OMP_NUM_THREADS", r.omp_num_threads}, {"MKL_NUM_THREADS", r.mkl_num_threads}})
    if (!value.empty() && !thread_counts(value))
      add("threads", "warning",
          fmt::format("{}={} is not a thread count (a whole number from 1), and this process runs {} intra-op "
                      "thread{}",
                      name, value, r.intra_op_threads, r.intra_op_threads == 1 ? "" : "s"),
          fmt::format("set {}={} (the cores), or unset it", name, r.cpu.usable_cores()));
  const int usable = r.cpu.usable_cores();
  if (r.intra_op_threads < usable)
    add("threads", "warning",
        fmt::format("{} intra-op thread{} on {} cores{} ({}): matrix kernels use only part of the CPU",
                    r.intra_op_threads, r.intra_op_threads == 1 ? "" : "s", usable, quota_note(r), threads_env),
        "use " + every_core_fix(r));
  else if (r.intra_op_threads > r.cpu.logical_cpus)
    add("threads", "warning",
        fmt::format("{} intra-op threads on {} logical CPUs ({}): oversubscribed threads wait for each other",
                    r.intra_op_threads, r.cpu.logical_cpus, threads_env),
        fmt::format("set --threads {} (or {}={})", usable, threads_variable(r), usable));
  else if (r.intra_op_threads > usable)
    add("threads", "warning",
        fmt::format("{} intra-op threads under a CPU quota of {} ({}; its cgroup's CPU limit): once they "
                    "have used it the kernel pauses them for the rest of each period, so steps stall at random",
                    r.intra_op_threads, detail::quota_text(r.cpu.quota), threads_env),
        fmt::format("set --threads {} (or {}={})", usable, threads_variable(r), usable));
  else
    add("threads", "ok",
        fmt::format("{}, {} inter-op, on {} / {}{} ({})", counted(r.intra_op_threads, "intra-op thread"),
                    r.inter_op_threads, counted(r.cpu.physical_cores, "core"),
                    counted(r.cpu.logical_cpus, "logical CPU"),
                    r.cpu.quota > 0 ? ", a CPU quota of " + detail::quota_text(r.cpu.quota) : "", threads_env));

  if (o.gemm()) {
    r.gemm_gflops = gemm_gflops(o);
    if (r.cpu.gflops > 0) r.gemm_fraction = *r.gemm_gflops / r.cpu.gflops;
    r.findings.push_back(judge_gemm(r, *r.gemm_gflops, o.gemm_size()));
  }
  if (!r.mkl_enable_instructions.empty() && r.blas == "mkl")
    add("mkl", "warning",
        fmt::format("MKL_ENABLE_INSTRUCTIONS={} limits MKL's instruction set on this {} CPU", r.mkl_enable_instructions,
                    r.cpu.isa),
        "unset MKL_ENABLE_INSTRUCTIONS");

  // CUDA.
  r.cuda_built = built_with_cuda();
  r.cuda_available = r.cuda_built && torch::cuda::is_available();
  r.cuda_devices = r.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  const detail::Nvml& nvml = detail::shared_nvml();
  r.nvml = nvml.available();
  r.nvml_reason = nvml.reason();
  if (!r.cuda_built) {
    add("cuda", "info", "this batchwise was built without CUDA: CPU only");
  } else if (!r.cuda_available) {
    add("cuda", "info",
        fmt::format("built with CUDA, but no CUDA device is visible{}", r.nvml ? "" : " (NVML: " + r.nvml_reason + ")"),
        "on a GPU machine: check nvidia-smi, the driver, and CUDA_VISIBLE_DEVICES");
  } else {
    try {
      if (at::Context::hasCuDNN()) r.cudnn_version = std::to_string(at::Context::versionCuDNN());
    } catch (const c10::Error&) {}
    r.tf32_matmul = at::globalContext().float32MatmulPrecision() != at::Float32MatmulPrecision::HIGHEST;
    r.cudnn_benchmark = at::globalContext().benchmarkCuDNN();
    add("cuda", "ok",
        fmt::format("{} CUDA device{}, cuDNN {}, NVML {}", r.cuda_devices, r.cuda_devices == 1 ? "" : "s",
                    r.cudnn_version.empty() ? "absent" : r.cudnn_version,
                    r.nvml ? "loaded" : "unavailable (" + r.nvml_reason + ")"));
    if (!r.nvml)
      add("nvml", "warning", "NVML could not be loaded: no utilisation or per-process GPU memory for --cmd",
          "install the NVIDIA driver's libnvidia-ml.so.1 (it comes with the driver)");
    add("tf32", "info",
        r.tf32_matmul ? "fp32 matmuls may use TF32 tensor cores (faster, 10-bit mantissa)"
                      : "fp32 matmuls run in full fp32 (TF32 off): on Ampere and later, up to several times slower",
        r.tf32_matmul ? ""
                      : "if TF32's precision suits the model: torch.backends.cuda.matmul.allow_tf32 = True "
                        "(C++: at::globalContext().setFloat32MatmulPrecision(\"high\"))");
    add("cudnn-benchmark", "info",
        r.cudnn_benchmark ? "cuDNN benchmark mode is on: convolution algorithms are tuned per shape"
                          : "cuDNN benchmark mode is off: fixed-shape convolution nets often run faster with it on",
        r.cudnn_benchmark ? "" : "torch.backends.cudnn.benchmark = True for fixed input shapes");
  }
  return r;
}

Finding judge_gemm(const DoctorReport& r, double gemm_gflops, int64_t gemm_size) {
  BATCHWISE_CHECK(
      gemm_gflops > 0 && gemm_size >= 1, ConfigError,
      "judge_gemm: a rate of {} GFLOP/s at size {}: give the measured rate (> 0) and the GEMM's size (>= 1)",
      gemm_gflops, gemm_size);
  const std::string size = fmt::format("fp32 GEMM {}x{}", gemm_size, gemm_size);
  if (r.cpu.gflops <= 0)
    return {"gemm", "info",
            fmt::format("{}: {:.0f} GFLOP/s; the CPU clock is unknown, so there is no peak to compare with", size,
                        gemm_gflops),
            ""};
  const double fraction = gemm_gflops / r.cpu.gflops;
  const std::string cores = r.cpu.quota > 0 && r.cpu.quota < r.cpu.physical_cores
                                ? "a CPU quota of " + detail::quota_text(r.cpu.quota)
                                : fmt::format("{} cores", r.cpu.physical_cores);
  const std::string basis = fmt::format("{} x {} fp32 FLOP/cycle ({}) x {:.2f} GHz = {:.0f} GFLOP/s", cores,
                                        r.cpu.flops_per_cycle, r.cpu.isa, r.cpu.ghz, r.cpu.gflops);
  const std::string detail =
      fmt::format("{} at {} thread{}: {:.0f} GFLOP/s, {:.0f} % of the estimated peak ({})", size, r.intra_op_threads,
                  r.intra_op_threads == 1 ? "" : "s", gemm_gflops, 100 * fraction, basis);
  if (fraction >= kGemmShortfall) return {"gemm", "ok", detail, ""};
  std::string fix;
  if (r.reference_blas)
    fix = "install an optimised BLAS: apt-get install libopenblas0-pthread";
  else if (r.intra_op_threads < r.cpu.usable_cores())
    fix = "give the math library " + every_core_fix(r);
  else if (r.intra_op_threads > r.cpu.logical_cpus)  // the threads check's warning: they wait for each other
    fix = fmt::format("set --threads {} (or {}={}): {} threads on {} logical CPUs wait for each other",
                      r.cpu.usable_cores(), threads_variable(r), r.cpu.usable_cores(), r.intra_op_threads,
                      r.cpu.logical_cpus);
  else if (r.intra_op_threads > r.cpu.usable_cores())  // the threads check's warning: the quota pauses them
    fix = fmt::format(
        "set --threads {} (or {}={}): {} threads under a CPU quota of {} are paused for the "
        "rest of each period once they have used it",
        r.cpu.usable_cores(), threads_variable(r), r.cpu.usable_cores(), r.intra_op_threads,
        detail::quota_text(r.cpu.quota));
  else if (!r.mkl_enable_instructions.empty())
    fix = fmt::format("unset MKL_ENABLE_INSTRUCTIONS (={}): it keeps MKL from this CPU's {} kernels",
                      r.mkl_enable_instructions, r.cpu.isa);
  else
    fix =
        "something else is using the CPU, or it is throttled: check top for other processes and the CPU "
        "frequency governor";
  return {"gemm", "warning", detail + fmt::format(": below {:.0f} % is a shortfall", 100 * kGemmShortfall), fix};
}

std::string to_table(const DoctorReport& r) {
  std::string out = fmt::format(
      "batchwise doctor: LibTorch {} | {} | {} ({} logical{}) | {}\n", r.torch_version,
      r.cpu.model.empty() ? "unknown CPU" : r.cpu.model, counted(r.cpu.physical_cores, "core"), r.cpu.logical_cpus,
      r.cpu.quota > 0 ? ", a CPU quota of " + detail::quota_text(r.cpu.quota) : "", r.cpu.isa);
  for (const auto& f : r.findings) {
    out += fmt::format("{:<8} {:<16} {}\n", f.status == "ok" ? "ok" : f.status, f.check, f.detail);
    if (!f.fix.empty()) out += fmt::format("{:<8} {:<16} fix: {}\n", "", "", f.fix);
  }
  const size_t warnings = r.warnings().size();
  out += warnings == 0 ? "no problems found\n" : fmt::format("{} warning{}\n", warnings, warnings == 1 ? "" : "s");
  return out;
}

std::string to_json(const DoctorReport& r) {
  using nlohmann::ordered_json;
  ordered_json findings = ordered_json::array();
  for (const auto& f : r.findings)
    findings.push_back({{"check", f.check}, {"status", f.status}, {"detail", f.detail}, {"fix", f.fix}});
  auto optional = [](const std::optional<double>& v) { return v ? ordered_json(*v) : ordered_json(); };
  const ordered_json j = {{"torch_version", r.torch_version},
                          {"blas", r.blas},
                          {"blas_library", r.blas_library},
                          {"reference_blas", r.reference_blas},
                          {"threads", {{"intra_op", r.intra_op_threads}, {"inter_op", r.inter_op_threads}}},
                          {"environment",
                           {{"OMP_NUM_THREADS", r.omp_num_threads},
                            {"MKL_NUM_THREADS", r.mkl_num_threads},
                            {"MKL_ENABLE_INSTRUCTIONS", r.mkl_enable_instructions}}},
                          {"cpu",
                           {{"model", r.cpu.model},
                            {"logical_cpus", r.cpu.logical_cpus},
                            {"physical_cores", r.cpu.physical_cores},
                            {"ghz", r.cpu.ghz},
                            {"isa", r.cpu.isa},
                            {"flops_per_cycle", r.cpu.flops_per_cycle},
                            {"quota_cores", r.cpu.quota > 0 ? ordered_json(r.cpu.quota) : ordered_json()},
                            {"peak_gflops", r.cpu.gflops}}},
                          {"gemm_gflops", optional(r.gemm_gflops)},
                          {"gemm_fraction_of_peak", optional(r.gemm_fraction)},
                          {"cuda",
                           {{"built", r.cuda_built},
                            {"available", r.cuda_available},
                            {"devices", r.cuda_devices},
                            {"cudnn_version", r.cudnn_version},
                            {"nvml", r.nvml},
                            {"tf32_matmul", r.tf32_matmul},
                            {"cudnn_benchmark", r.cudnn_benchmark}}},
                          {"findings", findings},
                          {"build_config", r.build_config}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace batchwise

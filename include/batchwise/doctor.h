#pragma once
/// `batchwise doctor`: is this machine set up to train fast? LibTorch's version and build, the BLAS
/// in use (and whether it is the slow reference one), a GEMM rate against what the CPU should reach,
/// threads against cores, CUDA, cuDNN, NVML, TF32 and cuDNN benchmark settings. Every finding that
/// is not fine comes with its fix.
#include <torch/arg.h>

#include <optional>
#include <string>
#include <vector>

namespace batchwise {

struct DoctorOptions {
  /// Square fp32 GEMM size of the rate check.
  TORCH_ARG(int64_t, gemm_size) = 1024;
  /// Timed GEMMs (after 2 unmeasured); the best rate counts (another process can only slow it).
  TORCH_ARG(int, gemm_repetitions) = 8;
  /// Skip the GEMM check (CUDA-only runs).
  TORCH_ARG(bool, gemm) = true;
};

struct Finding {
  std::string check;   ///< "blas", "gemm", "threads", "cuda", ...
  std::string status;  ///< "ok", "warning" or "info"
  std::string detail;  ///< what was found, with its figures
  std::string fix;     ///< what to do; empty when nothing
};

/// The CPU's fp32 peak as batchwise estimates it.
struct CpuPeak {
  std::string model;
  int logical_cpus = 0;     ///< available to this process
  int physical_cores = 0;   ///< of those, counting each core once (hyper-threads share its FMA units)
  double ghz = 0;           ///< /proc/cpuinfo's clock
  int flops_per_cycle = 0;  ///< fp32 per core: FMA x vector lanes x 2 FMA units
  std::string isa;          ///< "AVX-512", "AVX2+FMA", ...
  double quota = 0;         ///< cores' worth of CPU time the process's cgroup allows (cpu.max); 0: none
  double gflops = 0;        ///< min(physical_cores, quota) x flops_per_cycle x ghz
  /// The cores its threads can keep busy: the physical cores, or fewer where the quota's whole cores are.
  int usable_cores() const;
};

struct DoctorReport {
  std::string torch_version;
  std::string build_config;     ///< at::show_config()
  std::string blas;             ///< BLAS_INFO of the build ("mkl", "openblas", ...)
  std::string blas_library;     ///< the BLAS shared library loaded, when one is (path)
  bool reference_blas = false;  ///< the netlib reference BLAS is what libblas.so.3 resolves to
  int intra_op_threads = 0, inter_op_threads = 0;
  std::string omp_num_threads, mkl_num_threads, mkl_enable_instructions;  ///< environment, "" if unset
  CpuPeak cpu;
  std::optional<double> gemm_gflops;    ///< measured, at intra_op_threads
  std::optional<double> gemm_fraction;  ///< of cpu.gflops
  bool cuda_built = false, cuda_available = false;
  int cuda_devices = 0;
  std::string cudnn_version;  ///< "" when none
  bool nvml = false;
  std::string nvml_reason;
  bool tf32_matmul = false, cudnn_benchmark = false;
  std::vector<Finding> findings;
  /// The findings whose status is "warning".
  std::vector<Finding> warnings() const;
};

/// Below this fraction of the CPU's estimated fp32 peak, the GEMM check is a shortfall.
constexpr double kGemmShortfall = 0.5;

/// Runs every check. Library code: prints nothing.
DoctorReport run_doctor(const DoctorOptions& options = {});

/// The GEMM check's verdict on a measured rate (run_doctor passes the rate it timed; tests pass known
/// figures): "ok" at or above kGemmShortfall of `machine.cpu.gflops`, "info" when that peak is unknown,
/// else a "warning" whose fix names the likeliest cause, in order: the reference BLAS, fewer intra-op
/// threads than cores (naming MKL_NUM_THREADS or OMP_NUM_THREADS where it set them; MKL's wins), more
/// threads than logical CPUs, more than a cgroup's CPU quota's whole cores, MKL_ENABLE_INSTRUCTIONS,
/// another process or throttling. The peak counts no more cores than the quota. Reads machine.cpu,
/// intra_op_threads, omp_num_threads, mkl_num_threads, reference_blas and mkl_enable_instructions.
/// REQUIRES: gemm_gflops > 0, gemm_size >= 1.
Finding judge_gemm(const DoctorReport& machine, double gemm_gflops, int64_t gemm_size);

/// The findings as a table for people, and as JSON for programs.
std::string to_table(const DoctorReport& report);
std::string to_json(const DoctorReport& report);

}  // namespace batchwise

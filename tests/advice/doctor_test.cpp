// The doctor's GEMM verdict on known rates: the decision, never this machine's speed (the real
// measurement is bench/doctor_loader.sh's); and `batchwise doctor` on this machine, whose verdicts
// must follow from the figures its report gives.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "batchwise/doctor.h"
#include "batchwise/error.h"
#include "support/cli_util.h"

namespace batchwise {
namespace {

// Two AVX-512 cores at 2.0 GHz: 2 x 64 x 2.0 = 256 GFLOP/s estimated peak.
DoctorReport two_core_machine() {
  DoctorReport r;
  r.cpu.model = "test CPU";
  r.cpu.logical_cpus = 2;
  r.cpu.physical_cores = 2;
  r.cpu.ghz = 2.0;
  r.cpu.flops_per_cycle = 64;
  r.cpu.isa = "AVX-512";
  r.cpu.gflops = 256;
  r.intra_op_threads = 2;
  return r;
}

TEST(DoctorGemm, EightyPercentOfThePeakIsOk) {
  const Finding f = judge_gemm(two_core_machine(), 0.8 * 256, 1024);
  EXPECT_EQ(f.check, "gemm");
  EXPECT_EQ(f.status, "ok") << f.detail;
  EXPECT_TRUE(f.fix.empty()) << f.fix;
  EXPECT_NE(f.detail.find("fp32 GEMM 1024x1024 at 2 threads: 205 GFLOP/s, 80 % of the estimated peak (2 cores x 64 "
                          "fp32 FLOP/cycle (AVX-512) x 2.00 GHz = 256 GFLOP/s)"),
            std::string::npos)
      << f.detail;
  EXPECT_EQ(judge_gemm(two_core_machine(), 0.5 * 256, 1024).status, "ok");  // the threshold itself
}

TEST(DoctorGemm, TenPercentWithOneThreadOnTwoCoresNamesTheThreads) {
  DoctorReport r = two_core_machine();
  r.intra_op_threads = 1;
  const Finding f = judge_gemm(r, 0.1 * 256, 1024);
  EXPECT_EQ(f.status, "warning");
  EXPECT_NE(f.detail.find("10 % of the estimated peak"), std::string::npos) << f.detail;
  EXPECT_NE(f.detail.find("below 50 % is a shortfall"), std::string::npos) << f.detail;
  EXPECT_EQ(f.fix, "give the math library all 2 cores: pass --threads 2, or set OMP_NUM_THREADS=2");
  r.omp_num_threads = "1";  // the environment set it, not a --threads the user never passed
  EXPECT_EQ(judge_gemm(r, 0.1 * 256, 1024).fix,
            "give the math library all 2 cores: set OMP_NUM_THREADS=2 (it is 1), or pass --threads 2");
  // MKL's count wins over OpenMP's: OMP_NUM_THREADS=2 MKL_NUM_THREADS=1 is one thread, and the fix names MKL's (it had
  // said to set OMP_NUM_THREADS=2, which was set)
  r.omp_num_threads = "2";
  r.mkl_num_threads = "1";
  EXPECT_EQ(judge_gemm(r, 0.1 * 256, 1024).fix,
            "give the math library all 2 cores: set MKL_NUM_THREADS=2 (it is 1, and it wins over OMP_NUM_THREADS), or "
            "pass --threads 2");
}

// Oversubscribed threads wait for each other: the fix says so, as the threads check does, not that
// something else is using the CPU.
TEST(DoctorGemm, OversubscribedThreadsAreTheShortfallsCause) {
  DoctorReport r = two_core_machine();
  r.intra_op_threads = 64;
  EXPECT_EQ(judge_gemm(r, 25, 512).fix,
            "set --threads 2 (or OMP_NUM_THREADS=2): 64 threads on 2 logical CPUs wait for each other");
}

// In a container with a CPU quota (docker --cpus 2) on a bigger host, the peak is the quota's, not the host's
// (the GEMM had been judged against 8 cores and blamed "something else"), and threads past the quota's whole
// cores are the shortfall's cause; too few are counted against the quota's cores.
TEST(DoctorGemm, ACpuQuotaBoundsThePeakAndNamesItsThreads) {
  DoctorReport r = two_core_machine();
  r.cpu.logical_cpus = 16;
  r.cpu.physical_cores = 8;
  r.cpu.quota = 2;
  r.cpu.gflops = 256;  // min(8 cores, a quota of 2) x 64 x 2.0 GHz
  r.intra_op_threads = 8;
  const Finding f = judge_gemm(r, 25, 512);
  EXPECT_NE(f.detail.find("(a CPU quota of 2 cores x 64 fp32 FLOP/cycle (AVX-512) x 2.00 GHz = 256 GFLOP/s)"),
            std::string::npos)
      << f.detail;
  EXPECT_EQ(f.fix,
            "set --threads 2 (or OMP_NUM_THREADS=2): 8 threads under a CPU quota of 2 cores are paused for the rest of "
            "each period once they have used it");
  r.cpu.quota = 3.5;
  r.intra_op_threads = 1;
  EXPECT_EQ(
      judge_gemm(r, 25, 512).fix,
      "give the math library the 3 cores its CPU quota (3.5 cores) allows: pass --threads 3, or set OMP_NUM_THREADS=3");
  r.intra_op_threads = 3;
  EXPECT_NE(judge_gemm(r, 25, 512).fix.find("something else is using the CPU"), std::string::npos);
  r.cpu.quota = 16;  // a quota above the cores leaves them all
  EXPECT_EQ(r.cpu.usable_cores(), 8);
  EXPECT_EQ(judge_gemm(r, 25, 512).fix,
            "give the math library all 8 cores: pass --threads 8, or set OMP_NUM_THREADS=8");
}

TEST(DoctorGemm, AShortfallNamesItsLikeliestCause) {
  DoctorReport r = two_core_machine();
  EXPECT_NE(judge_gemm(r, 25, 512).fix.find("something else is using the CPU, or it is throttled"), std::string::npos);
  r.mkl_enable_instructions = "AVX2";
  EXPECT_EQ(judge_gemm(r, 25, 512).fix,
            "unset MKL_ENABLE_INSTRUCTIONS (=AVX2): it keeps MKL from this CPU's AVX-512 kernels");
  r.intra_op_threads = 1;  // too few threads comes before the instruction set
  EXPECT_NE(judge_gemm(r, 25, 512).fix.find("OMP_NUM_THREADS=2"), std::string::npos);
  r.reference_blas = true;  // and the reference BLAS before everything
  EXPECT_EQ(judge_gemm(r, 25, 512).fix, "install an optimised BLAS: apt-get install libopenblas0-pthread");
}

TEST(DoctorGemm, AnUnknownPeakIsInformation) {
  DoctorReport r = two_core_machine();
  r.cpu.ghz = 0;
  r.cpu.gflops = 0;
  const Finding f = judge_gemm(r, 40, 1024);
  EXPECT_EQ(f.status, "info");
  EXPECT_NE(f.detail.find("40 GFLOP/s; the CPU clock is unknown"), std::string::npos) << f.detail;
  EXPECT_THROW(judge_gemm(r, 0, 1024), ConfigError);
}

}  // namespace
}  // namespace batchwise

namespace {

using namespace cli;
using cli::batchwise;  // the binary, where doctor.h's namespace batchwise is also in scope

// doctor: the verdicts follow from the figures the report gives (the GEMM's speed is this machine's,
// so only the decision is asserted; judge_gemm's own tests use known rates).
nlohmann::json gemm_finding(const nlohmann::json& report) {
  for (const auto& f : report.at("findings"))
    if (f.at("check") == "gemm") return f;
  ADD_FAILURE() << "no gemm finding: " << report.at("findings").dump();
  return {};
}

void expect_gemm_verdict_follows_the_rate(const nlohmann::json& j) {
  EXPECT_GT(j.at("gemm_gflops").get<double>(), 0);
  EXPECT_GT(j.at("cpu").at("peak_gflops").get<double>(), 0);
  const double fraction = j.at("gemm_fraction_of_peak").get<double>();
  EXPECT_NEAR(fraction, j.at("gemm_gflops").get<double>() / j.at("cpu").at("peak_gflops").get<double>(), 1e-9);
  const nlohmann::json f = gemm_finding(j);
  EXPECT_EQ(f.at("status"), fraction >= 0.5 ? "ok" : "warning") << f.dump();
  EXPECT_EQ(f.at("fix").get<std::string>().empty(), fraction >= 0.5) << f.dump();
}

// The cores the threads can keep busy, as the doctor counts them: the physical cores, fewer under a CPU quota (a
// container's --cpus), so that these tests hold inside one too.
int usable_cores(const nlohmann::json& j) {
  const int physical = j.at("cpu").at("physical_cores");
  const nlohmann::json& quota = j.at("cpu").at("quota_cores");
  return quota.is_null() ? physical : std::min(physical, std::max(1, static_cast<int>(quota.get<double>() + 1e-9)));
}

TEST(Doctor, DefaultSettingsUseEveryCoreAndJudgeTheGemmByItsRate) {
  const fs::path json = scratch() / "doctor.json";
  const Outcome r = batchwise("doctor --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  expect_gemm_verdict_follows_the_rate(j);
  if (j.at("threads").at("intra_op").get<int>() > usable_cores(j))
    GTEST_SKIP() << "LibTorch's default threads are past this container's CPU quota: the doctor warns, as it should";
  size_t warnings = 0;
  for (const auto& f : j.at("findings")) {
    if (f.at("status") == "warning") ++warnings;
    if (f.at("check") != "gemm") EXPECT_NE(f.at("status"), "warning") << f.dump();
  }
  EXPECT_EQ(r.out.find("no problems found") != std::string::npos, warnings == 0) << r.out;
  EXPECT_FALSE(j.at("reference_blas").get<bool>());
}

TEST(Doctor, OneThreadOnTwoCoresIsAThreadsWarningWithItsFix) {
  const fs::path json = scratch() / "doctor1.json";
  const Outcome probe = batchwise("doctor --json " + json.string());
  ASSERT_EQ(probe.code, 0) << probe.err;
  const int cores = usable_cores(nlohmann::json::parse(slurp(json)));
  if (cores < 2) GTEST_SKIP() << "one core: one thread is all of it";
  const Outcome r = batchwise("doctor --threads 1 --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j.at("threads").at("intra_op"), 1);
  bool threads = false;
  for (const auto& f : j.at("findings"))
    if (f.at("check") == "threads") {
      threads = true;
      EXPECT_EQ(f.at("status"), "warning") << f.dump();
      EXPECT_NE(f.at("fix").get<std::string>().find("OMP_NUM_THREADS=" + std::to_string(cores)), std::string::npos);
    }
  EXPECT_TRUE(threads) << j.at("findings").dump();
  expect_gemm_verdict_follows_the_rate(j);
  const nlohmann::json gemm = gemm_finding(j);
  if (gemm.at("status") == "warning")  // a shortfall with too few threads names them
    EXPECT_NE(gemm.at("fix").get<std::string>().find("OMP_NUM_THREADS=" + std::to_string(cores)), std::string::npos);
}

// A thread count the runtime ignores ("abc", "0") had read as ok, named in the threads line as if it were set
TEST(Doctor, AThreadCountTheRuntimeIgnoresIsAWarningWithItsFix) {
  const fs::path json = scratch() / "doctor-env.json";
  for (const std::string value : {"abc", "0", "2,"}) {
    const Outcome r = batchwise("doctor --json " + json.string(), "OMP_NUM_THREADS='" + value + "'");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(slurp(json));
    const int cores = usable_cores(j), threads = j.at("threads").at("intra_op");
    int named = 0;
    for (const auto& f : j.at("findings"))
      if (f.at("check") == "threads" && f.at("detail").get<std::string>().rfind("OMP_NUM_THREADS=", 0) == 0) {
        ++named;
        EXPECT_EQ(f.at("status"), "warning");
        EXPECT_EQ(f.at("detail"), "OMP_NUM_THREADS=" + value +
                                      " is not a thread count (a whole number from 1), and this process runs " +
                                      std::to_string(threads) +
                                      (threads == 1 ? " intra-op thread" : " intra-op threads"));
        EXPECT_EQ(f.at("fix"), "set OMP_NUM_THREADS=" + std::to_string(cores) + " (the cores), or unset it");
      }
    EXPECT_EQ(named, 1) << value << ": " << j.at("findings").dump();
  }
  // MKL_NUM_THREADS=abc is no count either, and LibTorch then runs one thread: where that is fewer than the cores, the
  // fix sets MKL's count (it had said to set OMP_NUM_THREADS, which MKL's overrides, and that "the runtime ignores it")
  {
    const Outcome r = batchwise("doctor --json " + json.string(), "OMP_NUM_THREADS=2 MKL_NUM_THREADS=abc");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(slurp(json));
    const int cores = usable_cores(j), threads = j.at("threads").at("intra_op");
    int part = 0;
    for (const auto& f : j.at("findings"))
      if (f.at("check") == "threads" &&
          f.at("detail").get<std::string>().find("matrix kernels use only part") != std::string::npos) {
        ++part;
        if (cores == j.at("cpu").at("physical_cores").get<int>())  // no quota's note in the way
          EXPECT_EQ(f.at("fix"), fmt::format("use all {} cores: set MKL_NUM_THREADS={} (it is abc, and it wins over "
                                             "OMP_NUM_THREADS), or pass --threads {}",
                                             cores, cores, cores));
        else
          EXPECT_NE(f.at("fix").get<std::string>().find("set MKL_NUM_THREADS="), std::string::npos) << f.dump();
      }
    EXPECT_EQ(part, threads < cores ? 1 : 0) << j.at("findings").dump();
  }
  // OpenMP's nested levels are a count
  const Outcome r = batchwise("doctor --json " + json.string(), "OMP_NUM_THREADS=2,1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(json).find("is not a thread count"), std::string::npos);
}

}  // namespace

// tune runs the doctor first, between the user's state and the trials: its GEMM must not draw from
// the global generator, which is the user's training's (the Python API promises the RNG back).
TEST(DoctorGemm, TheRateIsMeasuredWithoutTouchingTheGlobalGenerator) {
  at::manual_seed(7);
  const at::Tensor before = at::detail::getDefaultCPUGenerator().get_state();
  const ::batchwise::DoctorReport r =
      ::batchwise::run_doctor(::batchwise::DoctorOptions().gemm_size(64).gemm_repetitions(1));
  ASSERT_TRUE(r.gemm_gflops.has_value());
  EXPECT_TRUE(at::equal(before, at::detail::getDefaultCPUGenerator().get_state()));
}

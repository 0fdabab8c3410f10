// The doctor's GEMM verdict on known rates: the decision, never this machine's speed (the real
// measurement is bench/doctor_loader.sh's).
#include <gtest/gtest.h>

#include <string>

#include "batchwise/doctor.h"
#include "batchwise/error.h"

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
  EXPECT_EQ(f.fix, "give the math library every core: drop --threads, or set OMP_NUM_THREADS=2");
}

TEST(DoctorGemm, AShortfallNamesItsLikeliestCause) {
  DoctorReport r = two_core_machine();
  EXPECT_NE(judge_gemm(r, 25, 512).fix.find("something else is using the CPU, or it is throttled"), std::string::npos);
  r.mkl_enable_instructions = "AVX2";
  EXPECT_EQ(judge_gemm(r, 25, 512).fix, "unset MKL_ENABLE_INSTRUCTIONS (=AVX2): it keeps MKL from this CPU's AVX-512 kernels");
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

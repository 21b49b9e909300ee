// The cuda backend's matmul wrapper under simt: the row-major -> cuBLASLt
// translation plus the CPU stand-in that executes cuBLASLt's descriptors,
// against a naive row-major GEMM, exactly (integer-valued inputs).
#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.h"
#include "test_cuda_backend_matmul_cases.h"

namespace {

using namespace ratchet::testing::mmcases;

struct CudaBackendMatmul : ::testing::TestWithParam<MmCase> {};

TEST_P(CudaBackendMatmul, StandInMatchesNaiveGemmExactly) {
  std::string err = run_mm_case(GetParam(), 0.0f);  // same GELU formula: exact
  EXPECT_TRUE(err.empty()) << err;
}

INSTANTIATE_TEST_SUITE_P(All, CudaBackendMatmul, ::testing::ValuesIn(all_mm_cases()),
                         [](const ::testing::TestParamInfo<MmCase>& info) {
                           return mm_name(info.param);
                         });

TEST(CudaBackendMatmulTranslation, RowMajorBecomesTransposedColumnMajor) {
  using namespace ratchet::cuda;
  Gemm g;
  g.transA = false;
  g.transB = true;  // out (N,OC) = inp (N,C) @ w (OC,C)^T, the forward matmul
  g.m = 6;          // N
  g.n = 12;         // OC
  g.k = 4;          // C
  g.lda = 4;
  g.ldb = 4;
  g.ldc = 12;
  LtCall c = to_lt(g, DType::bf16);
  EXPECT_EQ(c.M, 12);
  EXPECT_EQ(c.N, 6);
  EXPECT_EQ(c.K, 4);
  EXPECT_TRUE(c.opA_T);  // w stored (OC,C) row-major = (C,OC) column-major, op T -> (OC,C)
  EXPECT_FALSE(c.opB_T);
  EXPECT_EQ(c.rowsA, 4);
  EXPECT_EQ(c.colsA, 12);
  EXPECT_EQ(c.rowsB, 4);
  EXPECT_EQ(c.colsB, 6);
  EXPECT_NE(c.describe().find("M=12 N=6 K=4"), std::string::npos) << c.describe();
}

// A 4x4x4 FP32 GEMM C = A B over the given buffers (row-major, no transposes).
ratchet::cuda::Gemm gemm4(const void* A, const void* B, void* C) {
  ratchet::cuda::Gemm g;
  g.m = g.n = g.k = 4;
  g.lda = g.ldb = g.ldc = 4;
  g.A = A;
  g.B = B;
  g.C = C;
  return g;
}

TEST(CudaBackendMatmulCache, OnePlanPerShape) {
  using namespace ratchet::cuda;
  std::vector<float> a(64, 1.0f);
  DevBuf A(a, DType::f32), B(a, DType::f32), C(a, DType::f32);
  Matmul mm(DType::f32);
  Gemm g = gemm4(A.p, B.p, C.p);
  mm.run(g);
  mm.run(g);
  EXPECT_EQ(mm.cached_plans(), 1u);
  g.transB = true;
  mm.run(g);
  EXPECT_EQ(mm.cached_plans(), 2u);
}

TEST(CudaBackendMatmulDeathTest, MisalignedOperandIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  using namespace ratchet::cuda;
  std::vector<float> a(64, 1.0f);
  DevBuf A(a, DType::f32), B(a, DType::f32), C(a, DType::f32);
  Matmul mm(DType::f32);
  Gemm g = gemm4((const char*)A.p + 4, B.p, C.p);  // A 4-byte aligned only
  EXPECT_DEATH(mm.run(g), "16-byte aligned.*M=4 N=4 K=4");
}

// cuBLASLt wants the aux leading dimension divisible by 8 (EPILOGUE_AUX_LD);
// the wrapper says so under simt too instead of passing what a device rejects.
TEST(CudaBackendMatmulDeathTest, AuxLeadingDimensionNotMultipleOf8IsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  using namespace ratchet::cuda;
  std::vector<float> a(256, 1.0f);
  DevBuf A(a, DType::f32), B(a, DType::f32), C(a, DType::f32), X(a, DType::f32);
  Matmul mm(DType::f32);
  Gemm g = gemm4(A.p, B.p, C.p);
  g.epilogue = Epilogue::dgelu;
  g.aux = X.p;
  g.ldaux = 12;
  EXPECT_DEATH(mm.run(g), "aux leading dimension 12 not a multiple of 8.*DGELU");
}

TEST(CudaBackendMatmulRanges, OneNamedRangePerGemm) {
  using namespace ratchet::cuda;
  std::vector<float> a(256, 1.0f);
  DevBuf A(a, DType::f32), B(a, DType::f32), C(a, DType::f32);
  Matmul mm(DType::f32);
  Gemm g;
  g.m = 4;
  g.n = 8;
  g.k = 2;
  g.lda = 2;
  g.ldb = g.ldc = 8;
  g.A = A.p;
  g.B = B.p;
  g.C = C.p;
  mm.run(g);
  EXPECT_EQ(mm.ranges_opened(), 1);
  EXPECT_STREQ(mm.last_range(), "matmul DEFAULT m=4 n=8 k=2");
  g.batch = 2;
  g.strideA = 8;
  g.strideB = 16;
  g.strideC = 32;
  mm.run(g);
  EXPECT_EQ(mm.ranges_opened(), 2);
  EXPECT_STREQ(mm.last_range(), "matmul DEFAULT m=4 n=8 k=2 batch=2");
}

// The algorithm is pinned per (shape, epilogue), whatever the epilogue
// pointers' alignment: the heuristic is asked with canonical 16-byte aligned
// pointers, so the same shape with a 256-byte and a 16-byte aligned bias is
// one plan (a recompute writing into another buffer runs the same algorithm
// and gets the same bits; with the alignment class in the key it could not).
TEST(CudaBackendMatmulCache, PlanDoesNotDependOnPointerAlignment) {
  using namespace ratchet::cuda;
  std::vector<float> a(64, 1.0f), bias(64, 0.5f);
  DevBuf A(a, DType::f32), B(a, DType::f32), C(a, DType::f32), Bias(bias, DType::f32);
  Matmul mm(DType::f32);
  Gemm g = gemm4(A.p, B.p, C.p);
  g.epilogue = Epilogue::bias;
  g.bias = Bias.p;  // device_malloc: 256-byte aligned
  mm.run(g);
  mm.run(g);
  EXPECT_EQ(mm.cached_plans(), 1u);
  g.bias = static_cast<const char*>(Bias.p) + 16;  // 16-byte aligned only
  mm.run(g);
  EXPECT_EQ(mm.cached_plans(), 1u);
  EXPECT_TRUE(mm.offers(g));  // asked by shape alone: the same plan
  EXPECT_EQ(mm.cached_plans(), 1u);
}

// force_fallback: try_run declines the epilogue without asking cuBLASLt (the
// caller's unfused path runs), in both builds; other epilogues are unaffected.
TEST(CudaBackendMatmulFallback, ForcedFallbackDeclinesTheEpilogue) {
  using namespace ratchet::cuda;
  std::vector<float> a(64, 1.0f);
  DevBuf A(a, DType::f32), B(a, DType::f32), C(a, DType::f32), D(a, DType::f32);
  Matmul mm(DType::f32);
  Gemm g = gemm4(A.p, B.p, C.p);
  g.epilogue = Epilogue::bgrad;
  g.transA = true;
  g.dbias = D.p;
  EXPECT_TRUE(mm.offers(g));
  mm.force_fallback(Epilogue::bgrad);
  EXPECT_FALSE(mm.offers(g));
  EXPECT_FALSE(mm.try_run(g));
  EXPECT_TRUE(mm.try_run(gemm4(A.p, B.p, C.p)));
}

// The backend's bias gradient both ways (the BGRADB epilogue, and the
// bias_grad kernel when the fallback is forced), exact against the reference;
// the GPU runs the same (CudaBackendGpu.BiasGradientEpilogueAndFallback).
template <class S>
void expect_bias_grad_both_paths() {
  for (bool force : {false, true}) {
    ratchet::cuda::CudaBackend<S> be;
    bool by_epilogue = false;
    EXPECT_EQ(bias_grad_case(be, force, &by_epilogue), "") << (force ? "fallback" : "epilogue");
    EXPECT_EQ(by_epilogue, !force);  // the stand-in offers BGRADB
  }
}
TEST(CudaBackendMatmulFallback, BiasGradientEpilogueAndFallbackFp32) {
  expect_bias_grad_both_paths<float>();
}
TEST(CudaBackendMatmulFallback, BiasGradientEpilogueAndFallbackBf16) {
  expect_bias_grad_both_paths<ratchet::kernels::bf16>();
}

// The setup report names the paths: the stand-in offers BGRADB for every bias
// width; FP32 storage computes GELU with the kernel (bitwise recompute).
TEST(CudaBackendMatmulFallback, SetupReportNamesTheBiasGradientPath) {
  ratchet::OpShapes s{2, 16, 32, 2, 128};
  ratchet::cuda::CudaBackend<float> f32;
  std::string r = f32.setup_report(s);
  EXPECT_NE(r.find("bias gradients: cuBLASLt's BGRADB epilogue (every bias width)"),
            std::string::npos) << r;
  EXPECT_NE(r.find("gelu: a bias GEMM, then kernels/gelu.cu (FP32 storage"), std::string::npos)
      << r;
  ratchet::cuda::CudaBackend<ratchet::kernels::bf16> bf;
  bf.matmul().force_fallback(ratchet::cuda::Epilogue::bgrad);
  r = bf.setup_report(s);
  EXPECT_NE(r.find("bias gradients: the bias_grad kernel after the weight GEMM for 96x32, 32x32, "
                   "128x32, 32x128 (cuBLASLt offers no BGRADB algorithm there)"),
            std::string::npos) << r;
  EXPECT_NE(r.find("gelu: cuBLASLt's GELU_AUX_BIAS epilogue"), std::string::npos) << r;
}

// An optional fused plan that cuBLASLt rejects when it first runs (here the
// stand-in, told to) becomes "no algorithm": try_run returns false, now and
// for later calls, with one note on stderr; run() (not optional) still fails.
TEST(CudaBackendMatmulFallback, RejectedOptionalPlanIsNoAlgorithm) {
  using namespace ratchet::cuda;
  std::vector<float> a(64, 1.0f);
  DevBuf A(a, DType::f32), B(a, DType::f32), C(a, DType::f32), D(a, DType::f32);
  Matmul mm(DType::f32);
  Gemm g = gemm4(A.p, B.p, C.p);
  g.epilogue = Epilogue::bgrad;
  g.transA = true;
  g.dbias = D.p;
  EXPECT_TRUE(mm.try_run(g));  // accepted before the rejection starts
  Matmul mm2(DType::f32);
  mm2.reject_epilogue(Epilogue::bgrad);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(mm2.try_run(g));
  EXPECT_FALSE(mm2.try_run(g));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("rejected the fused BGRADB epilogue"), std::string::npos) << err;
  EXPECT_EQ(err.find("rejected", err.find("rejected") + 1), std::string::npos)
      << "the note is printed once: " << err;
  Gemm plain = gemm4(A.p, B.p, C.p);  // other epilogues are unaffected
  EXPECT_TRUE(mm2.try_run(plain));
}

TEST(CudaBackendMatmulDeathTest, RejectedRequiredPlanFailsNamingTheCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  using namespace ratchet::cuda;
  std::vector<float> a(64, 1.0f);
  DevBuf A(a, DType::f32), B(a, DType::f32), C(a, DType::f32), Bias(a, DType::f32);
  Matmul mm(DType::f32);
  mm.reject_epilogue(Epilogue::bias);
  Gemm g = gemm4(A.p, B.p, C.p);
  g.epilogue = Epilogue::bias;
  g.bias = Bias.p;
  EXPECT_DEATH(mm.run(g), "NOT_SUPPORTED.*epilogue BIAS");
}

}  // namespace

// RATCHET_GEMM_SWEEP (matmul.h): the bench knob's value is checked before any
// GEMM; a bad one is an Error naming the variable, never a silent default.
TEST(CudaBackendMatmulSweep, EnvValueIsCheckedAndNamed) {
  using ratchet::cuda::gemm_sweep_from_env;
  unsetenv("RATCHET_GEMM_SWEEP");
  EXPECT_EQ(gemm_sweep_from_env(), 0);
  setenv("RATCHET_GEMM_SWEEP", "8", 1);
  EXPECT_EQ(gemm_sweep_from_env(), 8);
  setenv("RATCHET_GEMM_SWEEP", "32", 1);
  EXPECT_EQ(gemm_sweep_from_env(), 32);
  for (const char* bad : {"1", "33", "-4", "8x", "eight", " 8"}) {
    setenv("RATCHET_GEMM_SWEEP", bad, 1);
    try {
      gemm_sweep_from_env();
      ADD_FAILURE() << "accepted RATCHET_GEMM_SWEEP=" << bad;
    } catch (const ratchet::Error& e) {
      EXPECT_NE(std::string(e.what()).find("RATCHET_GEMM_SWEEP='" + std::string(bad) + "'"),
                std::string::npos) << e.what();
    }
  }
  unsetenv("RATCHET_GEMM_SWEEP");
}

// Recompute policies on the cuda backend, run under simt: the same losses,
// gradients and updated parameters as keeping every activation.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "model/recompute.h"
#include "testing/recompute_cases.h"
#include "testing/tiny_model.h"

namespace {

using namespace ratchet;
using namespace ratchet::testing;

// FP32 storage: every recompute re-runs the same kernels on the same inputs,
// so the results are bitwise those of no recompute.
TEST(CudaBackendRecompute, Fp32BitwiseUnderEveryPolicy) {
  auto be = make_cuda_backend("f32");
  expect_every_policy_bitwise_equal(*be, tiny_config(3, 2, 16, 37, 16), 2, 16);
}

// BF16 storage: bitwise under every policy too. Blocks and the layernorm
// recompute re-run identical kernels; the forward takes GELU from the GEMM
// epilogue (rounded from the FP32 accumulator), so the gelu recompute re-runs
// that GEMM (CudaBackend::gelu_recompute) instead of computing gelu of the
// BF16-rounded pre-activation, which differed by one BF16 ulp.
TEST(CudaBackendRecompute, Bf16BitwiseUnderEveryPolicy) {
  auto be = make_cuda_backend("bf16");
  expect_every_policy_bitwise_equal(*be, tiny_config(3, 2, 16, 37, 16), 2, 16);
  EXPECT_TRUE(be->gelu_recompute_reruns_gemm()) << "the simt stand-in offers GELU_AUX_BIAS";
}

// The GELU epilogue refused (as a device might): the forward runs the GEMM,
// then the GELU kernel on the rounded pre-activation, and so does the
// recompute: bitwise again, with no GEMM re-run.
TEST(CudaBackendRecompute, Bf16WithoutTheGeluEpilogueBitwiseUnderEveryPolicy) {
  ratchet::cuda::CudaBackend<ratchet::kernels::bf16> be;
  be.matmul().reject_epilogue(ratchet::cuda::Epilogue::gelu_bias);
  ::testing::internal::CaptureStderr();  // the one-line note that the epilogue was rejected
  expect_every_policy_bitwise_equal(be, tiny_config(3, 2, 16, 37, 16), 2, 16);
  ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(be.gelu_recompute_reruns_gemm());
}

}  // namespace

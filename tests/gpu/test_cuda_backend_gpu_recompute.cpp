// On a real device: recompute policies give the same gradients (bitwise in
// FP32 storage; the kernels use no atomics and cuBLASLt's algorithm is cached
// per shape), and a training step fits an arena of exactly the accounted
// size (src/model/memory.h). The simt versions of these tests run in CI
// (tests/simt/test_cuda_backend_recompute.cpp, test_cuda_backend.cpp); these
// skip themselves without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "skip_without_device.h"
#include "model/memory.h"
#include "model/recompute.h"
#include "testing/recompute_cases.h"
#include "testing/tiny_model.h"

namespace {

using namespace ratchet;
using namespace ratchet::testing;


// FP32: the forward computes GELU with kernels/gelu.cu after a bias GEMM, as
// the gelu recompute does (cuBLASLt's GELU epilogue differed in the last bit
// here on an H100); blocks re-run GEMMs whose algorithm is pinned per (shape,
// epilogue) whatever the buffers' alignment.
TEST(CudaBackendGpuRecompute, Fp32BitwiseUnderEveryPolicy) {
  SKIP_WITHOUT_DEVICE();
  auto be = make_cuda_backend("f32");
  expect_every_policy_bitwise_equal(*be, tiny_config(3, 2, 64, 97, 32), 2, 32);
}

// BF16 keeps its fused epilogues and is bitwise too: blocks re-run the same
// GEMM + epilogue with the same pinned algorithm, and the gelu recompute
// re-runs the fc GEMM with its GELU epilogue (CudaBackend::gelu_recompute)
// rather than computing GELU of the BF16-rounded pre-activation, which
// differed by one BF16 ulp. Without a GELU_AUX_BIAS plan here the forward and
// the recompute both run kernels/gelu.cu: bitwise either way.
TEST(CudaBackendGpuRecompute, Bf16BitwiseUnderEveryPolicy) {
  SKIP_WITHOUT_DEVICE();
  auto be = make_cuda_backend("bf16");
  expect_every_policy_bitwise_equal(*be, tiny_config(3, 2, 64, 97, 32), 2, 32);
  std::printf("gelu recompute: %s\n", be->gelu_recompute_reruns_gemm() ? "the fc GEMM again (GELU_AUX_BIAS)"
                                                                      : "kernels/gelu.cu");
}

// Every policy's step runs inside an arena of exactly step_memory() bytes and
// reaches exactly that peak.
TEST(CudaBackendGpuRecompute, StepFitsTheExactArenaUnderEveryPolicy) {
  SKIP_WITHOUT_DEVICE();
  const GPTConfig cfg = tiny_config(3, 2, 64, 97, 32);
  for (const Recompute& p : standard_recompute_policies()) {
    auto be = make_cuda_backend("bf16");
    const StepMemory need = step_memory(cfg, 2, 32, p, *be, ParamLayout(cfg).total, 0);
    be->use_arena(need.arena());
    run_policy_step(*be, cfg, p, 2, 32);
    EXPECT_EQ(be->peak_bytes_in_use(), need.total()) << p.name();
  }
}

}  // namespace

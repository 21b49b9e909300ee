// On a real device: recompute policies give the same gradients (bitwise in
// FP32 storage; the kernels use no atomics and cuBLASLt's algorithm is cached
// per shape), and a training step fits an arena of exactly the accounted
// size (src/model/memory.h). The simt versions of these tests run in CI
// (tests/simt/test_cuda_backend_recompute.cpp, test_cuda_backend.cpp); these
// skip themselves without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
  const GPTConfig cfg = tiny_config(3, 2, 64, 97, 32);
  const PolicyStep ref = run_policy_step(*be, cfg, Recompute(), 2, 32);
  for (const std::string& name : policies_to_test()) {
    const PolicyStep got = run_policy_step(*be, cfg, parse_recompute(name), 2, 32);
    EXPECT_EQ(first_bit_difference(got.losses, ref.losses), "") << name;
    EXPECT_EQ(first_bit_difference(got.grads, ref.grads), "") << name;
    EXPECT_EQ(first_bit_difference(got.params, ref.params), "") << name;
  }
}

// BF16 keeps its fused epilogues: blocks re-run the same GEMM + epilogue with
// the same pinned algorithm (bitwise); the gelu recompute computes GELU from
// the BF16-rounded pre-activation where the forward's epilogue rounded it from
// FP32 (by design, as under simt: tests/simt/test_cuda_backend_recompute.cpp),
// so there the gradients agree to 5e-3 of their largest element (one BF16 ulp).
TEST(CudaBackendGpuRecompute, Bf16BlocksBitwiseGeluWithinOneUlp) {
  SKIP_WITHOUT_DEVICE();
  auto be = make_cuda_backend("bf16");
  const GPTConfig cfg = tiny_config(3, 2, 64, 97, 32);
  const PolicyStep ref = run_policy_step(*be, cfg, Recompute(), 2, 32);
  for (const std::string& name : policies_to_test()) {
    const Recompute p = parse_recompute(name);
    const PolicyStep got = run_policy_step(*be, cfg, p, 2, 32);
    EXPECT_EQ(first_bit_difference(got.losses, ref.losses), "") << name;
    if (p.kind == Recompute::kBlocks) {
      EXPECT_EQ(first_bit_difference(got.grads, ref.grads), "") << name;
      EXPECT_EQ(first_bit_difference(got.params, ref.params), "") << name;
      continue;
    }
    double m = 0, scale = 0;
    for (size_t i = 0; i < ref.grads.size(); i++) {
      scale = std::max(scale, (double)std::fabs(ref.grads[i]));
      m = std::max(m, std::fabs((double)got.grads[i] - ref.grads[i]));
    }
    EXPECT_LT(m / scale, 5e-3) << name;
  }
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

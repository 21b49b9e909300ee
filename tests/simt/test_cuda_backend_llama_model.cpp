// The llama model (src/model, issue 17) on the cuda backend, run under simt:
// a training step against the cpu backend, and recompute policies with FP32
// storage bitwise equal to keeping everything. The ops themselves are checked
// one by one in test_cuda_backend_llama_ops.cpp; this is their composition
// (the fused residual + RMSNorm in place on its input, RoPE on the saved qkv,
// GQA, SwiGLU, the untied lm_head).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "model/gpt.h"
#include "testing/family_configs.h"
#include "testing/plan_vs_allocation.h"
#include "testing/recompute_cases.h"
#include "testing/tiny_model.h"

namespace {

using namespace ratchet;
using namespace ratchet::testing;

// max |a - b| over max |b|
double rel_to_max(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0, scale = 0;
  for (size_t i = 0; i < a.size(); i++) {
    scale = std::max(scale, (double)std::fabs(b[i]));
    m = std::max(m, std::fabs((double)a[i] - b[i]));
  }
  return scale > 0 ? m / scale : m;
}

// FP32 storage on both: the cuda backend's GEMMs (cuBLASLt's emulation
// under simt) and reductions sum in other orders than the cpu's, so results
// agree to FP32 rounding through two layers: losses within 1e-5 relative,
// every gradient within 1e-5 of its tensor's largest entry (measured 1.4e-7
// to 3.4e-7: 30x headroom; a wrong term is O(1)).
// One training step of cfg on the cpu backend and on `cuda`, from the same
// parameters and tokens: the loss and every gradient tensor compared.
void expect_step_matches(const GPTConfig& cfg, Backend& cuda_be) {
  auto cpu = make_cpu_backend(2);
  GPT ref(cfg, *cpu), dut(cfg, cuda_be);
  ref.init_random(5);
  std::vector<float> p(ref.num_params());
  ref.get_params(p.data());
  dut.set_params(p.data());
  const int B = 2, T = 16;
  const auto t = random_tokens((size_t)B * T + 1, cfg.vocab_size, 8);
  ref.zero_grad();
  dut.zero_grad();
  const float lr = ref.forward_backward(t.data(), t.data() + 1, B, T, 1.0f);
  const float ld = dut.forward_backward(t.data(), t.data() + 1, B, T, 1.0f);
  EXPECT_NEAR(ld, lr, 1e-5 * std::fabs(lr));
  std::vector<float> gr(ref.num_params()), gd(dut.num_params());
  ref.get_grads(gr.data());
  dut.get_grads(gd.data());
  const ParamLayout& lay = ref.layout();
  for (int i = 0; i < kNumParamTensors; i++) {
    if (lay.sizes[i] == 0) continue;
    const std::vector<float> a(gd.begin() + lay.offsets[i],
                               gd.begin() + lay.offsets[i] + lay.sizes[i]);
    const std::vector<float> b(gr.begin() + lay.offsets[i],
                               gr.begin() + lay.offsets[i] + lay.sizes[i]);
    const double e = rel_to_max(a, b);
    EXPECT_LT(e, 1e-5) << ParamLayout::name(i);
    std::printf("grad %-8s rel %.2e\n", ParamLayout::name(i), e);
  }
}

TEST(CudaBackendLlamaModel, Fp32StepMatchesTheCpuBackend) {
  const GPTConfig cfg = tiny_llama_config(/*tied=*/false, 2, 4, 2, 32, 40, 37, 16);
  auto cuda = make_cuda_backend("f32");
  expect_step_matches(cfg, *cuda);
}

// Issue 38's families, every non-attention option on the cuda backend and
// composed in the model: q/k norms per head (qwen3, gemma3) and full width
// (olmo2), post (olmo2) and sandwich (gemma3) norms, the (1+w) form, the
// embedding scale, GeGLU and the final soft-cap (gemma3). gemma3's attention
// options (window, scale, soft-cap) are switched off here: they are the
// attention kernels' to test. qwen3's head size 12 takes the materialized
// attention (flash has 8/16/32/64/128). Tolerance: Fp32Step's, same reasoning
// (measured 1.1e-7 to 8.6e-7 here, gemma3's qnormw the largest:
// test_cuda_backend_llama_model --gtest_filter='*FamilyFp32Step*').
TEST(CudaBackendLlamaModel, FamilyFp32StepMatchesTheCpuBackend) {
  for (Family f : {Family::qwen3, Family::olmo2, Family::gemma3}) {
    SCOPED_TRACE((int)f);
    GPTConfig cfg = tiny_family_config(f, /*tied=*/false, 2);
    if (f == Family::gemma3) {
      cfg.attn_scale = 0;
      cfg.attn_softcap = 0;
      cfg.sliding_window = 0;
      cfg.layer_sliding.clear();
      cfg.finalize();
    }
    auto cuda = make_cuda_backend(
        "f32", f == Family::qwen3 ? AttentionImpl::materialized : AttentionImpl::flash);
    expect_step_matches(cfg, *cuda);
  }
}

// FP32 storage: every recompute re-runs the same kernels on the same inputs.
TEST(CudaBackendLlamaModel, Fp32RecomputeIsBitwiseUnderEveryPolicy) {
  auto be = make_cuda_backend("f32");
  expect_every_policy_bitwise_equal(*be, tiny_llama_config(/*tied=*/true, 3), 2, 16);
}

// BF16 storage: a recompute must re-run the very ops of the first forward
// (the fused residual + RMSNorm, not a separate add and norm that would round
// differently), so gradients stay bitwise equal here too.
TEST(CudaBackendLlamaModel, Bf16RecomputeIsBitwiseUnderEveryPolicy) {
  auto be = make_cuda_backend("bf16");
  expect_every_policy_bitwise_equal(*be, tiny_llama_config(/*tied=*/false, 3), 2, 16);
}

// `ratchet plan`'s memory for a llama on the cuda backend is what it
// allocates (RoPE table, GQA qkv, SwiGLU buffers, the ops' scratch), byte for
// byte, with and without ZeRO-1; one policy per storage type (simt is slow;
// the cpu test covers every policy).
TEST(CudaBackendLlamaModel, PlanIsTheAllocation) {
  const GPTConfig cfg = tiny_llama_config(/*tied=*/false, 2, 4, 2, 64, 96, 257, 32);
  expect_plan_is_the_allocation([] { return make_cuda_backend("bf16"); }, cfg, 2, 16,
                                parse_recompute("blocks:2"), false);
  expect_plan_is_the_allocation([] { return make_cuda_backend("f32"); }, cfg, 2, 16,
                                parse_recompute("gelu+ln"), false);
  expect_plan_is_the_allocation(
      [] { return make_cuda_backend("bf16", AttentionImpl::materialized); }, cfg, 2, 16,
      Recompute(), false);
}

}  // namespace

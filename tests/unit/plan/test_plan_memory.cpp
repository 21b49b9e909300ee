// `ratchet plan`'s memory figure for the cpu backend against what the backend
// really allocates (tests/testing/plan_vs_allocation.h), byte for byte, for
// every recompute policy, with and without ZeRO-1. Shapes are chosen so that
// the 64-byte rounding of every buffer matters. The cuda backend's twin is in
// tests/simt/test_cuda_backend.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.h"
#include "backend/memory_model.h"
#include "model/gpt.h"
#include "testing/plan_vs_allocation.h"
#include "testing/tiny_model.h"

using namespace ratchet;

namespace {

struct Shape {
  int L, NH, C, V, maxT, B, T;
};

class PlanMemory : public ::testing::TestWithParam<std::tuple<Shape, const char*>> {};

TEST_P(PlanMemory, CpuBackendAllocatesExactlyThePlannedBytes) {
  const Shape s = std::get<0>(GetParam());
  GPTConfig cfg;
  cfg.num_layers = s.L;
  cfg.num_heads = s.NH;
  cfg.channels = s.C;
  cfg.vocab_size = s.V;
  cfg.max_seq_len = s.maxT;
  cfg.padded_vocab = 0;
  cfg.finalize();
  ratchet::testing::expect_plan_is_the_allocation([] { return make_cpu_backend(2); }, cfg, s.B,
                                                  s.T, parse_recompute(std::get<1>(GetParam())));
}

// The description plan uses for --device cpu is the cpu backend's own.
TEST(PlanMemoryModel, CpuDeviceIsTheCpuBackend) {
  EXPECT_TRUE(plan::backend_memory_model(plan::find_device("cpu")) ==
              make_cpu_backend(1)->memory_model());
}

// --attention cudnn's scratch without a device (`ratchet plan`): the engine
// workspace formula (backend/memory_model.h) forward and backward, and dQ's
// FP32 accumulator (B,NH,T,HS) only with --deterministic off; the op workspace
// is the flash one's or the cuDNN backward's, whichever is larger.
TEST(PlanMemoryModel, CudnnAttentionScratchIsAccounted) {
  const OpShapes d12{8, 1024, 768, 12, 50304};
  const BackendMemoryModel det = cuda_memory_model(2, 0, AttentionImpl::cudnn, true);
  const BackendMemoryModel fast = cuda_memory_model(2, 0, AttentionImpl::cudnn, false);
  EXPECT_FALSE(det == fast);
  EXPECT_EQ(det.attention_forward_scratch(d12), 256u);  // the forward plans' 256-byte block
  // Deterministic: the (B,NH,T,T) BF16 dP workspace (T = 1024 is a multiple of 64
  // and 128), an FP32 (B,NH,T) row sum and the 256-byte block; no dQ accumulator
  // (d12 is not grouped-query: no FP32 dQ in the workspace either).
  const size_t dp = 2ull * 8 * 12 * 1024 * 1024, rows = 4ull * 8 * 12 * 1024;
  EXPECT_EQ(det.attention_backward_scratch(d12), dp + rows + 256);
  // --deterministic off: ratchet's accumulator (B,T,C) FP32, then the row sums and the block.
  const size_t acc = 8ull * 1024 * 768 * 4, ws = rows + 256;
  EXPECT_EQ(fast.attention_backward_scratch(d12), acc + ws);
  EXPECT_EQ(cuda_scratch::cudnn_dq_accumulator(1, 7, 24), 768u);  // 672 bytes rounded to 256
  for (int T : {1024, 4096}) {
    const OpShapes s{8, T, 768, 12, 50304};
    const size_t flash = cuda_memory_model(2, 0, AttentionImpl::flash).workspace_bytes(s);
    EXPECT_EQ(fast.workspace_bytes(s), std::max(flash, fast.attention_backward_scratch(s)));
    EXPECT_EQ(det.workspace_bytes(s), std::max(flash, det.attention_backward_scratch(s)));
  }
}

// The formula against the real plans' workspace sizes on an H200 (the 24
// lines of CudnnAttentionGpu.WorkspaceFormulaMatchesThePlans in
// bench/gpu/results/2026-11-30-h200/window2/test_cudnn_attention.log):
// exact, since the arena holds exactly the plan's figure.
TEST(PlanMemoryModel, CudnnWorkspaceFormulaMatchesTheH200Plans) {
  struct Seen { int B, T, NH, KV, HS; bool det; size_t fwd, bwd; };
  const Seen seen[] = {
      {16, 1024, 9, 3, 64, false, 256, 38338816},  {8, 1024, 12, 12, 64, false, 256, 393472},
      {4, 2048, 12, 12, 64, false, 256, 393472},   {2, 512, 16, 16, 128, false, 256, 65792},
      {2, 8192, 12, 12, 64, false, 256, 786688},   {3, 200, 4, 2, 64, false, 256, 624256},
      {16, 1024, 9, 3, 64, true, 256, 340328704},  {8, 1024, 12, 12, 64, true, 256, 201720064},
      {4, 2048, 12, 12, 64, true, 256, 403046656}, {2, 512, 16, 16, 128, true, 256, 16843008},
      {2, 8192, 12, 12, 64, true, 256, 3222012160}, {3, 200, 4, 2, 64, true, 256, 2197120},
  };
  for (const Seen& s : seen) {
    SCOPED_TRACE(std::to_string(s.B) + "x" + std::to_string(s.T) + " NH " + std::to_string(s.NH) +
                 " KV " + std::to_string(s.KV) + (s.det ? " deterministic" : ""));
    EXPECT_EQ(cuda_scratch::cudnn_workspace_formula(s.B, s.T, s.NH, s.KV, s.HS, false, s.det), s.fwd);
    EXPECT_EQ(cuda_scratch::cudnn_workspace_formula(s.B, s.T, s.NH, s.KV, s.HS, true, s.det), s.bwd);
  }
  // Issue 24's H100 record for the first shape, "38.3 MB", three significant figures.
  EXPECT_NEAR((double)cuda_scratch::cudnn_workspace_formula(16, 1024, 9, 3, 64, true, false), 38.3e6, 0.05e6);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PlanMemory,
    ::testing::Combine(
        ::testing::Values(Shape{2, 2, 64, 257, 64, 4, 32},  // the integration tests' model
                          Shape{1, 3, 36, 201, 32, 3, 17},  // odd sizes: rounding everywhere
                          Shape{3, 4, 32, 100, 16, 2, 16}),
        // blocks:2 is listed after the standard four: every policy is checked.
        ::testing::Values("blocks:2")));

// Llama: GQA, SwiGLU (odd hidden size), RoPE table, tied and untied lm_head.
class PlanMemoryLlama : public ::testing::TestWithParam<bool> {};

TEST_P(PlanMemoryLlama, CpuBackendAllocatesExactlyThePlannedBytes) {
  const GPTConfig cfg = ratchet::testing::tiny_llama_config(/*tied=*/GetParam(), 3, 4, 2, 40,
                                                            52, 201, 32);
  ratchet::testing::expect_plan_is_the_allocation([] { return make_cpu_backend(2); }, cfg, 3,
                                                  17, parse_recompute("blocks:2"));
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, PlanMemoryLlama, ::testing::Bool());

}  // namespace

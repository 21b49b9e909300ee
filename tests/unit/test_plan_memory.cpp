// `ratchet plan`'s memory figure for the cpu backend against what the backend
// really allocates (tests/testing/plan_vs_allocation.h), byte for byte, for
// every recompute policy, with and without ZeRO-1. Shapes are chosen so that
// the 64-byte rounding of every buffer matters. The cuda backend's twin is in
// tests/simt/test_cuda_backend.cpp.
#include <gtest/gtest.h>

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

// --attention cudnn's scratch (no device can allocate it here, so the figure
// itself is checked): the engine workspace cap forward; dQ's FP32
// accumulator (B,NH,T,HS) plus the cap backward; and the op workspace is the
// flash one's or the cuDNN backward's, whichever is larger (the other ops are
// the same).
TEST(PlanMemoryModel, CudnnAttentionScratchIsAccounted) {
  const size_t cap = kCudnnAttentionWorkspaceBytes;
  EXPECT_EQ(cuda_scratch::attention_forward(AttentionImpl::cudnn, 8, 1024, 768, 2), cap);
  const size_t acc = (size_t)8 * 1024 * 768 * 4;  // a multiple of 256 already
  EXPECT_EQ(cuda_scratch::attention_backward(AttentionImpl::cudnn, 8, 1024, 768, 12, 2),
            acc + cap);
  EXPECT_EQ(cuda_scratch::attention_backward(AttentionImpl::cudnn, 1, 7, 24, 3, 2),
            768 + cap);  // 7*24*4 = 672 bytes, rounded up to a multiple of 256
  for (int T : {1024, 4096}) {
    const OpShapes s{8, T, 768, 12, 50304};
    const size_t flash = cuda_memory_model(2, 0, AttentionImpl::flash).workspace_bytes(s);
    const size_t cudnn = cuda_memory_model(2, 0, AttentionImpl::cudnn).workspace_bytes(s);
    EXPECT_EQ(cudnn, std::max(flash, (size_t)8 * T * 768 * 4 + cap)) << "T=" << T;
  }
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

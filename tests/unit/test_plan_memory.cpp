// `ratchet plan`'s memory figure for the cpu backend against what the backend
// really allocates (tests/testing/plan_vs_allocation.h), byte for byte, for
// every recompute policy, with and without ZeRO-1. Shapes are chosen so that
// the 64-byte rounding of every buffer matters. The cuda backend's twin is in
// tests/simt/test_cuda_backend.cpp.
#include <gtest/gtest.h>

#include "backend/backend.h"
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

// `ratchet plan`'s memory figure for the cpu backend against what the backend
// really allocates: a GPT and its AdamW, after one forward/backward and one
// optimizer step, hold exactly plan's total for the recompute policy used (parameters,
// gradients, AdamW m and v, activations), byte for byte. Shapes are chosen so that the
// 64-byte rounding of every buffer matters.
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "plan/plan.h"

using namespace ratchet;

namespace {

struct Shape {
  int L, NH, C, V, maxT, B, T;
};

class PlanMemory : public ::testing::TestWithParam<std::tuple<Shape, const char*>> {};

// For every recompute policy: what the cpu backend allocates for a training
// step is what `ratchet plan` says, byte for byte.
TEST_P(PlanMemory, CpuBackendAllocatesExactlyThePlannedBytes) {
  const Shape s = std::get<0>(GetParam());
  const Recompute policy = parse_recompute(std::get<1>(GetParam()));
  GPTConfig cfg;
  cfg.num_layers = s.L;
  cfg.num_heads = s.NH;
  cfg.channels = s.C;
  cfg.vocab_size = s.V;
  cfg.max_seq_len = s.maxT;
  cfg.padded_vocab = 0;
  cfg.finalize();

  auto be = make_cpu_backend(2);
  const size_t before = be->bytes_in_use();
  {
    GPT model(cfg, *be);
    model.set_recompute(policy);
    AdamW opt(*be, model.layout(), AdamWConfig{});
    model.init_random(7);
    std::vector<int32_t> x(s.B * s.T), y(s.B * s.T);
    for (size_t i = 0; i < x.size(); i++) {
      x[i] = (int32_t)((i * 37 + 11) % s.V);
      y[i] = (int32_t)((i * 53 + 5) % s.V);
    }
    model.zero_grad();
    model.forward_backward(x.data(), y.data(), s.B, s.T, 1.0f);
    opt.step(model.params(), model.grads(), 1e-3f);

    const size_t used = be->bytes_in_use() - before;
    ASSERT_GT(used, 0u) << "the backend does not count its allocations (bytes_in_use)";
    const plan::MemoryPlan m =
        plan::memory_per_rank(cfg, s.B, s.T, be->storage_bytes(), 1, policy);
    EXPECT_EQ(used, m.total_chosen(false))
        << policy.name() << ": params " << m.params << " grads " << m.grads << " adam " << m.adam
        << " activations " << m.activations_chosen;
    // and the pieces are the model's own accounting
    EXPECT_EQ(m.activations_chosen,
              GPT::activation_bytes(cfg, s.B, s.T, be->storage_bytes(), policy));
    EXPECT_NEAR((double)(m.params + m.grads),
                (double)GPT::param_bytes(cfg, be->storage_bytes()), 128.0);
  }
  EXPECT_EQ(be->bytes_in_use(), before) << "every alloc() was released";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PlanMemory,
    ::testing::Combine(
        ::testing::Values(Shape{2, 2, 64, 257, 64, 4, 32},  // the integration tests' model
                          Shape{1, 3, 36, 201, 32, 3, 17},  // odd sizes: rounding everywhere
                          Shape{3, 4, 32, 100, 16, 2, 16}),
        ::testing::Values("none", "gelu", "gelu+ln", "blocks", "blocks:2")));

}  // namespace

// The cpu backend's MoE states (moe::MoeCache, host vectors) in its memory
// accounting (BackendMemoryModel::moe_state_host): after a training step the
// backend's bytes_in_use is step_memory's total byte for byte, the states
// included (one per kept MoE layer, one shared by the layers blocks:k
// recomputes), and the states' bytes leave it with the model.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "optim/adamw.h"
#include "testing/moe_configs.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

TEST(CpuMoeMemory, StepMemoryCountsTheMoeStates) {
  const int B = 2, T = 16;
  for (const auto& [name, fam] : moe_families())
    for (const char* pol : {"none", "blocks:2"}) {
      SCOPED_TRACE(name + " " + pol);
      const GPTConfig cfg = tiny_moe_config(fam, 0.5f);
      auto be = make_cpu_backend(2);
      const Recompute r = parse_recompute(pol);
      const size_t before = be->bytes_in_use();
      {
        GPT m(cfg, *be);
        m.set_recompute(r);
        m.init_random(3);
        AdamW opt(*be, m.layout(), AdamWConfig{});
        const auto t = random_tokens((size_t)B * T + 1, cfg.vocab_size, 4);
        const StepMemory want = step_memory(cfg, B, T, r, *be, m.num_params(), 0);
        ASSERT_GT(want.moe, 0u);
        for (int step = 0; step < 2; step++) {  // the second step grows nothing
          m.zero_grad();
          m.forward_backward(t.data(), t.data() + 1, B, T, 1.0f);
          opt.step(m.params(), m.grads(), 1e-3f);
          EXPECT_EQ(be->bytes_in_use(), want.total()) << "step " << step << ": moe " << want.moe
                                                      << " activations " << want.activations;
        }
        // One state's bytes: the formula for this shape, E=4 experts, top 2.
        const size_t one = be->memory_model().moe_state_bytes((long)B * T, cfg.channels, 4, 2, 16);
        EXPECT_EQ(want.moe % one, 0u);
      }
      EXPECT_EQ(be->bytes_in_use(), before);  // the model and its states gone: nothing left counted
    }
}

}  // namespace

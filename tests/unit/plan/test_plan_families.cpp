// `ratchet plan` for the 2026 families (issue 38): every preset plans; the
// FLOPs per token count a sliding layer's attention over min(T, W) keys, in
// plan, in MFU's count (train_flops_per_token, which trainer.cpp uses) and in
// block recomputation.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "plan/plan.h"

using namespace ratchet;
using namespace ratchet::plan;

namespace {

const char* const kFamilyPresets[] = {"qwen2.5-0.5b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-8b", "olmo2-1b",
                                      "smollm3-3b",   "mistral-7b", "gemma3-270m", "gemma3-1b"};

TEST(PlanFamilies, EveryPresetPlans) {
  for (const char* name : kFamilyPresets) {
    PlanInputs in;
    in.cfg = preset_config(name, 257, 4096);
    in.model_name = name;
    in.T = 4096;
    in.B = 1;
    in.steps = 10;
    in.device = "h100";
    const Plan p = make_plan(in);
    EXPECT_EQ(p.n_params, in.cfg.param_count()) << name;
    EXPECT_EQ(p.flops_per_token, train_flops_per_token(in.cfg, 4096)) << name;
    EXPECT_GT(p.mem.activations_of(in.recompute), 0u) << name;
    EXPECT_GT(p.step_s, 0) << name;
  }
}

TEST(PlanFamilies, SlidingLayersCountTheirWindowsKeys) {
  // gemma3-1b at T = 8192: 22 sliding layers see 512 keys, 4 full ones 8192;
  // NH·hs = 4·256 = 1024; the matmuls are every parameter (tied: wte is the classifier).
  const GPTConfig g = preset_config("gemma3-1b", 257, 8192);
  const double attn = 12.0 * 1024 * (22 * 512.0 + 4 * 8192.0);
  EXPECT_EQ(train_flops_per_token(g, 8192), 6.0 * 999885952.0 + attn);
  // Without the windows every layer sees all 8192 keys: more FLOPs.
  GPTConfig full = g;
  full.layer_sliding.clear();
  EXPECT_EQ(train_flops_per_token(full, 8192), 6.0 * 999885952.0 + 12.0 * 1024 * 26 * 8192.0);
  EXPECT_LT(train_flops_per_token(g, 8192), train_flops_per_token(full, 8192));
  // T below the window: the window changes nothing.
  EXPECT_EQ(train_flops_per_token(g, 256), train_flops_per_token(full, 256));

  // Plan uses that count (its step time and MFU figures follow from it).
  PlanInputs in;
  in.cfg = g;
  in.T = 8192;
  in.B = 1;
  in.steps = 10;
  EXPECT_EQ(make_plan(in).flops_per_token, train_flops_per_token(g, 8192));
  in.cfg = full;
  EXPECT_EQ(make_plan(in).flops_per_token, train_flops_per_token(full, 8192));

  // Recomputing every block adds a third of the attention (4 of 12) and
  // 2 per block parameter: the sliding layers' windows count there too.
  Recompute blocks;
  blocks.kind = Recompute::kBlocks;
  const ParamLayout lay(g);
  double layered = 0;
  for (int i : kBlockTensors) layered += (double)lay.sizes[i];
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(g, 8192, blocks), 2.0 * layered + attn / 3);
  EXPECT_LT(recompute_flops_per_token(g, 8192, blocks), recompute_flops_per_token(full, 8192, blocks));
}

}  // namespace

// --family's defaults (model/family_defaults.h): each family turns on what
// its models have, the pattern lists are per layer, and bad flags are refused.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/family_defaults.h"
#include "testing/expect_error.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

#define EXPECT_THROW_MSG(stmt, text) expect_error([&] { stmt; }, {text})

GPTConfig with(Family f, int layers, int window = 0) {
  GPTConfig c = tiny_llama_config(true, layers);
  apply_family_defaults(c, f, window);
  c.finalize();
  return c;
}

TEST(FamilyDefaults, EachFamilyTurnsOnItsOptions) {
  EXPECT_TRUE(with(Family::qwen2, 2).qkv_bias);
  EXPECT_EQ(with(Family::qwen3, 2).qk_norm, QkNorm::per_head);
  const GPTConfig o = with(Family::olmo2, 2);
  EXPECT_EQ(o.norm_placement, NormPlacement::post);
  EXPECT_EQ(o.qk_norm, QkNorm::full_width);
  const GPTConfig s = with(Family::smollm3, 8);
  for (int l = 0; l < 8; l++) EXPECT_EQ(s.layer_has_rope(l), l != 3 && l != 7) << l;
  const GPTConfig m = with(Family::mistral, 3, 5);
  for (int l = 0; l < 3; l++) EXPECT_EQ(m.window(l), 5);
  EXPECT_EQ(with(Family::mistral, 3).window(0), 0);
  const GPTConfig g = with(Family::gemma3, 12, 7);
  EXPECT_TRUE(g.norm_unit_offset && g.embed_scale && g.tied_embeddings);
  EXPECT_EQ(g.mlp_act, MlpAct::gelu_tanh);
  EXPECT_EQ(g.norm_placement, NormPlacement::sandwich);
  for (int l = 0; l < 12; l++) {
    EXPECT_EQ(g.window(l), (l + 1) % 6 == 0 ? 0 : 7) << l;
    EXPECT_EQ(g.layer_local_rope(l), (l + 1) % 6 != 0) << l;
  }
}

TEST(FamilyDefaults, BadFlagsAreRefusedByName) {
  EXPECT_THROW_MSG(parse_family_flag("qwen4", "--family"), "--family 'qwen4' is not a model family");
  EXPECT_EQ(parse_family_flag("gemma3", "--family"), Family::gemma3);
  EXPECT_EQ(parse_family_flag("gemma3_text", "--family"), Family::gemma3);
  GPTConfig c = tiny_llama_config(true, 2);
  EXPECT_THROW_MSG(apply_family_defaults(c, Family::qwen3, 4), "--sliding-window is for --family mistral or gemma3");
  EXPECT_THROW_MSG(apply_family_defaults(c, Family::mistral, -1), "--sliding-window must be positive");
  GPTConfig gpt2 = tiny_config();
  EXPECT_THROW_MSG(apply_family_defaults(gpt2, Family::qwen3, 0), "needs --arch llama");
}

// The flags train and plan share: --family on a custom shape or an lN
// preset, --head-dim, --sliding-window; mismatches refused by flag.
TEST(FamilyDefaults, ModelFlagsApplyThem) {
  ModelFlags f;
  f.model = "custom", f.arch = "llama", f.layers = 6, f.heads = 4, f.channels = 64;
  f.vocab_size = 300, f.max_seq_len = 64;
  f.family = "gemma3", f.head_dim = 32, f.sliding_window = 16;
  const GPTConfig g = config_from_flags(f);
  EXPECT_EQ(g.family, Family::gemma3);
  EXPECT_EQ(g.head_size(), 32);
  EXPECT_EQ(g.attn_channels(), 128);
  EXPECT_EQ(g.window(0), 16);
  EXPECT_EQ(g.window(5), 0);
  f.family = "", f.head_dim = 0;
  EXPECT_THROW_MSG(config_from_flags(f), "--sliding-window needs --family mistral or gemma3");
  f.model = "d6", f.arch = "", f.sliding_window = 0, f.head_dim = 8;
  f.layers = f.heads = f.channels = 0;
  EXPECT_THROW_MSG(config_from_flags(f), "--head-dim needs --arch llama");
  f.head_dim = 0, f.family = "qwen3";
  EXPECT_THROW_MSG(config_from_flags(f), "--family qwen3 needs --arch llama");
  f.model = "l4";
  EXPECT_EQ(config_from_flags(f).qk_norm, QkNorm::per_head);
}

}  // namespace

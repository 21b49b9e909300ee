// The 2026 families' presets (issue 38): each preset's shape gives its
// model's published parameter count. The count asserted is the exact sum of
// the shape's tensors (ParamLayout total; none of these vocabularies needs
// padding, so it is also the unpadded count), tied embeddings counted once;
// where the model card publishes only a rounded figure, the comment gives it
// and the test checks the exact count rounds to it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "model/moe_cost.h"

using namespace ratchet;

namespace {

// The preset's exact parameter count, after checking it has no padding rows.
double count(const std::string& name) {
  const GPTConfig c = preset_config(name, 257, 1024);
  EXPECT_EQ(c.padded_vocab, c.vocab_size) << name;
  EXPECT_EQ((double)ParamLayout(c).total, c.param_count()) << name;
  return (double)ParamLayout(c).total;
}
// Non-embedding parameters (the model cards' second figure): without wte (and lm_head).
double non_embedding(const std::string& name) {
  const GPTConfig c = preset_config(name, 257, 1024);
  return count(name) - (double)c.vocab_size * c.channels * (c.tied_embeddings ? 1 : 2);
}
double round_to(double x, double unit) { return std::round(x / unit) * unit; }

TEST(Presets, Qwen25_05B) {
  // Qwen/Qwen2.5-0.5B: 0.49B, 0.36B non-embedding; 494,032,768 (tied, q/k/v biases).
  EXPECT_EQ(count("qwen2.5-0.5b"), 494032768.0);
  EXPECT_EQ(round_to(non_embedding("qwen2.5-0.5b"), 1e7), 3.6e8);
  const GPTConfig c = preset_config("qwen2.5-0.5b", 257, 1024);
  EXPECT_EQ(c.family, Family::qwen2);
  EXPECT_TRUE(c.qkv_bias);
}

TEST(Presets, Qwen3) {
  // Qwen/Qwen3-0.6B: 0.6B, 0.44B non-embedding: 596,049,920 (tied, head_dim 128).
  EXPECT_EQ(count("qwen3-0.6b"), 596049920.0);
  EXPECT_EQ(round_to(non_embedding("qwen3-0.6b"), 1e7), 4.4e8);
  // Qwen/Qwen3-1.7B: 1.7B, 1.4B non-embedding (exactly 1,720,574,976, tied).
  EXPECT_EQ(count("qwen3-1.7b"), 1720574976.0);
  EXPECT_EQ(round_to(count("qwen3-1.7b"), 1e8), 1.7e9);
  EXPECT_EQ(round_to(non_embedding("qwen3-1.7b"), 1e8), 1.4e9);
  // Qwen/Qwen3-8B: 8.2B, 6.95B non-embedding (exactly 8,190,735,360, untied).
  EXPECT_EQ(count("qwen3-8b"), 8190735360.0);
  EXPECT_EQ(round_to(count("qwen3-8b"), 1e8), 8.2e9);
  EXPECT_EQ(round_to(non_embedding("qwen3-8b"), 1e7), 6.95e9);
  const GPTConfig c = preset_config("qwen3-8b", 257, 1024);
  EXPECT_EQ(c.head_size(), 128);
  EXPECT_EQ(c.qk_norm, QkNorm::per_head);
  EXPECT_FALSE(c.tied_embeddings);
}

TEST(Presets, Olmo2_1B) {
  // allenai/OLMo-2-0425-1B: 1.48B (exactly 1,484,916,736, untied, full-width q/k norms).
  EXPECT_EQ(count("olmo2-1b"), 1484916736.0);
  EXPECT_EQ(round_to(count("olmo2-1b"), 1e7), 1.48e9);
  EXPECT_EQ(preset_config("olmo2-1b", 257, 1024).norm_placement, NormPlacement::post);
}

TEST(Presets, SmolLM3_3B) {
  // HuggingFaceTB/SmolLM3-3B: 3.08B (exactly 3,075,098,624, tied); every 4th layer NoPE.
  EXPECT_EQ(count("smollm3-3b"), 3075098624.0);
  EXPECT_EQ(round_to(count("smollm3-3b"), 1e7), 3.08e9);
  const GPTConfig c = preset_config("smollm3-3b", 257, 1024);
  int nope = 0;
  for (int l = 0; l < c.num_layers; l++) nope += !c.layer_has_rope(l);
  EXPECT_EQ(nope, 9);
  EXPECT_FALSE(c.layer_has_rope(3));
  EXPECT_TRUE(c.layer_has_rope(4));
}

TEST(Presets, Mistral7B) {
  // mistralai/Mistral-7B-v0.1: 7,241,732,096 parameters, a 4096-token window on every layer.
  EXPECT_EQ(count("mistral-7b"), 7241732096.0);
  const GPTConfig c = preset_config("mistral-7b", 257, 1024);
  for (int l = 0; l < c.num_layers; l++) EXPECT_EQ(c.window(l), 4096);
}

TEST(Presets, Gemma3) {
  // google/gemma-3-270m: 268,098,176; google/gemma-3-1b-pt: 999,885,952 (tied, head_dim 256).
  EXPECT_EQ(count("gemma3-270m"), 268098176.0);
  EXPECT_EQ(count("gemma3-1b"), 999885952.0);
  const GPTConfig c = preset_config("gemma3-1b", 257, 1024);
  // sliding_window_pattern 6: layers 5, 11, 17, 23 full, the other 22 within 512 tokens.
  int full = 0;
  for (int l = 0; l < c.num_layers; l++) full += c.window(l) == 0;
  EXPECT_EQ(full, 4);
  EXPECT_EQ(c.window(0), 512);
  EXPECT_EQ(c.window(5), 0);
  EXPECT_EQ(c.rope_local_theta, 10000.f);
  EXPECT_EQ(c.attn_scale, 0.f);  // query_pre_attn_scalar 256 = head_dim
}

TEST(Presets, MoeTotalAndActive) {
  // Issue 39. Active: the parameters a token uses (model/moe_cost.h):
  // embeddings and lm_head, attention, norms, the router and k experts.
  // Qwen/Qwen3-30B-A3B: "30.5B in total and 3.3B activated" (48 layers, 128
  // experts of 768, top 8, head_dim 128, untied): 30,532,122,624 and 3,353,032,704.
  EXPECT_EQ(count("qwen3-30b-a3b"), 30532122624.0);
  EXPECT_EQ(round_to(count("qwen3-30b-a3b"), 1e8), 30.5e9);
  EXPECT_EQ(active_param_count(preset_config("qwen3-30b-a3b", 257, 1024)), 3353032704.0);
  EXPECT_EQ(std::floor(3353032704.0 / 1e8) * 1e8, 3.3e9);  // the card truncates 3.35 to 3.3
  // allenai/OLMoE-1B-7B-0924: 6.9B total, 1.3B active (16 layers, 64 experts of 1024, top 8).
  EXPECT_EQ(count("olmoe-1b-7b"), 6919161856.0);
  EXPECT_EQ(round_to(count("olmoe-1b-7b"), 1e8), 6.9e9);
  EXPECT_EQ(active_param_count(preset_config("olmoe-1b-7b", 257, 1024)), 1282017280.0);
  EXPECT_EQ(round_to(1282017280.0, 1e8), 1.3e9);
  // mistralai/Mixtral-8x7B-v0.1: 46.7B total, 12.9B active (32 layers, 8 experts of 14336, top 2).
  EXPECT_EQ(count("mixtral-8x7b"), 46702792704.0);
  EXPECT_EQ(round_to(count("mixtral-8x7b"), 1e8), 46.7e9);
  EXPECT_EQ(active_param_count(preset_config("mixtral-8x7b", 257, 1024)), 12879925248.0);
  EXPECT_EQ(round_to(12879925248.0, 1e8), 12.9e9);
  // rednote-hilab/dots.llm1: "activates 14B parameters out of a total of
  // 142B" (62 layers, layer 0 dense of 10944, 128 experts of 1408, top 6, 2
  // shared experts; the shape as its config.json has it). Its flat buffer
  // holds more (param_layout.h: a model mixing dense and MoE layers keeps
  // both MLPs' slices on every layer, the unused ones zero): 153.2B.
  const GPTConfig dots = preset_config("dots.llm1", 257, 1024);
  EXPECT_EQ(dots.param_count(), 142774373888.0);
  EXPECT_EQ(active_param_count(dots), 14016581120.0);
  EXPECT_EQ(std::floor(dots.param_count() / 1e9) * 1e9, 142e9);  // 142.77B: the card truncates
  EXPECT_EQ(round_to((double)ParamLayout(dots).total, 1e8), 153.2e9);
  EXPECT_EQ(std::floor(active_param_count(dots) / 1e9) * 1e9, 14e9) << active_param_count(dots);
  EXPECT_EQ(dots.family, Family::dots1);
  EXPECT_EQ(dots.moe_layer_count(), 61);
  EXPECT_EQ(dots.shared_ffn(), 2816);
  EXPECT_TRUE(dots.moe_sigmoid);
  EXPECT_EQ(dots.routed_scaling_factor, 2.5f);
  // Qwen/Qwen1.5-MoE-A2.7B: "14.3B parameters in total and 2.7B activated"
  // (24 layers, 60 experts of 1408, top 4, a gated shared expert of 5632 on
  // every layer; the shape as transformers' Qwen2MoeConfig defaults have it).
  const GPTConfig qm = preset_config("qwen1.5-moe-a2.7b", 257, 1024);
  EXPECT_EQ(qm.param_count(), 14315784192.0);
  EXPECT_EQ(round_to(qm.param_count(), 1e8), 14.3e9);
  EXPECT_EQ(active_param_count(qm), 2689173504.0);
  EXPECT_EQ(round_to(active_param_count(qm), 1e8), 2.7e9);
  EXPECT_EQ((double)ParamLayout(qm).total, qm.param_count() + (qm.padded_vocab - qm.vocab_size) * 2.0 * 2048);
  EXPECT_EQ(qm.family, Family::qwen2_moe);
  EXPECT_TRUE(qm.qkv_bias);
  EXPECT_FALSE(qm.norm_topk_prob);
  EXPECT_EQ(qm.shared_ffn(), 5632);
  EXPECT_TRUE(qm.shared_expert_gated());
  EXPECT_EQ(ParamLayout(qm).sizes[P_SHGATE], 24u * 2048);
  for (const char* n : {"qwen3-30b-a3b", "olmoe-1b-7b", "mixtral-8x7b", "qwen1.5-moe-a2.7b"}) {
    const GPTConfig c = preset_config(n, 257, 1024);
    EXPECT_EQ(c.moe_layer_count(), c.num_layers) << n;
    EXPECT_EQ(ParamLayout(c).sizes[P_FCW], 0u) << n;  // no dense MLP held
  }
  EXPECT_EQ(preset_config("qwen3-30b-a3b", 257, 1024).family, Family::qwen3_moe);
  EXPECT_TRUE(preset_config("qwen3-30b-a3b", 257, 1024).norm_topk_prob);
  EXPECT_EQ(preset_config("olmoe-1b-7b", 257, 1024).qk_norm, QkNorm::full_width);
  EXPECT_FALSE(preset_config("olmoe-1b-7b", 257, 1024).norm_topk_prob);
  EXPECT_TRUE(preset_config("mixtral-8x7b", 257, 1024).layer_sliding.empty());
}

TEST(Presets, LayersFlagKeepsTheLayerPattern) {
  // --layers on gemma3-1b: every 6th layer stays full; on smollm3-3b every 4th stays NoPE.
  ModelFlags f;
  f.model = "gemma3-1b", f.layers = 8, f.vocab_size = 257, f.max_seq_len = 64;
  GPTConfig c = config_from_flags(f);
  ASSERT_EQ(c.layer_sliding.size(), 8u);
  for (int l = 0; l < 8; l++) EXPECT_EQ(c.window(l) == 0, l == 5) << l;
  f.model = "smollm3-3b", f.layers = 5;
  c = config_from_flags(f);
  for (int l = 0; l < 5; l++) EXPECT_EQ(c.layer_has_rope(l), l != 3) << l;
}

TEST(Presets, UnknownNameListsThemAll) {
  try {
    preset_config("qwen9", 257, 1024);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* n : {"qwen2.5-0.5b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-8b", "olmo2-1b", "smollm3-3b",
                          "mistral-7b", "gemma3-270m", "gemma3-1b", "llama3.1-8b", "qwen3-30b-a3b",
                          "olmoe-1b-7b", "mixtral-8x7b", "qwen1.5-moe-a2.7b"})
      EXPECT_NE(m.find(n), std::string::npos) << n << " missing from: " << m;
  }
}

}  // namespace

// The MoE fields of GPTConfig (issue 39, docs/moe.md): transformers' rule for
// which layers are MoE, the parameter count against the flat layout, and the
// refusals that name the field.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/param_layout.h"
#include "testing/expect_error.h"

using namespace ratchet;

namespace {

GPTConfig tiny_moe() {
  GPTConfig c;
  c.arch = Arch::llama, c.family = Family::qwen3_moe;
  c.num_layers = 4, c.num_heads = 2, c.channels = 32, c.num_kv_heads = 1, c.ffn_hidden = 64;
  c.vocab_size = 100, c.max_seq_len = 16;
  c.num_experts = 4, c.experts_per_tok = 2, c.moe_ffn_hidden = 24;
  c.padded_vocab = 0;
  return c;
}

TEST(MoeConfig, LayerRuleIsTransformers) {
  GPTConfig c = tiny_moe();
  c.decoder_sparse_step = 2, c.mlp_only_layers = {3};
  c.finalize();
  // (l+1) % 2 == 0 -> layers 1 and 3; 3 is mlp-only.
  EXPECT_FALSE(c.layer_is_moe(0));
  EXPECT_TRUE(c.layer_is_moe(1));
  EXPECT_FALSE(c.layer_is_moe(2));
  EXPECT_FALSE(c.layer_is_moe(3));
  EXPECT_EQ(c.moe_layer_count(), 1);
  GPTConfig dense = tiny_moe();
  dense.num_experts = 0, dense.experts_per_tok = 0, dense.moe_ffn_hidden = 0;
  dense.finalize();
  EXPECT_FALSE(dense.layer_is_moe(1));
}

TEST(MoeConfig, AllMoeLayersHaveNoDenseMlpTensors) {
  GPTConfig c = tiny_moe();
  c.finalize();
  const ParamLayout lay(c);
  EXPECT_EQ(lay.sizes[P_FCW], 0u);
  EXPECT_EQ(lay.sizes[P_FCPROJW], 0u);
  EXPECT_EQ(lay.sizes[P_ROUTERW], 4u * 4 * 32);
  EXPECT_EQ(lay.sizes[P_EXPW1], 4u * 4 * 2 * 24 * 32);
  EXPECT_EQ(lay.sizes[P_EXPW2], 4u * 4 * 32 * 24);
  // Every parameter the layout holds is one the model has.
  EXPECT_EQ((double)lay.total, c.param_count());
}

TEST(MoeConfig, MixedLayersCountOnlyTheSlicesInUse) {
  GPTConfig c = tiny_moe();
  c.mlp_only_layers = {0};
  c.finalize();
  const ParamLayout lay(c);
  // Both MLPs are held for all 4 layers; the model uses 1 dense and 3 MoE.
  const size_t dense_slice = 3 * 64 * 32, moe_slice = 4 * 32 + 4 * 3 * 24 * 32;
  EXPECT_EQ(lay.sizes[P_FCW] + lay.sizes[P_FCPROJW], 4 * dense_slice);
  EXPECT_EQ((double)lay.total - c.param_count(), (double)(3 * dense_slice + 1 * moe_slice));
  EXPECT_TRUE(ParamLayout::decayed(P_EXPW1));
  EXPECT_FALSE(ParamLayout::decayed(P_LN1W));
}

TEST(MoeConfig, RefusalsNameTheField) {
  auto refuse = [](void (*edit)(GPTConfig&), const char* needle) {
    GPTConfig c = tiny_moe();
    edit(c);
    ratchet::testing::expect_error([&] { c.finalize(); }, {needle});
  };
  refuse([](GPTConfig& c) { c.experts_per_tok = 5; }, "num_experts_per_tok 5");
  refuse([](GPTConfig& c) { c.experts_per_tok = 0; }, "num_experts_per_tok 0");
  refuse([](GPTConfig& c) { c.moe_ffn_hidden = 0; }, "moe_intermediate_size 0");
  refuse([](GPTConfig& c) { c.decoder_sparse_step = 0; }, "decoder_sparse_step 0");
  refuse([](GPTConfig& c) { c.mlp_only_layers = {7}; }, "mlp_only_layers names layer 7");
  refuse([](GPTConfig& c) { c.router_aux_loss_coef = -1; }, "router_aux_loss_coef");
  refuse([](GPTConfig& c) { c.num_experts = 0; }, "num_experts 0");
  refuse([](GPTConfig& c) { c.arch = Arch::gpt2, c.family = Family::llama, c.num_kv_heads = 0,
                            c.ffn_hidden = 0; }, "a llama-family option");
}

// DeepSeek-V3's routing options: sigmoid, routed_scaling_factor and the
// selection bias (with or without its update rate) are accepted on a MoE
// model; what the model does not implement yet (shared experts,
// group-limited selection) is refused naming the field, and so is any of
// them on a dense model.
TEST(MoeConfig, DeepSeekRoutingFields) {
  GPTConfig ok = tiny_moe();
  ok.moe_sigmoid = true, ok.routed_scaling_factor = 2.5f;
  ok.finalize();
  {
    GPTConfig biased = tiny_moe();
    biased.moe_selection_bias = true;  // a checkpoint's bias, kept fixed (rate 0)
    biased.finalize();
    biased.moe_bias_update_rate = 0.001f;
    biased.finalize();
    // A buffer beside the parameters: a resume checks its dataset instead (checkpoint_restore.cpp).
    GPTConfig plain = tiny_moe();
    plain.finalize();
    EXPECT_EQ(first_config_difference(plain, biased), "");
  }
  auto refuse = [](void (*edit)(GPTConfig&), std::vector<std::string> needles) {
    GPTConfig c = tiny_moe();
    edit(c);
    ratchet::testing::expect_error([&] { c.finalize(); }, needles);
  };
  // Group-limited selection (E = 4, k = 2): the shape rules, naming the flags.
  refuse([](GPTConfig& c) { c.n_group = 3; }, {"n_group (--moe-n-group) is 3 with 4 experts"});
  refuse([](GPTConfig& c) { c.n_group = 2, c.topk_group = 3; },
         {"topk_group (--moe-topk-group) is 3 with n_group 2"});
  refuse([](GPTConfig& c) { c.n_group = 4, c.topk_group = 1; },
         {"(--experts-per-tok) 2 exceeds topk_group 1 x 1 experts per group"});
  refuse([](GPTConfig& c) { c.n_shared_experts = -1; }, {"n_shared_experts -1"});
  refuse([](GPTConfig& c) { c.n_shared_experts = 1 << 30; }, {"n_shared_experts 1073741824", "at most"});
  {  // shared experts are in the model now
    GPTConfig s = tiny_moe();
    s.n_shared_experts = 2;
    s.finalize();
    EXPECT_EQ(s.shared_ffn(), 2 * s.moe_ffn_hidden);
    EXPECT_EQ(ParamLayout(s).sizes[P_SHW1], (size_t)s.num_layers * 2 * s.shared_ffn() * s.channels);
    EXPECT_EQ(ParamLayout(s).sizes[P_SHW2], (size_t)s.num_layers * s.channels * s.shared_ffn());
    EXPECT_EQ(ParamLayout(tiny_moe()).sizes[P_SHW1], 0u);
    EXPECT_TRUE(ParamLayout::decayed(P_SHW1) && ParamLayout::decayed(P_SHW2));
    GPTConfig a = tiny_moe();
    a.finalize();
    EXPECT_EQ(first_config_difference(a, s), "n_shared_experts");
  }
  // Qwen2-MoE's gated shared expert: a width in range, with experts, not
  // beside n_shared_experts.
  refuse([](GPTConfig& c) { c.shared_expert_ffn = -4; }, {"shared_expert_intermediate_size", "-4"});
  refuse([](GPTConfig& c) { c.shared_expert_ffn = 1 << 30; }, {"shared_expert_intermediate_size", "1073741824"});
  refuse([](GPTConfig& c) { c.shared_expert_ffn = 24, c.n_shared_experts = 1; },
         {"shared_expert_intermediate_size", "n_shared_experts", "not both"});
  refuse([](GPTConfig& c) {
    c.num_experts = 0, c.experts_per_tok = 0, c.moe_ffn_hidden = 0, c.shared_expert_ffn = 24;
  }, {"shared_expert_intermediate_size", "no experts"});
  {
    GPTConfig g = tiny_moe();
    g.shared_expert_ffn = 24;
    g.finalize();
    EXPECT_EQ(g.shared_ffn(), 24);
    EXPECT_TRUE(g.shared_expert_gated());
    EXPECT_EQ(ParamLayout(g).sizes[P_SHW1], (size_t)g.num_layers * 2 * 24 * g.channels);
    EXPECT_EQ(ParamLayout(g).sizes[P_SHGATE], (size_t)g.num_layers * g.channels);
    EXPECT_EQ(ParamLayout(tiny_moe()).sizes[P_SHGATE], 0u);
    // Every tensor before shgate keeps its offset: earlier models' flat buffers are unchanged.
    GPTConfig s = tiny_moe();
    s.n_shared_experts = 2;
    s.finalize();
    EXPECT_EQ(ParamLayout(s).sizes[P_SHGATE], 0u);
    EXPECT_EQ(ParamLayout(s).offsets[P_SHGATE], ParamLayout(s).total);
    GPTConfig a = tiny_moe();
    a.finalize();
    EXPECT_EQ(first_config_difference(a, g), "shared_expert_ffn");
  }
  refuse([](GPTConfig& c) { c.moe_bias_update_rate = 0.001f; },
         {"update rate 0.001", "needs the selection bias"});
  refuse([](GPTConfig& c) {
    c.num_experts = 0, c.experts_per_tok = 0, c.moe_ffn_hidden = 0, c.moe_selection_bias = true;
  }, {"no experts"});
  refuse([](GPTConfig& c) { c.moe_bias_update_rate = -1.f; }, {"update rate"});
  refuse([](GPTConfig& c) { c.routed_scaling_factor = 0.f; }, {"routed_scaling_factor"});
  refuse([](GPTConfig& c) { c.routed_scaling_factor = NAN; }, {"routed_scaling_factor"});
  refuse([](GPTConfig& c) {
    c.num_experts = 0, c.experts_per_tok = 0, c.moe_ffn_hidden = 0, c.moe_sigmoid = true;
  }, {"no experts"});
  refuse([](GPTConfig& c) {
    c.arch = Arch::gpt2, c.family = Family::llama, c.num_kv_heads = 0, c.ffn_hidden = 0;
    c.num_experts = 0, c.experts_per_tok = 0, c.moe_ffn_hidden = 0;
    c.routed_scaling_factor = 2.f;
  }, {"no experts"});
  // first_config_difference names them (an --init-from or resume check).
  GPTConfig a = tiny_moe();
  a.finalize();
  EXPECT_EQ(first_config_difference(a, ok), "moe_sigmoid");
  GPTConfig b = a;
  b.routed_scaling_factor = 2.f;
  EXPECT_EQ(first_config_difference(a, b), "routed_scaling_factor");
}

// The flags: --moe-scoring and --routed-scaling-factor on a MoE family.
TEST(MoeConfig, DeepSeekRoutingFlags) {
  ModelFlags f;
  f.model = "custom", f.arch = "llama", f.layers = 2, f.heads = 2, f.channels = 32;
  f.family = "qwen3_moe", f.num_experts = 4, f.experts_per_tok = 2, f.moe_ffn_hidden = 16;
  f.vocab_size = 100, f.max_seq_len = 16;
  GPTConfig c = config_from_flags(f);
  EXPECT_FALSE(c.moe_sigmoid);
  EXPECT_EQ(c.routed_scaling_factor, 1.f);
  f.moe_scoring = "sigmoid", f.routed_scaling_factor = 2.5f;
  c = config_from_flags(f);
  EXPECT_TRUE(c.moe_sigmoid);
  EXPECT_EQ(c.routed_scaling_factor, 2.5f);
  f.n_shared_experts = 2;  // --n-shared-experts
  EXPECT_EQ(config_from_flags(f).n_shared_experts, 2);
  f.n_shared_experts = -1;
  ratchet::testing::expect_error([&] { config_from_flags(f); }, {"--n-shared-experts", "-1"});
  f.n_shared_experts = 0;
  {  // --family qwen2_moe needs --shared-expert-ffn; the flag needs experts
    ModelFlags q = f;
    q.family = "qwen2_moe", q.moe_scoring = "", q.routed_scaling_factor = 0;
    ratchet::testing::expect_error([&] { config_from_flags(q); }, {"--family qwen2_moe", "--shared-expert-ffn"});
    q.shared_expert_ffn = 24;
    const GPTConfig g = config_from_flags(q);
    EXPECT_EQ(g.shared_expert_ffn, 24);
    EXPECT_TRUE(g.qkv_bias);
    EXPECT_FALSE(g.norm_topk_prob);
    q.shared_expert_ffn = -3;
    ratchet::testing::expect_error([&] { config_from_flags(q); }, {"--shared-expert-ffn", "-3"});
    ModelFlags dense;
    dense.model = "l2", dense.vocab_size = 100, dense.max_seq_len = 16, dense.shared_expert_ffn = 24;
    ratchet::testing::expect_error([&] { config_from_flags(dense); }, {"--shared-expert-ffn", "qwen2_moe"});
  }
  f.family = "dots1";  // --family dots1: per-head q/k norm, sigmoid scores
  c = config_from_flags(f);
  EXPECT_EQ(c.family, Family::dots1);
  EXPECT_TRUE(c.moe_sigmoid);
  EXPECT_EQ(c.qk_norm, QkNorm::per_head);
  f.family = "qwen3_moe";
  f.moe_scoring = "tanh";
  ratchet::testing::expect_error([&] { config_from_flags(f); }, {"--moe-scoring", "tanh"});
  ModelFlags d;
  d.model = "custom", d.arch = "llama", d.layers = 2, d.heads = 2, d.channels = 32;
  d.vocab_size = 100, d.max_seq_len = 16, d.moe_scoring = "sigmoid";
  ratchet::testing::expect_error([&] { config_from_flags(d); },
                                 {"--moe-scoring", "Mixture-of-Experts"});
  d.moe_scoring = "", d.n_shared_experts = 1;
  ratchet::testing::expect_error([&] { config_from_flags(d); },
                                 {"--n-shared-experts", "Mixture-of-Experts"});
}

TEST(MoeConfig, DifferenceNamesTheMoeField) {
  GPTConfig a = tiny_moe(), b = tiny_moe();
  a.finalize();
  b.mlp_only_layers = {2};
  b.finalize();
  EXPECT_EQ(first_config_difference(a, b), "mlp_only_layers");
  // Every layer MoE: the dense ffn_hidden is not part of the model.
  b = a, b.ffn_hidden = 96;
  EXPECT_EQ(first_config_difference(a, b), "");
  b = a, b.experts_per_tok = 1;
  EXPECT_EQ(first_config_difference(a, b), "experts_per_tok");
  Family f;
  ASSERT_TRUE(parse_family("olmoe", &f));
  EXPECT_EQ(f, Family::olmoe);
  EXPECT_STREQ(family_name(Family::mixtral), "mixtral");
}

}  // namespace

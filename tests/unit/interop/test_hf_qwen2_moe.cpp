// Hugging Face interop of qwen2_moe (transformers' Qwen2MoeConfig /
// Qwen2MoeSparseMoeBlock: Qwen2's attention with q/k/v biases, a softmax
// router whose top-k weights are not renormalised by default, and one
// SwiGLU shared expert of shared_expert_intermediate_size on every MoE layer,
// scaled per token by sigmoid(shared_expert_gate(x))): config.json's fields
// and Qwen2MoeConfig's defaults, the refusals (naming the file, the field and
// the value), the tensor names of the shared expert and its gate, what the
// export writes, and a shared_expert_intermediate_size in another family.
// The round trip import -> export -> import byte-exact in FP32, tied and
// untied, and the fused expert tensors are test_hf_moe.cpp's loops over
// hf_moe_families() (qwen2_moe among them).
#include <gtest/gtest.h>

#include <map>

#include "interop/hf_checkpoint.h"
#include "model/param_layout.h"
#include "testing/expect_error.h"
#include "testing/hf_moe_configs.h"

namespace ratchet {
namespace {
using testing::expect_error;
using J = nlohmann::json;

// A small qwen2_moe config.json: 4 layers, 64 channels, 4 heads (2 KV), 4
// experts of 24, top 2, a shared expert of 40, layer 0 dense (96).
J qwen2_moe(const J& extra = J::object()) {
  J j = {{"model_type", "qwen2_moe"},   {"hidden_size", 64},        {"intermediate_size", 96},
         {"num_hidden_layers", 4},      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
         {"vocab_size", 300},           {"num_experts", 4},         {"num_experts_per_tok", 2},
         {"moe_intermediate_size", 24}, {"shared_expert_intermediate_size", 40},
         {"mlp_only_layers", {0}}};
  for (const auto& [k, v] : extra.items()) j[k] = v;
  return j;
}
GPTConfig parse(const J& j) { return hf_config_from_json(j, "m/config.json"); }

TEST(HfQwen2Moe, Fields) {
  const GPTConfig c = parse(qwen2_moe({{"norm_topk_prob", true}, {"router_aux_loss_coef", 0.02}}));
  EXPECT_EQ(c.family, Family::qwen2_moe);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.qk_norm, QkNorm::none);
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_EQ(c.experts_per_tok, 2);
  EXPECT_EQ(c.moe_ffn_hidden, 24);
  EXPECT_EQ(c.ffn(), 96);  // the dense layer's MLP
  EXPECT_EQ(c.shared_expert_ffn, 40);
  EXPECT_EQ(c.shared_ffn(), 40);  // not a multiple of moe_intermediate_size
  EXPECT_TRUE(c.shared_expert_gated());
  EXPECT_EQ(c.n_shared_experts, 0);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.router_aux_loss_coef, 0.02f);
  EXPECT_FALSE(c.layer_is_moe(0));
  for (int l = 1; l < 4; l++) EXPECT_TRUE(c.layer_is_moe(l)) << l;
  // Qwen2MoeConfig's defaults: 60 experts, top 4, moe 1408, shared 5632,
  // norm_topk_prob off, aux 0.001, 16 KV heads, every layer MoE, untied.
  J j = qwen2_moe();
  for (const char* k : {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                        "shared_expert_intermediate_size", "num_key_value_heads", "mlp_only_layers"})
    j.erase(k);
  j["num_attention_heads"] = 16;
  j["hidden_size"] = 128;
  const GPTConfig d = parse(j);
  EXPECT_EQ(d.num_experts, 60);
  EXPECT_EQ(d.experts_per_tok, 4);
  EXPECT_EQ(d.moe_ffn_hidden, 1408);
  EXPECT_EQ(d.shared_expert_ffn, 5632);
  EXPECT_FALSE(d.norm_topk_prob);
  EXPECT_EQ(d.router_aux_loss_coef, 0.001f);
  EXPECT_EQ(d.kv_heads(), 16);
  EXPECT_EQ(d.moe_layer_count(), 4);
  EXPECT_FALSE(d.tied_embeddings);
  EXPECT_EQ(d.rope_theta, 10000.f);
  // decoder_sparse_step 2: layers 1 and 3 MoE.
  const GPTConfig s = parse(qwen2_moe({{"decoder_sparse_step", 2}, {"mlp_only_layers", J::array()}}));
  EXPECT_EQ(s.moe_layer_count(), 2);
  EXPECT_TRUE(s.layer_is_moe(1) && s.layer_is_moe(3));
  // The published configs' sliding fields with use_sliding_window false: no layer slides.
  const GPTConfig w = parse(qwen2_moe({{"use_sliding_window", false}, {"sliding_window", 32768},
                                       {"max_window_layers", 21}, {"qkv_bias", true}}));
  EXPECT_TRUE(w.layer_sliding.empty());
}

TEST(HfQwen2Moe, RefusalsNameFileFieldAndValue) {
  const std::string f = "m/config.json";
  expect_error([&] { parse(qwen2_moe({{"shared_expert_intermediate_size", 0}})); },
               {f, "shared_expert_intermediate_size", "0"});
  expect_error([&] { parse(qwen2_moe({{"shared_expert_intermediate_size", -8}})); },
               {f, "shared_expert_intermediate_size", "-8"});
  expect_error([&] { parse(qwen2_moe({{"shared_expert_intermediate_size", 1e12}})); },
               {f, "shared_expert_intermediate_size", "more than ratchet accepts"});
  expect_error([&] { parse(qwen2_moe({{"moe_intermediate_size", -1}})); }, {f, "moe_intermediate_size", "-1"});
  expect_error([&] { parse(qwen2_moe({{"qkv_bias", false}})); }, {f, "qkv_bias", "false"});
  expect_error([&] { parse(qwen2_moe({{"use_sliding_window", true}, {"sliding_window", 8}})); },
               {f, "use_sliding_window", "qwen2_moe"});
  expect_error([&] { parse(qwen2_moe({{"mlp_only_layers", {5}}})); }, {f, "mlp_only_layers\"[0]", "5"});
  expect_error([&] { parse(qwen2_moe({{"num_experts_per_tok", 5}})); }, {f, "num_experts_per_tok 5"});
  expect_error([&] { parse(qwen2_moe({{"hidden_act", "gelu"}})); }, {f, "hidden_act", "gelu"});
  // The field in a family that builds no gated shared expert.
  for (const char* other : {"qwen3_moe", "olmoe", "mixtral", "qwen2"}) {
    SCOPED_TRACE(other);
    J j = qwen2_moe();
    j["model_type"] = other;
    j.erase("mlp_only_layers");
    if (std::string(other) == "mixtral") j["num_local_experts"] = j["num_experts"], j.erase("num_experts");
    expect_error([&] { parse(j); }, {f, "shared_expert_intermediate_size", "40", other, "qwen2_moe"});
  }
}

TEST(HfQwen2Moe, SharedExpertAndGateNames) {
  const GPTConfig c = parse(qwen2_moe());
  const ParamLayout lay(c);
  std::map<std::string, HfTensor> m;
  for (const auto& t : hf_tensor_map(c)) m[t.name] = t;
  const int64_t C = 64, Is = 40;
  EXPECT_FALSE(m.count("model.layers.0.mlp.shared_expert.gate_proj.weight"));  // dense layer
  EXPECT_FALSE(m.count("model.layers.0.mlp.shared_expert_gate.weight"));
  EXPECT_TRUE(m.count("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_FALSE(m.count("model.layers.2.mlp.shared_experts.gate_proj.weight"));  // DeepSeek-V3's spelling
  const auto& g = m.at("model.layers.2.mlp.shared_expert.gate_proj.weight");
  EXPECT_EQ(g.shape, (std::vector<int64_t>{Is, C}));
  EXPECT_EQ(g.offset, lay.offsets[P_SHW1] + 2 * 2 * Is * C);
  EXPECT_EQ(m.at("model.layers.2.mlp.shared_expert.up_proj.weight").offset, g.offset + Is * C);
  const auto& dn = m.at("model.layers.2.mlp.shared_expert.down_proj.weight");
  EXPECT_EQ(dn.shape, (std::vector<int64_t>{C, Is}));
  EXPECT_EQ(dn.offset, lay.offsets[P_SHW2] + 2 * C * Is);
  const auto& sg = m.at("model.layers.3.mlp.shared_expert_gate.weight");
  EXPECT_EQ(sg.shape, (std::vector<int64_t>{1, C}));
  EXPECT_EQ(sg.offset, lay.offsets[P_SHGATE] + 3 * C);
  EXPECT_EQ(lay.sizes[P_SHGATE], (size_t)(4 * C));
  EXPECT_TRUE(ParamLayout::decayed(P_SHGATE));  // a Linear's weight, as the router's
  EXPECT_STREQ(ParamLayout::name(P_SHGATE), "shgate");
  // q/k/v biases, as Qwen2's.
  EXPECT_TRUE(m.count("model.layers.1.self_attn.q_proj.bias"));
  EXPECT_TRUE(hf_bias_map(c).empty());  // no selection bias
}

TEST(HfQwen2Moe, ExportWritesEveryFieldTheModelReads) {
  const GPTConfig c = testing::hf_moe_config(Family::qwen2_moe);
  const auto j = J::parse(hf_config_to_json(c, StDtype::F32).dump());
  EXPECT_EQ(j["model_type"], "qwen2_moe");
  EXPECT_EQ(j["architectures"][0], "Qwen2MoeForCausalLM");
  EXPECT_EQ(j["shared_expert_intermediate_size"], 20);
  EXPECT_TRUE(j["shared_expert_intermediate_size"].is_number_integer());
  EXPECT_EQ(j["moe_intermediate_size"], 24);
  EXPECT_EQ(j["num_experts"], 4);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["decoder_sparse_step"], 1);
  EXPECT_EQ(j["mlp_only_layers"], J::array({0}));
  EXPECT_EQ(j["norm_topk_prob"], false);
  EXPECT_EQ(j["qkv_bias"], true);
  EXPECT_EQ(j["use_sliding_window"], false);
  EXPECT_EQ(j["output_router_logits"], false);
  EXPECT_TRUE(j["intermediate_size"].is_number_integer());
  EXPECT_FALSE(j.contains("attention_bias"));  // Qwen2MoeAttention's biases are qkv_bias's
  EXPECT_FALSE(j.contains("n_shared_experts"));
  EXPECT_EQ(first_config_difference(parse(j), c), "");
  // A qwen2_moe model without its gated shared expert is not one transformers builds.
  GPTConfig no = c;
  no.shared_expert_ffn = 0;
  no.finalize();
  expect_error([&] { hf_config_to_json(no, StDtype::F32); }, {"shared_expert_ffn", "qwen2_moe"});
  // Another family with one is refused too.
  GPTConfig q3 = testing::hf_moe_config(Family::qwen3_moe);
  q3.shared_expert_ffn = 20;
  q3.finalize();
  expect_error([&] { hf_config_to_json(q3, StDtype::F32); }, {"shared_expert_ffn", "qwen3_moe"});
}

}  // namespace
}  // namespace ratchet

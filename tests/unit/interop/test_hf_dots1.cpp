// Hugging Face interop of dots1 (rednote's dots.llm1; transformers' Dots1Config:
// Qwen3 attention, DeepSeek-V3's MoE): config.json's fields as transformers
// reads them (first_k_dense_replace onto the dense/MoE layer pattern,
// sigmoid scores with the selection bias, routed_scaling_factor, the shared
// experts, group-limited selection), the refusals (n_group / topk_group that
// do not fit the experts, a negative n_shared_experts, a missing required field), the tensor names of the
// shared experts and of mlp.gate.e_score_correction_bias (the selection
// bias, outside the flat parameters), the round trip import -> export ->
// import byte-exact in FP32 with the bias, a missing bias tensor named with
// its file, and the other MoE families refusing shared experts on export.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "core/error.h"
#include "interop/atomic_write.h"
#include "interop/hf_checkpoint.h"
#include "model/param_layout.h"
#include "testing/expect_error.h"
#include "testing/hf_moe_configs.h"
#include "testing/test_util.h"

namespace ratchet {
namespace {
using testing::expect_error;
using testing::TempDir;
using J = nlohmann::json;

// A small dots1 config.json: 4 layers, 64 channels, 4 heads (2 KV), 4
// routed experts of 24, top 2, 2 shared experts, layer 0 dense (40).
J dots1(const J& extra = J::object()) {
  J j = {{"model_type", "dots1"},       {"hidden_size", 64},          {"intermediate_size", 40},
         {"num_hidden_layers", 4},      {"num_attention_heads", 4},   {"num_key_value_heads", 2},
         {"vocab_size", 300},           {"n_routed_experts", 4},      {"num_experts_per_tok", 2},
         {"moe_intermediate_size", 24}, {"n_shared_experts", 2},      {"first_k_dense_replace", 1},
         {"norm_topk_prob", true},      {"routed_scaling_factor", 2.5}, {"n_group", 1},
         {"topk_group", 1}};
  for (const auto& [k, v] : extra.items()) j[k] = v;
  return j;
}
GPTConfig parse(const J& j) { return hf_config_from_json(j, "m/config.json"); }

TEST(HfDots1, Fields) {
  const GPTConfig c = parse(dots1());
  EXPECT_EQ(c.family, Family::dots1);
  EXPECT_EQ(c.qk_norm, QkNorm::per_head);
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_EQ(c.experts_per_tok, 2);
  EXPECT_EQ(c.moe_ffn_hidden, 24);
  EXPECT_EQ(c.ffn(), 40);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.shared_ffn(), 48);
  EXPECT_TRUE(c.moe_sigmoid);
  EXPECT_TRUE(c.moe_selection_bias);  // e_score_correction_bias: always in the router
  EXPECT_EQ(c.routed_scaling_factor, 2.5f);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.router_aux_loss_coef, 0.f);
  EXPECT_FALSE(c.layer_is_moe(0));  // first_k_dense_replace 1
  for (int l = 1; l < 4; l++) EXPECT_TRUE(c.layer_is_moe(l)) << l;
  EXPECT_TRUE(c.layer_sliding.empty());  // max_window_layers 62 by default: no layer slides
  // Dots1Config's defaults: first_k_dense_replace 0 (every layer MoE),
  // norm_topk_prob false, routed_scaling_factor 1, moe_intermediate_size 1408.
  J j = dots1();
  for (const char* k : {"first_k_dense_replace", "norm_topk_prob", "routed_scaling_factor",
                        "moe_intermediate_size", "n_group", "topk_group"})
    j.erase(k);
  const GPTConfig d = parse(j);
  EXPECT_EQ(d.moe_layer_count(), 4);
  EXPECT_FALSE(d.norm_topk_prob);
  EXPECT_EQ(d.routed_scaling_factor, 1.f);
  EXPECT_EQ(d.moe_ffn_hidden, 1408);
  // Group-limited selection (DeepseekV3TopkRouter): 2 groups of 2, one kept.
  const GPTConfig g = parse(dots1({{"n_group", 2}, {"topk_group", 1}}));
  EXPECT_EQ(g.n_group, 2);
  EXPECT_EQ(g.topk_group, 1);
  EXPECT_EQ(parse(dots1({{"n_group", nullptr}, {"topk_group", nullptr}})).n_group, 1);  // the hub's null
  // n_shared_experts 0: no shared experts.
  EXPECT_EQ(parse(dots1({{"n_shared_experts", 0}})).shared_ffn(), 0);
  // Sliding layers from max_window_layers on, by sliding_window.
  const GPTConfig s = parse(dots1({{"max_window_layers", 2}, {"sliding_window", 8}}));
  EXPECT_EQ(s.sliding_window, 8);
  EXPECT_EQ(s.layer_sliding, (std::vector<uint8_t>{0, 0, 1, 1}));
}

TEST(HfDots1, RefusalsNameFileFieldAndValue) {
  const std::string f = "m/config.json";
  expect_error([&] { parse(dots1({{"n_group", 3}})); }, {f, "n_group", "3", "divide num_experts"});
  expect_error([&] { parse(dots1({{"n_group", 2}, {"topk_group", 3}})); }, {f, "topk_group", "3"});
  expect_error([&] { parse(dots1({{"n_group", 0}})); }, {f, "n_group", "0"});
  expect_error([&] { parse(dots1({{"n_shared_experts", -1}})); }, {f, "n_shared_experts", "-1"});
  J j = dots1();
  j.erase("n_routed_experts");
  expect_error([&] { parse(j); }, {f, "n_routed_experts"});
  j = dots1();
  j.erase("n_shared_experts");
  expect_error([&] { parse(j); }, {f, "n_shared_experts"});
  expect_error([&] { parse(dots1({{"first_k_dense_replace", 9}})); }, {f, "first_k_dense_replace", "9"});
  expect_error([&] { parse(dots1({{"first_k_dense_replace", 4}})); }, {f, "first_k_dense_replace", "dense"});
  expect_error([&] { parse(dots1({{"num_local_experts", 8}})); }, {f, "n_routed_experts", "num_local_experts"});
  expect_error([&] { parse(dots1({{"hidden_act", "gelu"}})); }, {f, "hidden_act", "gelu"});
}

// Random values in every element the maps name.
void random_fill(const std::vector<HfTensor>& map, std::vector<float>& v, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  for (const auto& t : map) {
    size_t k = 1;
    for (auto d : t.shape) k *= d;
    for (size_t i = 0; i < k; i++) v[t.offset + i] = n(rng);
  }
}

TEST(HfDots1, SharedExpertAndBiasNames) {
  const GPTConfig c = parse(dots1());
  const ParamLayout lay(c);
  std::map<std::string, HfTensor> m, b;
  for (const auto& t : hf_tensor_map(c)) m[t.name] = t;
  for (const auto& t : hf_bias_map(c)) b[t.name] = t;
  const int64_t C = 64, Is = 48, E = 4;
  EXPECT_FALSE(m.count("model.layers.0.mlp.shared_experts.gate_proj.weight"));  // dense layer
  EXPECT_TRUE(m.count("model.layers.0.mlp.gate_proj.weight"));
  const auto& g = m.at("model.layers.2.mlp.shared_experts.gate_proj.weight");
  EXPECT_EQ(g.shape, (std::vector<int64_t>{Is, C}));
  EXPECT_EQ(g.offset, lay.offsets[P_SHW1] + 2 * 2 * Is * C);
  EXPECT_EQ(m.at("model.layers.2.mlp.shared_experts.up_proj.weight").offset, g.offset + Is * C);
  const auto& dn = m.at("model.layers.2.mlp.shared_experts.down_proj.weight");
  EXPECT_EQ(dn.shape, (std::vector<int64_t>{C, Is}));
  EXPECT_EQ(dn.offset, lay.offsets[P_SHW2] + 2 * C * Is);
  // The bias: one (E) per MoE layer, at the layer's row of the (L,E) bias.
  EXPECT_EQ(b.size(), 3u);
  EXPECT_FALSE(b.count("model.layers.0.mlp.gate.e_score_correction_bias"));
  EXPECT_EQ(b.at("model.layers.3.mlp.gate.e_score_correction_bias").offset, 3u * E);
  EXPECT_EQ(b.at("model.layers.3.mlp.gate.e_score_correction_bias").shape, (std::vector<int64_t>{E}));
  // The other MoE families have no bias tensor.
  EXPECT_TRUE(hf_bias_map(testing::hf_moe_config(Family::qwen3_moe)).empty());
}

TEST(HfDots1, RoundTripIsByteExactWithTheSelectionBias) {
  TempDir d;
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const GPTConfig c = parse(dots1({{"tie_word_embeddings", tied}, {"n_group", 2}, {"topk_group", 1}}));
    std::vector<float> params(ParamLayout(c).total, 0.f), bias((size_t)c.num_layers * c.num_experts, 0.f);
    random_fill(hf_tensor_map(c), params, 11);
    random_fill(hf_bias_map(c), bias, 12);
    const std::string a = d / (std::string("a") + (tied ? "t" : "u")), b2 = d / (std::string("b") + (tied ? "t" : "u"));
    save_hf_checkpoint(a, c, params, StDtype::F32, false, 5'000'000'000ull, bias);
    const J j = testing::read_json_file(a + "/config.json");
    EXPECT_EQ(j["model_type"], "dots1");
    EXPECT_EQ(j["architectures"][0], "Dots1ForCausalLM");
    EXPECT_EQ(j["n_routed_experts"], 4);
    EXPECT_EQ(j["n_shared_experts"], 2);
    EXPECT_EQ(j["first_k_dense_replace"], 1);
    EXPECT_EQ(j["routed_scaling_factor"], 2.5);
    EXPECT_EQ(j["intermediate_size"], 40);
    EXPECT_EQ(j["n_group"], 2);
    EXPECT_EQ(j["topk_group"], 1);
    GPTConfig c1;
    std::vector<float> bias1;
    const auto p1 = load_hf_checkpoint(a, &c1, &bias1);
    EXPECT_EQ(first_config_difference(c1, c), "");
    EXPECT_TRUE(c1.moe_selection_bias);
    ASSERT_EQ(p1.size(), params.size());
    EXPECT_EQ(std::memcmp(p1.data(), params.data(), params.size() * 4), 0);
    ASSERT_EQ(bias1.size(), bias.size());
    EXPECT_EQ(std::memcmp(bias1.data(), bias.data(), bias.size() * 4), 0);
    save_hf_checkpoint(b2, c1, p1, StDtype::F32, false, 5'000'000'000ull, bias1);
    EXPECT_EQ(testing::read_file(a + "/config.json"), testing::read_file(b2 + "/config.json"));
    EXPECT_TRUE(testing::read_file(a + "/model.safetensors") == testing::read_file(b2 + "/model.safetensors"));
  }
}

// A dots1 model routed without a selection bias (trained from flags) exports
// zeros, which import as a zero bias.
TEST(HfDots1, ExportWithoutABiasWritesZeros) {
  TempDir d;
  GPTConfig c = parse(dots1());
  c.moe_selection_bias = false;
  c.finalize();
  std::vector<float> params(ParamLayout(c).total, 0.f);
  random_fill(hf_tensor_map(c), params, 3);
  save_hf_checkpoint(d / "m", c, params, StDtype::F32, false);
  GPTConfig c1;
  std::vector<float> bias;
  load_hf_checkpoint(d / "m", &c1, &bias);
  ASSERT_EQ(bias.size(), (size_t)c.num_layers * c.num_experts);
  for (float v : bias) EXPECT_EQ(v, 0.f);
}

// BF16 weights with the bias in F32 (as DeepSeek-style checkpoints keep
// it: two files and an index here) import, the bias exactly; a BF16 weight
// file claiming F32 is still refused.
TEST(HfDots1, Bf16WeightsWithAnF32Bias) {
  TempDir d;
  const GPTConfig c = parse(dots1());
  std::vector<float> params(ParamLayout(c).total, 0.f), bias((size_t)c.num_layers * c.num_experts, 0.f);
  random_fill(hf_tensor_map(c), params, 7);
  random_fill(hf_bias_map(c), bias, 8);
  for (float& b : bias) b *= 1e-3f;  // values BF16 would round
  std::vector<StWrite> w, b;
  J index = {{"metadata", J::object()}, {"weight_map", J::object()}};
  for (const auto& t : hf_tensor_map(c)) {
    w.push_back({t.name, t.shape, params.data() + t.offset});
    index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  }
  for (const auto& t : hf_bias_map(c)) {
    b.push_back({t.name, t.shape, bias.data() + t.offset});
    index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  }
  const std::string dir = d / "m";
  std::filesystem::create_directories(dir);
  write_safetensors(dir + "/model-00001-of-00002.safetensors", w, StDtype::BF16, {{"format", "pt"}});
  write_safetensors(dir + "/model-00002-of-00002.safetensors", b, StDtype::F32, {{"format", "pt"}});
  write_text_atomically(dir + "/model.safetensors.index.json", index.dump());
  write_text_atomically(dir + "/config.json", hf_config_to_json(c, StDtype::BF16).dump(2));
  GPTConfig got;
  std::vector<float> bias_back;
  load_hf_checkpoint(dir, &got, &bias_back);
  ASSERT_EQ(bias_back.size(), bias.size());
  EXPECT_EQ(std::memcmp(bias_back.data(), bias.data(), bias.size() * 4), 0);
  J j = hf_config_to_json(c, StDtype::F32);  // the weights are BF16: refused
  write_text_atomically(dir + "/config.json", j.dump(2));
  expect_error([&] { load_hf_checkpoint(dir, &got); }, {"BF16", "float32"});
}

TEST(HfDots1, MissingBiasTensorIsNamedWithTheFile) {
  TempDir d;
  const GPTConfig c = parse(dots1());
  std::vector<float> params(ParamLayout(c).total, 0.f), bias((size_t)c.num_layers * c.num_experts, 0.f);
  random_fill(hf_tensor_map(c), params, 5);
  std::vector<StWrite> ts;
  for (const auto& t : hf_tensor_map(c)) ts.push_back({t.name, t.shape, params.data() + t.offset});
  for (const auto& t : hf_bias_map(c))
    if (t.name != "model.layers.2.mlp.gate.e_score_correction_bias") ts.push_back({t.name, t.shape, bias.data() + t.offset});
  const std::string dir = d / "m";
  std::filesystem::create_directories(dir);
  write_safetensors_checkpoint(dir, ts, StDtype::F32, {{"format", "pt"}}, 5'000'000'000ull);
  write_text_atomically(dir + "/config.json", hf_config_to_json(c, StDtype::F32).dump(2));
  GPTConfig got;
  expect_error([&] { load_hf_checkpoint(dir, &got); },
               {"model.layers.2.mlp.gate.e_score_correction_bias", dir, "selection bias"});
}

// Shared experts, sigmoid scores, a routed scale and a selection bias are
// dots1's: the softmax families refuse them on export, naming the field;
// a dots1 model whose layers are not "the first k dense" is refused too.
TEST(HfDots1, ExportRefusesWhatTheFamilyCannotSay) {
  GPTConfig q = testing::hf_moe_config(Family::qwen3_moe);
  q.n_shared_experts = 1;
  q.finalize();
  expect_error([&] { hf_config_to_json(q, StDtype::F32); }, {"n_shared_experts", "qwen3_moe"});
  GPTConfig c = parse(dots1());
  c.mlp_only_layers = {2};  // layers 0, 1, 3 MoE: not first_k_dense_replace's pattern
  c.finalize();
  expect_error([&] { hf_config_to_json(c, StDtype::F32); }, {"mlp_only_layers", "dots1"});
  c = parse(dots1());
  c.moe_sigmoid = false;  // DeepseekV3TopkRouter always takes the sigmoid
  c.finalize();
  expect_error([&] { hf_config_to_json(c, StDtype::F32); }, {"scoring_func", "dots1"});
}

}  // namespace
}  // namespace ratchet

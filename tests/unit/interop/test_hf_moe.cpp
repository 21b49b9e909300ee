// Hugging Face interop of the MoE families (issue 39): qwen3_moe, olmoe and
// mixtral config.json fields read as transformers reads them (defaults of
// absent fields included), the refusals naming file, field and value, the
// per-expert tensor names of the hub's files (and transformers' fused
// gate_up_proj / down_proj on import), and the round trip import -> export
// -> import byte-exact in FP32, tied and untied.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "interop/atomic_write.h"
#include "interop/hf_checkpoint.h"
#include "model/expert_slice.h"
#include "model/param_layout.h"
#include "testing/expect_error.h"
#include "testing/hf_moe_configs.h"
#include "testing/test_util.h"

namespace ratchet {
namespace {
using testing::expect_error;
using testing::TempDir;
using J = nlohmann::json;

// A small config.json of `model_type` (4 layers, 64 channels, 4 heads, 2 KV
// heads) with `extra` merged over it.
J cfg(const std::string& model_type, const J& extra = J::object()) {
  J j = {{"model_type", model_type}, {"hidden_size", 64},        {"intermediate_size", 96},
         {"num_hidden_layers", 4},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
         {"vocab_size", 300},        {"num_experts_per_tok", 2}};
  j[model_type == "mixtral" ? "num_local_experts" : "num_experts"] = 4;
  for (const auto& [k, v] : extra.items()) j[k] = v;
  return j;
}
GPTConfig parse(const J& j) { return hf_config_from_json(j, "m/config.json"); }
std::vector<int> moe_layers(const GPTConfig& c) {
  std::vector<int> v;
  for (int l = 0; l < c.num_layers; l++)
    if (c.layer_is_moe(l)) v.push_back(l);
  return v;
}

TEST(HfMoe, Qwen3MoeFields) {
  GPTConfig c = parse(cfg("qwen3_moe", {{"moe_intermediate_size", 24}, {"norm_topk_prob", true},
                                        {"decoder_sparse_step", 2}, {"mlp_only_layers", {3}},
                                        {"router_aux_loss_coef", 0.02}, {"head_dim", 32},
                                        {"output_router_logits", true}}));
  EXPECT_EQ(c.family, Family::qwen3_moe);
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_EQ(c.experts_per_tok, 2);
  EXPECT_EQ(c.moe_ffn_hidden, 24);
  EXPECT_EQ(c.ffn_hidden, 96);  // the dense layers' MLP
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.router_aux_loss_coef, 0.02f);
  EXPECT_EQ(c.qk_norm, QkNorm::per_head);
  EXPECT_EQ(c.head_size(), 32);
  // (l + 1) % 2 == 0 gives layers 1 and 3; mlp_only_layers keeps 3 dense.
  EXPECT_EQ(moe_layers(c), (std::vector<int>{1}));
  // Qwen3MoeConfig's defaults: 128 experts, top 8, moe_intermediate_size 768,
  // norm_topk_prob false, step 1, aux 0.001, no head_dim (hidden / heads), 4 KV heads.
  J j = cfg("qwen3_moe");
  for (const char* k : {"num_experts", "num_experts_per_tok", "num_key_value_heads"}) j.erase(k);
  c = parse(j);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.experts_per_tok, 8);
  EXPECT_EQ(c.moe_ffn_hidden, 768);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.router_aux_loss_coef, 0.001f);
  EXPECT_EQ(c.head_size(), 16);
  EXPECT_EQ(c.kv_heads(), 4);
  EXPECT_EQ(moe_layers(c), (std::vector<int>{0, 1, 2, 3}));
  // mlp_only_layers null is none; num_local_experts is the same count (Qwen3MoeConfig's attribute_map).
  j = cfg("qwen3_moe", {{"mlp_only_layers", nullptr}});
  j.erase("num_experts");
  j["num_local_experts"] = 6;
  c = parse(j);
  EXPECT_EQ(c.num_experts, 6);
  EXPECT_EQ(moe_layers(c).size(), 4u);
  // use_sliding_window false (every published Qwen3-MoE): no window, whatever sliding_window says.
  c = parse(cfg("qwen3_moe", {{"use_sliding_window", false}, {"sliding_window", 8}}));
  EXPECT_TRUE(c.layer_sliding.empty());
}

TEST(HfMoe, OlmoeFields) {
  GPTConfig c = parse(cfg("olmoe", {{"clip_qkv", 8.0}, {"norm_topk_prob", false}, {"router_aux_loss_coef", 0.01}}));
  EXPECT_EQ(c.family, Family::olmoe);
  EXPECT_EQ(c.clip_qkv, 8.f);
  EXPECT_EQ(c.qk_norm, QkNorm::full_width);
  EXPECT_EQ(c.norm_placement, NormPlacement::pre);  // OLMoE keeps Llama's input norms
  EXPECT_EQ(c.moe_ffn_hidden, 96);                  // intermediate_size is the experts' size
  EXPECT_EQ(moe_layers(c).size(), 4u);
  const ParamLayout lay(c);
  EXPECT_EQ(lay.sizes[P_QNORMW], 4u * 64);  // hidden_size per layer
  EXPECT_EQ(lay.sizes[P_KNORMW], 4u * 32);  // KV * hs per layer
  EXPECT_EQ(lay.sizes[P_FCW], 0u);          // no dense MLP
  // OlmoeConfig's defaults: 64 experts, top 8, no clip, norm_topk_prob false,
  // aux 0.01, KV heads = heads, eps 1e-5, max_position_embeddings 4096.
  J j = cfg("olmoe");
  for (const char* k : {"num_experts", "num_experts_per_tok", "num_key_value_heads"}) j.erase(k);
  c = parse(j);
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_EQ(c.experts_per_tok, 8);
  EXPECT_EQ(c.clip_qkv, 0.f);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.router_aux_loss_coef, 0.01f);
  EXPECT_EQ(c.kv_heads(), 4);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.max_seq_len, 4096);
  // OLMoE has no decoder_sparse_step: transformers puts experts on every layer whatever it says.
  c = parse(cfg("olmoe", {{"decoder_sparse_step", 2}}));
  EXPECT_EQ(moe_layers(c).size(), 4u);
}

TEST(HfMoe, MixtralFields) {
  GPTConfig c = parse(cfg("mixtral", {{"sliding_window", 8}, {"router_aux_loss_coef", 0.02},
                                      {"router_jitter_noise", 0.0}, {"norm_topk_prob", false}}));
  EXPECT_EQ(c.family, Family::mixtral);
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_TRUE(c.norm_topk_prob);  // Mixtral always renormalises (it has no such field)
  EXPECT_EQ(c.moe_ffn_hidden, 96);
  EXPECT_EQ(c.layer_sliding, (std::vector<uint8_t>{1, 1, 1, 1}));
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.qk_norm, QkNorm::none);
  // MixtralConfig's defaults: 8 experts, top 2, no window, theta 1e6, aux 0.001, 8 KV heads.
  J j = cfg("mixtral");
  for (const char* k : {"num_local_experts", "num_experts_per_tok", "num_key_value_heads"}) j.erase(k);
  j["num_attention_heads"] = 8;
  c = parse(j);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.experts_per_tok, 2);
  EXPECT_TRUE(c.layer_sliding.empty());
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.router_aux_loss_coef, 0.001f);
  EXPECT_EQ(c.kv_heads(), 8);
  c = parse(cfg("mixtral", {{"sliding_window", nullptr}}));
  EXPECT_TRUE(c.layer_sliding.empty());
}

TEST(HfMoe, RefusalsNameFileFieldAndValue) {
  const std::string f = "m/config.json";
  expect_error([&] { parse(cfg("mixtral", {{"router_jitter_noise", 0.1}})); }, {f, "router_jitter_noise", "0.1"});
  expect_error([&] { parse(cfg("qwen3_moe", {{"shared_expert_intermediate_size", 64}})); },
               {f, "shared_expert_intermediate_size", "64"});
  expect_error([&] { parse(cfg("qwen3_moe", {{"use_sliding_window", true}, {"sliding_window", 8}})); },
               {f, "use_sliding_window", "true"});
  expect_error([&] { parse(cfg("olmoe", {{"head_dim", 32}})); }, {f, "head_dim", "32", "16"});
  expect_error([&] { parse(cfg("olmoe", {{"clip_qkv", -1}})); }, {f, "clip_qkv", "-1"});
  expect_error([&] { parse(cfg("qwen3_moe", {{"clip_qkv", 8}})); }, {f, "clip_qkv", "8"});
  expect_error([&] { parse(cfg("qwen3_moe", {{"num_experts_per_tok", 5}})); },
               {f, "num_experts_per_tok 5", "num_experts 4"});
  expect_error([&] { parse(cfg("qwen3_moe", {{"mlp_only_layers", {1, 7}}})); }, {f, "mlp_only_layers\"[1]", "7"});
  expect_error([&] { parse(cfg("qwen3_moe", {{"mlp_only_layers", 1}})); }, {f, "mlp_only_layers", "list"});
  expect_error([&] { parse(cfg("qwen3_moe", {{"decoder_sparse_step", 0}})); }, {f, "decoder_sparse_step", "0"});
  expect_error([&] { parse(cfg("olmoe", {{"num_local_experts", 8}})); },
               {f, "num_experts\" is 4", "num_local_experts\" is 8"});
  expect_error([&] { parse(cfg("mixtral", {{"num_local_experts", 0}})); }, {f, "num_local_experts", "0"});
  expect_error([&] { parse(cfg("olmoe", {{"router_aux_loss_coef", -0.5}})); }, {f, "router_aux_loss_coef", "-0.5"});
  expect_error([&] { parse(cfg("mixtral", {{"hidden_act", "gelu"}})); }, {f, "hidden_act", "gelu"});
}

// Random values in every element the map names; padded rows and unused slices stay zero.
std::vector<float> random_params(const GPTConfig& c, uint32_t seed) {
  std::vector<float> p(ParamLayout(c).total, 0.f);
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  for (const auto& t : hf_tensor_map(c)) {
    size_t k = 1;
    for (auto d : t.shape) k *= d;
    for (size_t i = 0; i < k; i++) p[t.offset + i] = n(rng);
  }
  return p;
}

// DeepSeek-V3's router options (docs/moe.md) have no field in these
// families: a model trained with them is refused on export, naming the
// field, rather than written as a softmax router transformers would run.
TEST(HfMoe, DeepSeekRoutingIsRefusedOnExport) {
  const auto refused = [](void (*edit)(GPTConfig&), const std::string& field) {
    GPTConfig c = testing::hf_moe_config(Family::qwen3_moe);
    edit(c);
    c.finalize();
    expect_error([&] { hf_config_to_json(c, StDtype::F32); }, {field, "cannot be exported"});
  };
  refused([](GPTConfig& c) { c.moe_sigmoid = true, c.router_aux_loss_coef = 0; }, "scoring_func");
  refused([](GPTConfig& c) { c.routed_scaling_factor = 2.5f; }, "routed_scaling_factor");
  refused([](GPTConfig& c) { c.moe_selection_bias = true; }, "moe_selection_bias");
  hf_config_to_json(testing::hf_moe_config(Family::qwen3_moe), StDtype::F32);  // the plain one exports
}

TEST(HfMoe, TensorMapCoversEveryUsedElementOnce) {
  for (const auto& [name, fam] : testing::hf_moe_families())
    for (bool fused : {false, true}) {
      SCOPED_TRACE(name + (fused ? " fused" : ""));
      const GPTConfig c = testing::hf_moe_config(fam);
      const ParamLayout lay(c);
      std::vector<int> hits(lay.total, 0);
      for (const auto& t : hf_tensor_map(c, fused)) {
        size_t n = 1;
        for (auto d : t.shape) n *= d;
        ASSERT_LE(t.offset + n, lay.total) << t.name;
        for (size_t i = 0; i < n; ++i) hits[t.offset + i]++;
      }
      size_t never = 0;
      for (int h : hits) {
        ASSERT_LE(h, 1);
        never += h == 0;
      }
      // Unnamed: wte's and lm_head's padded rows, and a mixed model's unused
      // slices (param_layout.h: the dense MLP on MoE layers, the experts, the
      // shared expert and its gate on dense ones).
      const size_t C = c.channels, H = c.ffn(), E = c.num_experts, I = c.moe_ffn_hidden;
      const size_t Lm = c.moe_layer_count(), L = c.num_layers, Is = c.shared_ffn();
      const size_t gate = c.shared_expert_gated() ? C : 0;
      size_t unused = (size_t)(c.padded_vocab - c.vocab_size) * C * (c.tied_embeddings ? 1 : 2);
      if (Lm < L) unused += Lm * 3 * C * H + (L - Lm) * (E * C + 3 * E * C * I + 3 * C * Is + gate);
      EXPECT_EQ(never, unused);
    }
}

TEST(HfMoe, HubTensorNames) {
  std::map<std::string, HfTensor> q, m;
  for (const auto& t : hf_tensor_map(testing::hf_moe_config(Family::qwen3_moe))) q[t.name] = t;
  for (const auto& t : hf_tensor_map(testing::hf_moe_config(Family::mixtral))) m[t.name] = t;
  const GPTConfig qc = testing::hf_moe_config(Family::qwen3_moe);
  const ParamLayout ql(qc);
  const int64_t C = 32, E = 4, I = 24;
  // qwen3_moe: layer 0 dense, layer 1 MoE, layer 3 dense (mlp_only_layers).
  EXPECT_TRUE(q.count("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_FALSE(q.count("model.layers.0.mlp.gate.weight"));
  EXPECT_TRUE(q.count("model.layers.3.mlp.down_proj.weight"));
  EXPECT_FALSE(q.count("model.layers.1.mlp.gate_proj.weight"));
  ASSERT_TRUE(q.count("model.layers.1.mlp.gate.weight"));
  EXPECT_EQ(q["model.layers.1.mlp.gate.weight"].shape, (std::vector<int64_t>{E, C}));
  EXPECT_EQ(q["model.layers.1.mlp.gate.weight"].offset, ql.offsets[P_ROUTERW] + 1 * E * C);
  // Expert 2 of layer 1: gate rows, then up rows, of expw1[1][2]; down is expw2[1][2].
  const size_t w1 = ql.offsets[P_EXPW1] + (1 * E + 2) * 2 * I * C, w2 = ql.offsets[P_EXPW2] + (1 * E + 2) * C * I;
  EXPECT_EQ(q["model.layers.1.mlp.experts.2.gate_proj.weight"].offset, w1);
  EXPECT_EQ(q["model.layers.1.mlp.experts.2.up_proj.weight"].offset, w1 + I * C);
  EXPECT_EQ(q["model.layers.1.mlp.experts.2.up_proj.weight"].shape, (std::vector<int64_t>{I, C}));
  EXPECT_EQ(q["model.layers.1.mlp.experts.2.down_proj.weight"].offset, w2);
  EXPECT_EQ(q["model.layers.1.mlp.experts.2.down_proj.weight"].shape, (std::vector<int64_t>{C, I}));
  EXPECT_FALSE(q.count("model.layers.1.mlp.experts.4.gate_proj.weight"));
  // Mixtral: block_sparse_moe, w1 = gate, w3 = up, w2 = down.
  const ParamLayout ml(testing::hf_moe_config(Family::mixtral));
  EXPECT_EQ(m["model.layers.0.block_sparse_moe.gate.weight"].offset, ml.offsets[P_ROUTERW]);
  EXPECT_EQ(m["model.layers.0.block_sparse_moe.experts.1.w1.weight"].offset, ml.offsets[P_EXPW1] + 2 * I * C);
  EXPECT_EQ(m["model.layers.0.block_sparse_moe.experts.1.w3.weight"].offset, ml.offsets[P_EXPW1] + 3 * I * C);
  EXPECT_EQ(m["model.layers.0.block_sparse_moe.experts.1.w2.weight"].offset, ml.offsets[P_EXPW2] + C * I);
  EXPECT_FALSE(m.count("model.layers.0.mlp.gate.weight"));
  // The fused names transformers keeps in memory: one (E, 2I, C) and one (E, C, I) per layer.
  std::map<std::string, HfTensor> f;
  for (const auto& t : hf_tensor_map(testing::hf_moe_config(Family::mixtral), true)) f[t.name] = t;
  EXPECT_EQ(f["model.layers.2.mlp.experts.gate_up_proj"].shape, (std::vector<int64_t>{E, 2 * I, C}));
  EXPECT_EQ(f["model.layers.2.mlp.experts.gate_up_proj"].offset, ml.offsets[P_EXPW1] + 2 * E * 2 * I * C);
  EXPECT_EQ(f["model.layers.2.mlp.experts.down_proj"].shape, (std::vector<int64_t>{E, C, I}));
  EXPECT_TRUE(f.count("model.layers.2.mlp.gate.weight"));
}

TEST(HfMoe, RoundTripIsByteExactTiedAndUntied) {
  TempDir d;
  for (const auto& [name, fam] : testing::hf_moe_families())
    for (bool tied : {true, false}) {
      SCOPED_TRACE(name + (tied ? " tied" : " untied"));
      const GPTConfig c = testing::hf_moe_config(fam, tied);
      const auto params = random_params(c, 17 + (int)fam);
      const std::string a = d / (name + std::to_string(tied) + "a"), b = d / (name + std::to_string(tied) + "b");
      save_hf_checkpoint(a, c, params, StDtype::F32, false);
      const J j = testing::read_json_file(a + "/config.json");
      EXPECT_EQ(j["model_type"], family_name(fam));
      EXPECT_EQ(j["architectures"][0], hf_architecture(fam));
      EXPECT_EQ(j["num_experts_per_tok"], 2);
      EXPECT_EQ(j[fam == Family::mixtral ? "num_local_experts" : "num_experts"], 4);
      EXPECT_EQ(j["intermediate_size"], fam == Family::qwen3_moe || fam == Family::qwen2_moe ? 40 : 24);
      GPTConfig c1;
      const auto p1 = load_hf_checkpoint(a, &c1);
      EXPECT_EQ(first_config_difference(c1, c), "");
      EXPECT_EQ(c1.router_aux_loss_coef, c.router_aux_loss_coef);
      EXPECT_EQ(c1.clip_qkv, c.clip_qkv);
      ASSERT_EQ(p1.size(), params.size());
      EXPECT_EQ(std::memcmp(p1.data(), params.data(), params.size() * 4), 0);
      save_hf_checkpoint(b, c1, p1, StDtype::F32, false);
      EXPECT_EQ(testing::read_file(a + "/config.json"), testing::read_file(b + "/config.json"));
      EXPECT_TRUE(testing::read_file(a + "/model.safetensors") == testing::read_file(b + "/model.safetensors"));
    }
}

TEST(HfMoe, ImportsFusedExpertTensors) {
  // A checkpoint saved with transformers' fused parameters imports to the
  // same flat buffer as the hub's per-expert files.
  TempDir d;
  for (const auto& [name, fam] : testing::hf_moe_families()) {
    SCOPED_TRACE(name);
    const GPTConfig c = testing::hf_moe_config(fam);
    const auto params = random_params(c, 5);
    const std::string dir = d / name;
    std::filesystem::create_directories(dir);
    std::vector<StWrite> ts;
    for (const auto& t : hf_tensor_map(c, true)) ts.push_back({t.name, t.shape, params.data() + t.offset});
    write_safetensors_checkpoint(dir, ts, StDtype::F32, {{"format", "pt"}}, 5'000'000'000ull);
    write_text_atomically(dir + "/config.json", hf_config_to_json(c, StDtype::F32).dump(2));
    GPTConfig got;
    const auto p = load_hf_checkpoint(dir, &got);
    EXPECT_EQ(first_config_difference(got, c), "");
    ASSERT_EQ(p.size(), params.size());
    EXPECT_EQ(std::memcmp(p.data(), params.data(), p.size() * 4), 0);
  }
}

// --expert-parallel's slices import only their experts
// (load_hf_checkpoint_slice): each slice of the hub's per-expert files and
// of transformers' fused tensors equals that slice of the whole import, bit
// for bit. A NaN in another slice's expert (per-expert files) is not read:
// that slice imports, the one holding it names the tensor.
TEST(HfMoe, ASliceImportsOnlyItsExperts) {
  TempDir d;
  for (const auto& [name, fam] : testing::hf_moe_families()) {
    const GPTConfig c = testing::hf_moe_config(fam);
    const auto params = random_params(c, 9);
    for (const bool fused : {false, true}) {
      SCOPED_TRACE(name + (fused ? ", fused" : ", per expert"));
      const std::string dir = d / (name + (fused ? "_fused" : ""));
      std::filesystem::create_directories(dir);
      std::vector<StWrite> ts;
      for (const auto& t : hf_tensor_map(c, fused)) ts.push_back({t.name, t.shape, params.data() + t.offset});
      write_safetensors_checkpoint(dir, ts, StDtype::F32, {{"format", "pt"}}, 5'000'000'000ull);
      write_text_atomically(dir + "/config.json", hf_config_to_json(c, StDtype::F32).dump(2));
      for (int n : {2, c.num_experts})
        for (int q = 0; q < n; q++) {
          SCOPED_TRACE("slice " + std::to_string(q) + " of " + std::to_string(n));
          const ExpertSlice x{n, q};
          std::vector<float> want(ParamLayout(c, n).total);
          slice_experts(c, x, params.data(), want.data());
          GPTConfig got;
          const std::vector<float> p = load_hf_checkpoint_slice(dir, &got, x);
          EXPECT_EQ(first_config_difference(got, c), "");
          ASSERT_EQ(p.size(), want.size());
          EXPECT_EQ(std::memcmp(p.data(), want.data(), p.size() * 4), 0);
        }
    }
    // Expert E-1 of layer 1 damaged, in the per-expert files.
    SCOPED_TRACE(name + ", a damaged expert");
    auto bad = params;
    std::string damaged;
    for (const auto& t : hf_tensor_map(c))
      if (t.name.find("layers.1.") != std::string::npos &&
          t.name.find("experts." + std::to_string(c.num_experts - 1) + ".") != std::string::npos) {
        bad[t.offset + 3] = std::numeric_limits<float>::quiet_NaN();
        damaged = t.name;
        break;
      }
    ASSERT_FALSE(damaged.empty());
    const std::string dir = d / (name + "_damaged");
    std::filesystem::create_directories(dir);
    std::vector<StWrite> ts;
    for (const auto& t : hf_tensor_map(c)) ts.push_back({t.name, t.shape, bad.data() + t.offset});
    write_safetensors_checkpoint(dir, ts, StDtype::F32, {{"format", "pt"}}, 5'000'000'000ull);
    write_text_atomically(dir + "/config.json", hf_config_to_json(c, StDtype::F32).dump(2));
    GPTConfig got;
    EXPECT_NO_THROW(load_hf_checkpoint_slice(dir, &got, ExpertSlice{2, 0}));
    expect_error([&] { load_hf_checkpoint_slice(dir, &got, ExpertSlice{2, 1}); }, {damaged, "damaged"});
    expect_error([&] { load_hf_checkpoint(dir, &got); }, {damaged, "damaged"});
  }
}

TEST(HfMoe, MissingExpertTensorIsNamed) {
  TempDir d;
  const GPTConfig c = testing::hf_moe_config(Family::olmoe);
  const auto params = random_params(c, 3);
  std::vector<StWrite> ts;
  for (const auto& t : hf_tensor_map(c))
    if (t.name != "model.layers.2.mlp.experts.3.up_proj.weight") ts.push_back({t.name, t.shape, params.data() + t.offset});
  const std::string dir = d / "m";
  std::filesystem::create_directories(dir);
  write_safetensors_checkpoint(dir, ts, StDtype::F32, {{"format", "pt"}}, 5'000'000'000ull);
  write_text_atomically(dir + "/config.json", hf_config_to_json(c, StDtype::F32).dump(2));
  GPTConfig got;
  expect_error([&] { load_hf_checkpoint(dir, &got); }, {"model.layers.2.mlp.experts.3.up_proj.weight", "incomplete"});
}

TEST(HfMoe, ExportRefusesOptionsItsFamilyDoesNotHave) {
  GPTConfig c = testing::hf_moe_config(Family::mixtral);
  c.norm_topk_prob = false;  // Mixtral always renormalises
  expect_error([&] { hf_config_to_json(c, StDtype::F32); }, {"norm_topk_prob", "mixtral"});
  c = testing::hf_moe_config(Family::qwen3_moe);
  c.clip_qkv = 2.f;  // only OLMoE clips
  expect_error([&] { hf_config_to_json(c, StDtype::F32); }, {"clip_qkv", "qwen3_moe"});
  c = testing::hf_moe_config(Family::olmoe);
  c.decoder_sparse_step = 2;  // OLMoE has experts on every layer
  expect_error([&] { hf_config_to_json(c, StDtype::F32); }, {"mlp_only_layers", "olmoe"});
  c = testing::hf_moe_config(Family::qwen3_moe);
  c.family = Family::qwen3;  // experts on a dense family
  expect_error([&] { hf_config_to_json(c, StDtype::F32); }, {"num_experts", "qwen3"});
}

}  // namespace
}  // namespace ratchet

// Hugging Face config.json and tensors of the 2026 families (issue 38):
// each family's fields read from a small config.json as transformers reads
// it (defaults of absent fields included), the refusals naming file, field
// and value, the tensor map tiling the flat buffer, and the round trip
// import -> export -> import byte-exact in FP32 for every family.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "core/error.h"
#include "interop/hf_checkpoint.h"
#include "model/param_layout.h"
#include "testing/expect_error.h"
#include "testing/family_configs.h"
#include "testing/test_util.h"

namespace ratchet {
namespace {
using testing::expect_error;
using testing::TempDir;
using J = nlohmann::json;
namespace fs = std::filesystem;

// A small config.json of `model_type` (4 layers, 64 channels, 4 heads, 2 KV
// heads) with `extra` merged over it.
J cfg(const std::string& model_type, const J& extra = J::object()) {
  J j = {{"model_type", model_type}, {"hidden_size", 64},        {"intermediate_size", 96},
         {"num_hidden_layers", 4},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
         {"vocab_size", 300}};
  for (const auto& [k, v] : extra.items()) j[k] = v;
  return j;
}
GPTConfig parse(const J& j) { return hf_config_from_json(j, "m/config.json"); }
std::vector<uint8_t> bits(std::initializer_list<int> v) { return std::vector<uint8_t>(v.begin(), v.end()); }

TEST(HfFamilies, Qwen2BiasAndSlidingLayers) {
  GPTConfig c = parse(cfg("qwen2", {{"use_sliding_window", true}, {"sliding_window", 16},
                                    {"max_window_layers", 2}, {"tie_word_embeddings", true},
                                    {"rope_theta", 1000000.0}}));
  EXPECT_EQ(c.family, Family::qwen2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.qk_norm, QkNorm::none);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.layer_sliding, bits({0, 0, 1, 1}));  // layers from max_window_layers on
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.max_seq_len, 32768);  // Qwen2Config's default
  // use_sliding_window false (every published Qwen2.5): no layer slides, whatever sliding_window says.
  c = parse(cfg("qwen2", {{"use_sliding_window", false}, {"sliding_window", 32768}, {"max_window_layers", 2}}));
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(c.layer_sliding.empty());
  // layer_types, when given, says which layers slide.
  c = parse(cfg("qwen2", {{"use_sliding_window", true}, {"sliding_window", 8}, {"max_window_layers", 2},
                          {"layer_types", {"sliding_attention", "full_attention", "full_attention", "sliding_attention"}}}));
  EXPECT_EQ(c.layer_sliding, bits({1, 0, 0, 1}));
}

TEST(HfFamilies, Qwen3HeadDimAndPerHeadNorms) {
  GPTConfig c = parse(cfg("qwen3", {{"head_dim", 32}, {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 500000.0}}}}));
  EXPECT_EQ(c.family, Family::qwen3);
  EXPECT_EQ(c.head_size(), 32);  // != 64 / 4
  EXPECT_EQ(c.attn_channels(), 128);
  EXPECT_EQ(c.qk_norm, QkNorm::per_head);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.rope_theta, 500000.f);  // from rope_parameters
  EXPECT_FALSE(c.tied_embeddings);    // Qwen3Config's default
  // Absent head_dim is Qwen3Config's 128, not hidden / heads.
  c = parse(cfg("qwen3"));
  EXPECT_EQ(c.head_size(), 128);
  // rope_parameters wins over rope_theta (transformers converts the old spelling into it).
  c = parse(cfg("qwen3", {{"rope_theta", 10000.0}, {"rope_parameters", {{"rope_theta", 20000.0}}}}));
  EXPECT_EQ(c.rope_theta, 20000.f);
}

TEST(HfFamilies, Olmo2PostNormsAndFullWidthQkNorm) {
  const GPTConfig c = parse(cfg("olmo2", {{"rope_theta", 500000.0}}));
  EXPECT_EQ(c.family, Family::olmo2);
  EXPECT_EQ(c.norm_placement, NormPlacement::post);
  EXPECT_EQ(c.qk_norm, QkNorm::full_width);
  EXPECT_EQ(c.norm_eps, 1e-5f);  // Olmo2Config's default
  const ParamLayout lay(c);
  EXPECT_EQ(lay.sizes[P_LN1W], 0u);
  EXPECT_EQ(lay.sizes[P_QNORMW], 4u * 64);  // NH * hs per layer
  EXPECT_EQ(lay.sizes[P_KNORMW], 4u * 32);  // KV * hs per layer
}

TEST(HfFamilies, SmolLM3NoRopeLayers) {
  GPTConfig c = parse(cfg("smollm3", {{"no_rope_layers", {1, 0, 1, 1}}}));
  EXPECT_EQ(c.family, Family::smollm3);
  EXPECT_EQ(c.layer_rope, bits({1, 0, 1, 1}));
  EXPECT_TRUE(c.tied_embeddings);      // SmolLM3Config's default
  EXPECT_EQ(c.rope_theta, 2000000.f);  // SmolLM3Config's default theta
  // Absent: every no_rope_layer_interval-th layer (default 4) is NoPE.
  c = parse(cfg("smollm3"));
  EXPECT_EQ(c.layer_rope, bits({1, 1, 1, 0}));
  c = parse(cfg("smollm3", {{"no_rope_layer_interval", 2}}));
  EXPECT_EQ(c.layer_rope, bits({1, 0, 1, 0}));
  // Sliding layers by default are the NoPE layers, and only with use_sliding_window.
  c = parse(cfg("smollm3", {{"use_sliding_window", true}, {"sliding_window", 8}}));
  EXPECT_EQ(c.layer_sliding, bits({0, 0, 0, 1}));
  c = parse(cfg("smollm3", {{"sliding_window", 8}}));
  EXPECT_TRUE(c.layer_sliding.empty());
}

TEST(HfFamilies, MistralSlidesEveryLayer) {
  GPTConfig c = parse(cfg("mistral", {{"sliding_window", 8}}));
  EXPECT_EQ(c.family, Family::mistral);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.layer_sliding, bits({1, 1, 1, 1}));
  c = parse(cfg("mistral", {{"sliding_window", nullptr}}));  // v0.3: none
  EXPECT_TRUE(c.layer_sliding.empty());
  c = parse(cfg("mistral"));  // absent: MistralConfig's 4096
  EXPECT_EQ(c.sliding_window, 4096);
}

TEST(HfFamilies, Gemma3TextEveryOption) {
  GPTConfig c = parse(cfg("gemma3_text", {{"head_dim", 32}, {"query_pre_attn_scalar", 16},
                                          {"sliding_window", 8}, {"sliding_window_pattern", 2},
                                          {"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0},
                                          {"rope_local_base_freq", 10000.0}, {"rope_theta", 1000000.0}}));
  EXPECT_EQ(c.family, Family::gemma3);
  EXPECT_EQ(c.qk_norm, QkNorm::per_head);
  EXPECT_EQ(c.norm_placement, NormPlacement::sandwich);
  EXPECT_TRUE(c.norm_unit_offset);
  EXPECT_TRUE(c.embed_scale);
  EXPECT_EQ(c.mlp_act, MlpAct::gelu_tanh);
  EXPECT_EQ(c.attn_scale, 0.25f);  // 16^-0.5
  EXPECT_EQ(c.attn_softcap, 50.f);
  EXPECT_EQ(c.final_softcap, 30.f);
  EXPECT_EQ(c.layer_sliding, bits({1, 0, 1, 0}));  // every 2nd layer full
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_local_theta, 1e4f);
  EXPECT_TRUE(c.tied_embeddings);
  // The defaults: query_pre_attn_scalar 256 (= head_dim 256: the plain scale),
  // pattern 6, no soft-caps, window 4096, local base 10000, global 1e6.
  c = parse(cfg("gemma3_text"));
  EXPECT_EQ(c.head_size(), 256);
  EXPECT_EQ(c.attn_scale, 0.f);
  EXPECT_EQ(c.attn_softcap, 0.f);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.layer_sliding, bits({1, 1, 1, 1}));  // 4 layers: the 6th would be the first full one
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_local_theta, 1e4f);
  // The newer spelling: layer_types and per-layer-type rope_parameters.
  c = parse(cfg("gemma3_text", {{"sliding_window", 8},
                                {"layer_types", {"sliding_attention", "sliding_attention", "full_attention", "sliding_attention"}},
                                {"rope_parameters", {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 2000000.0}}},
                                                     {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}}}}));
  EXPECT_EQ(c.layer_sliding, bits({1, 1, 0, 1}));
  EXPECT_EQ(c.rope_theta, 2e6f);
  EXPECT_EQ(c.rope_local_theta, 5000.f);
}

TEST(HfFamilies, RefusalsNameFileFieldAndValue) {
  const std::string f = "m/config.json";
  expect_error([&] { parse(cfg("gpt_neox")); }, {f, "\"gpt_neox\"", "qwen3", "gemma3_text", "olmo2"});
  expect_error([&] { parse(cfg("gemma3")); }, {f, "gemma3_text", "Gemma3ForCausalLM"});
  J j = cfg("qwen3");
  j.erase("hidden_size");
  expect_error([&] { parse(j); }, {f, "hidden_size"});
  expect_error([&] { parse(cfg("qwen3", {{"head_dim", 15}})); }, {f, "head_dim 15", "even"});
  expect_error([&] { parse(cfg("llama", {{"hidden_size", 66}})); }, {f, "hidden_size 66", "num_attention_heads 4"});
  expect_error([&] { parse(cfg("mistral", {{"sliding_window", 0}})); }, {f, "sliding_window", "0"});
  expect_error([&] { parse(cfg("mistral", {{"sliding_window", -4}})); }, {f, "sliding_window", "-4"});
  expect_error([&] { parse(cfg("gemma3_text", {{"layer_types", {"full_attention"}}})); },
               {f, "layer_types", "1 entries", "4"});
  expect_error([&] { parse(cfg("qwen3", {{"layer_types", {"full_attention", "full_attention", "chunked_attention", "full_attention"}}})); },
               {f, "layer_types\"[2]", "chunked_attention"});
  expect_error([&] { parse(cfg("qwen2", {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}})); },
               {f, "rope_scaling", "\"yarn\""});
  expect_error([&] { parse(cfg("gemma3_text", {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}})); },
               {f, "rope_scaling", "\"linear\""});
  expect_error([&] { parse(cfg("gemma3_text", {{"rope_parameters", {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}}}}}})); },
               {f, "rope_parameters.full_attention", "\"linear\""});
  expect_error([&] { parse(cfg("qwen3", {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}})); },
               {f, "rope_scaling", "\"llama3\""});
  expect_error([&] { parse(cfg("qwen3", {{"attention_bias", true}})); }, {f, "attention_bias", "true"});
  expect_error([&] { parse(cfg("olmo2", {{"clip_qkv", 8}})); }, {f, "clip_qkv", "8"});
  expect_error([&] { parse(cfg("gemma3_text", {{"hidden_activation", "gelu"}})); }, {f, "hidden_activation", "gelu"});
  expect_error([&] { parse(cfg("mistral", {{"hidden_act", "gelu"}})); }, {f, "hidden_act", "gelu"});
  expect_error([&] { parse(cfg("smollm3", {{"no_rope_layers", {1, 1, 1}}})); }, {f, "no_rope_layers", "3 entries"});
  expect_error([&] { parse(cfg("smollm3", {{"no_rope_layers", {1, 2, 1, 1}}})); }, {f, "no_rope_layers\"[1]", "2"});
  expect_error([&] { parse(cfg("gemma3_text", {{"sliding_window", nullptr}})); }, {f, "sliding_window", "null"});
  expect_error([&] { parse(cfg("qwen3", {{"num_key_value_heads", nullptr}})); },  // Qwen3Config's default 32
               {f, "must divide"});
}

// Random values in every element the map names; padded rows stay zero (as an import leaves them).
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

TEST(HfFamilies, TensorMapTilesTheFlatBufferForEveryFamily) {
  for (const auto& [name, fam] : testing::all_families())
    for (bool tied : {true, false}) {
      const GPTConfig c = testing::tiny_family_config(fam, tied);
      const ParamLayout lay(c);
      std::vector<int> hits(lay.total, 0);
      for (const auto& t : hf_tensor_map(c)) {
        size_t n = 1;
        for (auto d : t.shape) n *= d;
        ASSERT_LE(t.offset + n, lay.total) << name << " " << t.name;
        for (size_t i = 0; i < n; ++i) hits[t.offset + i]++;
      }
      size_t never = 0;
      for (int h : hits) {
        ASSERT_LE(h, 1) << name;
        never += h == 0;
      }
      // Every element once, except wte's (and lm_head's) padded rows.
      EXPECT_EQ(never, (size_t)(c.padded_vocab - c.vocab_size) * c.channels * (tied ? 1 : 2)) << name;
    }
}

TEST(HfFamilies, RoundTripIsByteExactForEveryFamily) {
  TempDir d;
  for (const auto& [name, fam] : testing::all_families())
    for (bool tied : {true, false}) {
      SCOPED_TRACE(name + (tied ? " tied" : " untied"));
      const GPTConfig c = testing::tiny_family_config(fam, tied);
      const auto params = random_params(c, 7 + (int)fam);
      const std::string a = d / (name + std::to_string(tied) + "a"), b = d / (name + std::to_string(tied) + "b");
      save_hf_checkpoint(a, c, params, StDtype::F32, false);
      const J j = testing::read_json_file(a + "/config.json");
      EXPECT_EQ(j["model_type"], family_name(fam));
      EXPECT_EQ(j["architectures"][0], hf_architecture(fam));
      // transformers' strict Gemma3TextConfig refuses a float here ("expected int, got float
      // (value: 24.0)", transformers 5.17 on the GPU node): an integral scalar is written as
      // an integer (this tiny config's 11.11111 cannot be, and stays a decimal).
      if (fam == Family::gemma3) {
        const double q = j["query_pre_attn_scalar"].get<double>();
        EXPECT_EQ(j["query_pre_attn_scalar"].is_number_integer(), q == std::floor(q)) << q;
        GPTConfig c16 = c;
        c16.attn_scale = 0.25f;  // query_pre_attn_scalar 16
        const std::string d16 = d / (name + std::to_string(tied) + "q16");
        save_hf_checkpoint(d16, c16, params, StDtype::F32, false);
        const J j16 = testing::read_json_file(d16 + "/config.json");
        EXPECT_TRUE(j16["query_pre_attn_scalar"].is_number_integer()) << j16["query_pre_attn_scalar"];
        EXPECT_EQ(j16["query_pre_attn_scalar"].get<int64_t>(), 16);
      }
      GPTConfig c1;
      const auto p1 = load_hf_checkpoint(a, &c1);
      EXPECT_EQ(first_config_difference(c1, c), "");
      ASSERT_EQ(p1.size(), params.size());
      EXPECT_EQ(std::memcmp(p1.data(), params.data(), params.size() * 4), 0);
      // The export of the import is the same files, byte for byte.
      save_hf_checkpoint(b, c1, p1, StDtype::F32, false);
      EXPECT_EQ(testing::read_file(a + "/config.json"), testing::read_file(b + "/config.json"));
      EXPECT_TRUE(testing::read_file(a + "/model.safetensors") == testing::read_file(b + "/model.safetensors"));
      GPTConfig c2;
      const auto p2 = load_hf_checkpoint(b, &c2);
      EXPECT_EQ(first_config_difference(c2, c), "");
      EXPECT_EQ(std::memcmp(p2.data(), params.data(), params.size() * 4), 0);
    }
}

TEST(HfFamilies, ExportNamesTheFamilysTensors) {
  const auto names = [](Family f) {
    std::set<std::string> s;
    for (const auto& t : hf_tensor_map(testing::tiny_family_config(f, true))) s.insert(t.name);
    return s;
  };
  const auto q2 = names(Family::qwen2), q3 = names(Family::qwen3), o2 = names(Family::olmo2),
             g3 = names(Family::gemma3);
  EXPECT_TRUE(q2.count("model.layers.0.self_attn.k_proj.bias"));
  EXPECT_FALSE(q2.count("model.layers.0.self_attn.o_proj.bias"));
  EXPECT_TRUE(q3.count("model.layers.1.self_attn.q_norm.weight"));
  EXPECT_FALSE(o2.count("model.layers.0.input_layernorm.weight"));
  EXPECT_TRUE(o2.count("model.layers.0.post_feedforward_layernorm.weight"));
  for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                        "post_feedforward_layernorm"})
    EXPECT_TRUE(g3.count(std::string("model.layers.2.") + n + ".weight")) << n;
  // OLMo 2's q_norm is the full width.
  for (const auto& t : hf_tensor_map(testing::tiny_family_config(Family::olmo2, true)))
    if (t.name == "model.layers.0.self_attn.q_norm.weight") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{4 * 8}));
    }
}

TEST(HfFamilies, ExportRefusesOptionsItsFamilyDoesNotHave) {
  GPTConfig c = testing::tiny_family_config(Family::qwen3, true);
  c.family = Family::llama;  // q/k norms on a llama: transformers' Llama has none
  expect_error([&] { hf_config_to_json(c, StDtype::F32); }, {"qk_norm", "llama"});
  c = testing::tiny_family_config(Family::mistral, true);
  c.layer_sliding[0] = 0;  // Mistral slides on every layer or none
  expect_error([&] { hf_config_to_json(c, StDtype::F32); }, {"layer_sliding", "mistral"});
}

}  // namespace
}  // namespace ratchet

// Tiny configs of each 2026 family (issue 38), every option of the family on,
// for model-level tests: shapes small enough for finite differences and the
// float64 oracle, with head_dim != C/NH, GQA and windows shorter than T where
// the family has them.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "testing/tiny_model.h"

namespace ratchet::testing {

inline GPTConfig tiny_family_config(Family f, bool tied = true, int layers = 3) {
  GPTConfig c = tiny_llama_config(tied, layers, 4, 2, 32, 40, 37, 16);
  c.rope_factor = 0;  // the families use plain RoPE (Llama 3.1 scaling stays Llama's)
  c.family = f;
  switch (f) {
    case Family::llama: break;
    case Family::qwen2:
      c.qkv_bias = true;
      c.sliding_window = 5;  // use_sliding_window with max_window_layers 1
      c.layer_sliding.assign(layers, 1);
      c.layer_sliding[0] = 0;
      break;
    case Family::qwen3:
      c.head_dim = 12;  // != C/NH = 8
      c.qk_norm = QkNorm::per_head;
      break;
    case Family::olmo2:
      c.norm_placement = NormPlacement::post;
      c.qk_norm = QkNorm::full_width;
      break;
    case Family::smollm3:
      c.layer_rope.assign(layers, 1);
      c.layer_rope[layers - 1] = 0;  // the last layer NoPE
      break;
    case Family::mistral:
      c.sliding_window = 6;
      c.layer_sliding.assign(layers, 1);
      break;
    case Family::gemma3:
      c.head_dim = 16;
      c.qk_norm = QkNorm::per_head;
      c.norm_placement = NormPlacement::sandwich;
      c.norm_unit_offset = true;
      c.embed_scale = true;
      c.attn_scale = 0.3f;  // query_pre_attn_scalar^-0.5 with the scalar != head_dim
      c.mlp_act = MlpAct::gelu_tanh;
      c.attn_softcap = 7.f;
      c.final_softcap = 5.f;
      c.sliding_window = 4;
      c.layer_sliding.assign(layers, 1);
      c.layer_sliding[layers - 1] = 0;  // 2 sliding, 1 full
      c.rope_local_theta = 300.f;
      break;
    case Family::qwen3_moe:  // the MoE families: testing/moe_configs.h
    case Family::olmoe:
    case Family::mixtral:
    case Family::dots1:
    case Family::qwen2_moe:
      break;
  }
  c.finalize();
  return c;
}

inline std::vector<std::pair<std::string, Family>> all_families() {
  return {{"llama", Family::llama},     {"qwen2", Family::qwen2},     {"qwen3", Family::qwen3},
          {"olmo2", Family::olmo2},     {"smollm3", Family::smollm3}, {"mistral", Family::mistral},
          {"gemma3", Family::gemma3}};
}

}  // namespace ratchet::testing

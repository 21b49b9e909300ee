// Tiny configs of the MoE families (issue 39) as transformers allows them,
// for the interop, plan and oracle tests: every option of the family on,
// shapes small enough for the float64 oracle. qwen3_moe mixes dense and MoE
// layers (decoder_sparse_step 2 and an mlp_only_layers entry); olmoe clips
// q/k/v; mixtral slides its window; qwen2_moe has q/k/v biases, layer 0
// dense (mlp_only_layers) and a gated shared expert of width 20 (not a
// multiple of I = 24); OLMoE and Mixtral have experts on every
// layer, as their transformers classes do (the model tests' moe_configs.h
// mixes layers in every family).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "testing/tiny_model.h"

namespace ratchet::testing {

inline GPTConfig hf_moe_config(Family f, bool tied = false, int layers = 4) {
  GPTConfig c = tiny_llama_config(tied, layers, 4, 2, 32, 40, 37, 16);
  c.rope_factor = 0;  // the MoE families use plain RoPE
  c.family = f;
  c.num_experts = 4, c.experts_per_tok = 2, c.moe_ffn_hidden = 24;
  c.router_aux_loss_coef = 0.01f;
  switch (f) {
    case Family::qwen3_moe:
      c.head_dim = 12;  // != C/NH = 8
      c.qk_norm = QkNorm::per_head;
      c.norm_topk_prob = true;
      c.decoder_sparse_step = 2;  // layers 1, 3, ... MoE
      c.mlp_only_layers = {layers - 1};  // ... but the last dense
      break;
    case Family::olmoe:
      c.qk_norm = QkNorm::full_width;
      c.clip_qkv = 0.75f;
      c.ffn_hidden = c.moe_ffn_hidden;  // no dense MLP: intermediate_size is the experts'
      break;
    case Family::qwen2_moe:
      c.qkv_bias = true;
      c.norm_topk_prob = false;   // Qwen2MoeConfig's default
      c.mlp_only_layers = {0};    // layers 1.. MoE
      c.shared_expert_ffn = 20;
      break;
    case Family::mixtral:
      c.norm_topk_prob = true;  // Mixtral always renormalises
      c.sliding_window = 6;
      c.layer_sliding.assign(layers, 1);
      c.ffn_hidden = c.moe_ffn_hidden;
      break;
    default:
      break;
  }
  c.finalize();
  return c;
}

inline std::vector<std::pair<std::string, Family>> hf_moe_families() {
  return {{"qwen3_moe", Family::qwen3_moe}, {"olmoe", Family::olmoe}, {"mixtral", Family::mixtral},
          {"qwen2_moe", Family::qwen2_moe}};
}

}  // namespace ratchet::testing

// Tiny Mixture-of-Experts configs (issue 39) for the model, checkpoint and
// MPI tests: one per MoE family, each with the family's attention and a
// layer pattern of its own, E = 4 experts, top 2, expert hidden size 16
// (C = 32: multiples of 16 bytes for the cuda path too).
//   qwen3_moe  per-head q/k norm, head_dim 12, norm_topk_prob; 4 layers with
//              decoder_sparse_step 2: layers 1 and 3 MoE, 0 and 2 dense
//   olmoe      full-width q/k norm, clip_qkv 1.5 (clamps the normed q/k
//              entries beyond it, a few percent), no renormalisation; 3 layers, all MoE
//   mixtral    Llama attention, renormalised; 4 layers, mlp_only_layers {2}:
//              layers 0, 1, 3 MoE
// The router weights of init_random (N(0, 0.02)) give nearly uniform
// probabilities; widen_router() scales them so top-k choices have margins.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "testing/tiny_model.h"

namespace ratchet::testing {

inline GPTConfig tiny_moe_config(Family f, float aux_coef = 0.05f) {
  const int layers = f == Family::olmoe ? 3 : 4;
  GPTConfig c = tiny_llama_config(/*tied=*/f != Family::olmoe, layers, 4, 2, 32, 40, 37, 16);
  c.rope_factor = 0;
  c.family = f;
  c.num_experts = 4;
  c.experts_per_tok = 2;
  c.moe_ffn_hidden = 16;
  c.router_aux_loss_coef = aux_coef;
  switch (f) {
    case Family::qwen3_moe:
      c.head_dim = 12;
      c.qk_norm = QkNorm::per_head;
      c.norm_topk_prob = true;
      c.decoder_sparse_step = 2;
      break;
    case Family::olmoe:
      c.qk_norm = QkNorm::full_width;
      c.norm_topk_prob = false;
      c.clip_qkv = 1.5f;
      break;
    default:  // mixtral
      c.norm_topk_prob = true;
      c.mlp_only_layers = {2};
      break;
  }
  c.finalize();
  return c;
}

// With DeepSeek-V3's shared experts (n_shared_experts, Is = 16·n): qwen3_moe
// with 2 (Is 32, narrower than the dense layers' ffn 40) and sigmoid scores
// scaled by 2.5; mixtral with 3 (Is 48, wider than ffn 40: the dense MLP's
// buffers take the larger width) and softmax.
inline GPTConfig tiny_shared_config(Family f, float aux_coef = 0.05f) {
  GPTConfig c = tiny_moe_config(f, aux_coef);
  c.n_shared_experts = f == Family::mixtral ? 3 : 2;
  if (f == Family::qwen3_moe) c.moe_sigmoid = true, c.routed_scaling_factor = 2.5f;
  c.finalize();
  return c;
}

// Qwen2-MoE's gated shared expert (shared_expert_ffn): q/k/v biases, softmax
// top 2 not renormalised, 4 layers with mlp_only_layers {2} (0, 1, 3 MoE),
// a shared expert of `width` (24 by default: not a multiple of I = 16)
// scaled by sigmoid(x · shgate).
inline GPTConfig tiny_gated_config(float aux_coef = 0.05f, int width = 24) {
  GPTConfig c = tiny_moe_config(Family::mixtral, aux_coef);
  c.family = Family::qwen2_moe;
  c.qkv_bias = true;
  c.norm_topk_prob = false;
  c.shared_expert_ffn = width;
  c.finalize();
  return c;
}

inline std::vector<std::pair<std::string, Family>> moe_families() {
  return {{"qwen3_moe", Family::qwen3_moe}, {"olmoe", Family::olmoe}, {"mixtral", Family::mixtral}};
}

// Router weights times `s` (from N(0, 0.02) to N(0, 0.02 s)): the logits'
// spread grows with them, so the top-k margins do too.
inline void widen_router(GPT& m, float s) {
  std::vector<float> p(m.num_params());
  m.get_params(p.data());
  const size_t o = m.layout().offsets[P_ROUTERW];
  for (size_t j = 0; j < m.layout().sizes[P_ROUTERW]; j++) p[o + j] *= s;
  m.set_params(p.data());
}

}  // namespace ratchet::testing

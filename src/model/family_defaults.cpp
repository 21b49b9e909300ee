#include "model/family_defaults.h"

#include "core/error.h"

namespace ratchet {

Family parse_family_flag(const std::string& s, const char* flag) {
  Family f;
  if (s == "gemma3") return Family::gemma3;
  if (parse_family(s, &f)) return f;
  fail(flag, " '", s, "' is not a model family: use llama, qwen2, qwen3, olmo2, smollm3, mistral, "
       "gemma3, qwen3_moe, qwen2_moe, olmoe, mixtral or dots1");
}

bool family_is_moe(Family f) {
  return f == Family::qwen3_moe || f == Family::olmoe || f == Family::mixtral || f == Family::dots1 ||
         f == Family::qwen2_moe;
}

void apply_family_defaults(GPTConfig& c, Family f, int window) {
  if (c.arch != Arch::llama) fail("--family ", family_name(f), " needs --arch llama");
  if (window < 0) fail("--sliding-window must be positive (got ", window, ")");
  const int L = c.num_layers;
  c.family = f;
  switch (f) {
    case Family::llama: break;
    case Family::qwen2: c.qkv_bias = true; break;
    case Family::qwen3: c.qk_norm = QkNorm::per_head; break;
    case Family::olmo2:
      c.norm_placement = NormPlacement::post;
      c.qk_norm = QkNorm::full_width;
      break;
    case Family::smollm3:
      c.layer_rope.assign(L, 1);
      for (int i = 0; i < L; i++) c.layer_rope[i] = (i + 1) % 4 != 0;
      break;
    case Family::mistral:
      if (window > 0) c.sliding_window = window, c.layer_sliding.assign(L, 1);
      break;
    case Family::gemma3:
      c.norm_placement = NormPlacement::sandwich;
      c.norm_unit_offset = true;
      c.qk_norm = QkNorm::per_head;
      c.embed_scale = true;
      c.mlp_act = MlpAct::gelu_tanh;
      c.tied_embeddings = true;
      c.rope_theta = 1e6f;
      if (window > 0) {
        c.sliding_window = window;
        c.layer_sliding.assign(L, 1);
        for (int i = 0; i < L; i++) c.layer_sliding[i] = (i + 1) % 6 != 0;
        c.rope_local_theta = 10000.f;
      }
      break;
    case Family::qwen3_moe:
      c.qk_norm = QkNorm::per_head;
      c.norm_topk_prob = true;
      break;
    case Family::olmoe:
      c.qk_norm = QkNorm::full_width;
      c.norm_topk_prob = false;
      break;
    case Family::mixtral: c.norm_topk_prob = true; break;
    case Family::dots1:  // Qwen3's attention, DeepSeek-V3's router (sigmoid scores)
      c.qk_norm = QkNorm::per_head;
      c.norm_topk_prob = true;
      c.moe_sigmoid = true;
      break;
    case Family::qwen2_moe:  // Qwen2's attention; the gated shared expert's width from --shared-expert-ffn
      c.qkv_bias = true;
      c.norm_topk_prob = false;
      break;
  }
  if (window > 0 && f != Family::mistral && f != Family::gemma3)
    fail("--sliding-window is for --family mistral or gemma3 (", family_name(f),
         " models slide only as their config.json says: import one with --init-from)");
}

}  // namespace ratchet

// What each 2026 family changes in the Llama block when nothing else is said
// (issue 38): the options of config.h a model of that family has whatever
// its size. `ratchet train --family F` applies them to a custom shape (a
// small Qwen3 for the worked example); the presets and the Hugging Face
// importer set the same fields from the published configs.
//   llama    nothing
//   qwen2    q/k/v bias
//   qwen3    per-head q/k RMSNorm
//   olmo2    post norms (no input norms), full-width q/k RMSNorm
//   smollm3  NoPE on every 4th layer (no_rope_layer_interval 4: layer i has
//            RoPE unless (i+1) % 4 == 0)
//   mistral  sliding window on every layer (needs a window: `window`)
//   gemma3   sandwich norms in the (1+w) form, per-head q/k norms, embeddings
//            times sqrt(C), GeGLU (gelu_pytorch_tanh), tied embeddings, and
//            5 sliding layers to 1 full (sliding_window_pattern 6) with the
//            sliding layers' RoPE base 10000 and the full ones' 1e6
//   qwen3_moe  Qwen3's per-head q/k RMSNorm; MoE MLPs whose k routing
//              weights are renormalised (norm_topk_prob: Qwen3-30B-A3B's
//              config sets it; an imported config.json says per model)
//   olmoe      full-width q/k RMSNorm with pre norms (OLMoE keeps Llama's
//              input norms); norm_topk_prob off; clip_qkv only as a
//              config.json says (OLMoE-1B-7B has none)
//   mixtral    Llama's attention; MoE MLPs, always renormalised
//              (norm_topk_prob on: MixtralSparseMoeBlock divides by the sum)
//   qwen2_moe  Qwen2's attention (q/k/v biases); MoE MLPs, norm_topk_prob
//              off (Qwen2MoeConfig's default), and one shared expert whose
//              output is scaled by sigmoid(x · shared_expert_gate) on every
//              MoE layer (its width: --shared-expert-ffn)
//   The MoE families' E, k and I come from --num-experts, --experts-per-tok
//   and --moe-ffn-hidden (or a preset); every layer is MoE.
// `window`: the sliding window for the families that slide (mistral, gemma3;
// 0 there: none, every layer full). Throws Error naming --family.
#pragma once
#include <string>

#include "model/config.h"

namespace ratchet {

void apply_family_defaults(GPTConfig& c, Family f, int window);
// "qwen3" -> Family::qwen3 (also "gemma3" for gemma3_text); Error naming `flag` otherwise.
Family parse_family_flag(const std::string& s, const char* flag);
// Whether f's MLPs are Mixture-of-Experts (qwen3_moe, qwen2_moe, olmoe, mixtral, dots1).
bool family_is_moe(Family f);

}  // namespace ratchet

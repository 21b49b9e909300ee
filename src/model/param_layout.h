// The flat parameter buffer: every parameter of the model lives in one
// contiguous array, in llm.c's GPT-2 tensor order, so that a checkpoint, an
// all-reduce and the optimizer each see one array.
//
//  idx name       shape          weight decay
//   0  wte        (Vp, C)        yes  (tied: token embedding and lm_head)
//   1  wpe        (maxT, C)      yes
//   2  ln1w       (L, C)         no
//   3  ln1b       (L, C)         no
//   4  qkvw       (L, 3C, C)     yes
//   5  qkvb       (L, 3C)        no
//   6  attprojw   (L, C, C)      yes
//   7  attprojb   (L, C)         no
//   8  ln2w       (L, C)         no
//   9  ln2b       (L, C)         no
//  10  fcw        (L, 4C, C)     yes
//  11  fcb        (L, 4C)        no
//  12  fcprojw    (L, C, 4C)     yes
//  13  fcprojb    (L, C)         no
//  14  lnfw       (C)            no
//  15  lnfb       (C)            no
//  16  lmhead     size 0         yes  (GPT-2 ties it to wte)
// Matrices are [out][in], row-major. Padded rows Vp > V of wte stay zero.
// Weight decay applies to the 2-D matrices (embeddings and linear weights),
// as in nanoGPT/llm.c.
//
// Llama (cfg.arch == Arch::llama; hs = C/NH, KV = kv_heads(), H = ffn()) uses
// the same slots; those it has no use for get size 0:
//   0 wte (Vp, C)                 1 wpe size 0       2 ln1w (L, C) RMSNorm gain
//   3 ln1b size 0                 4 qkvw (L, (NH+2KV)*hs, C): rows q | k | v
//   5 qkvb size 0                 6 attprojw (L, C, NH*hs) o_proj
//   7 attprojb size 0             8 ln2w (L, C)      9 ln2b size 0
//  10 fcw (L, 2H, C): rows gate_proj | up_proj    11 fcb size 0
//  12 fcprojw (L, C, H) down_proj                13 fcprojb size 0
//  14 lnfw (C)                   15 lnfb size 0
//  16 lmhead (Vp, C) if untied, else size 0 (padded rows zero)
//  5 qkvb (L, (NH+2KV)*hs) when qkv_bias (Qwen2.5)
// and the 2026 families' tensors (issue 38), appended so that every earlier
// model keeps its flat buffer (size 0 unless the config asks for them):
//  17 qnormw (L, hs) per-head q RMSNorm, or (L, NH*hs) full width (config qk_norm)
//  18 knormw (L, hs) per-head k RMSNorm, or (L, KV*hs) full width
//  19 attnpostw (L, C) RMSNorm on the attention output (post / sandwich norms)
//  20 mlppostw (L, C)  RMSNorm on the MLP output
// ln1w and ln2w are size 0 where norm_placement is post (OLMo 2).
// Mixture-of-Experts (issue 39; E = num_experts, I = moe_ffn_hidden), also
// appended, size 0 for a dense model:
//  21 routerw (L, E, C)        the router gate (HF mlp.gate.weight)
//  22 expw1   (L, E, 2I, C)    each expert's rows gate_proj | up_proj (Mixtral w1 | w3)
//  23 expw2   (L, E, C, I)     each expert's down_proj (Mixtral w2)
//  24 shw1    (L, 2Is, C)      the shared experts' gate_proj | up_proj rows
//                              (HF mlp.shared_experts; Is = I·n_shared_experts,
//                              or HF mlp.shared_expert of Qwen2-MoE: Is = shared_expert_ffn)
//  25 shw2    (L, C, Is)       the shared experts' down_proj
//  26 shgate  (L, C)          Qwen2-MoE's shared_expert_gate (HF mlp.shared_expert_gate.weight,
//                              (1, C) per layer): the shared expert's output times sigmoid(x · g)
// (shw1/shw2 are size 0 without shared experts; Is is then Qwen2-MoE's
// shared_expert_ffn. shgate is size 0 unless the shared expert is gated.)
// Every layered tensor keeps one slice per layer (the shards, buckets and
// per-block gathers rely on it), so a model that mixes dense and MoE layers
// (mlp_only_layers, decoder_sparse_step > 1) holds fcw/fcprojw and the
// expert tensors for all L layers; the slices a layer does not use stay zero
// (zero gradient, zero weight decay: AdamW leaves them zero) and are neither
// exported nor counted by param_count(). fcw/fcprojw are size 0 when every
// layer is MoE (Qwen3-MoE, OLMoE, Mixtral as published).
// [out][in] row-major is Hugging Face's nn.Linear layout: HF tensors copy in
// as row blocks.
// Expert slices (--expert-parallel N keeping E/N experts' weights per rank,
// model/expert_slice.h): ParamLayout(cfg, N) sizes expw1 and expw2 for E/N
// experts per layer, (L, E/N, 2I, C) and (L, E/N, C, I); every other tensor
// is the same, so every rank of the group has the same layout and only the
// experts behind expw1/expw2 differ. N = 1 is the whole model.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "model/config.h"

namespace ratchet {

constexpr int kNumParamTensors = 27;

enum ParamIndex {
  P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
  P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, P_LMHEAD,
  P_QNORMW, P_KNORMW, P_ATTNPOSTW, P_MLPPOSTW, P_ROUTERW, P_EXPW1, P_EXPW2, P_SHW1, P_SHW2,
  P_SHGATE
};

// The tensors a transformer block owns (an (L, ...) tensor: one slice per
// layer), in flat-buffer order. Everything that walks a block's parameters
// (buckets, shards, the per-layer all-reduce, FLOP and memory counts) walks
// this list, so a tensor added here is carried everywhere.
constexpr int kBlockTensors[] = {P_LN1W,  P_LN1B,     P_QKVW,   P_QKVB,   P_ATTPROJW, P_ATTPROJB,
                                 P_LN2W,  P_LN2B,     P_FCW,    P_FCB,    P_FCPROJW,  P_FCPROJB,
                                 P_QNORMW, P_KNORMW, P_ATTNPOSTW, P_MLPPOSTW,
                                 P_ROUTERW, P_EXPW1,  P_EXPW2,  P_SHW1,   P_SHW2, P_SHGATE};
inline bool is_block_tensor(int i) { return (i >= P_LN1W && i <= P_FCPROJB) || i >= P_QNORMW; }

struct ParamLayout {
  std::array<size_t, kNumParamTensors> sizes{};    // elements of each tensor
  std::array<size_t, kNumParamTensors> offsets{};  // element offset in the flat buffer
  size_t total = 0;                                // elements in all
  int layers = 0;                                  // L, the config's num_layers
  int expert_shards = 1;                           // N: expw1/expw2 hold E/N experts

  // expert_shards N must divide num_experts (an Error naming both otherwise).
  explicit ParamLayout(const GPTConfig& c, int expert_shards = 1);
  static const char* name(int i);
  static bool decayed(int i);  // true for the 2-D matrices
  // The tensor the logits are computed with: lmhead when untied, else wte.
  int classifier() const { return sizes[P_LMHEAD] > 0 ? P_LMHEAD : P_WTE; }
  // Per-layer stride of a layered tensor (elements of one layer's slice).
  size_t per_layer(int i, int num_layers) const { return sizes[i] / num_layers; }
};

// "" when every value of the flat buffer `p` (layout.total elements) is
// finite, else where the first NaN or inf is: "tensor 'qkvw' (layer 3) holds
// nan at element 17". Every weight reader and writer checks with it.
std::string first_non_finite(const ParamLayout& layout, const float* p);
inline std::string first_non_finite(const ParamLayout& layout, const std::vector<float>& p) {
  return p.size() == layout.total ? first_non_finite(layout, p.data()) : "";
}

}  // namespace ratchet

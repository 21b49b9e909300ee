#include "model/param_layout.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace ratchet {

ParamLayout::ParamLayout(const GPTConfig& c, int shards) {
  const size_t Vp = c.padded_vocab, C = c.channels, L = c.num_layers, maxT = c.max_seq_len;
  layers = c.num_layers;
  if (shards < 1 || (shards > 1 && (!c.moe() || c.num_experts % shards != 0)))
    fail("expert slices: ", shards, " slices of ", c.num_experts,
         " experts; the slice count must divide num_experts (--expert-parallel)");
  expert_shards = shards;
  if (c.arch == Arch::llama) {
    const size_t hs = c.head_size(), NH = c.num_heads, KV = c.kv_heads(), H = c.ffn();
    const size_t pre = c.has_pre_norms() ? L * C : 0, post = c.has_post_norms() ? L * C : 0;
    const size_t qn = c.qk_norm == QkNorm::per_head ? L * hs : c.qk_norm == QkNorm::full_width ? L * NH * hs : 0;
    const size_t kn = c.qk_norm == QkNorm::per_head ? L * hs : c.qk_norm == QkNorm::full_width ? L * KV * hs : 0;
    const int Lm = c.moe_layer_count();
    const size_t dense = Lm < c.num_layers ? L : 0, moe = Lm > 0 ? L : 0;  // see the header
    const size_t E = c.num_experts, I = c.moe_ffn_hidden, Is = c.shared_ffn();
    const size_t Eh = c.moe() ? E / shards : 0;  // the experts held here
    sizes = {Vp * C,  0, pre, 0, L * (NH + 2 * KV) * hs * C,
             c.qkv_bias ? L * (NH + 2 * KV) * hs : 0, L * C * NH * hs, 0,
             pre,   0, dense * 2 * H * C, 0, dense * C * H, 0, C, 0,
             c.tied_embeddings ? 0 : Vp * C, qn, kn, post, post,
             moe * E * C, moe * Eh * 2 * I * C, moe * Eh * C * I, moe * 2 * Is * C, moe * C * Is,
             c.shared_expert_gated() ? moe * C : 0};
  } else {
    sizes = {Vp * C,     maxT * C,  L * C,         L * C, L * 3 * C * C, L * 3 * C,
             L * C * C,  L * C,     L * C,         L * C, L * 4 * C * C, L * 4 * C,
             L * C * 4 * C, L * C,  C,             C,     0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  }
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; i++) {
    offsets[i] = off;
    off += sizes[i];
  }
  total = off;
}

const char* ParamLayout::name(int i) {
  static const char* names[kNumParamTensors] = {
      "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
      "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "lmhead",
      "qnormw", "knormw", "attnpostw", "mlppostw", "routerw", "expw1", "expw2", "shw1", "shw2", "shgate"};
  return names[i];
}

std::string first_non_finite(const ParamLayout& layout, const float* p) {
  for (size_t i = 0; i < layout.total; i++) {
    if (std::isfinite(p[i])) continue;
    int t = 0;
    while (t + 1 < kNumParamTensors && layout.offsets[t + 1] <= i) t++;
    while (layout.sizes[t] == 0) t++;  // empty tensors share the next one's offset
    const size_t at = i - layout.offsets[t];
    std::ostringstream os;
    os << "tensor '" << ParamLayout::name(t) << "' holds " << p[i] << " at element " << at
       << " (of " << layout.sizes[t] << ")";
    return os.str();
  }
  return "";
}

bool ParamLayout::decayed(int i) {
  return i == P_WTE || i == P_WPE || i == P_QKVW || i == P_ATTPROJW || i == P_FCW ||
         i == P_FCPROJW || i == P_LMHEAD || i == P_ROUTERW || i == P_EXPW1 || i == P_EXPW2 || i == P_SHW1 || i == P_SHW2 ||
         i == P_SHGATE;  // a Linear(C, 1): decayed as the router's Linear is
}

}  // namespace ratchet

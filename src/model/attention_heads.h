// What --attention auto needs to know of a model (backend/attention_choice.h):
// its heads, its head size (head_dim, not C/NH, for Qwen3 and Gemma 3) and
// issue 38's options any of its layers use (the widest sliding window, the
// attention soft-cap), which ratchet's cuDNN graph does not take.
#pragma once
#include <algorithm>

#include "backend/attention_choice.h"
#include "model/config.h"

namespace ratchet {

inline AttentionHeads attention_heads(const GPTConfig& cfg) {
  AttentionHeads h;
  h.NH = cfg.num_heads > 0 ? cfg.num_heads : 1;
  h.KV = cfg.kv_heads();
  h.HS = cfg.num_heads > 0 ? cfg.head_size() : cfg.channels;
  for (int l = 0; l < cfg.num_layers; l++) h.window = std::max(h.window, cfg.window(l));
  h.softcap = cfg.attn_softcap;
  return h;
}

}  // namespace ratchet

// A tiny GPT-2 config and random batches shared by model-level tests.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "model/config.h"

namespace ratchet::testing {

// A small GPT-2 shape; the defaults (L=2, NH=2, C=16, V=37 -> Vp=128, maxT=16)
// reach every code path and run in milliseconds.
inline GPTConfig tiny_config(int layers = 2, int heads = 2, int channels = 16, int vocab = 37,
                             int max_seq_len = 16) {
  GPTConfig c;
  c.num_layers = layers;
  c.num_heads = heads;
  c.channels = channels;
  c.vocab_size = vocab;
  c.padded_vocab = 0;
  c.max_seq_len = max_seq_len;
  c.finalize();
  return c;
}

// A small Llama shape with every feature on: GQA (4 heads sharing 2 KV
// heads), SwiGLU with a hidden size that is not 4C, RoPE with Llama 3.1
// scaling (original_max_pos small enough that all three frequency bands
// occur at hs = 8), and untied embeddings unless `tied`.
inline GPTConfig tiny_llama_config(bool tied = false, int layers = 2, int heads = 4, int kv = 2,
                                   int channels = 32, int ffn = 40, int vocab = 37,
                                   int max_seq_len = 16) {
  GPTConfig c;
  c.arch = Arch::llama;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv;
  c.channels = channels;
  c.ffn_hidden = ffn;
  c.vocab_size = vocab;
  c.padded_vocab = 0;
  c.max_seq_len = max_seq_len;
  c.tied_embeddings = tied;
  c.rope_theta = 500.f;
  c.rope_factor = 8.f;
  c.rope_original_max_pos = 64;
  c.finalize();
  return c;
}

inline std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)rng.below(vocab);
  return t;
}

}  // namespace ratchet::testing

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

inline std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)rng.below(vocab);
  return t;
}

}  // namespace ratchet::testing

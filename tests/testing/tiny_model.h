// A tiny GPT-2 config and random batches shared by model-level tests.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "model/config.h"

namespace ratchet::testing {

// L=2, NH=2, C=16, V=37 (Vp=128), maxT=16: every code path, milliseconds to run.
inline GPTConfig tiny_config() {
  GPTConfig c;
  c.num_layers = 2;
  c.num_heads = 2;
  c.channels = 16;
  c.vocab_size = 37;
  c.padded_vocab = 0;
  c.max_seq_len = 16;
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

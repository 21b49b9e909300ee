// GPT-2 model shape.
//
// Presets follow llm.c's depth naming: dN has N layers. The four GPT-2 sizes
// use GPT-2's own widths: d12 = 124M (768 channels, 12 heads), d24 = 350M
// (1024, 16), d36 = 774M (1280, 20), d48 = 1.5B (1600, 25). Any other depth
// uses 64·N channels and N heads (d6 = 384 channels, 6 heads).
#pragma once
#include <cstdint>
#include <string>

namespace ratchet {

struct GPTConfig {
  int max_seq_len = 1024;  // maxT: rows of wpe
  int vocab_size = 50257;  // V: real tokens
  int padded_vocab = 50304;  // Vp: V rounded up to a multiple of 128 (rows of wte)
  int num_layers = 12;     // L
  int num_heads = 12;      // NH
  int channels = 768;      // C

  int head_size() const { return channels / num_heads; }
  // Fills padded_vocab from vocab_size and checks the shape; throws Error
  // naming the offending field.
  void finalize();
  std::string describe() const;
};

// V rounded up to a multiple of 128 (llm.c's padding: tensor-core friendly).
inline int pad_vocab(int v) { return (v + 127) / 128 * 128; }

// "d12" -> config with the given vocab/max_seq_len. Throws Error on an unknown name.
GPTConfig preset_config(const std::string& name, int vocab_size, int max_seq_len);

}  // namespace ratchet

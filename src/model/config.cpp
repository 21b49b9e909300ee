#include "model/config.h"

#include <sstream>

#include "core/error.h"

namespace ratchet {

void GPTConfig::finalize() {
  if (num_layers < 1) fail("--layers must be at least 1 (got ", num_layers, ")");
  if (num_heads < 1) fail("--heads must be at least 1 (got ", num_heads, ")");
  if (channels < 1 || channels % num_heads != 0)
    fail("--channels ", channels, " must be a positive multiple of --heads ", num_heads);
  if (vocab_size < 2) fail("--vocab-size must be at least 2 (got ", vocab_size, ")");
  if (max_seq_len < 1) fail("--max-seq-len must be at least 1 (got ", max_seq_len, ")");
  if (padded_vocab < vocab_size) padded_vocab = pad_vocab(vocab_size);
}

std::string GPTConfig::describe() const {
  std::ostringstream os;
  os << "L=" << num_layers << " H=" << num_heads << " C=" << channels << " V=" << vocab_size
     << " Vp=" << padded_vocab << " maxT=" << max_seq_len;
  return os.str();
}

GPTConfig preset_config(const std::string& name, int vocab_size, int max_seq_len) {
  int depth = 0;
  if (name.size() >= 2 && name[0] == 'd') {
    try {
      size_t pos = 0;
      depth = std::stoi(name.substr(1), &pos);
      if (pos != name.size() - 1) depth = 0;
    } catch (...) {
      depth = 0;
    }
  }
  if (depth < 1 || depth > 96)
    fail("--model '", name, "' is not a preset: use dN with N layers, e.g. d6, d12 (GPT-2 124M), "
         "d24, d36, d48, or give --layers/--heads/--channels");
  GPTConfig c;
  c.num_layers = depth;
  c.num_heads = depth;
  c.channels = 64 * depth;
  switch (depth) {  // GPT-2's published sizes
    case 24: c.num_heads = 16; c.channels = 1024; break;
    case 36: c.num_heads = 20; c.channels = 1280; break;
    case 48: c.num_heads = 25; c.channels = 1600; break;
    default: break;
  }
  c.vocab_size = vocab_size;
  c.padded_vocab = pad_vocab(vocab_size);
  c.max_seq_len = max_seq_len;
  c.finalize();
  return c;
}

}  // namespace ratchet

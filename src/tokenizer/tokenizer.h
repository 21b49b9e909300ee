// The tokenizer interface `ratchet shard` encodes with and samplers decode
// with, and the factory that maps a --tokenizer name to one.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ratchet {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // recorded in the shard's `tokenizer` attribute
  virtual int vocab_size() const = 0;    // ids are in [0, vocab_size)
  virtual int eot_token() const = 0;     // end-of-text: separates documents
  // Text -> ids. Never emits eot_token(); callers append it after a document.
  virtual std::vector<uint32_t> encode(const std::string& text) const = 0;
  // Ids -> text; see the implementation for how eot and invalid ids print.
  virtual std::string decode(const std::vector<uint32_t>& ids) const = 0;
};

// Files a tokenizer is loaded from (GPT-2: encoder.json and vocab.bpe). Empty
// paths mean the default location (see default_gpt2_dir() in gpt2_tokenizer.h).
struct TokenizerFiles {
  std::string vocab;   // --vocab: encoder.json
  std::string merges;  // --merges: vocab.bpe
};

// --vocab/--merges name GPT-2's files: given with another tokenizer they
// would be ignored, so Error "--vocab/--merges are for --tokenizer gpt2, not
// 'NAME'". make_tokenizer checks it; commands call it before reading data.
void check_tokenizer_files(const std::string& name, const TokenizerFiles& files);

// "byte" -> ByteTokenizer, "gpt2" -> Gpt2Tokenizer (from `files`), an
// existing path -> HfTokenizer (a tokenizer.json or a directory with one). Throws
// Error naming `flag` and the value on an unknown name, listing the known
// ones, or naming the vocabulary file that cannot be loaded.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name,
                                          const std::string& flag = "--tokenizer",
                                          const TokenizerFiles& files = {});

}  // namespace ratchet

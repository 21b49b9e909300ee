#include "data/tokenizer.h"

#include "core/error.h"
#include "data/byte_tokenizer.h"
#include "data/gpt2_tokenizer.h"

namespace ratchet {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& flag,
                                          const TokenizerFiles& files) {
  if (name == ByteTokenizer::kName) return std::make_unique<ByteTokenizer>();
  if (name == Gpt2Tokenizer::kName) {
    const std::string dir = default_gpt2_dir();
    std::string vocab = files.vocab.empty() ? dir + "/encoder.json" : files.vocab;
    std::string merges = files.merges.empty() ? dir + "/vocab.bpe" : files.merges;
    return std::make_unique<Gpt2Tokenizer>(vocab, merges);
  }
  fail("unknown ", flag, " '", name, "': the known tokenizers are: ", ByteTokenizer::kName, ", ",
       Gpt2Tokenizer::kName);
}

}  // namespace ratchet

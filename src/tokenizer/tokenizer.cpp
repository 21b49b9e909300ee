#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/json/file_checks.h"
#include "tokenizer/tokenizer_json.h"

namespace ratchet {

void check_tokenizer_files(const std::string& name, const TokenizerFiles& files) {
  if ((!files.vocab.empty() || !files.merges.empty()) && name != Gpt2Tokenizer::kName)
    fail("--vocab/--merges are for --tokenizer gpt2, not '", name, "'");
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& flag,
                                          const TokenizerFiles& files) {
  check_tokenizer_files(name, files);
  if (name == ByteTokenizer::kName) return std::make_unique<ByteTokenizer>();
  if (name == Gpt2Tokenizer::kName) {
    const std::string dir = default_gpt2_dir();
    std::string vocab = files.vocab.empty() ? dir + "/encoder.json" : files.vocab;
    std::string merges = files.merges.empty() ? dir + "/vocab.bpe" : files.merges;
    return std::make_unique<Gpt2Tokenizer>(vocab, merges);
  }
  // Anything else that exists is a tokenizer.json or a directory holding one;
  // shards record one as "hf:PATH" (HfTokenizer::name).
  const std::string path = name.rfind("hf:", 0) == 0 ? name.substr(3) : name;
  // A symbolic-link loop or dangling link is named by the loader
  // (tokenizer/json/file_checks.h), not taken for an unknown name.
  if (hf::name_exists(path)) return HfTokenizer::load(path);
  fail("unknown ", flag, " '", name, "': the known tokenizers are: ", ByteTokenizer::kName, ", ",
       Gpt2Tokenizer::kName, ", or the path of a Hugging Face tokenizer.json (or of a model "
       "directory holding one); no such file or directory");
}

}  // namespace ratchet

#include "data/tokenizer.h"

#include "core/error.h"
#include "data/byte_tokenizer.h"

namespace ratchet {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& flag) {
  if (name == ByteTokenizer::kName) return std::make_unique<ByteTokenizer>();
  fail("unknown ", flag, " '", name, "': the known tokenizers are: ", ByteTokenizer::kName);
}

}  // namespace ratchet

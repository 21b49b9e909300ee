#include "data/tokenizer_identity.h"

namespace ratchet {

namespace {
bool both_digested(const ShardMeta& a, const ShardMeta& b) {
  return !a.tokenizer_sha256.empty() && !b.tokenizer_sha256.empty();
}
std::string digest(const ShardMeta& m) {
  return m.tokenizer_sha256.empty() ? std::string("none") : m.tokenizer_sha256;
}
}  // namespace

std::string tokenizer_difference(const ShardMeta& a, const ShardMeta& b) {
  if (both_digested(a, b)) {
    if (a.tokenizer_sha256 != b.tokenizer_sha256)
      return "tokenizer.json digest (" + a.tokenizer_sha256 + " in '" + a.tokenizer + "' vs " +
             b.tokenizer_sha256 + " in '" + b.tokenizer + "')";
  } else if (a.tokenizer != b.tokenizer) {
    return "tokenizer ('" + a.tokenizer + "' vs '" + b.tokenizer + "')";
  } else if (a.tokenizer_sha256 != b.tokenizer_sha256) {
    return "tokenizer.json digest (" + digest(a) + " vs " + digest(b) + ")";
  }
  if (a.vocab_size != b.vocab_size)
    return "vocab_size (" + std::to_string(a.vocab_size) + " vs " + std::to_string(b.vocab_size) + ")";
  if (a.eot_token != b.eot_token)
    return "eot_token (" + std::to_string(a.eot_token) + " vs " + std::to_string(b.eot_token) + ")";
  if (a.add_bos != b.add_bos || a.add_eos != b.add_eos || a.bos_token != b.bos_token)
    return "document framing (add_bos " + std::to_string(a.add_bos) + ", add_eos " +
           std::to_string(a.add_eos) + ", bos " + std::to_string(a.bos_token) + " vs add_bos " +
           std::to_string(b.add_bos) + ", add_eos " + std::to_string(b.add_eos) + ", bos " +
           std::to_string(b.bos_token) + ")";
  return "";
}

bool same_tokenizer_other_path(const ShardMeta& a, const ShardMeta& b) {
  return both_digested(a, b) && a.tokenizer != b.tokenizer && tokenizer_difference(a, b).empty();
}

}  // namespace ratchet

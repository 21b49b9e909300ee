// A set of token shards, named by a glob pattern, read as one token stream.
//
//   TokenDataset train("data/train_*.h5", "--train-data");
//   train.check_vocab(model.vocab_size);
//   train.read(start, T + 1, buf);   // wraps around the end of the stream
//
// The pattern is expanded and sorted (byte order, independent of locale); the
// stream is the shards' /tokens concatenated in that order. Every shard is
// validated at construction (see ShardFile) and all must agree on tokenizer,
// vocab_size and eot_token. Errors name the flag, the pattern or the file.
//
// Cache: each shard's tokens are loaded whole into memory at construction, as
// uint16 (or uint32 for vocab > 65535), and files are closed again. Shards
// are small for now; streaming by HDF5 chunk through a bounded cache is a
// later step that keeps this interface. read() is const and touches no
// mutable state, so several threads may call it at once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/shard_format.h"

namespace ratchet {

class TokenDataset {
 public:
  // `flag` is the option the pattern came from ("--train-data"), for messages.
  TokenDataset(const std::string& pattern, const std::string& flag);

  uint64_t num_tokens() const { return total_; }
  uint64_t num_documents() const { return num_documents_; }
  int vocab_size() const { return meta_.vocab_size; }
  int eot_token() const { return meta_.eot_token; }
  const std::string& tokenizer() const { return meta_.tokenizer; }
  const std::string& pattern() const { return pattern_; }
  const std::string& flag() const { return flag_; }
  size_t num_shards() const { return shards_.size(); }
  const std::string& shard_path(size_t i) const { return shards_[i].path; }
  uint32_t max_token() const { return max_token_; }  // largest id in any shard

  // Tokens [start, start+count) of the stream, positions taken modulo
  // num_tokens(): a read running past the end continues at token 0.
  void read(uint64_t start, size_t count, int32_t* out) const;

  // Throws Error when the shards cannot feed a model with `model_vocab`
  // embedding rows: their vocab_size or any token id is >= model_vocab.
  void check_vocab(int model_vocab) const;

  // "--train-data 'data/train_*.h5' (2 shards, 1234 tokens, tokenizer byte)"
  std::string describe() const;

 private:
  struct Shard {
    std::string path;
    uint64_t start = 0;  // position of its first token in the stream
    uint64_t size = 0;
    std::vector<uint16_t> t16;  // one of the two is filled
    std::vector<uint32_t> t32;
  };
  const Shard& shard_at(uint64_t pos) const;

  std::string pattern_, flag_;
  ShardMeta meta_;
  std::vector<Shard> shards_;
  uint64_t total_ = 0, num_documents_ = 0;
  uint32_t max_token_ = 0;
};

}  // namespace ratchet

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
// Streaming: every shard stays open (read-only, file locking off) and read()
// goes through HDF5's chunk cache of that shard: nothing is loaded whole, so
// multi-GB shards (over 4 Gi tokens: all positions are uint64) open at once
// and use memory bounded by the cache. Opening reads only the headers: the
// largest token id comes from the `max_token` attribute (or, for shards
// written before it existed, a scan of shards up to kScanLimit tokens); every
// read still checks its ids against vocab_size and throws Error naming the
// shard on a bad one. read() is const and thread-safe (the HDF5 library is
// built thread-safe and serialises its calls), so the loader's prefetch
// thread and the trainer may read at once.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/shard_format.h"

namespace ratchet {

class ShardFile;

struct TokenDatasetOptions {
  // HDF5 chunk cache over all shards, split evenly (at least two chunks per
  // shard): sequential reads need one chunk per shard, shuffled windows hit
  // random chunks and gain from more.
  size_t cache_bytes = size_t(64) << 20;
};

class TokenDataset {
 public:
  // Shards without a max_token attribute are scanned at open up to this size.
  static constexpr uint64_t kScanLimit = uint64_t(1) << 26;

  // `flag` is the option the pattern came from ("--train-data"), for messages.
  TokenDataset(const std::string& pattern, const std::string& flag,
               const TokenDatasetOptions& options = {});
  ~TokenDataset();
  TokenDataset(TokenDataset&&) noexcept;

  uint64_t num_tokens() const { return total_; }
  uint64_t num_documents() const { return num_documents_; }
  int vocab_size() const { return meta_.vocab_size; }
  int eot_token() const { return meta_.eot_token; }
  const std::string& tokenizer() const { return meta_.tokenizer; }
  // Everything the first shard says about its tokens (framing, the
  // tokenizer.json digest); the shards agree on all of it.
  const ShardMeta& meta() const { return meta_; }
  const std::string& pattern() const { return pattern_; }
  const std::string& flag() const { return flag_; }
  size_t num_shards() const { return shards_.size(); }
  const std::string& shard_path(size_t i) const { return shards_[i].path; }
  uint64_t shard_num_tokens(size_t i) const { return shards_[i].size; }
  // Device and inode of the file shard i was opened from (ShardFile::file_id).
  std::pair<uint64_t, uint64_t> shard_file_id(size_t i) const;
  // Largest id in any shard (from max_token attributes or a scan; shards too
  // big to scan without the attribute count as vocab_size - 1).
  uint32_t max_token() const { return max_token_; }

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
    std::unique_ptr<ShardFile> file;
  };
  const Shard& shard_at(uint64_t pos) const;

  std::string pattern_, flag_;
  ShardMeta meta_;
  std::vector<Shard> shards_;
  uint64_t total_ = 0, num_documents_ = 0;
  uint32_t max_token_ = 0;
};

}  // namespace ratchet

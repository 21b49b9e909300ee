// Writes one token shard (see shard_format.h) atomically.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/shard_format.h"

namespace ratchet {

// Writes `tokens` and `doc_offsets` with `meta`'s attributes to `path`.
// The file is built under a hidden temporary name in the same directory
// (".<name>.tmp-<pid>"), flushed to disk, then renamed over `path`: a crash
// never leaves a file named `path` that looks whole. Throws Error naming the
// path when the file cannot be written, or when the arguments break the
// format (a token >= vocab_size, doc_offsets not increasing or out of range).
void write_shard(const std::string& path, const ShardMeta& meta,
                 const std::vector<uint32_t>& tokens, const std::vector<uint64_t>& doc_offsets,
                 size_t chunk_tokens = shard_format::kChunkTokens);

// One written shard, as reported to the caller.
struct ShardSummary {
  std::string path;
  uint64_t tokens = 0;
  uint64_t documents = 0;  // documents that start in this shard
};

// Cuts a stream of documents into shards <dir>/<prefix>_000000.h5,
// <prefix>_000001.h5, ... of exactly `shard_tokens` tokens each (the last
// one shorter). Each document is followed by meta.eot_token; a document may
// continue from one shard into the next, so the shards concatenated in name
// order are the same stream whatever `shard_tokens` is.
class ShardStreamWriter {
 public:
  using Callback = std::function<void(const ShardSummary&)>;
  // `on_shard` (optional) is called after each shard is written.
  ShardStreamWriter(std::string dir, std::string prefix, ShardMeta meta, uint64_t shard_tokens,
                    Callback on_shard = {});
  // Appends `tokens` and an eot token as one document.
  void add_document(const std::vector<uint32_t>& tokens);
  // Writes the last, partial shard (none if nothing is pending). Call once.
  void finish();
  const std::vector<ShardSummary>& shards() const { return written_; }
  uint64_t total_tokens() const { return total_tokens_; }

  static std::string shard_name(const std::string& prefix, size_t index);  // "train_000000.h5"

 private:
  void append(const uint32_t* tokens, size_t n, bool starts_document);
  void flush();

  std::string dir_, prefix_;
  ShardMeta meta_;
  uint64_t shard_tokens_;
  Callback on_shard_;
  std::vector<uint32_t> tokens_;
  std::vector<uint64_t> doc_offsets_;
  std::vector<ShardSummary> written_;
  uint64_t total_tokens_ = 0;
};

}  // namespace ratchet

// A per-user cache of facts computed by reading whole shards (each shard's
// token CRC-32 for data/shard_identity.h, the training tokens' unigram
// entropy the trainer prints), so that a run started again and again on the
// same shards (a sweep's trial segments, requeues) does not read them all at
// every start. An entry counts only while every file it was computed from is
// the very same: path, device, inode, size, modification and change times
// (st_ctime cannot be set from user space: rewriting a shard in place, even
// with its old mtime restored, or replacing it by rename misses the cache).
// Files changed in the last two seconds are not cached: file times come from
// a coarse clock and may not yet tell two versions apart.
//
// File: $RATCHET_CACHE_DIR/shard-cache.tsv, else $XDG_CACHE_HOME/ratchet/...,
// else $HOME/.cache/ratchet/...; RATCHET_CACHE_DIR set but empty turns it off.
// One line per fact, tab-separated: KIND, then per file its
// "dev ino size mtime_ns ctime_ns" and absolute path, then the VALUE.
// Rewritten whole (temp file + rename), without the entries of files that no
// longer exist; a cache that cannot be read or written
// is ignored (the fact is computed), never an error.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace ratchet {

class ShardCache {
 public:
  ShardCache();  // from the environment (above)
  explicit ShardCache(std::string file) : file_(std::move(file)) {}
  // The value stored for `kind` over `files`, if none of them changed since.
  std::optional<std::string> lookup(const std::string& kind, const std::vector<std::string>& files) const;
  void store(const std::string& kind, const std::vector<std::string>& files, const std::string& value) const;
  const std::string& file() const { return file_; }

 private:
  // KIND and each file's signature, tab-separated; "" when not cacheable
  // (a file missing, fresh, or a name with a tab or newline).
  std::string key(const std::string& kind, const std::vector<std::string>& files, bool for_store) const;
  std::string file_;  // "": off
};

}  // namespace ratchet

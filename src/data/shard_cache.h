// A per-user cache of facts computed by reading whole shards (each shard's
// token CRC-32 for data/shard_identity.h, the training tokens' unigram
// entropy the trainer prints), so that a run started again and again on the
// same shards (a sweep's trial segments, requeues) does not read them all at
// every start. An entry counts only while every file it was computed from is
// the very same: path, device, inode, size, modification and change times
// (st_ctime cannot be set from user space: rewriting a shard in place, even
// with its old mtime restored, or replacing it by rename misses the cache).
// Files changed in the last two seconds are not cached: file times come from
// a coarse clock and may not yet tell two versions apart. Nor are files on a
// file system whose ctime may not be a real change time (FUSE, e.g. sshfs,
// reports ctime = mtime): only known local and cluster file systems count.
//
// A value is stored under the files' state taken before it was computed
// (snapshot()), and only when the files are still in that state after: a
// shard rewritten or renamed over while it was being read would otherwise
// leave the old file's value under the new file's key (a changed shard
// passing as verified). Callers that read through files they opened earlier
// also check that the snapshot names those very files (shard_identity.h).
//
// File: $RATCHET_CACHE_DIR/shard-cache.tsv, else $XDG_CACHE_HOME/ratchet/...,
// else $HOME/.cache/ratchet/...; RATCHET_CACHE_DIR set but empty turns it off.
// One line per fact, tab-separated: KIND, then per file its
// "dev ino size mtime_ns ctime_ns" and absolute path, then the VALUE.
// Rewritten whole (a unique temp file + rename) under an flock of
// shard-cache.tsv.lock, so that trainers starting together neither lose each
// other's entries nor tear the file; entries of files that no longer exist
// are dropped. A cache that cannot be read or written (or is implausibly
// large) is ignored (the fact is computed), never an error.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ratchet {

class ShardCache {
 public:
  // The state of some files at one instant.
  struct Snapshot {
    std::vector<std::string> files;
    std::vector<std::pair<uint64_t, uint64_t>> ids;  // (device, inode) per file
    std::string sig;  // each file's signature and path, tab-separated; "": not cacheable
  };

  ShardCache();  // from the environment (above)
  explicit ShardCache(std::string file) : file_(std::move(file)) {}

  // The files' state now; sig "" when the cache is off or a file is missing,
  // is on an untrusted file system (above) or has a tab or newline in its name.
  Snapshot snapshot(const std::vector<std::string>& files) const;
  // The value stored for `kind` over the files in state `s`, if any.
  std::optional<std::string> lookup(const std::string& kind, const Snapshot& s) const;
  std::optional<std::string> lookup(const std::string& kind, const std::vector<std::string>& files) const {
    return lookup(kind, snapshot(files));
  }
  // Stores `value`, computed from the files in state `before`, when they are
  // all still in that state and it is at least two seconds old.
  void store(const std::string& kind, const Snapshot& before, const std::string& value) const;
  const std::string& file() const { return file_; }

  static constexpr uint64_t kMaxFileBytes = 64u << 20;  // a larger cache file is not read

 private:
  std::string file_;  // "": off
};

}  // namespace ratchet

// Reads a shard's /tokens chunk by chunk, decoding each chunk itself instead
// of going through HDF5's filter pipeline, and keeps the decoded chunks last
// used (least recently used first out).
//
// Why: a short training segment (a sweep's trial segment, a requeue) reads
// windows all over the shards, so it decodes nearly every chunk once before
// its first steps. HDF5 inflates through zlib; libdeflate does the same
// inflate (and the same Adler-32 check of every chunk) about 5x faster:
// measured on the KJV train shard (17 chunks of 262144 tokens, shuffle +
// deflate level 4), 52-61 ms with zlib against 8-10 ms with libdeflate.
//
// Only what `ratchet shard` writes is decoded here: a 1-D chunked dataset of
// native little-endian uint16 or uint32, filters shuffle and/or deflate in
// that order. For anything else open() returns nullptr and ShardFile reads
// through H5Dread as before. A chunk that was never written (HDF5 would
// return fill values) is read through H5Dread too.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/h5_util.h"

struct libdeflate_decompressor;

namespace ratchet {

class ChunkReader {
 public:
  // `tokens`: the open /tokens dataset (not owned; must outlive the reader);
  // `path` names the shard in errors. nullptr when the storage is not one
  // this reader decodes (see above).
  static std::unique_ptr<ChunkReader> open(hid_t tokens, const std::string& path);
  ~ChunkReader();

  // Room for decoded chunks in bytes (at least one chunk is always kept;
  // 0: 1 MiB, HDF5's default chunk cache).
  void set_cache_bytes(size_t bytes);
  void set_dataset(hid_t tokens) { tokens_ = tokens; }  // after ShardFile reopens it

  // Tokens [start, start+count) (in range: the caller checks), converted as
  // H5Dread converts to the native type (uint32 values above INT32_MAX clamp
  // to INT32_MAX for int32). Thread-safe.
  void read(uint64_t start, uint64_t count, uint32_t* out) const;
  void read(uint64_t start, uint64_t count, int32_t* out) const;

  uint64_t chunks_decoded() const { return decoded_; }  // cache misses, for tests

 private:
  ChunkReader(hid_t tokens, std::string path, uint64_t chunk_tokens, uint64_t num_tokens,
              int token_bytes, int shuffle_index, int deflate_index);
  template <typename Out>
  void read_as(uint64_t start, uint64_t count, Out* out) const;
  // Chunk `index` decoded: chunk_tokens_ tokens of token_bytes_ each (mu_ held).
  const std::vector<uint8_t>& chunk(uint64_t index) const;
  void decode(uint64_t index, std::vector<uint8_t>* bytes) const;

  hid_t tokens_;
  std::string path_;
  uint64_t chunk_tokens_, num_tokens_;
  int token_bytes_;
  int shuffle_index_, deflate_index_;  // position in the filter pipeline, -1: absent
  size_t capacity_ = 1;                // decoded chunks kept

  mutable std::mutex mu_;
  struct Entry {
    uint64_t index;
    std::vector<uint8_t> bytes;  // (chunk_tokens_ * token_bytes_)
  };
  mutable std::list<Entry> lru_;  // most recently used first
  mutable std::unordered_map<uint64_t, std::list<Entry>::iterator> where_;
  mutable std::vector<uint8_t> raw_, inflated_;  // (stored bytes), (chunk bytes): reused
  mutable libdeflate_decompressor* inflater_ = nullptr;
  mutable uint64_t decoded_ = 0;
};

}  // namespace ratchet

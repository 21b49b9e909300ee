// Opens one token shard (see shard_format.h) read-only, without file locking,
// and checks its header: HDF5 at all, /tokens present and integer, format,
// format_version, tokenizer, vocab_size, eot_token. Every problem is an Error
// that names the file and says what to do.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/chunk_reader.h"
#include "data/h5_util.h"
#include "data/shard_format.h"

namespace ratchet {

// Shard arguments of inspect/verify/convert: each value a file or a glob
// (sorted); Error naming `what` and the value when one matches nothing.
std::vector<std::string> expand_shard_paths(const std::vector<std::string>& values,
                                            const std::string& what);

class ShardFile {
 public:
  // `cache_bytes`: the HDF5 chunk cache of /tokens (0: HDF5's default, 1 MiB).
  // Reads stream through it: nothing is loaded whole, so shards of any size
  // (over 4 Gi tokens too: every offset is 64-bit) open instantly. Shards as
  // `ratchet shard` writes them are decoded by data/chunk_reader.h (libdeflate)
  // with a cache of decoded chunks of the same size instead; the values read
  // are the same.
  explicit ShardFile(const std::string& path, size_t cache_bytes = 0);

  const std::string& path() const { return path_; }
  const ShardMeta& meta() const { return meta_; }
  uint64_t num_tokens() const { return num_tokens_; }  // length of /tokens
  int token_bytes() const { return token_bytes_; }     // 2 (uint16) or 4 (uint32) as stored
  // The device and inode of the file this object reads (fstat of HDF5's
  // descriptor): tells whether the path still names it after a rename.
  std::pair<uint64_t, uint64_t> file_id() const;

  // Tokens [start, start+count) of /tokens, converted to the element type.
  void read_tokens(uint64_t start, uint64_t count, uint16_t* out) const;
  void read_tokens(uint64_t start, uint64_t count, uint32_t* out) const;
  void read_tokens(uint64_t start, uint64_t count, int32_t* out) const;
  // /doc_offsets, or empty if the shard has none.
  std::vector<uint64_t> read_doc_offsets() const;
  // Length of /doc_offsets without reading it (0 if absent).
  uint64_t num_doc_offsets() const;
  // Offsets [start, start+count) of /doc_offsets.
  std::vector<uint64_t> read_doc_offsets(uint64_t start, uint64_t count) const;

  // Optional attributes (shard_format.h); nullopt / empty when absent. Error
  // when present with the wrong type.
  std::optional<std::string> string_attr(const char* name) const;
  std::optional<int64_t> int_attr(const char* name) const;
  std::optional<double> double_attr(const char* name) const;
  std::vector<std::string> string_array_attr(const char* name) const;
  // Names of every root attribute, in name order.
  std::vector<std::string> attribute_names() const;
  int64_t format_version() const { return version_; }
  // Reopens /tokens with a chunk cache of `bytes`.
  void set_chunk_cache(size_t bytes);

  // Storage: tokens per chunk (0 if /tokens is contiguous), bytes on disk of
  // /tokens, and the filters applied ("shuffle", "deflate", ...).
  uint64_t chunk_tokens() const { return chunk_tokens_; }
  // Whether reads go through data/chunk_reader.h (else H5Dread), and how many
  // chunks it decoded so far (cache misses).
  bool decodes_chunks() const { return chunks_ != nullptr; }
  uint64_t chunks_decoded() const { return chunks_ ? chunks_->chunks_decoded() : 0; }
  uint64_t stored_bytes() const;
  std::vector<std::string> filters() const;

 private:
  void read_tokens_as(uint64_t start, uint64_t count, hid_t mem_type, void* out) const;
  void check_range(uint64_t start, uint64_t count) const;  // Error naming the file when out of range

  std::string path_;
  ShardMeta meta_;
  uint64_t num_tokens_ = 0, chunk_tokens_ = 0;
  int token_bytes_ = 0;
  int64_t version_ = 0;
  H5Handle file_, tokens_;
  std::unique_ptr<ChunkReader> chunks_;  // null: read through H5Dread
};

}  // namespace ratchet

// Opens one token shard (see shard_format.h) read-only, without file locking,
// and checks its header: HDF5 at all, /tokens present and integer, format,
// format_version, tokenizer, vocab_size, eot_token. Every problem is an Error
// that names the file and says what to do.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/h5_util.h"
#include "data/shard_format.h"

namespace ratchet {

class ShardFile {
 public:
  explicit ShardFile(const std::string& path);

  const std::string& path() const { return path_; }
  const ShardMeta& meta() const { return meta_; }
  uint64_t num_tokens() const { return num_tokens_; }  // length of /tokens
  int token_bytes() const { return token_bytes_; }     // 2 (uint16) or 4 (uint32) as stored

  // Tokens [start, start+count) of /tokens, converted to the element type.
  void read_tokens(uint64_t start, uint64_t count, uint16_t* out) const;
  void read_tokens(uint64_t start, uint64_t count, uint32_t* out) const;
  // /doc_offsets, or empty if the shard has none.
  std::vector<uint64_t> read_doc_offsets() const;

 private:
  void read_tokens_as(uint64_t start, uint64_t count, hid_t mem_type, void* out) const;

  std::string path_;
  ShardMeta meta_;
  uint64_t num_tokens_ = 0;
  int token_bytes_ = 0;
  H5Handle file_, tokens_;
};

}  // namespace ratchet

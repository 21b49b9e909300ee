// The token shard format, version 1 (fixed: later versions extend it, never
// break it). One HDF5 file per shard:
//
//   /tokens        1-D uint16 (uint32 when vocab_size > 65535), chunked,
//                  shuffle + deflate. Documents back to back, each followed by
//                  the eot token.
//   /doc_offsets   1-D uint64: index in /tokens of the first token of each
//                  document that starts in this shard (a shard may begin in
//                  the middle of a document continued from the previous one).
//   root attributes
//     format         string  "ratchet-tokens"
//     format_version int     1
//     tokenizer      string  e.g. "byte"
//     vocab_size     int     token ids are in [0, vocab_size)
//     eot_token      int     the end-of-text id
//     num_tokens     uint64  length of /tokens
//     num_documents  uint64  length of /doc_offsets
//
// Strings are variable-length UTF-8 (h5py reads them as str); readers also
// accept fixed-length strings.
#pragma once
#include <cstddef>
#include <string>

namespace ratchet {

namespace shard_format {
inline constexpr const char* kFormat = "ratchet-tokens";
inline constexpr int kVersion = 1;
inline constexpr const char* kTokens = "tokens";
inline constexpr const char* kDocOffsets = "doc_offsets";
inline constexpr const char* kAttrFormat = "format";
inline constexpr const char* kAttrVersion = "format_version";
inline constexpr const char* kAttrTokenizer = "tokenizer";
inline constexpr const char* kAttrVocab = "vocab_size";
inline constexpr const char* kAttrEot = "eot_token";
inline constexpr const char* kAttrNumTokens = "num_tokens";
inline constexpr const char* kAttrNumDocuments = "num_documents";
// Largest vocab stored as uint16.
inline constexpr int kMaxVocab16 = 65535;
// Tokens per HDF5 chunk: 512 KiB as uint16, under HDF5's default 1 MiB chunk
// cache, small enough that a T+1 window read decompresses little extra.
inline constexpr size_t kChunkTokens = size_t(1) << 18;
}  // namespace shard_format

// What a shard says about its tokens; identical across the shards of a dataset.
struct ShardMeta {
  std::string tokenizer;
  int vocab_size = 0;
  int eot_token = 0;
};

}  // namespace ratchet

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
// Optional root attributes, added within version 1 (readers must not require
// them: shards written before they existed lack them; unknown attributes are
// ignored, which is how the format grows without a version bump):
//     max_token           uint64  largest id in /tokens (lets readers skip a scan)
//     tool_version        string  "ratchet 0.1.0", the writer
//     source_files        1-D string  the inputs whose documents are in this shard
//     source_sha256       1-D string  their SHA-256 (hex), same order
//     tokenizer_files     1-D string  e.g. encoder.json, vocab.bpe (gpt2 only)
//     tokenizer_sha256    1-D string  their SHA-256, same order
//     dedup               string  "none", "exact" or "exact+near"
//     dedup_documents_in  uint64  documents read before deduplication (whole run)
//     dedup_exact_removed uint64  exact duplicates removed (whole run)
//     dedup_near_removed  uint64  near duplicates removed (whole run)
//     dedup_near_threshold double Jaccard threshold of near-dup removal
//     unk_bytes           uint64  input bytes of this shard that became the unk
//                                 token (absent: none)
//     dropped_chars       uint64  input characters of this shard dropped: no
//                                 token and no unk token (absent: none)
//   Document framing and the tokenizer's identity (written by `ratchet shard`;
//   without them a shard means: no BOS, eot_token after every document):
//     add_bos             int     1: every document starts with bos_token
//     add_eos             int     1: every document ends with eot_token (the EOS)
//     bos_token           int     the BOS id (absent: the tokenizer has none)
//     tokenizer_json_sha256 string SHA-256 (hex) of the tokenizer.json the ids
//                                 come from (Hugging Face tokenizers only; the
//                                 file's path is the `tokenizer` attribute,
//                                 "hf:PATH", and tokenizer_files[0])
//     parse_special       int     1: text spelling a special token was read as
//                                 that token (--parse-special)
//
// Strings are variable-length UTF-8 (h5py reads them as str); readers also
// accept fixed-length strings.
//
// A reader for a future version 2 must keep reading version 1: bump
// kVersion only together with such a reader (see shard_reader.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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
inline constexpr const char* kAttrMaxToken = "max_token";
inline constexpr const char* kAttrToolVersion = "tool_version";
inline constexpr const char* kAttrSourceFiles = "source_files";
inline constexpr const char* kAttrSourceSha256 = "source_sha256";
inline constexpr const char* kAttrTokenizerFiles = "tokenizer_files";
inline constexpr const char* kAttrTokenizerSha256 = "tokenizer_sha256";
inline constexpr const char* kAttrDedup = "dedup";
inline constexpr const char* kAttrDedupIn = "dedup_documents_in";
inline constexpr const char* kAttrDedupExact = "dedup_exact_removed";
inline constexpr const char* kAttrDedupNear = "dedup_near_removed";
inline constexpr const char* kAttrDedupThreshold = "dedup_near_threshold";
inline constexpr const char* kAttrAddBos = "add_bos";
inline constexpr const char* kAttrAddEos = "add_eos";
inline constexpr const char* kAttrBos = "bos_token";
inline constexpr const char* kAttrTokenizerJsonSha256 = "tokenizer_json_sha256";
inline constexpr const char* kAttrParseSpecial = "parse_special";
// Input of this shard the tokenizer had no token for (written when not 0):
// bytes that became the unk token, characters dropped (no unk token).
inline constexpr const char* kAttrUnkBytes = "unk_bytes";
inline constexpr const char* kAttrDroppedChars = "dropped_chars";
// Largest vocab stored as uint16.
inline constexpr int kMaxVocab16 = 65535;
// Tokens per HDF5 chunk: 512 KiB as uint16, under HDF5's default 1 MiB chunk
// cache, small enough that a T+1 window read decompresses little extra.
inline constexpr size_t kChunkTokens = size_t(1) << 18;
}  // namespace shard_format

// What a shard says about its tokens; identical across the shards of a dataset.
struct ShardMeta {
  ShardMeta() = default;
  ShardMeta(std::string tokenizer_name, int vocab, int eot)
      : tokenizer(std::move(tokenizer_name)), vocab_size(vocab), eot_token(eot) {}
  std::string tokenizer;
  int vocab_size = 0;
  int eot_token = 0;
  // Document framing (add_bos, add_eos, bos_token) and the tokenizer.json
  // digest: `framed` when the shard records them (written by `ratchet
  // shard`); the defaults are what older shards mean.
  bool framed = false;
  bool add_bos = false, add_eos = true;
  int bos_token = -1;            // -1: none
  std::string tokenizer_sha256;  // tokenizer_json_sha256, "" when none
};

// Where a shard's contents came from (the optional attributes above). Empty
// fields are not written.
struct ShardProvenance {
  std::string tool_version;
  std::vector<std::string> source_files, source_sha256;
  std::vector<std::string> tokenizer_files, tokenizer_sha256;
  std::string dedup;  // "" = not recorded
  uint64_t dedup_documents_in = 0, dedup_exact_removed = 0, dedup_near_removed = 0;
  double dedup_near_threshold = 0;
  bool parse_special = false;  // written when true
  uint64_t unk_bytes = 0, dropped_chars = 0;  // written when not 0
};

}  // namespace ratchet

// Writes one token shard (see shard_format.h) atomically.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
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
// `provenance` (optional) adds the optional attributes of shard_format.h;
// max_token is always written. A failed write (disk full, I/O error) removes
// the temporary file and throws Error naming `path` and the cause.
void write_shard(const std::string& path, const ShardMeta& meta,
                 const std::vector<uint32_t>& tokens, const std::vector<uint64_t>& doc_offsets,
                 size_t chunk_tokens = shard_format::kChunkTokens,
                 const ShardProvenance* provenance = nullptr);

// One written shard, as reported to the caller.
struct ShardSummary {
  std::string path;
  uint64_t tokens = 0;
  uint64_t documents = 0;  // documents that start in this shard
};

// Cuts a stream of documents into shards <dir>/<prefix>_000000.h5,
// <prefix>_000001.h5, ... of exactly `shard_tokens` tokens each (the last
// one shorter). Each document is framed as meta says: meta.bos_token before
// it when meta.add_bos, meta.eot_token after it when meta.add_eos (the
// default, and the only framing of byte and gpt2); a document may
// continue from one shard into the next, so the shards concatenated in name
// order are the same stream whatever `shard_tokens` is.
//
// Writing runs on a background thread beside the caller: a shard of more than
// one chunk is compressed and stored chunk by chunk as its tokens arrive, so
// memory holds a few chunks, not the shard (shard_writer.cpp). Errors of the
// background (disk full, a token outside the vocab) surface from the next
// add_document() or from finish().
class ShardStreamWriter {
 public:
  using Callback = std::function<void(const ShardSummary&)>;
  // `on_shard` (optional) is called, on the caller's thread, after each shard
  // is written (from add_document() or finish()).
  ShardStreamWriter(std::string dir, std::string prefix, ShardMeta meta, uint64_t shard_tokens,
                    Callback on_shard = {});
  ~ShardStreamWriter();  // without finish(): stops the background, removes unfinished files
  // Appends `tokens`, framed (BOS, EOS) as meta says, as one document. `source` (optional) is
  // its input's index in the table given to set_sources().
  void add_document(const std::vector<uint32_t>& tokens, int source = -1) {
    add_document_part(tokens, source, true, true);
  }
  // A document in consecutive parts (a long one tokenized piece by piece):
  // BOS and its offset come with the first part (`first`), EOS after the
  // last (`last`); the shards are those add_document(all parts joined) makes.
  void add_document_part(const std::vector<uint32_t>& tokens, int source, bool first, bool last);
  // Provenance written into every shard; source_files / source_sha256 of
  // `base` are the table that add_document's `source` indexes, and each shard
  // records only the sources with tokens in it.
  void set_provenance(ShardProvenance base) { provenance_ = std::move(base); }
  // Input of the document part just added that had no token: bytes that
  // became unk, characters dropped; recorded in the shard it ends in.
  void add_unknown(uint64_t unk_bytes, uint64_t dropped_chars) {
    pending_unknown_[0] += unk_bytes;
    pending_unknown_[1] += dropped_chars;
  }
  // false: compress and store on the caller's thread instead of a background
  // one (`ratchet shard --threads 1` keeps to one core). Call before adding.
  void set_background(bool on) { background_ = on; }
  // Writes the last, partial shard (none if nothing is pending) and waits for
  // every shard to be on disk. Call once.
  void finish();
  const std::vector<ShardSummary>& shards() const { return written_; }
  // After a failure (an error, a signal): stops the background (a shard it
  // is renaming into place finishes first), then removes every shard this
  // writer put in place, reported or not yet. Before, a shard the background
  // had just renamed, not yet reported, stayed behind. Call at most once.
  void remove_written();
  uint64_t total_tokens() const { return total_tokens_; }

  static std::string shard_name(const std::string& prefix, size_t index);  // "train_000000.h5"

 private:
  struct OpenShard;
  struct Background;
  void append(const uint32_t* tokens, size_t n, bool starts_document, int source);
  void write_chunk();  // tokens_ (one chunk) to the background
  void flush();        // the pending shard to the background
  void report_done();  // written_ and on_shard_ for shards the background finished

  std::string dir_, prefix_;
  ShardMeta meta_;
  uint64_t shard_tokens_;
  Callback on_shard_;
  std::vector<uint32_t> tokens_;  // the pending shard's tokens not yet sent (< one chunk)
  uint64_t shard_count_ = 0;      // tokens in the pending shard
  std::vector<uint64_t> doc_offsets_;
  bool doc_start_pending_ = false;  // a document began but none of its tokens was appended yet
  std::shared_ptr<OpenShard> open_;  // the pending shard's file, once its first chunk is sent
  std::mutex done_mu_;
  std::vector<ShardSummary> done_;  // finished in the background, not yet reported
  size_t queued_ = 0;               // shards handed to the background, not yet reported
  std::vector<ShardSummary> written_;
  ShardProvenance provenance_;
  std::vector<int> shard_sources_;  // sources with tokens in the pending shard, sorted
  uint64_t pending_unknown_[2] = {0, 0};  // add_unknown() for the pending shard
  uint64_t total_tokens_ = 0;
  bool background_ = true;
  std::unique_ptr<Background> bg_;  // last: stopped first, while what its jobs use still exists
};

}  // namespace ratchet

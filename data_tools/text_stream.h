// `ratchet shard`'s inputs read in bounded chunks: the documents of a file
// (the whole file, or split by a separator line, by blank lines, or one per
// JSONL record; see text_source.h for the rules) are handed out piece by
// piece as they are read, so memory does not grow with the input. What is
// held: one read chunk (kReadChunk), plus with --separator the current line
// (the regex needs it whole) and with --jsonl-field the current record.
//
// `ratchet shard` reads every input twice (shard_pipeline.h): a first pass
// for the dedup digests, the document count (the val split needs it) and
// the sources' SHA-256, a second to tokenize. An input that is not a regular
// file (stdin, a pipe, /dev/stdin, a FIFO) cannot be read twice: the first
// pass copies it to a spool file in the output directory, read by the
// second. The second pass checks that a file still has the size and SHA-256
// of the first: a file changed or grown in between is an error, never a
// silent mix of two versions.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <regex>
#include <string>
#include <string_view>

#include "data_tools/text_source.h"

namespace ratchet {

inline constexpr size_t kReadChunk = size_t(1) << 20;

// Receives the documents of an input in order.
class DocumentEvents {
 public:
  virtual ~DocumentEvents() = default;
  // A document starts; line: 1-based line where it starts (0: the whole file).
  virtual void begin(uint64_t line) = 0;
  virtual void text(std::string_view bytes) = 0;  // its next bytes (never empty)
  virtual void end() = 0;
};

// Incremental SHA-256 (OpenSSL EVP), lower-case hex at the end.
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  void add(std::string_view bytes);
  std::string hex();  // once
  void raw(unsigned char out[32]);  // once, instead of hex()

 private:
  void* ctx_;
};

// One input as read by a pass. `name` as given ("-": stdin).
struct InputRead {
  std::string sha256;
  uint64_t bytes = 0;
};

// Reads `path` ("-": stdin) in chunks of kReadChunk and streams its
// documents to `ev`. When `spool` is given every byte read is also
// written to it. `expect` (second pass): read exactly expect->bytes and
// fail naming the file when they differ from the first pass (size or
// SHA-256) or the file grew. `sep`: the compiled --separator (or null).
InputRead stream_input(const std::string& path, const TextSourceOptions& o, const std::regex* sep,
                       DocumentEvents& ev, std::FILE* spool = nullptr,
                       const InputRead* expect = nullptr);

// Whether a path must be spooled to be read twice (stdin, pipes, devices).
bool needs_spool(const std::string& path);

// Whether the bytes seen so far are valid UTF-8 (as is_valid_utf8 of their
// concatenation), fed in any pieces.
class Utf8Check {
 public:
  void add(std::string_view s);
  bool valid() const { return valid_ && carry_.empty(); }

 private:
  bool valid_ = true;
  std::string carry_;  // an incomplete sequence at the end of the last piece
};

}  // namespace ratchet

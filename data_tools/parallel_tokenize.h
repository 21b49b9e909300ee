// Tokenizes many documents on several threads with a result that does not
// depend on the thread count: document i's ids always land in out[i], and a
// long document is cut into pieces only at places where the tokenizer's
// output provably does not change (DocumentCutter), so pieces tokenized
// apart concatenate to the whole document's ids.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json/safe_cut.h"
#include "tokenizer/tokenizer.h"

namespace ratchet {

// Pieces of about this many bytes are tokenized as separate tasks.
inline constexpr size_t kTokenizePieceBytes = size_t(1) << 18;

using TextCut = hf::TextCut;

// Where documents may be cut for a tokenizer: byte anywhere; gpt2 and a
// tokenizer.json where hf::SafeCutter proves it (src/tokenizer/json/safe_cut.h;
// for gpt2: after a '\n' between two printable ASCII characters, or between
// an ASCII letter and a space); anything else never.
// Built once per run (a tokenizer.json's table is computed here).
class DocumentCutter {
 public:
  explicit DocumentCutter(const Tokenizer& tok);
  ~DocumentCutter();
  bool can_cut() const { return kind_ != kNone; }
  // Bytes after a cut that decide whether it is one (see find).
  size_t lookahead() const;
  // The first cut at or after `from`; `complete`: text is the rest of the
  // document (else cuts within lookahead() of its end are not considered).
  bool find(std::string_view text, size_t from, bool complete, TextCut* cut) const;
  // A whole document in parts of at least `part_bytes`.
  std::vector<TextCut> cuts(std::string_view text, size_t part_bytes) const;

 private:
  enum Kind { kNone, kByte, kGpt2, kHf } kind_ = kNone;
  std::unique_ptr<hf::SafeCutter> hf_;
};

// Cut points of `text` (ascending, excluding 0 and size) into pieces of about
// `piece_bytes`; none when the tokenizer is not known to allow cutting.
std::vector<TextCut> safe_cuts(const Tokenizer& tok, const std::string& text, size_t piece_bytes);

// out[i] = tok.encode(*docs[i]), computed by `threads` OpenMP threads; long
// documents are cut where `cutter` (default: DocumentCutter(tok)) allows.
void tokenize_parallel(const Tokenizer& tok, const std::vector<const std::string*>& docs,
                       int threads, std::vector<std::vector<uint32_t>>& out,
                       size_t piece_bytes = kTokenizePieceBytes,
                       const DocumentCutter* cutter = nullptr);

}  // namespace ratchet

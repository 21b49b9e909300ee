// Where a long document may be cut so that a tokenizer.json tokenizer gives
// the same ids for the parts, tokenized apart and concatenated, as for the
// whole: `ratchet shard` tokenizes the parts of one long document on several
// threads and writes them as they come (data_tools/parallel_tokenize.h).
//
// A cut at c is accepted only when every stage is shown not to look across it:
//   - added tokens: none is matched (raw or normalized) within `window` bytes
//     of c (the window is longer than the longest added token);
//   - normalizers: on the text around c, normalize(left) + normalize(right)
//     == normalize(left + right). With a Prepend normalizer (Llama 2's "▁")
//     the next part starts one byte later (TextCut::resume = c + 1) and c
//     must be a byte the normalizer maps to the prepended string (a space):
//     the Prepend of the next part re-creates it. Replace with a regex:
//     no cuts;
//   - pieces ("piece" mode): the first pre-tokenizer is a Split with GPT-2's,
//     Llama 3's or Qwen's regex (Isolated), or ByteLevel with GPT-2's. For
//     those regexes c = [ASCII letter | space] or c = ['\n' | printable
//     ASCII, after a printable] is a piece boundary whatever came before:
//     no alternative of the regex matches a letter followed by a space, or a
//     newline followed by a non-space, and every character starts a match,
//     so no piece spans c and a match ending at c reads nothing beyond it.
//     As a guard the regex is also run from every start in the 32 bytes
//     before c, on the text with and without what follows c: the pieces must
//     agree and end at c. Later stages only split pieces further;
//   - merges ("barrier" mode, for tokenizers that hand the model a whole
//     document: Llama 2 without a pre-tokenizer, Gemma 3 whose Split on " "
//     never matches once spaces became "▁"): the two normalized characters
//     a|b on either side of c have their own tokens and no token of the
//     vocabulary or added token contains "ab", so no merge can make a symbol
//     that spans c (it would be a token containing "ab"); BPE merges on each
//     side then run as they would alone (lowest rank, leftmost, per side).
//     Needs a non-byte-level BPE without ignore_merges; Split stages must be
//     literals whose characters are not a or b. The table of such pairs is
//     built at construction over ASCII and U+2581.
// Besides, in any family without a Metaspace pre-tokenizer: a cut next to
// a byte that is by itself a non-special added token (Gemma 3's "\n", "\t"),
// when no added token holds the two bytes around the cut. The engine cuts
// the raw text at added tokens first and runs every later stage per
// segment; such a byte is always matched (nothing can skip over it) and no
// match spans the cut, so the segments are the same whole or parted.
// Anything else (Metaspace pre-tokenizer, unknown Split regexes, a window
// with invalid UTF-8) is never cut: the document is tokenized whole, as
// before. tests/unit/tokenizer/test_hf_safe_cut.cpp checks parts == whole for the four
// families on varied text.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ratchet::hf {

struct Engine;

// The part before ends at `end`; the next part starts at `resume` (== end,
// or end + 1 where a Prepend normalizer re-creates the byte at end).
struct TextCut {
  size_t end = 0, resume = 0;
  bool operator==(const TextCut& o) const { return end == o.end && resume == o.resume; }
};

// Cuts of a whole document into parts of at least `part_bytes`: the first cut
// `cutter.find` accepts at or after each part's start + part_bytes. Shared by
// every cutter with can_cut() and find(text, from, complete, &cut).
template <class Cutter>
std::vector<TextCut> cuts_every(const Cutter& cutter, std::string_view text, size_t part_bytes) {
  std::vector<TextCut> out;
  size_t pos = 0;
  while (cutter.can_cut() && part_bytes > 0 && pos + part_bytes < text.size()) {
    TextCut k;
    if (!cutter.find(text, pos + part_bytes, true, &k)) break;
    out.push_back(k);
    pos = k.resume;
  }
  return out;
}

class SafeCutter {
 public:
  explicit SafeCutter(const Engine& e);
  // "" when this tokenizer can be cut, else why not (for logs and tests).
  const std::string& no_cut_reason() const { return why_not_; }
  bool can_cut() const { return why_not_.empty() || has_single_added_; }
  // The first accepted cut at or after `from` in `text`. `complete`: the
  // text is the whole rest of the document (else the last window bytes are
  // not considered: what follows them is not known yet). False when none.
  bool find(std::string_view text, size_t from, bool complete, TextCut* cut) const;
  // Cuts of a whole document into parts of at least `part_bytes` (the first
  // accepted cut at or after each part's start + part_bytes).
  std::vector<TextCut> cuts(std::string_view text, size_t part_bytes) const;
  // Is c (0 < c < text.size()) an accepted cut? (*resume: where the next part starts)
  bool check(std::string_view text, size_t c, size_t* resume) const;
  size_t window() const { return window_; }

 private:
  bool candidate(std::string_view text, size_t c) const;
  bool added_boundary(unsigned char x, unsigned char y) const;
  bool pieces_end_at(const std::string& full, const std::string& left) const;

  const Engine& e_;
  std::string why_not_;
  enum Mode { kPieces, kBarrier } mode_ = kPieces;
  bool prepend_ = false;      // a Prepend normalizer: resume = end + 1 at a space
  size_t window_ = 128;
  std::string split_chars_;   // barrier mode: bytes of the literal Split patterns
  // barrier mode: joined_[a * 129 + b] when some token holds code point a
  // followed by b (index 128 stands for U+2581)
  std::vector<bool> joined_;
  std::vector<int> norm1_;
  std::vector<bool> added_pair_;    // [x * 256 + y]: some added token holds bytes x, y adjacent
  std::vector<bool> single_added_;  // [x]: x alone is a non-special raw added token
  bool has_single_added_ = false;  // barrier mode: ASCII byte -> its normalized index (-1: none)
};

}  // namespace ratchet::hf

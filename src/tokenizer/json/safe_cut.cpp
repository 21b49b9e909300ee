// Safe cut points of a document for a tokenizer.json tokenizer (safe_cut.h).
#include "tokenizer/json/safe_cut.h"

#include <algorithm>

#include "tokenizer/json/engine.h"
#include "tokenizer/json/fast_split.h"
#include "tokenizer/json/text.h"

namespace ratchet::hf {
namespace {

constexpr size_t kGuardBytes = 32;  // pieces mode: regex starts checked before a cut
constexpr int kMeta = 128;          // index of U+2581 in the barrier table
constexpr int kDomain = 129;

int domain_index(uint32_t cp) {
  if (cp < 128) return (int)cp;
  if (cp == 0x2581) return kMeta;
  return -1;
}

bool printable(unsigned char c) { return c >= 0x21 && c <= 0x7E; }
bool ascii_letter(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

// The first match of `p` in s[pos:] as offsets into s; false when none.
bool first_match(const Pattern& p, const std::string& s, size_t pos, std::pair<size_t, size_t>* m) {
  std::vector<std::pair<size_t, size_t>> all;
  p.find_all(std::string_view(s).substr(pos), &all);
  if (all.empty()) return false;
  *m = {all[0].first + pos, all[0].second + pos};
  return true;
}

uint32_t first_cp(std::string_view s) {
  uint32_t cp = 0;
  if (!s.empty()) next_cp(s, 0, &cp);
  return cp;
}

uint32_t last_cp(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--;
  if (i > 0) i--;
  uint32_t cp = 0;
  if (!s.empty()) next_cp(s, i, &cp);
  return cp;
}

bool known_regex(const PreTokenizer& p) {
  if (!p.pattern.regex) return false;
  const std::string& s = p.pattern.regex->pattern();
  return s == kLlama3Regex || s == kQwenRegex || s == gpt2_regex();
}

}  // namespace

SafeCutter::SafeCutter(const Engine& e) : e_(e) {
  // Added-token boundaries (any family without Metaspace, whose prefix
  // depends on where a segment is): byte pairs inside raw added tokens, and
  // bytes that are a non-special raw added token by themselves.
  bool metaspace = false;
  for (const PreTokenizer& p : e.pre_tokenizers) metaspace |= p.kind == PreTokenizer::kMetaspace;
  added_pair_.assign(256 * 256, false);
  single_added_.assign(256, false);
  for (const AddedToken& a : e.added) {
    if (a.normalized) continue;  // matched in normalized segments, not the raw text
    for (size_t i = 0; i + 1 < a.content.size(); i++)
      added_pair_[(size_t)(unsigned char)a.content[i] * 256 + (unsigned char)a.content[i + 1]] = true;
    if (!metaspace && !a.special && a.content.size() == 1 && (unsigned char)a.content[0] < 0x80) {
      single_added_[(unsigned char)a.content[0]] = true;
      has_single_added_ = true;
    }
  }
  // A special token is matched but stays text (without --parse-special): a
  // byte inside one may be swallowed by it instead of cutting the segment.
  for (const AddedToken& a : e.added)
    if (a.special)
      for (char ch : a.content) single_added_[(unsigned char)ch] = false;
  has_single_added_ = std::find(single_added_.begin(), single_added_.end(), true) != single_added_.end();
  for (const AddedToken& a : e.added)  // a normalized token may also span a raw boundary
    if (a.normalized)
      for (size_t i = 0; i + 1 < a.content.size(); i++)
        added_pair_[(size_t)(unsigned char)a.content[i] * 256 + (unsigned char)a.content[i + 1]] = true;
  for (const Normalizer& n : e.normalizers) {
    if (n.kind == Normalizer::kReplace && n.pattern.regex) {
      why_not_ = "a Replace normalizer with a regex";
      return;
    }
    if (n.kind == Normalizer::kPrepend) prepend_ = true;
  }
  size_t longest = 0;
  for (const AddedToken& a : e.added) longest = std::max({longest, a.content.size(), a.match.size()});
  window_ = std::max<size_t>(128, longest + 16);

  const std::vector<PreTokenizer>& pts = e.pre_tokenizers;
  const bool split_first =
      !pts.empty() && known_regex(pts[0]) &&
      ((pts[0].kind == PreTokenizer::kSplit && pts[0].behavior == PreTokenizer::kIsolated &&
        !pts[0].invert) ||
       (pts[0].kind == PreTokenizer::kByteLevel && pts[0].use_regex && !pts[0].add_prefix_space));
  if (split_first) {
    mode_ = kPieces;
    for (size_t i = 1; i < pts.size(); i++) {
      const PreTokenizer& p = pts[i];
      // Later stages split each piece on its own; only a prefix added to
      // every piece (Metaspace, ByteLevel's add_prefix_space) would differ.
      if (p.kind == PreTokenizer::kMetaspace ||
          (p.kind == PreTokenizer::kByteLevel && p.add_prefix_space)) {
        why_not_ = "a Metaspace or prefix-space pre-tokenizer after the Split";
        return;
      }
    }
    return;
  }
  mode_ = kBarrier;
  for (const PreTokenizer& p : pts) {
    if (p.kind != PreTokenizer::kSplit || p.pattern.regex || p.invert) {
      why_not_ = "a pre-tokenizer other than a known Split regex or literal Splits";
      return;
    }
    split_chars_ += p.pattern.literal;
  }
  if (e.model.byte_level) {
    why_not_ = "a byte-level model without a known splitting regex";
    return;
  }
  if (e.model.ignore_merges) {
    why_not_ = "ignore_merges without a splitting pre-tokenizer";
    return;
  }
  joined_.assign((size_t)kDomain * kDomain, false);
  auto mark = [&](std::string_view t) {
    int prev = -1;
    for (size_t i = 0; i < t.size();) {
      uint32_t cp;
      i += (size_t)next_cp(t, i, &cp);
      const int cur = domain_index(cp);
      if (prev >= 0 && cur >= 0) joined_[(size_t)prev * kDomain + (size_t)cur] = true;
      prev = cur;
    }
  };
  for (const std::string& t : e.model.token_of) mark(t);
  for (const AddedToken& a : e.added) {
    mark(a.content);
    mark(a.match);
  }
  // Each ASCII byte as the normalizers see it alone (the Prepend left out):
  // a quick filter before the exact check of a window.
  norm1_.assign(128, -1);
  for (int b = 0; b < 128; b++) {
    std::string s(1, (char)b);
    normalize(e.normalizers, s);
    if (prepend_) {
      size_t n = 0;
      for (const Normalizer& nz : e.normalizers)
        if (nz.kind == Normalizer::kPrepend) n += nz.content.size();
      s = s.size() >= n ? s.substr(n) : std::string();
    }
    uint32_t cp;
    if (!s.empty() && (size_t)next_cp(s, 0, &cp) == s.size()) norm1_[(size_t)b] = domain_index(cp);
  }
}

bool SafeCutter::added_boundary(unsigned char x, unsigned char y) const {
  return (single_added_[x] || single_added_[y]) && !added_pair_[(size_t)x * 256 + y];
}

bool SafeCutter::candidate(std::string_view text, size_t c) const {
  const unsigned char x = (unsigned char)text[c - 1], y = (unsigned char)text[c];
  if (x >= 0x80 || y >= 0x80) return false;
  if (added_boundary(x, y)) return true;
  if (!why_not_.empty()) return false;
  if (prepend_ && y != ' ') return false;
  if (mode_ == kPieces)
    return (ascii_letter(x) && y == ' ') ||
           (x == '\n' && printable(y) && c >= 2 && printable((unsigned char)text[c - 2]));
  const int a = norm1_[x], b = norm1_[y];
  return a >= 0 && b >= 0 && !joined_[(size_t)a * kDomain + (size_t)b];
}

bool SafeCutter::pieces_end_at(const std::string& full, const std::string& left) const {
  const Pattern& p = e_.pre_tokenizers[0].pattern;
  const size_t c = left.size();
  for (size_t q = c > kGuardBytes ? c - kGuardBytes : 0; q < c; q++) {
    if (((unsigned char)full[q] & 0xC0) == 0x80) continue;  // not a character start
    size_t pos = q;
    while (pos < c) {
      std::pair<size_t, size_t> mf, ml;
      const bool hf = first_match(p, full, pos, &mf);
      const bool hl = first_match(p, left, pos, &ml);
      if (!hf || mf.first >= c) return false;  // a gap or a match would span c
      if (!hl || mf != ml) return false;       // what follows c changed the match
      if (mf.second > c || mf.second <= pos) return false;
      pos = mf.second;
    }
  }
  return true;
}

bool SafeCutter::check(std::string_view text, size_t c, size_t* resume) const {
  if (!can_cut() || c == 0 || c >= text.size() || !candidate(text, c)) return false;
  if (added_boundary((unsigned char)text[c - 1], (unsigned char)text[c])) {
    // A non-special added token of one byte is matched wherever it stands,
    // and no added token spans c: the engine's segments end and start at c
    // whole or parted, and every later stage runs per segment.
    *resume = c;
    return true;
  }
  if (!why_not_.empty()) return false;
  const size_t skip = prepend_ ? 1 : 0;
  if (c + skip >= text.size()) return false;
  size_t a = c > window_ ? c - window_ : 0;
  while (a > 0 && ((unsigned char)text[a] & 0xC0) == 0x80) a++;
  size_t b = std::min(text.size(), c + window_);
  while (b < text.size() && ((unsigned char)text[b] & 0xC0) == 0x80) b--;
  const std::string_view F = text.substr(a, b - a);
  std::string tmp;
  if (escape_invalid(F, &tmp)) return false;  // invalid UTF-8 nearby: never cut there
  size_t s, t;
  const AddedToken* tok;
  if (!e_.raw_added.empty() && e_.raw_added.find(F, 0, &s, &t, &tok)) return false;
  std::string nF(F), nL(text.substr(a, c - a)), nR(text.substr(c + skip, b - c - skip));
  if (!e_.normalizers.empty()) {
    normalize(e_.normalizers, nF);
    normalize(e_.normalizers, nL);
    normalize(e_.normalizers, nR);
    if (nL.size() + nR.size() != nF.size() || nF.compare(0, nL.size(), nL) != 0 ||
        nF.compare(nL.size(), nR.size(), nR) != 0)
      return false;
  }
  if (!e_.norm_added.empty() && e_.norm_added.find(nF, 0, &s, &t, &tok)) return false;
  if (nL.empty() || nR.empty()) return false;
  if (mode_ == kPieces) {
    if (!pieces_end_at(nF, nL)) return false;
  } else {
    const uint32_t x = last_cp(nL), y = first_cp(nR);
    const int ix = domain_index(x), iy = domain_index(y);
    if (ix < 0 || iy < 0 || joined_[(size_t)ix * kDomain + (size_t)iy]) return false;
    // Both must be symbols of their own (no unknown or byte-fallback pieces).
    if (x >= e_.model.bmp_id.size() || y >= e_.model.bmp_id.size() ||
        e_.model.bmp_id[x] == BpeModel::kNone || e_.model.bmp_id[y] == BpeModel::kNone)
      return false;
    std::string bx, by;
    append_utf8(bx, x);
    append_utf8(by, y);
    if (split_chars_.find(bx) != std::string::npos || split_chars_.find(by) != std::string::npos)
      return false;
  }
  *resume = c + skip;
  return true;
}

bool SafeCutter::find(std::string_view text, size_t from, bool complete, TextCut* cut) const {
  if (!can_cut()) return false;
  const size_t limit = complete ? text.size() : (text.size() > window_ + 1 ? text.size() - window_ - 1 : 0);
  for (size_t c = std::max<size_t>(from, 1); c < limit; c++) {
    size_t r;
    if (candidate(text, c) && check(text, c, &r)) {
      *cut = {c, r};
      return true;
    }
  }
  return false;
}

std::vector<TextCut> SafeCutter::cuts(std::string_view text, size_t part_bytes) const {
  return cuts_every(*this, text, part_bytes);
}

}  // namespace ratchet::hf

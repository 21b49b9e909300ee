// Pre-tokenizers of the tokenizer.json engine (see engine.h), following the
// Rust library's pre_tokenizers/ and NormalizedString::split: a stage maps
// every piece to sub-pieces; empty pieces are dropped.

#include "tokenizer/gpt2_pretokenize.h"
#include "tokenizer/json/engine.h"
#include "tokenizer/json/fast_split.h"
#include "tokenizer/json/text.h"

namespace ratchet::hf {
namespace {

struct Span {
  size_t a, b;
  bool match;
};

// NormalizedString::split's SplitDelimiterBehavior over the matches/non-matches
// that cover the piece in order. Appends the kept [a, b) ranges.
void apply_behavior(const std::vector<Span>& spans, PreTokenizer::Behavior behavior,
                    std::vector<std::pair<size_t, size_t>>* out) {
  out->clear();
  switch (behavior) {
    case PreTokenizer::kRemoved:
      for (const Span& s : spans)
        if (!s.match) out->emplace_back(s.a, s.b);
      break;
    case PreTokenizer::kIsolated:
      for (const Span& s : spans) out->emplace_back(s.a, s.b);
      break;
    case PreTokenizer::kMergedWithPrevious: {
      bool prev = false;
      for (const Span& s : spans) {
        if (s.match && !prev && !out->empty())
          out->back().second = s.b;
        else
          out->emplace_back(s.a, s.b);
        prev = s.match;
      }
      break;
    }
    case PreTokenizer::kMergedWithNext: {
      bool prev = false;
      std::vector<std::pair<size_t, size_t>> rev;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.match && !prev && !rev.empty())
          rev.back().first = s.a;
        else
          rev.emplace_back(s.a, s.b);
        prev = s.match;
      }
      out->assign(rev.rbegin(), rev.rend());
      break;
    }
    case PreTokenizer::kContiguous: {
      bool prev = false;
      for (const Span& s : spans) {
        if (s.match == prev && !out->empty())
          out->back().second = s.b;
        else
          out->emplace_back(s.a, s.b);
        prev = s.match;
      }
      break;
    }
  }
}

// Matches [a, b) of a pattern -> the spans that cover [0, n), as the Rust
// library's find_matches builds them.
void cover(const std::vector<std::pair<size_t, size_t>>& m, size_t n, bool invert,
           std::vector<Span>* spans) {
  spans->clear();
  size_t prev = 0;
  for (auto [a, b] : m) {
    if (prev != a) spans->push_back({prev, a, invert});
    spans->push_back({a, b, !invert});
    prev = b;
  }
  if (prev != n) spans->push_back({prev, n, invert});
}

// Rust's char::is_numeric: Nd, Nl, No, i.e. \p{N}, in the Unicode version of
// the pre-tokenizer tables (that of Rust's own, 16.0).
bool is_numeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  if (is_escape(cp)) return false;
  return char_class(cp) == CharClass::kNumber;
}

// Emits `piece` cut at the ranges; the first range inherits `origin` when it
// starts at 0.
void emit(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& ranges,
          std::vector<Piece>* out) {
  for (auto [a, b] : ranges)
    if (b > a) out->push_back({piece.s.substr(a, b - a), piece.origin && a == 0});
}

void gpt2_split(const Piece& p, std::vector<Piece>* out) {
  size_t off = 0;
  for (std::string_view v : gpt2_pretokenize(p.s)) {
    out->push_back({v, p.origin && off == 0});
    off += v.size();
  }
}

std::string_view own(std::vector<std::unique_ptr<std::string>>& arena, std::string s) {
  arena.push_back(std::make_unique<std::string>(std::move(s)));
  return *arena.back();
}

// ByteLevel's byte mapping, done on raw bytes: escapes become their byte.
std::string_view unescape(std::vector<std::unique_ptr<std::string>>& arena, std::string_view s) {
  if (!has_escape(s)) return s;
  std::string r;
  r.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    int n = next_cp(s, i, &cp);
    if (is_escape(cp))
      r.push_back((char)escaped_byte(cp));
    else
      r.append(s.data() + i, (size_t)n);
    i += (size_t)n;
  }
  return own(arena, std::move(r));
}

}  // namespace

void pre_tokenize(const std::vector<PreTokenizer>& pts, std::string_view segment, bool origin,
                  bool escapes, std::vector<std::unique_ptr<std::string>>& arena,
                  std::vector<Piece>* out) {
  std::vector<Piece> cur, next;
  out->clear();
  if (segment.empty()) return;
  cur.push_back({segment, origin});
  std::vector<std::pair<size_t, size_t>> m, ranges;
  std::vector<Span> spans;
  std::vector<std::string_view> views;
  for (const PreTokenizer& pt : pts) {
    next.clear();
    for (const Piece& p : cur) {
      switch (pt.kind) {
        case PreTokenizer::kSplit:
          if (pt.gpt2_fast) {
            gpt2_split(p, &next);
            break;
          }
          if (pt.llama3_fast) {
            llama3_split(p.s, pt.llama3_fast, &views);
            size_t off = 0;
            for (std::string_view v : views) {
              next.push_back({v, p.origin && off == 0});
              off += v.size();
            }
            break;
          }
          pt.pattern.find_all(p.s, &m);
          cover(m, p.s.size(), pt.invert, &spans);
          apply_behavior(spans, pt.behavior, &ranges);
          emit(p, ranges, &next);
          break;
        case PreTokenizer::kByteLevel: {
          Piece q = p;
          if (pt.add_prefix_space && q.s[0] != ' ') q.s = own(arena, " " + std::string(q.s));
          if (!pt.use_regex) {
            next.push_back(q);
          } else if (pt.gpt2_fast) {
            gpt2_split(q, &next);
          } else {
            pt.pattern.find_all(q.s, &m);
            cover(m, q.s.size(), false, &spans);
            apply_behavior(spans, PreTokenizer::kIsolated, &ranges);
            emit(q, ranges, &next);
          }
          break;
        }
        case PreTokenizer::kMetaspace: {
          std::string s;
          s.reserve(p.s.size() + 8);
          for (char c : p.s) {
            if (c == ' ')
              s += pt.replacement;
            else
              s.push_back(c);
          }
          const bool starts = s.compare(0, pt.replacement.size(), pt.replacement) == 0;
          if (!starts && (pt.prepend == PreTokenizer::kAlways ||
                          (pt.prepend == PreTokenizer::kFirst && p.origin)))
            s.insert(0, pt.replacement);
          Piece q{own(arena, std::move(s)), p.origin};
          if (!pt.split) {
            next.push_back(q);
            break;
          }
          m.clear();
          for (size_t pos = q.s.find(pt.replacement); pos != std::string_view::npos;
               pos = q.s.find(pt.replacement, pos + pt.replacement.size()))
            m.emplace_back(pos, pos + pt.replacement.size());
          cover(m, q.s.size(), false, &spans);
          apply_behavior(spans, PreTokenizer::kMergedWithNext, &ranges);
          emit(q, ranges, &next);
          break;
        }
        case PreTokenizer::kDigits: {
          spans.clear();
          size_t last = 0;
          for (size_t i = 0; i < p.s.size();) {
            uint32_t cp;
            int n = next_cp(p.s, i, &cp);
            if (is_numeric(cp)) {
              if (last < i) spans.push_back({last, i, false});
              spans.push_back({i, i + (size_t)n, true});
              last = i + (size_t)n;
            }
            i += (size_t)n;
          }
          if (last < p.s.size()) spans.push_back({last, p.s.size(), false});
          apply_behavior(spans,
                         pt.individual_digits ? PreTokenizer::kIsolated : PreTokenizer::kContiguous,
                         &ranges);
          emit(p, ranges, &next);
          break;
        }
      }
    }
    std::swap(cur, next);
  }
  if (escapes && !pts.empty() && pts.back().kind == PreTokenizer::kByteLevel)
    for (Piece& p : cur) p.s = unescape(arena, p.s);
  *out = std::move(cur);
}

}  // namespace ratchet::hf

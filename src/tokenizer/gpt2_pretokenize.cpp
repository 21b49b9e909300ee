#include "tokenizer/gpt2_pretokenize.h"

#include <algorithm>
#include <array>

namespace ratchet {
namespace {

struct Range {
  uint32_t first, last;
  uint8_t cls;
};
constexpr Range kRanges[] = {
#include "tokenizer/unicode_classes.inc"
};

// ASCII fast path.
constexpr std::array<CharClass, 128> make_ascii() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; c++) {
    CharClass k = CharClass::kOther;
    for (const Range& r : kRanges)
      if ((uint32_t)c >= r.first && (uint32_t)c <= r.last) k = (CharClass)r.cls;
    t[c] = k;
  }
  return t;
}
const std::array<CharClass, 128> kAscii = make_ascii();

constexpr uint32_t kInvalid = 0xFFFFFFFFu;

}  // namespace

CharClass char_class(uint32_t cp) {
  if (cp < 128) return kAscii[cp];
  if (cp == kInvalid) return CharClass::kOther;
  auto it = std::upper_bound(std::begin(kRanges), std::end(kRanges), cp,
                             [](uint32_t v, const Range& r) { return v < r.first; });
  if (it == std::begin(kRanges)) return CharClass::kOther;
  --it;
  return cp <= it->last ? (CharClass)it->cls : CharClass::kOther;
}

int utf8_next(std::string_view s, size_t i, uint32_t* cp) {
  const unsigned char c = (unsigned char)s[i];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int n;
  uint32_t v, min;
  if ((c & 0xE0) == 0xC0) n = 2, v = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) n = 3, v = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) n = 4, v = c & 0x07, min = 0x10000;
  else {
    *cp = kInvalid;
    return 1;
  }
  if (i + n > s.size()) {
    *cp = kInvalid;
    return 1;
  }
  for (int k = 1; k < n; k++) {
    unsigned char d = (unsigned char)s[i + k];
    if ((d & 0xC0) != 0x80) {
      *cp = kInvalid;
      return 1;
    }
    v = (v << 6) | (d & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
    *cp = kInvalid;
    return 1;
  }
  *cp = v;
  return n;
}

// Decodes up to kBatch more characters; false at the end of the text.
bool Gpt2Splitter::decode_more() {
  if (pos_ >= text_.size()) return false;
  const size_t old = c_.size();
  c_.resize(old + kBatch);
  Ch* out = c_.data() + old;
  size_t k = 0;
  while (k < kBatch && pos_ < text_.size()) {
    const unsigned char b = (unsigned char)text_[pos_];
    if (b < 0x80) {
      out[k++] = {(uint32_t)pos_, kAscii[b], (char)b};
      pos_++;
      continue;
    }
    uint32_t cp;
    const int n = utf8_next(text_, pos_, &cp);
    // byte: the character when it is one byte (an invalid byte is one too)
    out[k++] = {(uint32_t)pos_, char_class(cp), n == 1 ? (char)b : '\0'};
    pos_ += (size_t)n;
  }
  c_.resize(old + k);
  return true;
}

bool Gpt2Splitter::next(std::string_view* piece) {
  if (i_ - base_ >= kBatch * 4) {  // forget the characters already emitted
    c_.erase(c_.begin(), c_.begin() + (long)(i_ - base_));
    base_ = i_;
  }
  const size_t i = i_;
  if (!has(i)) return false;
  auto cls = [&](size_t j) { return c_[j - base_].cls; };
  auto byte_at = [&](size_t j) { return has(j) ? c_[j - base_].byte : '\0'; };
  auto run_end = [&](size_t j, CharClass c) {
    while (has(j) && cls(j) == c) j++;
    return j;
  };
  size_t e = 0;
  const char c = byte_at(i);
  // 's|'t|'re|'ve|'m|'ll|'d
  if (c == '\'' && has(i + 1)) {
    char c1 = byte_at(i + 1), c2 = byte_at(i + 2);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') e = i + 2;
    else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
      e = i + 3;
  }
  if (!e) {
    // ` ?X+` for X = letter, number, other: the optional space is U+0020 only.
    const size_t j = (c == ' ' && has(i + 1)) ? i + 1 : i;
    const CharClass k = cls(j);
    if (k == CharClass::kLetter || k == CharClass::kNumber || k == CharClass::kOther) {
      e = run_end(j, k);
    } else {
      // Here cls(i) is space (j == i, or j == i+1 and cls(j) is space).
      // \s+(?!\S): the whitespace run, minus its last character when a
      // non-space follows; else \s+ (a single space before a non-space).
      e = run_end(i, CharClass::kSpace);
      if (has(e) && e - i >= 2) e--;
    }
  }
  const size_t a = c_[i - base_].off;
  const size_t b = has(e) ? c_[e - base_].off : text_.size();
  *piece = text_.substr(a, b - a);
  i_ = e;
  return true;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  Gpt2Splitter sp(text);
  std::string_view p;
  while (sp.next(&p)) out.push_back(p);
  return out;
}

}  // namespace ratchet

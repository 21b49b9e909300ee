#include "data/gpt2_pretokenize.h"

#include <algorithm>
#include <array>

namespace ratchet {
namespace {

struct Range {
  uint32_t first, last;
  uint8_t cls;
};
constexpr Range kRanges[] = {
#include "data/unicode_classes.inc"
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

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  // Decode once: byte offset and class of every code point (+ a sentinel).
  std::vector<uint32_t> off;
  std::vector<CharClass> cls;
  off.reserve(text.size() + 1);
  cls.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    int n = utf8_next(text, i, &cp);
    off.push_back((uint32_t)i);
    cls.push_back(char_class(cp));
    i += n;
  }
  const size_t n = cls.size();
  off.push_back((uint32_t)text.size());

  std::vector<std::string_view> out;
  auto emit = [&](size_t a, size_t b) { out.push_back(text.substr(off[a], off[b] - off[a])); };
  auto run_end = [&](size_t j, CharClass c) {
    while (j < n && cls[j] == c) j++;
    return j;
  };
  auto other_end = [&](size_t j) {  // [^\s\p{L}\p{N}]+
    while (j < n && cls[j] == CharClass::kOther) j++;
    return j;
  };
  auto byte_at = [&](size_t j) { return off[j + 1] - off[j] == 1 ? text[off[j]] : '\0'; };

  size_t i = 0;
  while (i < n) {
    const char c = byte_at(i);
    // 's|'t|'re|'ve|'m|'ll|'d
    if (c == '\'' && i + 1 < n) {
      char c1 = byte_at(i + 1), c2 = i + 2 < n ? byte_at(i + 2) : '\0';
      size_t len = 0;
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') len = 2;
      else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        len = 3;
      if (len) {
        emit(i, i + len);
        i += len;
        continue;
      }
    }
    // ` ?X+` for X = letter, number, other: the optional space is U+0020 only.
    size_t j = (c == ' ' && i + 1 < n) ? i + 1 : i;
    const CharClass k = cls[j];
    if (k == CharClass::kLetter || k == CharClass::kNumber) {
      size_t e = run_end(j, k);
      emit(i, e);
      i = e;
      continue;
    }
    if (k == CharClass::kOther) {
      size_t e = other_end(j);
      emit(i, e);
      i = e;
      continue;
    }
    // Here cls[i] is space (j == i, or j == i+1 and cls[j] is space).
    // \s+(?!\S): the whitespace run, minus its last character when a
    // non-space follows; else \s+ (a single space before a non-space).
    size_t e = run_end(i, CharClass::kSpace);
    if (e < n && e - i >= 2) e--;
    emit(i, e);
    i = e;
  }
  return out;
}

}  // namespace ratchet

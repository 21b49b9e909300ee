#include "tokenizer/json/fast_split.h"

#include <array>
#include <cstdint>

#include "tokenizer/gpt2_pretokenize.h"
#include "tokenizer/json/text.h"

namespace ratchet::hf {

const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwenRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

bool nl(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// (?i:...) letters: ASCII both cases; 's' also matches U+017F (long s), which
// case-folds to it.
bool ci(uint32_t cp, char lower) {
  if (cp == (uint32_t)lower || cp == (uint32_t)(lower - 32)) return true;
  return lower == 's' && cp == 0x17F;
}

}  // namespace

Llama3Splitter::Llama3Splitter(std::string_view text, int max_digits)
    : text_(text), max_digits_((size_t)max_digits) {
  c_.reserve(kBatch * 2);
}

// Decodes up to kBatch more characters; false at the end of the text.
bool Llama3Splitter::decode_more() {
  if (pos_ >= text_.size()) return false;
  static const std::array<CharClass, 128> ascii = [] {  // char_class() of ASCII, inlined
    std::array<CharClass, 128> t{};
    for (uint32_t c = 0; c < 128; c++) t[c] = char_class(c);
    return t;
  }();
  const size_t old = c_.size();
  c_.resize(old + kBatch);
  Ch* out = c_.data() + old;
  size_t k = 0;
  while (k < kBatch && pos_ < text_.size()) {
    const unsigned char b = (unsigned char)text_[pos_];
    if (b < 0x80) {
      out[k++] = {b, (uint32_t)pos_, ascii[b]};
      pos_++;
      continue;
    }
    uint32_t cp;
    const int n = next_cp(text_, pos_, &cp);
    out[k++] = {cp, (uint32_t)pos_, is_escape(cp) ? CharClass::kOther : char_class(cp)};
    pos_ += (size_t)n;
  }
  c_.resize(old + k);
  return true;
}

bool Llama3Splitter::next(std::string_view* piece) {
  // Forget the characters before the match (they are all emitted).
  if (i_ - base_ >= kBatch * 4) {
    c_.erase(c_.begin(), c_.begin() + (long)(i_ - base_));
    base_ = i_;
  }
  const size_t i = i_;
  if (!has(i)) return false;
  auto is = [&](size_t j, CharClass k) { return has(j) && c_[j - base_].cls == k; };
  auto other = [&](size_t j) { return is(j, CharClass::kOther); };
  auto cp = [&](size_t j) { return has(j) ? c_[j - base_].cp : 0u; };
  size_t e = 0;  // end (in chars) of the match at i
  // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (cp(i) == '\'' && has(i + 1)) {
    uint32_t a = cp(i + 1), b = cp(i + 2);
    if (ci(a, 's') || ci(a, 't') || ci(a, 'm') || ci(a, 'd'))
      e = i + 2;
    else if ((ci(a, 'r') && ci(b, 'e')) || (ci(a, 'v') && ci(b, 'e')) || (ci(a, 'l') && ci(b, 'l')))
      e = i + 3;
  }
  // 2. [^\r\n\p{L}\p{N}]?\p{L}+
  if (!e) {
    size_t j = i;
    if (!is(j, CharClass::kLetter) && !is(j, CharClass::kNumber) && !nl(cp(j)) &&
        is(j + 1, CharClass::kLetter))
      j++;
    if (is(j, CharClass::kLetter)) {
      while (is(j, CharClass::kLetter)) j++;
      e = j;
    }
  }
  // 3. \p{N}{1,max}
  if (!e && is(i, CharClass::kNumber)) {
    size_t j = i;
    while (j - i < max_digits_ && is(j, CharClass::kNumber)) j++;
    e = j;
  }
  // 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  if (!e) {
    size_t j = i;
    if (cp(j) == ' ' && other(j + 1)) j++;
    if (other(j)) {
      while (other(j)) j++;
      while (has(j) && nl(cp(j))) j++;
      e = j;
    }
  }
  if (!e) {
    // c[i] is white space: its run is [i, w).
    size_t w = i;
    while (is(w, CharClass::kSpace)) w++;
    // 5. \s*[\r\n]+ : up to just past the run's last \r or \n.
    size_t last = SIZE_MAX;
    for (size_t j = w; j-- > i;)
      if (nl(cp(j))) {
        last = j;
        break;
      }
    if (last != SIZE_MAX) {
      e = last + 1;
    } else if (!has(w) || w - i == 1) {
      // 6/7. \s+(?!\S) takes the whole run at the end of the text; a run of
      // one before a non-space can only be \s+.
      e = w;
    } else {
      e = w - 1;  // 6. \s+(?!\S): all but the last, which goes with what follows
    }
  }
  const size_t a = c_[i - base_].off;
  const size_t b = has(e) ? c_[e - base_].off : text_.size();
  *piece = text_.substr(a, b - a);
  i_ = e;
  return true;
}

void llama3_split(std::string_view text, int max_digits, std::vector<std::string_view>* out) {
  out->clear();
  Llama3Splitter sp(text, max_digits);
  std::string_view p;
  while (sp.next(&p)) out->push_back(p);
}

}  // namespace ratchet::hf

#include "data/hf/fast_split.h"

#include <cstdint>

#include "data/gpt2_pretokenize.h"
#include "data/hf/text.h"

namespace ratchet::hf {

const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwenRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

struct Ch {
  uint32_t cp;
  uint32_t off;  // byte offset
  CharClass cls;
};

bool nl(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// (?i:...) letters: ASCII both cases; 's' also matches U+017F (long s), which
// case-folds to it.
bool ci(uint32_t cp, char lower) {
  if (cp == (uint32_t)lower || cp == (uint32_t)(lower - 32)) return true;
  return lower == 's' && cp == 0x17F;
}

}  // namespace

void llama3_split(std::string_view text, int max_digits, std::vector<std::string_view>* out) {
  out->clear();
  std::vector<Ch> c;
  c.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    int n = next_cp(text, i, &cp);
    CharClass k = is_escape(cp) ? CharClass::kOther : char_class(cp);
    c.push_back({cp, (uint32_t)i, k});
    i += (size_t)n;
  }
  const size_t n = c.size();
  c.push_back({0, (uint32_t)text.size(), CharClass::kOther});  // sentinel
  auto is = [&](size_t j, CharClass k) { return j < n && c[j].cls == k; };
  auto other = [&](size_t j) { return j < n && c[j].cls == CharClass::kOther; };
  size_t i = 0;
  while (i < n) {
    size_t e = 0;  // end (in chars) of the match at i
    // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c[i].cp == '\'' && i + 1 < n) {
      uint32_t a = c[i + 1].cp, b = i + 2 < n ? c[i + 2].cp : 0;
      if (ci(a, 's') || ci(a, 't') || ci(a, 'm') || ci(a, 'd'))
        e = i + 2;
      else if ((ci(a, 'r') && ci(b, 'e')) || (ci(a, 'v') && ci(b, 'e')) ||
               (ci(a, 'l') && ci(b, 'l')))
        e = i + 3;
    }
    // 2. [^\r\n\p{L}\p{N}]?\p{L}+
    if (!e) {
      size_t j = i;
      if (!is(j, CharClass::kLetter) && !is(j, CharClass::kNumber) && !nl(c[j].cp) &&
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
      while (j < n && j - i < (size_t)max_digits && is(j, CharClass::kNumber)) j++;
      e = j;
    }
    // 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    if (!e) {
      size_t j = i;
      if (c[j].cp == ' ' && other(j + 1)) j++;
      if (other(j)) {
        while (other(j)) j++;
        while (j < n && nl(c[j].cp)) j++;
        e = j;
      }
    }
    if (!e) {
      // c[i] is white space: its run is [i, w).
      size_t w = i;
      while (is(w, CharClass::kSpace)) w++;
      // 5. \s*[\r\n]+ : up to just past the run's last \r or \n.
      size_t last = n;
      for (size_t j = w; j-- > i;)
        if (nl(c[j].cp)) {
          last = j;
          break;
        }
      if (last != n) {
        e = last + 1;
      } else if (w == n || w - i == 1) {
        // 6/7. \s+(?!\S) takes the whole run at the end of the text; a run of
        // one before a non-space can only be \s+.
        e = w;
      } else {
        e = w - 1;  // 6. \s+(?!\S): all but the last, which goes with what follows
      }
    }
    out->push_back(text.substr(c[i].off, c[e].off - c[i].off));
    i = e;
  }
}

}  // namespace ratchet::hf

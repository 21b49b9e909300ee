// Normalizers of the tokenizer.json engine (see engine.h): Unicode forms
// from utf8proc, limited to the code points of Hugging Face's Unicode 9.0
// normalization data (unicode_form below), the rest string operations with the Rust library's rules.
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "tokenizer/json/engine.h"
#include "tokenizer/json/text.h"
#include "tokenizer/unicode_tables.h"

namespace ratchet::hf {
namespace {

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

// One Unicode normalization form over text free of escapes.
void utf8proc_form(std::string_view run, int options, std::string& out) {
  if (is_ascii(run)) {  // every form leaves ASCII as it is
    out.append(run);
    return;
  }
  utf8proc_uint8_t* dst = nullptr;
  utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t*)run.data(), (utf8proc_ssize_t)run.size(),
                                    &dst, (utf8proc_option_t)(options | UTF8PROC_STABLE));
  if (n < 0) fail("utf8proc: cannot normalize text (", utf8proc_errmsg(n), ")");
  out.append((const char*)dst, (size_t)n);
  std::free(dst);
}

// The form applied to the runs between the code points it must leave alone:
// escapes (an escape reads as U+FFFD, a starter that composes with nothing),
// and the code points that Hugging Face's normalization data (Unicode 9.0,
// unicode_tables.h) does not assign. Its crate gives those no decomposition,
// combining class 0 and no composition, so each is a starter that composes
// with nothing: marks do not reorder across it, and nothing composes across
// it or with it; cutting the text there and normalizing the runs apart is
// that exactly. (utf8proc's newer data would otherwise reorder a mark added
// in Unicode 10.0-15.0, or compose U+11935 U+11930 into U+11938.)
void unicode_form(std::string& s, int options) {
  if (is_ascii(s)) return;
  std::string out;
  out.reserve(s.size() + 8);
  size_t run = 0;
  for (size_t i = 0; i < s.size();) {
    if ((unsigned char)s[i] < 0x80) {
      i++;
      continue;
    }
    uint32_t cp;
    int n = next_cp(s, i, &cp);
    if (is_escape(cp) || !assigned_for_normalization(cp)) {
      utf8proc_form(std::string_view(s).substr(run, i - run), options, out);
      out.append(s, i, (size_t)n);
      run = i + (size_t)n;
    }
    i += (size_t)n;
  }
  utf8proc_form(std::string_view(s).substr(run), options, out);
  s = std::move(out);
}

// Rust's char::to_lowercase, per code point (the Rust library lowercases
// char by char, so no final-sigma rule): the simple mapping of
// UnicodeData.txt, which utf8proc_tolower gives, plus SpecialCasing.txt's one
// unconditional lowercase expansion, U+0130 -> U+0069 U+0307.
void lowercase(std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    int n = next_cp(s, i, &cp);
    if (cp < 0x80) {
      out.push_back((char)(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    } else if (is_escape(cp)) {
      out.append(s, i, (size_t)n);
    } else if (cp == 0x130) {
      out += "i\xCC\x87";
    } else {
      append_utf8(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
    }
    i += (size_t)n;
  }
  s = std::move(out);
}

bool is_white_space(uint32_t c) {  // Unicode White_Space = Rust's char::is_whitespace
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

void strip(std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      uint32_t cp;
      int n = next_cp(s, b, &cp);
      if (!is_white_space(cp)) break;
      b += (size_t)n;
    }
  }
  if (right) {
    while (e > b) {
      size_t k = e - 1;
      while (k > b && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
      uint32_t cp;
      next_cp(s, k, &cp);
      if (!is_white_space(cp)) break;
      e = k;
    }
  }
  s = s.substr(b, e - b);
}

// A Replace that grows a text past this is refused by name (issue 36: a 1 MB
// content over a long input died of std::bad_alloc, naming nothing). Real
// ones grow it by a few bytes per space at most.
void check_growth(const std::string& where, size_t in, size_t out) {
  if (out > std::max<size_t>(16 * in, size_t(64) << 20))
    fail(where, ": this Replace would grow a text of ", in, " bytes past ", out,
         " bytes (more than 16 times, and 64 MB): its content is too long for the text; fix the "
         "tokenizer.json");
}

void replace(const Pattern& p, const std::string& content, std::string& s, const std::string& where) {
  if (!p.regex) {  // a string: one pass, no list of matches (Llama 2's and Gemma's " " -> "\u2581")
    const std::string& lit = p.literal;
    if (lit.empty()) return;  // the Rust library: an empty pattern matches nothing
    auto next = [&](size_t from) {  // one byte (the usual " "): memchr, no compare
      return lit.size() == 1 ? s.find(lit[0], from) : s.find(lit, from);
    };
    size_t pos = next(0);
    if (pos == std::string::npos) return;
    std::string out;
    out.reserve(s.size() + s.size() / 4 * (content.size() > lit.size() ? content.size() - lit.size() : 0));
    size_t prev = 0;
    for (; pos != std::string::npos; pos = next(prev)) {
      out.append(s, prev, pos - prev);
      check_growth(where, s.size(), out.size() + content.size());
      out += content;
      prev = pos + lit.size();
    }
    out.append(s, prev, std::string::npos);
    s = std::move(out);
    return;
  }
  std::vector<std::pair<size_t, size_t>> m;
  p.find_all(s, &m);
  if (m.empty()) return;
  std::string out;
  out.reserve(s.size());
  size_t prev = 0;
  for (auto [a, b] : m) {
    out.append(s, prev, a - prev);
    check_growth(where, s.size(), out.size() + content.size());
    out += content;
    prev = b;
  }
  out.append(s, prev, std::string::npos);
  s = std::move(out);
}

}  // namespace

void Pattern::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const {
  out->clear();
  if (regex) {
    if (has_escape(s)) {
      const std::string v = regex_view(s);
      regex->find_all(v, out);
    } else {
      regex->find_all(s, out);
    }
    return;
  }
  if (literal.empty()) return;  // the Rust library: an empty pattern matches nothing
  for (size_t pos = s.find(literal); pos != std::string_view::npos;
       pos = s.find(literal, pos + literal.size()))
    out->emplace_back(pos, pos + literal.size());
}

void normalize(const std::vector<Normalizer>& norms, std::string& s) {
  for (const Normalizer& n : norms) {
    switch (n.kind) {
      case Normalizer::kNFC: unicode_form(s, UTF8PROC_COMPOSE); break;
      case Normalizer::kNFD: unicode_form(s, UTF8PROC_DECOMPOSE); break;
      case Normalizer::kNFKC: unicode_form(s, UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
      case Normalizer::kNFKD: unicode_form(s, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
      case Normalizer::kReplace: replace(n.pattern, n.content, s, n.where); break;
      case Normalizer::kPrepend:
        if (!s.empty()) s.insert(0, n.content);
        break;
      case Normalizer::kStrip: strip(s, n.strip_left, n.strip_right); break;
      case Normalizer::kLowercase: lowercase(s); break;
    }
  }
}

}  // namespace ratchet::hf

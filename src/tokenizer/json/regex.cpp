#include "tokenizer/json/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace ratchet::hf {
namespace {

// Unicode White_Space (PropList.txt), the \s of Oniguruma and of Rust.
constexpr const char* kWhiteSpace =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// One match_data per thread, shared by every pattern: only the whole match's
// offsets are read, so one offset pair is enough (a pattern with groups
// then returns 0, "ovector too small", with the whole match filled in).
struct MatchData {
  pcre2_match_data_8* md = pcre2_match_data_create_8(1, nullptr);
  ~MatchData() { pcre2_match_data_free_8(md); }
};

}  // namespace

std::string translate_whitespace(const std::string& p, const std::string& where) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); i++) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char d = p[i + 1];
      if (d == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (d == 'S') {
        if (in_class)
          fail(where, ": \\S inside a character class is not supported (pattern ", p, ")");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += d;
      }
      i++;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      size_t e = p.find(":]", i + 2);
      if (e != std::string::npos) {
        out.append(p, i, e + 2 - i);
        i = e + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where)
    : pattern_(pattern), where_(where) {
  const std::string translated = translate_whitespace(pattern, where);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code_8* code = pcre2_compile_8((PCRE2_SPTR8)translated.data(), translated.size(),
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off,
                                       nullptr);
  if (!code) {
    PCRE2_UCHAR8 msg[256];
    pcre2_get_error_message_8(err, msg, sizeof msg);
    fail(where, ": the regex '", pattern, "' does not compile in PCRE2 (", (const char*)msg,
         " at offset ", off, ")");
  }
  // JIT where the platform has it; the interpreter gives the same matches.
  pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() {
  if (code_) pcre2_code_free_8((pcre2_code_8*)code_);
}

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const {
  out->clear();
  thread_local MatchData tl;
  auto* code = (pcre2_code_8*)code_;
  size_t pos = 0;
  while (pos <= s.size()) {
    // Subjects are valid UTF-8 (escapes are swapped for U+FFFD by the caller).
    int rc = pcre2_match_8(code, (PCRE2_SPTR8)s.data(), s.size(), pos, PCRE2_NO_UTF_CHECK, tl.md,
                           nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR8 msg[256];
      pcre2_get_error_message_8(rc, msg, sizeof msg);
      // Named by its file and JSON path (issue 36: a match limit named neither).
      fail(where_, ": the regex '", pattern_, "' failed while matching a piece of ", s.size(),
           " bytes (PCRE2: ", (const char*)msg, ")",
           rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT
               ? ": the pattern backtracks catastrophically on this text; fix the pattern"
               : "");
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer_8(tl.md);
    size_t a = ov[0], b = ov[1];
    out->emplace_back(a, b);
    if (b > a) {
      pos = b;
    } else {  // empty match: step over one code point
      if (a >= s.size()) break;
      size_t k = a + 1;
      while (k < s.size() && ((unsigned char)s[k] & 0xC0) == 0x80) k++;
      pos = k;
    }
  }
}

}  // namespace ratchet::hf

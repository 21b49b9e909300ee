// PCRE2 (8-bit, UTF + UCP, JIT-compiled) running the regexes of a
// tokenizer.json (Split pre-tokenizers, Replace normalizers and decoders).
//
// The Rust library runs them in Oniguruma, whose Unicode \s is the
// White_Space property; PCRE2's \s also takes U+180E. So \s and \S outside
// a character class, and \s inside one, are rewritten into White_Space
// spelled out (\S inside a class is refused). \p{L}, \p{N}, (?i:...),
// lookahead and possessive quantifiers are PCRE2's own. PCRE2's Unicode
// tables (14.0 on Debian 12) decide the classes of code points.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratchet::hf {

class Regex {
 public:
  // Throws Error "<where>: ..." when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The non-overlapping matches of the pattern in `subject` (valid UTF-8),
  // left to right, as [start, end) byte offsets. After an empty match the
  // search resumes one code point later (as Oniguruma's find_iter does).
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>* out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string where_;  // "<tokenizer.json>: <JSON path>", named when a match fails
  void* code_ = nullptr;  // pcre2_code_8*
};

// The pattern with \s / \S spelled as Unicode White_Space (see above).
// Throws Error naming `where` on \S inside a character class.
std::string translate_whitespace(const std::string& pattern, const std::string& where);

}  // namespace ratchet::hf

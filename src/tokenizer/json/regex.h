// PCRE2 (8-bit, UTF + UCP, JIT-compiled) running the regexes of a
// tokenizer.json (Split pre-tokenizers, Replace normalizers and decoders).
//
// The Rust library runs them in Oniguruma, with its Unicode version (16.0)
// and its \s, the White_Space property (PCRE2's \s also takes U+180E).
// PCRE2's own Unicode tables are older (14.0 on Debian 12), so before
// compiling, the classes whose meaning is Unicode data are rewritten from
// ratchet's tables (unicode_tables.h, docs/tokenizers-unicode.md): \s \S as
// White_Space spelled out; \d \D and \p{..} \P{..} \p{^..} of a general
// category (L, Lu, N, Nd, P, S, M, Z, C, LC, their long names, Any,
// Assigned), inside a class or not, as PCRE2's own \p{..} (a fast table
// lookup) plus the code points added since its Unicode version, spelled out;
// where its version also has members the tables do not, or the class cannot
// say it that way, the whole class is spelled out (a long list of ranges,
// slower to match). Left to PCRE2's tables: \w, \b, [:alpha:], scripts and
// binary properties (\p{Han}), and \p{Lu} \p{Ll} \p{Lt} in a caseless
// pattern. (?i:...), lookahead and possessive quantifiers are PCRE2's own.
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

// The pattern with its classes spelled out as code-point ranges (see above).
// Throws Error naming `where` on an unterminated \p{.
std::string translate_classes(const std::string& pattern, const std::string& where);

}  // namespace ratchet::hf

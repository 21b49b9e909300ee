// A small JSON reader for the data tools: the GPT-2 vocabulary (encoder.json,
// one object of string -> integer) and JSONL corpora (one object per line, a
// named text field). Not a general DOM: it reads strings and integers,
// skips everything else, and reports the byte offset of the first problem.
//
// Strings are returned as UTF-8; \uXXXX escapes with surrogate pairs become
// one code point, and a lone surrogate becomes U+FFFD (as Python's decoder
// would leave it unencodable).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ratchet::json {

// Thrown (as a plain message, wrapped by callers into an Error that names the
// file and line) when the text is not valid JSON.
struct ParseError {
  std::string what;
  size_t offset = 0;
};

// Calls `member(key, parser)` for each member of the top-level object in
// `text`; the callback must consume the value with one of Parser's value
// readers. Throws ParseError.
class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}
  void for_each_member(const std::function<void(const std::string& key, Parser& p)>& member);
  // Value readers, at the current position.
  std::string read_string();
  int64_t read_int();
  void skip_value();
  // The kind of the next value: '"', '{', '[', 'n', 't', 'f', or '0' (number).
  char peek_kind();
  // Requires only whitespace to remain.
  void expect_end();
  size_t offset() const { return i_; }

 private:
  [[noreturn]] void error(const std::string& what) const;
  void ws();
  void expect(char c);

  std::string_view s_;
  size_t i_ = 0;
};

// The string value of top-level member `field` of the JSON object `line`:
// nullopt when the member is absent; ParseError when the line is not an
// object or the member is not a string.
std::optional<std::string> string_field(std::string_view line, const std::string& field);

// Appends the UTF-8 encoding of code point `cp` to `out`.
void append_utf8(std::string& out, uint32_t cp);

// s as a JSON string literal (quotes, backslashes and control bytes escaped;
// other bytes, UTF-8 included, copied).
std::string quote(const std::string& s);

}  // namespace ratchet::json

// GPT-2's pre-tokenizer: the regular expression
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// applied left to right (JavaScript / Python `regex` semantics), implemented
// by hand over UTF-8 code points because std::regex has no \p{L}.
//
// Code-point classes come from unicode_classes.inc, generated from node's
// regex engine (the reference encoder runs there). Bytes that are not valid
// UTF-8 are taken one at a time as class "other" (neither letter, number nor
// space), so any byte string splits, and the pieces concatenate back to it.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace ratchet {

enum class CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// The class of one Unicode code point (\p{L}, \p{N}, \s or other).
CharClass char_class(uint32_t cp);

// Decodes one UTF-8 code point at s[i]: sets cp and returns its length in
// bytes (1..4); an invalid or truncated sequence returns 1 with cp = 0xFFFFFFFF.
int utf8_next(std::string_view s, size_t i, uint32_t* cp);

// The pieces of `text` in order; their concatenation is `text`.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace ratchet

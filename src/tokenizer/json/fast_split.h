// Hand-written splitters for two known Split regexes, the fast path the
// tokenizer.json engine takes instead of PCRE2 when a file holds one of them
// (GPT-2's own is tokenizer/gpt2_pretokenize.h):
//   Llama 3 (max_digits 3) and Qwen 2/3 (max_digits 1, \p{N} alone):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// The alternatives cover every character, so the matches tile the text; at
// each position the first alternative that matches wins, with the greedy
// quantifiers' backtracking worked out by hand (see the .cpp). Classes: the
// GPT-2 table (gpt2_pretokenize.h: \p{L}, \p{N}, White_Space, Unicode 16.0);
// an escaped byte (text.h) is "other", as U+FFFD is to PCRE2.
// tests/fuzz/fuzz_llama3_split_vs_pcre2.cpp proves them equal to PCRE2.
// Llama3Splitter gives the pieces one at a time, decoding the text as it
// goes (a window of characters, not the whole text: a document of many
// megabytes costs no memory beyond its longest piece).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/gpt2_pretokenize.h"

namespace ratchet::hf {

extern const char* const kLlama3Regex;
extern const char* const kQwenRegex;

class Llama3Splitter {
 public:
  Llama3Splitter(std::string_view text, int max_digits);
  // The next piece (a view into the text); false after the last.
  bool next(std::string_view* piece);

 private:
  struct Ch {
    uint32_t cp;
    uint32_t off;  // byte offset
    CharClass cls;
  };
  static constexpr size_t kBatch = 256;
  // Whether character j (counted from the text's start) exists, decoding up to it.
  bool has(size_t j) {
    while (j - base_ >= c_.size())
      if (!decode_more()) return false;
    return true;
  }
  bool decode_more();

  std::string_view text_;
  size_t max_digits_;
  std::vector<Ch> c_;  // characters base_, base_ + 1, ... decoded so far
  size_t base_ = 0, i_ = 0, pos_ = 0;  // pos_: the byte after the last decoded
};

// All the pieces of `text` in order.
void llama3_split(std::string_view text, int max_digits, std::vector<std::string_view>* out);

}  // namespace ratchet::hf

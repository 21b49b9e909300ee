// Hand-written splitters for two known Split regexes, the fast path the
// tokenizer.json engine takes instead of PCRE2 when a file holds one of them
// (GPT-2's own is data/gpt2_pretokenize.h):
//   Llama 3 (max_digits 3) and Qwen 2/3 (max_digits 1, \p{N} alone):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// The alternatives cover every character, so the matches tile the text; at
// each position the first alternative that matches wins, with the greedy
// quantifiers' backtracking worked out by hand (see the .cpp). Classes: the
// GPT-2 table (gpt2_pretokenize.h: \p{L}, \p{N}, White_Space, Unicode 15.0);
// an escaped byte (text.h) is "other", as U+FFFD is to PCRE2.
// tests/fuzz/fuzz_llama3_split_vs_pcre2.cpp proves them equal to PCRE2.
#pragma once
#include <string_view>
#include <vector>

namespace ratchet::hf {

extern const char* const kLlama3Regex;
extern const char* const kQwenRegex;

void llama3_split(std::string_view text, int max_digits, std::vector<std::string_view>* out);

}  // namespace ratchet::hf

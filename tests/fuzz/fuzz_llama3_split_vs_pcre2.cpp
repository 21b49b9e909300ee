// Differential: the hand-written splitters for Llama 3's and Qwen's Split
// regexes (tokenizer/json/fast_split.h) against PCRE2 running the real patterns, as
// the tokenizer.json engine does without the fast path (tokenizer/json/regex.h).
// Any bytes: invalid UTF-8 is escaped first (tokenizer/json/text.h) and PCRE2 sees
// each escaped byte as U+FFFD. PCRE2's classes are spelled out from the same
// Unicode tables as the hand-written ones (tokenizer/json/regex.h), so every
// input is compared.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json/fast_split.h"
#include "pcre2_split_diff.h"

namespace {
void check(const ratchet::hf::Regex& re, int max_digits, const std::string& text,
           const std::string& view) {
  std::vector<std::string_view> pieces;
  ratchet::hf::llama3_split(text, max_digits, &pieces);
  if (ratchet::fuzz::piece_spans(pieces, text) != ratchet::fuzz::pcre2_isolated_split(re, view))
    __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ratchet::hf::Regex llama3(ratchet::hf::kLlama3Regex, "Llama 3's regex");
  static const ratchet::hf::Regex qwen(ratchet::hf::kQwenRegex, "Qwen's regex");
  std::string text, view;
  ratchet::fuzz::prepare_split_input(data, size, &text, &view);
  check(llama3, 3, text, view);
  check(qwen, 1, text, view);
  return 0;
}

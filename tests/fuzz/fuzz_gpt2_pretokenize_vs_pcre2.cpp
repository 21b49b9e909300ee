// Differential: GPT-2's hand-written pre-tokenizer (tokenizer/gpt2_pretokenize.h,
// the fast path the tokenizer.json engine takes for ByteLevel's regex) against
// PCRE2 running the real pattern, as the engine does without the fast path
// (tokenizer/json/regex.h: UTF + UCP + JIT, \s as White_Space).
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Any bytes: invalid UTF-8 is escaped first (tokenizer/json/text.h), and PCRE2 sees
// each escaped byte as U+FFFD, as the engine runs it. PCRE2's \p{L}, \p{N}
// and \s are spelled out from the hand-written table's own Unicode data
// (tokenizer/json/regex.h), so every input must split the same.
#include <cstdint>
#include <string>

#include "tokenizer/gpt2_pretokenize.h"
#include "tokenizer/json/engine.h"
#include "pcre2_split_diff.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ratchet::hf::Regex gpt2(ratchet::hf::gpt2_regex(), "GPT-2's regex");
  std::string text, view;
  ratchet::fuzz::prepare_split_input(data, size, &text, &view);
  if (ratchet::fuzz::piece_spans(ratchet::gpt2_pretokenize(text), text) !=
      ratchet::fuzz::pcre2_isolated_split(gpt2, view))
    __builtin_trap();
  return 0;
}

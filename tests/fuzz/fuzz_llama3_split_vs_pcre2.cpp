// Differential: the hand-written splitters for Llama 3's and Qwen's Split
// regexes (data/hf/fast_split.h) against PCRE2 running the real patterns, as
// the tokenizer.json engine does without the fast path (data/hf/regex.h).
// Any bytes: invalid UTF-8 is escaped first (data/hf/text.h) and PCRE2 sees
// each escaped byte as U+FFFD. Inputs holding a code point that PCRE2's
// Unicode tables (14.0 on Debian 12) leave unassigned are skipped (the
// hand-written classes are pinned to Unicode 15.0).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/hf/fast_split.h"
#include "data/hf/regex.h"
#include "data/hf/text.h"

namespace {
const ratchet::hf::Regex& unassigned() {
  static ratchet::hf::Regex r("\\p{Cn}", "unassigned");
  return r;
}

void check(const ratchet::hf::Regex& re, int max_digits, const std::string& text,
           const std::string& view) {
  std::vector<std::pair<size_t, size_t>> m, want, got;
  re.find_all(view, &m);
  size_t prev = 0;
  for (auto [a, b] : m) {
    if (a > prev) want.emplace_back(prev, a);
    if (b > a) want.emplace_back(a, b);
    prev = b;
  }
  if (prev < view.size()) want.emplace_back(prev, view.size());
  std::vector<std::string_view> pieces;
  ratchet::hf::llama3_split(text, max_digits, &pieces);
  for (std::string_view p : pieces) {
    size_t a = (size_t)(p.data() - text.data());
    got.emplace_back(a, a + p.size());
  }
  if (got != want) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ratchet::hf::Regex llama3(ratchet::hf::kLlama3Regex, "Llama 3's regex");
  static const ratchet::hf::Regex qwen(ratchet::hf::kQwenRegex, "Qwen's regex");
  const std::string input((const char*)data, size);
  std::string escaped;
  const std::string& text = ratchet::hf::escape_invalid(input, &escaped) ? escaped : input;
  const std::string view = ratchet::hf::regex_view(text);
  std::vector<std::pair<size_t, size_t>> m;
  unassigned().find_all(view, &m);
  if (!m.empty()) return 0;
  check(llama3, 3, text, view);
  check(qwen, 1, text, view);
  return 0;
}

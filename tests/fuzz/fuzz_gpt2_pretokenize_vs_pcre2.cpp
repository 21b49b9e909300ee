// Differential: GPT-2's hand-written pre-tokenizer (data/gpt2_pretokenize.h,
// the fast path the tokenizer.json engine takes for ByteLevel's regex) against
// PCRE2 running the real pattern, as the engine does without the fast path
// (data/hf/regex.h: UTF + UCP + JIT, \s as White_Space).
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Any bytes: invalid UTF-8 is escaped first (data/hf/text.h), and PCRE2 sees
// each escaped byte as U+FFFD, as the engine runs it. Inputs holding a code
// point that PCRE2's Unicode tables (14.0 on Debian 12) leave unassigned are
// skipped: the hand-written table is pinned to Unicode 15.0, and a letter
// assigned in 15.0 is "other" to PCRE2. Everything else must split the same.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/gpt2_pretokenize.h"
#include "data/hf/engine.h"
#include "data/hf/regex.h"
#include "data/hf/text.h"

namespace {
const ratchet::hf::Regex& gpt2() {
  static ratchet::hf::Regex r(ratchet::hf::gpt2_regex(), "GPT-2's regex");
  return r;
}
const ratchet::hf::Regex& unassigned() {
  static ratchet::hf::Regex r("\\p{Cn}", "unassigned");
  return r;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input((const char*)data, size);
  std::string escaped;
  const std::string& text = ratchet::hf::escape_invalid(input, &escaped) ? escaped : input;
  const std::string view = ratchet::hf::regex_view(text);
  std::vector<std::pair<size_t, size_t>> m;
  unassigned().find_all(view, &m);
  if (!m.empty()) return 0;
  // PCRE2's split (Isolated): matches and the gaps between them.
  std::vector<std::pair<size_t, size_t>> want;
  gpt2().find_all(view, &m);
  size_t prev = 0;
  for (auto [a, b] : m) {
    if (a > prev) want.emplace_back(prev, a);
    if (b > a) want.emplace_back(a, b);
    prev = b;
  }
  if (prev < view.size()) want.emplace_back(prev, view.size());
  // The hand-written split, as offsets.
  std::vector<std::pair<size_t, size_t>> got;
  for (std::string_view p : ratchet::gpt2_pretokenize(text)) {
    size_t a = (size_t)(p.data() - text.data());
    got.emplace_back(a, a + p.size());
  }
  if (got != want) __builtin_trap();
  return 0;
}

// Shared by the fuzz targets that prove a hand-written splitter equal to PCRE2
// running the real pattern (fuzz_*_vs_pcre2.cpp): the same input preparation,
// the same reading of PCRE2's matches as an Isolated split, and the same
// offsets for the hand-written pieces, so the two sides are compared as
// [begin, end) byte ranges of the escaped text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/json/regex.h"
#include "tokenizer/json/text.h"

namespace ratchet::fuzz {

using Spans = std::vector<std::pair<size_t, size_t>>;

// The fuzzer's bytes as the engine runs them: invalid UTF-8 escaped
// (tokenizer/json/text.h; PCRE2 sees each escaped byte as U+FFFD) into `text`, and
// PCRE2's view of it. Every input is compared: hf::Regex spells \p{L}, \p{N}
// and \s out from the same Unicode tables as the hand-written splitters
// (json/regex.h), so PCRE2's own Unicode version plays no part.
inline void prepare_split_input(const uint8_t* data, size_t size, std::string* text,
                                std::string* view) {
  const std::string input((const char*)data, size);
  std::string escaped;
  *text = hf::escape_invalid(input, &escaped) ? escaped : input;
  *view = hf::regex_view(*text);
}

// PCRE2's split with behavior Isolated: the matches and the gaps between them.
inline Spans pcre2_isolated_split(const hf::Regex& re, const std::string& view) {
  Spans m, want;
  re.find_all(view, &m);
  size_t prev = 0;
  for (auto [a, b] : m) {
    if (a > prev) want.emplace_back(prev, a);
    if (b > a) want.emplace_back(a, b);
    prev = b;
  }
  if (prev < view.size()) want.emplace_back(prev, view.size());
  return want;
}

// Pieces that point into `text`, as byte ranges of it.
template <class Pieces>
Spans piece_spans(const Pieces& pieces, const std::string& text) {
  Spans got;
  for (std::string_view p : pieces) {
    const size_t a = (size_t)(p.data() - text.data());
    got.emplace_back(a, a + p.size());
  }
  return got;
}

}  // namespace ratchet::fuzz

// A bounded differential fuzz of ratchet's tokenizer.json engine against
// Hugging Face's `tokenizers` (tests/data/hf_tokenizers_ref.js) on random
// Unicode strings, for the four real tokenizers of scripts/install-deps.sh.
//
// Rounds of kStrings strings each run until the time budget is spent (at
// least one round per family): $RATCHET_HF_FUZZ_SECONDS (default 40 over all
// four families). Round r of family f uses seed (base + r): a failure prints
// the seed and the string, and RATCHET_HF_FUZZ_SEED=S reruns from it.
//
// The strings mix ASCII, every kind of whitespace, digits, Latin, combining
// marks, CJK, Hangul, emoji (ZWJ sequences, skin tones, flags, variation
// selectors), special-token spellings, and code points drawn from the whole
// range (controls, private use, noncharacters, unassigned; see
// agreed_code_points), as valid UTF-8;
// invalid UTF-8 is test_hf_tokenizer_parity's (each side treats it its own
// way). Both special-token modes are compared (see that file).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "testing/hf_reference.h"
#include "testing/test_util.h"
#include "testing/utf8.h"
#include "tokenizer/unicode_tables.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

constexpr int kStrings = 1000;

// Code points drawn from the whole range: every character Unicode 16.0
// assigns (the version of ratchet's classes and of the reference's,
// tokenizer/unicode_tables.h; private use included), weighted by range size,
// with planes 4-13 (unassigned in every version) and the noncharacters
// U+FDD0-FDEF. test_hf_tokenizer_unicode_sweep.cpp takes each one in turn.
struct Ranges {
  std::vector<std::pair<uint32_t, uint32_t>> r;  // [lo, hi]
  std::vector<uint64_t> cum;                     // code points up to and including range i
  void add(uint32_t lo, uint32_t hi) {
    r.push_back({lo, hi});
    cum.push_back((cum.empty() ? 0 : cum.back()) + (hi - lo + 1));
  }
  uint32_t draw(Rng& rng) const {
    const uint64_t k = rng.below(cum.back());
    const size_t i = std::upper_bound(cum.begin(), cum.end(), k) - cum.begin();
    return r[i].first + (uint32_t)(k - (i ? cum[i - 1] : 0));
  }
};

const Ranges& agreed_code_points() {
  static const Ranges r = [] {
    Ranges a;
    CodePointRanges assigned;
    general_category_ranges("Assigned", &assigned);
    for (auto [lo, hi] : assigned) {
      if (hi >= 0xD800 && lo <= 0xDFFF) continue;  // surrogates are not UTF-8 (a range of their own)
      a.add(lo, hi);
    }
    a.add(0x40000, 0xDFFFF);  // planes 4-13: unassigned
    a.add(0xFDD0, 0xFDEF);    // noncharacters
    return a;
  }();
  return r;
}

uint32_t anywhere(Rng& rng) { return agreed_code_points().draw(rng); }

uint32_t pick(Rng& rng, std::initializer_list<uint32_t> set) {
  return *(set.begin() + rng.below(set.size()));
}

// One random string of 0-48 pieces.
std::string random_text(Rng& rng) {
  static const char* kSpecial[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<s>",
                                   "</s>", "<unk>", "<bos>", "<eos>", "<pad>", "<|endoftext|>",
                                   "<|im_start|>", "<|im_end|>", "<start_of_turn>", "<|", "|>"};
  std::string s;
  const int n = (int)rng.below(49);
  for (int i = 0; i < n; i++) {
    const uint64_t k = rng.below(100);
    uint32_t cp;
    if (k < 30) cp = 0x20 + (uint32_t)rng.below(0x5F);  // printable ASCII
    else if (k < 40)
      cp = pick(rng, {' ', ' ', '\t', '\n', '\n', '\r', 0x0B, 0x0C, 0x85, 0xA0, 0x1680, 0x2000,
                      0x2003, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0x200B, 0xFEFF});
    else if (k < 45) cp = '0' + (uint32_t)rng.below(10);
    else if (k < 52) cp = 0xC0 + (uint32_t)rng.below(0x250 - 0xC0);  // Latin-1 and Extended
    else if (k < 56) cp = 0x300 + (uint32_t)rng.below(0x70);         // combining marks
    else if (k < 62) cp = 0x4E00 + (uint32_t)rng.below(0x5200);      // CJK
    else if (k < 64) cp = 0x3040 + (uint32_t)rng.below(0x60);        // Hiragana
    else if (k < 66) cp = 0xAC00 + (uint32_t)rng.below(0x2BA4);      // Hangul
    else if (k < 68) cp = 0x400 + (uint32_t)rng.below(0x100);        // Cyrillic
    else if (k < 70) cp = 0x600 + (uint32_t)rng.below(0x100);        // Arabic
    else if (k < 76) cp = 0x1F300 + (uint32_t)rng.below(0x700);      // emoji
    else if (k < 79) cp = pick(rng, {0x200D, 0xFE0F, 0x1F3FB, 0x1F3FF, 0x1F1E9, 0x1F1EA, 0x20E3});
    else if (k < 84) {
      s += kSpecial[rng.below(sizeof kSpecial / sizeof *kSpecial)];
      continue;
    } else if (k < 88) cp = pick(rng, {'\'', 's', 't', 'l', 'd', 'm', 'v', 'e', 'r', 'S', 'T'});
    else if (k < 90) cp = pick(rng, {0x2581, 0xFFFD, 0xFB01, 0x212B, 0x1E9B, 0xFF21, 0x2460, 0xDF});
    else cp = anywhere(rng);
    put_utf8(s, cp);
  }
  return s;
}

double budget_seconds() {
  const char* e = std::getenv("RATCHET_HF_FUZZ_SECONDS");
  return e && *e ? std::atof(e) : 40.0;
}

uint64_t base_seed() {
  const char* e = std::getenv("RATCHET_HF_FUZZ_SEED");
  return e && *e ? std::strtoull(e, nullptr, 10) : 20260529;
}

}  // namespace

TEST(HfTokenizerFuzz, RandomUnicodeAgainstTokenizers) {
  const double budget = budget_seconds() / (double)hf_families().size();
  size_t total = 0;
  for (const std::string& family : hf_families()) {
    ASSERT_TRUE(std::filesystem::exists(hf_family_json(family)))
        << hf_family_json(family) << " is missing: run scripts/install-deps.sh";
    const HfTokenizer& tok = hf_family_tokenizer(family);
    const double t0 = now_seconds();
    int rounds = 0;
    for (uint64_t r = 0; rounds == 0 || now_seconds() - t0 < budget; r++, rounds++) {
      const uint64_t seed = base_seed() + r;
      Rng rng(seed);
      std::vector<std::string> texts;
      for (int i = 0; i < kStrings; i++) texts.push_back(random_text(rng));
      const std::string what = family + " seed " + std::to_string(seed);
      size_t bad = expect_ids_equal(what + " parse_special", texts,
                                    hf_ref_encode(hf_family_json(family), texts, false, false),
                                    [&](const std::string& t) { return tok.encode(t, true); });
      bad += expect_ids_equal(what + " special as text", texts,
                              hf_ref_encode(hf_family_json(family), texts, false, true),
                              [&](const std::string& t) { return tok.encode(t); });
      // Decoding: the same text as the reference's decode of the same ids.
      std::vector<std::vector<uint32_t>> ids;
      for (const auto& t : texts) ids.push_back(tok.encode(t, true));
      const std::vector<std::string> want = hf_ref_decode(hf_family_json(family), ids);
      ASSERT_EQ(want.size(), texts.size());
      for (size_t i = 0; i < texts.size(); i++)
        if (tok.decode(ids[i]) != want[i] && bad++ < 5)
          ADD_FAILURE() << what << ": decode of " << show_text(texts[i])
                        << "\n  ratchet:    " << show_text(tok.decode(ids[i]))
                        << "\n  tokenizers: " << show_text(want[i]);
      total += texts.size();
      if (bad) {
        ADD_FAILURE() << what << ": rerun with RATCHET_HF_FUZZ_SEED=" << seed;
        break;
      }
    }
    std::printf("%s: %d round(s) of %d strings in %.1f s\n", family.c_str(), rounds, kStrings,
                now_seconds() - t0);
  }
  EXPECT_GE(total, hf_families().size() * kStrings);
}

// Characters of Unicode 15.1 and 16.0, once a known difference (ratchet's
// classes were 15.0, the reference's are 16.0), before "<s>": U+2EBF0 (CJK
// Extension I, 15.1) and U+10D50 (Garay, 16.0) are letters, so "<" joins
// them ("<s"); U+322FD (CJK Extension H, 15.0) likewise.
TEST(HfTokenizerFuzz, NewerCodePointsAgree) {
  const std::vector<std::string> texts = {"\U0002EBF0<s>", "\U00010D50<s>", "\U000322FD<s>"};
  for (const std::string& family : hf_families()) {
    const auto want = hf_ref_encode(hf_family_json(family), texts, false, true);
    ASSERT_EQ(want.size(), texts.size());
    const HfTokenizer& tok = hf_family_tokenizer(family);
    for (size_t i = 0; i < texts.size(); i++)
      EXPECT_EQ(ids_text(tok.encode(texts[i])), ids_text(want[i])) << family << " " << show_text(texts[i]);
  }
}

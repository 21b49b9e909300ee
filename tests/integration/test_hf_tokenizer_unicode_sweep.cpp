// Every code point against Hugging Face's `tokenizers` (issue 37): each
// code point of planes 0-3 (every character any Unicode version up to 17.0
// assigns outside the private-use planes, and the unassigned ones around
// them), plane 14's tags and variation selectors and a few of planes 15-16's
// private use, in one fixed context, "a" + c + "b " + c + "'s": between
// letters (does c join a letter run?), after a space (does it take the space,
// as a letter or a symbol does and a digit does not?) and before "'s" (does
// it take the apostrophe, as a symbol does and a letter does not?). Each
// class gives other pieces there, and other ids: byte-level BPE merges the
// space into a character's first byte. Encoded by ratchet and by the reference (tests/data/
// hf_tokenizers_ref.js, one node process per family) for the four real
// tokenizers, and for Llama 3.1 and Qwen3 also without the hand-written
// splitters (RATCHET_HF_NO_FAST_PATH: PCRE2 with its classes spelled out from
// ratchet's Unicode 16.0 tables, json/regex.h). Then, for Qwen3 (NFC), the
// normalization cases: every canonical composite decomposed, every combining
// mark before and after marks of other combining classes, and each mark
// added in Unicode 10.0-16.0 (unassigned to the reference's Unicode 9.0
// normalization data) beside the older marks of every combining class.
//
// Zero differences are expected: kKnownDifferences lists (and explains) any
// that are accepted, and is empty. Each test prints how many texts it
// compared.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "testing/hf_reference.h"
#include "testing/test_util.h"
#include "testing/utf8.h"
#include "tokenizer/unicode_tables.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

// Accepted differences, as texts; none today.
const std::set<std::string> kKnownDifferences = {};

std::string utf8(std::initializer_list<uint32_t> cps) {
  std::string s;
  for (uint32_t c : cps) put_utf8(s, c);
  return s;
}

// The swept code points (surrogates are not UTF-8).
std::vector<uint32_t> swept_code_points() {
  std::vector<uint32_t> out;
  auto add = [&](uint32_t a, uint32_t b) {
    for (uint32_t c = a; c <= b; c++)
      if (c < 0xD800 || c > 0xDFFF) out.push_back(c);
  };
  add(0, 0x3FFFF);
  add(0xE0000, 0xE0FFF);
  add(0xF0000, 0xF00FF), add(0xFFF00, 0xFFFFF);
  add(0x100000, 0x1000FF), add(0x10FF00, 0x10FFFF);
  return out;
}

std::vector<std::string> code_point_texts() {
  std::vector<std::string> texts;
  for (uint32_t c : swept_code_points()) texts.push_back(utf8({'a', c, 'b', ' ', c, '\'', 's'}));
  return texts;
}

// ratchet's ids for every text against the reference's; prints the first
// differences. Returns the number of differences not in kKnownDifferences.
size_t compare(const std::string& what, const HfTokenizer& tok,
               const std::vector<std::string>& texts,
               const std::vector<std::vector<uint32_t>>& want) {
  EXPECT_EQ(want.size(), texts.size()) << what;
  if (want.size() != texts.size()) return texts.size();
  size_t bad = 0, known = 0;
  for (size_t i = 0; i < texts.size(); i++) {
    const std::vector<uint32_t> got = tok.encode(texts[i], true);
    if (got == want[i]) continue;
    if (kKnownDifferences.count(texts[i])) {
      known++;
      continue;
    }
    if (bad++ < 8)
      ADD_FAILURE() << what << ": " << show_text(texts[i]) << "\n  ratchet:    " << ids_text(got)
                    << "\n  tokenizers: " << ids_text(want[i]);
  }
  std::printf("%s: %zu texts compared, %zu differ, %zu known differences\n", what.c_str(),
              texts.size(), bad, known);
  return bad;
}

// The family's tokenizer loaded without the hand-written splitters.
std::unique_ptr<HfTokenizer> load_without_fast_paths(const std::string& family) {
  setenv("RATCHET_HF_NO_FAST_PATH", "1", 1);
  auto t = HfTokenizer::load(hf_family_dir(family));
  unsetenv("RATCHET_HF_NO_FAST_PATH");
  return t;
}

void sweep(const std::string& family, bool also_pcre2) {
  ASSERT_TRUE(std::filesystem::exists(hf_family_json(family)))
      << hf_family_json(family) << " is missing: run scripts/install-deps.sh";
  const std::vector<std::string> texts = code_point_texts();
  const double t0 = now_seconds();
  const auto want = hf_ref_encode(hf_family_json(family), texts, false, false);
  const double t1 = now_seconds();
  EXPECT_EQ(compare(family, hf_family_tokenizer(family), texts, want), 0u);
  if (also_pcre2)
    EXPECT_EQ(compare(family + " (PCRE2, no fast path)", *load_without_fast_paths(family), texts, want),
              0u);
  std::printf("%s: %zu code points; reference %.1f s, ratchet %.1f s\n", family.c_str(), texts.size(),
              t1 - t0, now_seconds() - t1);
  EXPECT_GT(texts.size(), 260000u);
}

int ccc(uint32_t c) { return utf8proc_get_property((utf8proc_int32_t)c)->combining_class; }

// The normalization cases (see the top of the file).
std::vector<std::string> nfc_texts() {
  CodePointRanges marks;
  general_category_ranges("M", &marks);
  std::vector<uint32_t> all, added;  // every mark (16.0); those added after 9.0
  for (auto [a, b] : marks)
    for (uint32_t c = a; c <= b; c++) {
      all.push_back(c);
      if (!assigned_for_normalization(c)) added.push_back(c);
    }
  // Older marks, two of each combining class (utf8proc's data, only to pick
  // the cases), and a starter.
  std::map<int, std::vector<uint32_t>> by_class;
  for (uint32_t c : all)
    if (assigned_for_normalization(c) && by_class[ccc(c)].size() < 2) by_class[ccc(c)].push_back(c);
  std::vector<uint32_t> older;
  for (auto& [k, v] : by_class) older.insert(older.end(), v.begin(), v.end());
  std::vector<std::string> texts;
  // Canonical composites, and their decompositions (Hangul included).
  for (uint32_t c = 0xA0; c < 0x40000; c++) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    utf8proc_int32_t buf[8];
    int opts = 0;
    const utf8proc_ssize_t n =
        utf8proc_decompose_char((utf8proc_int32_t)c, buf, 8, (utf8proc_option_t)UTF8PROC_DECOMPOSE, &opts);
    if (n < 2 || n > 8) continue;
    std::string d = "a";
    for (utf8proc_ssize_t k = 0; k < n; k++) put_utf8(d, (uint32_t)buf[k]);
    texts.push_back(d);
    texts.push_back(utf8({'a', c, 0x301}));
  }
  // Every mark before and after marks of class 230 (U+0301) and 220 (U+0323).
  for (uint32_t m : all)
    for (uint32_t o : {0x301u, 0x323u}) {
      texts.push_back(utf8({'a', m, o}));
      texts.push_back(utf8({'a', o, m}));
    }
  // The added marks beside the older ones, in pairs and triples.
  for (uint32_t m : added)
    for (uint32_t o : older) {
      texts.push_back(utf8({'e', m, o}));
      texts.push_back(utf8({'e', o, m}));
      texts.push_back(utf8({'e', o, m, o}));
    }
  // The pair from issue 37 and its neighbours (Dives Akuru: U+11935 U+11930
  // is U+11938's decomposition, added in 13.0).
  texts.push_back(utf8({0x11935, 0x11930}));
  texts.push_back(utf8({0x9FE, 0x9BC}));
  texts.push_back(utf8({'a', 0x1DF6, 0x301}));
  return texts;
}

}  // namespace

TEST(HfTokenizerUnicodeSweep, Llama31EveryCodePoint) { sweep("llama3_1", true); }
TEST(HfTokenizerUnicodeSweep, Qwen3EveryCodePoint) { sweep("qwen3", true); }
TEST(HfTokenizerUnicodeSweep, Llama2EveryCodePoint) { sweep("llama2", false); }
TEST(HfTokenizerUnicodeSweep, Gemma3EveryCodePoint) { sweep("gemma3", false); }

TEST(HfTokenizerUnicodeSweep, Qwen3NfcMarkOrder) {
  const std::vector<std::string> texts = nfc_texts();
  const auto want = hf_ref_encode(hf_family_json("qwen3"), texts, false, false);
  EXPECT_EQ(compare("qwen3 NFC", hf_family_tokenizer("qwen3"), texts, want), 0u);
  EXPECT_GT(texts.size(), 40000u);
}

// The examples of issue 37, as ids (the reference's, Unicode 16.0 classes
// and 9.0 normalization data).
TEST(HfTokenizerUnicodeSweep, IssueExamples) {
  const HfTokenizer& llama3 = hf_family_tokenizer("llama3_1");
  const HfTokenizer& qwen3 = hf_family_tokenizer("qwen3");
  EXPECT_EQ(ids_text(llama3.encode(utf8({' ', 0x116D2}))), "220 172 239 249 240 ");
  EXPECT_EQ(ids_text(qwen3.encode(utf8({0x9FE, 0x9BC}))), "26927 122 11125 120 ");
}

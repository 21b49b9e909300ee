// hf::SafeCutter (src/tokenizer/json/safe_cut.h) for the four real tokenizer.json
// families of scripts/install-deps.sh and GPT-2's files: a document cut at its safe cuts and
// tokenized part by part gives exactly the ids of the whole, on real text
// (the KJV, fortunes, C headers) and on random mixtures of words, every kind
// of whitespace run, digits, contractions, special-token spellings, CJK,
// emoji, combining marks and invalid UTF-8; and through tokenize_parallel
// (what `ratchet shard --threads N` runs) for 1 and 2 threads. The cut
// points must also be plentiful on ordinary text (otherwise threads would
// get nothing to share). A failure prints the family, the seed and the cut.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/json/safe_cut.h"
#include "tokenizer/tokenizer_json.h"
#include "data_tools/parallel_tokenize.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

const char* kFamilies[] = {"llama3_1", "llama2", "qwen3", "gemma3", "gpt2"};

// Each family loaded once for all tests (loading Gemma's takes seconds).
const HfTokenizer* load(const std::string& family) {
  static std::map<std::string, std::unique_ptr<HfTokenizer>> loaded;
  auto it = loaded.find(family);
  if (it != loaded.end()) return it->second.get();
  if (family == "gpt2") {  // GPT-2's files as the engine's ByteLevel configuration
    const std::string dir = default_gpt2_dir();
    return (loaded[family] = HfTokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe"))
        .get();
  }
  const std::string path = default_hf_tokenizers_dir() + "/" + family + "/tokenizer.json";
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: run scripts/install-deps.sh";
    return nullptr;
  }
  return (loaded[family] = HfTokenizer::load(path)).get();
}

std::string real_text() {
  std::string t;
  t += read_file("/usr/share/games/fortunes/fortunes").substr(0, 60000);
  t += read_file("/usr/share/games/fortunes/literature").substr(0, 30000);
  t += read_file("/usr/include/stdio.h").substr(0, 20000);
  return t;
}

// A random mixture of the pieces that stress the pre-tokenizers and the merges.
std::string random_text(uint64_t seed, size_t bytes) {
  static const std::vector<std::string> parts = {
      "the", "The", "LORD", "and", "it's", "we'll", "I'M", "they're", "don't", " ", "  ", "   ",
      "\n", "\n\n", "\r\n", "\t", " \n", "\n ", " \t\n", "\u00a0", "\u3000", "\u2028", "\u0085",
      "0", "12", "345", "2024", "3.14159", "1,000,000", "x86_64", "(){}", "->", "::", "&&", "...",
      "!?", "\"quoted\"", "'single'", "<|endoftext|>", "<|begin_of_text|>", "<s>", "</s>",
      "<start_of_turn>", "<pad>", "<unk>", "\u4e2d\u6587", "\u65e5\u672c\u8a9e", "\ud55c\uad6d\uc5b4",
      "\U0001F600", "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F1FA\U0001F1F8",
      "e\u0301", "a\u0308\u0323", "\u00e9", "\u2581", "\u2581\u2581", "int main(void) {", "return 0;", "#include <stdio.h>", "    if (x) {",
      "http://example.com/a?b=c", "base64+/==", "ALLCAPS", "camelCase", "snake_case", "-", "_",
      ".", ",", ";", ":", "!", "?", "'", "`", "~", "|", "\\", "/", "%", "$", "#", "@", "^", "*"};
  // Invalid UTF-8 (a window holding it is never cut) in one text of five.
  static const std::vector<std::string> invalid = {"\xff", "\xc3", "\xe2\x96", "\x80\x80"};
  Rng rng(seed);
  std::string s;
  while (s.size() < bytes) {
    s += parts[rng.below(parts.size())];
    if (seed % 5 == 0 && rng.below(20) == 0) s += invalid[rng.below(invalid.size())];
  }
  return s;
}

// Ids of `text` tokenized in the parts that `cuts` make.
std::vector<uint32_t> by_parts(const HfTokenizer& tok, const std::string& text,
                               const std::vector<hf::TextCut>& cuts) {
  std::vector<uint32_t> ids;
  size_t at = 0;
  for (const hf::TextCut& c : cuts) {
    std::vector<uint32_t> p = tok.encode(text.substr(at, c.end - at));
    ids.insert(ids.end(), p.begin(), p.end());
    at = c.resume;
  }
  std::vector<uint32_t> p = tok.encode(text.substr(at));
  ids.insert(ids.end(), p.begin(), p.end());
  return ids;
}

TEST(HfSafeCut, RealTextPartsGiveTheWholeIdsAndCutsAreDense) {
  const std::string text = real_text();
  for (const char* f : kFamilies) {
    auto tok = load(f);
    if (!tok) continue;
    hf::SafeCutter cutter(tok->engine());
    ASSERT_TRUE(cutter.can_cut()) << f << ": " << cutter.no_cut_reason();
    const std::vector<hf::TextCut> cuts = cutter.cuts(text, 1024);
    // ~110 KB in parts of >= 1 KiB: nearly every part ends soon after 1 KiB.
    EXPECT_GT(cuts.size(), text.size() / 1024 * 8 / 10) << f;
    for (size_t i = 0; i < cuts.size(); i++)
      EXPECT_LT(cuts[i].end, (i ? cuts[i - 1].resume : 0) + 1024 + 512) << f << " cut " << i;
    EXPECT_EQ(by_parts(*tok, text, cuts), tok->encode(text)) << f;
    EXPECT_EQ(by_parts(*tok, text, cuts), tok->encode(text)) << f;
  }
}

TEST(HfSafeCut, RandomMixturesCutEverywhereGiveTheWholeIds) {
  for (const char* f : kFamilies) {
    auto tok = load(f);
    if (!tok) continue;
    hf::SafeCutter cutter(tok->engine());
    size_t total_cuts = 0;
    for (uint64_t seed = 1; seed <= 150; seed++) {
      const std::string text = random_text(seed, 1500);
      // Parts of >= 16 bytes: every accepted cut is used.
      const std::vector<hf::TextCut> cuts = cutter.cuts(text, 16);
      total_cuts += cuts.size();
      const std::vector<uint32_t> whole = tok->encode(text);
      ASSERT_EQ(by_parts(*tok, text, cuts), whole) << f << " seed " << seed;
      // Each cut alone too (a failure names it).
      for (const hf::TextCut& c : cuts)
        ASSERT_EQ(by_parts(*tok, text, {c}), whole) << f << " seed " << seed << " cut " << c.end;
    }
    EXPECT_GT(total_cuts, 150u) << f << ": too few cuts accepted on mixed text";
  }
}

TEST(HfSafeCut, ThreadedShardTokenizingEqualsOneThread) {
  std::string text = real_text();
  for (uint64_t seed = 1; seed <= 20; seed++) text += random_text(1000 + seed, 4000);
  for (const char* f : kFamilies) {
    auto tok = load(f);
    if (!tok) continue;
    const DocumentCutter cutter(*tok);
    ASSERT_TRUE(cutter.can_cut()) << f;
    std::vector<const std::string*> docs{&text};
    std::vector<std::vector<uint32_t>> one, two;
    tokenize_parallel(*tok, docs, 1, one, 4096, &cutter);
    tokenize_parallel(*tok, docs, 2, two, 4096, &cutter);
    const std::vector<uint32_t> whole = tok->encode(text);
    EXPECT_EQ(one[0], whole) << f;
    EXPECT_EQ(two[0], whole) << f;
  }
}

// Where no stage is proven safe, nothing is cut: a window with invalid
// UTF-8 (except at Gemma 3's added "\n", which cuts the raw text before any
// decoding), or text with no candidate (one long word).
TEST(HfSafeCut, NoCutWithoutProof) {
  for (const char* f : kFamilies) {
    auto tok = load(f);
    if (!tok) continue;
    hf::SafeCutter cutter(tok->engine());
    std::string word(20000, 'a');
    for (size_t i = 0; i < word.size(); i++) word[i] = (char)('a' + (i * 7919 % 26));
    if (std::string(f) == "llama3_1" || std::string(f) == "qwen3" || std::string(f) == "gpt2") {
      EXPECT_TRUE(cutter.cuts(word, 100).empty()) << f;  // letters only: no boundary is proven
    }
    std::string bad = random_text(7, 3000);
    for (size_t i = 0; i < bad.size(); i += 50) bad[i] = '\xff';  // invalid bytes every 50
    const std::vector<hf::TextCut> cuts = cutter.cuts(bad, 16);
    if (std::string(f) == "gemma3") {  // its "\n" cuts stand next to any bytes
      EXPECT_EQ(by_parts(*tok, bad, cuts), tok->encode(bad)) << f;
    } else {
      for (const hf::TextCut& c : cuts)
        ADD_FAILURE() << f << ": cut at " << c.end << " with invalid UTF-8 in its window";
    }
  }
}

}  // namespace

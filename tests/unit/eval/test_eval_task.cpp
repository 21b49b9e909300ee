// Multiple-choice task files (src/eval/mc_task.cpp): the three formats, the
// harness's tokenization, and a clear error naming the line for each kind of
// bad input.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "eval/mc_task.h"
#include "eval/metrics.h"
#include "eval/named_path.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

std::vector<uint32_t> bytes(const std::string& s) {
  std::vector<uint32_t> v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}

// llm.c's HellaSwag .bin (dev/data/hellaswag.py's write_evalfile), written
// here field by field from its documented layout.
struct BinExample {
  std::vector<uint16_t> ctx;
  std::vector<std::vector<uint16_t>> endings;
  int label;
};
std::string llmc_bin(const std::vector<BinExample>& exs) {
  std::vector<uint16_t> stream;
  int32_t hdr[256] = {20240522, 1, (int32_t)exs.size(), 0};
  for (size_t i = 0; i < exs.size(); i++) {
    std::vector<uint16_t> rec = {65535, 0, (uint16_t)i, (uint16_t)exs[i].label,
                                 (uint16_t)exs[i].endings.size(), (uint16_t)exs[i].ctx.size()};
    rec.insert(rec.end(), exs[i].ctx.begin(), exs[i].ctx.end());
    for (const auto& e : exs[i].endings) {
      rec.push_back((uint16_t)e.size());
      rec.insert(rec.end(), e.begin(), e.end());
    }
    rec[1] = (uint16_t)(rec.size() * 2);
    hdr[3] = std::max<int32_t>(hdr[3], rec[1]);
    stream.insert(stream.end(), rec.begin(), rec.end());
  }
  std::string out((const char*)hdr, sizeof hdr);
  out.append((const char*)stream.data(), stream.size() * 2);
  return out;
}

class EvalTask : public ::testing::Test {
 protected:
  TempDir d;
  ByteTokenizer byte;
  std::string put(const std::string& name, const std::string& text) {
    write_file(d / name, text);
    return d / name;
  }
};

TEST_F(EvalTask, HellaSwagJsonlWithTheHarnessSplit) {
  const std::string p = put("hs.jsonl",
                            R"({"ctx": "A man sits.", "endings": ["He eats.", "Café!"], "label": 1})"
                            "\n\n"
                            R"({"ctx": "Dogs run ", "endings": ["fast", "far"], "label": 0})"
                            "\n");
  McTask t = load_mc_task("hs", p, byte, 257);
  EXPECT_EQ(t.format, "hellaswag-jsonl");
  ASSERT_EQ(t.examples.size(), 2u);
  EXPECT_EQ(t.max_endings, 2u);
  const McExample& a = t.examples[0];
  EXPECT_EQ(a.line, 1);
  EXPECT_EQ(a.label, 1);
  EXPECT_EQ(a.context, bytes("A man sits."));
  EXPECT_EQ(a.endings[0], bytes(" He eats."));
  EXPECT_EQ(a.endings[1], bytes(" Café!"));
  // Characters, not bytes: "Café!" is 5 code points in 6 bytes.
  EXPECT_EQ(a.ending_chars[0], 8u);
  EXPECT_EQ(a.ending_chars[1], 5u);
  // The blank line is skipped but counted; the trailing space moves to the continuation.
  const McExample& b = t.examples[1];
  EXPECT_EQ(b.line, 3);
  EXPECT_EQ(b.context, bytes("Dogs run"));
  EXPECT_EQ(b.endings[0], bytes("  fast"));
  EXPECT_EQ(b.ending_chars[0], 4u);
}

TEST_F(EvalTask, GenericJsonlEmptyContextIsEndOfText) {
  const std::string p =
      put("g.jsonl", R"({"context": "", "choices": ["a", "bb", "ccc"], "label": "2"})" "\n");
  McTask t = load_mc_task("g", p, byte, 257);
  EXPECT_EQ(t.format, "generic-jsonl");
  ASSERT_EQ(t.examples.size(), 1u);
  EXPECT_EQ(t.examples[0].context, std::vector<uint32_t>{256});
  EXPECT_EQ(t.examples[0].label, 2);
  EXPECT_EQ(t.max_endings, 3u);
}

TEST_F(EvalTask, ShippedTestFilesLoad) {
  McTask h = load_mc_task("h", RATCHET_TESTS_DIR "/data/eval/hellaswag_tiny.jsonl", byte, 257);
  EXPECT_EQ(h.examples.size(), 6u);
  McTask g = load_mc_task("g", RATCHET_TESTS_DIR "/data/eval/generic_tiny.jsonl", byte, 257);
  EXPECT_EQ(g.examples.size(), 4u);
  EXPECT_EQ(g.max_endings, 5u);
}

TEST_F(EvalTask, GPT2TokenizationMatchesEncodingTheWholeString) {
  Gpt2Tokenizer gpt2(default_gpt2_dir() + "/encoder.json", default_gpt2_dir() + "/vocab.bpe");
  const std::string p =
      put("g.jsonl", R"({"context": "The cat sat on the", "choices": ["mat.", "dog"], "label": 0})"
                     "\n");
  McTask t = load_mc_task("g", p, gpt2, 50257);
  const McExample& e = t.examples[0];
  const auto whole = gpt2.encode("The cat sat on the mat.");
  std::vector<uint32_t> joined = e.context;
  joined.insert(joined.end(), e.endings[0].begin(), e.endings[0].end());
  EXPECT_EQ(joined, whole);
  EXPECT_EQ(e.endings[1].size(), 1u) << "' dog' is one GPT-2 token";
}

TEST_F(EvalTask, LlmcBin) {
  const std::string p = put("hs.bin", llmc_bin({{{464, 3797}, {{3332}, {319, 262}, {13}, {11}}, 2},
                                                {{40}, {{1}, {2}, {3}, {4}}, 0}}));
  Gpt2Tokenizer gpt2(default_gpt2_dir() + "/encoder.json", default_gpt2_dir() + "/vocab.bpe");
  McTask t = load_mc_task("b", p, gpt2, 50257);
  EXPECT_EQ(t.format, "llmc-bin");
  ASSERT_EQ(t.examples.size(), 2u);
  EXPECT_EQ(t.examples[0].context, (std::vector<uint32_t>{464, 3797}));
  EXPECT_EQ(t.examples[0].endings[1], (std::vector<uint32_t>{319, 262}));
  EXPECT_EQ(t.examples[0].label, 2);
  EXPECT_EQ(t.examples[1].line, 2);
  // " sat" -> "sat" (3 characters); " on the" -> "on the" (6)
  EXPECT_EQ(t.examples[0].ending_chars[0], 3u);
  EXPECT_EQ(t.examples[0].ending_chars[1], 6u);
  // GPT-2 ids need the GPT-2 tokenizer, and a vocab that holds them.
  expect_error([&] { load_mc_task("b", p, byte, 257); }, {p, "GPT-2", "--tokenizer gpt2"});
  expect_error([&] { load_mc_task("b", p, gpt2, 1000); }, {p, "record 1", "3797", "vocab of 1000"});
}

TEST_F(EvalTask, LlmcBinCorruption) {
  Gpt2Tokenizer gpt2(default_gpt2_dir() + "/encoder.json", default_gpt2_dir() + "/vocab.bpe");
  const std::string good = llmc_bin({{{464}, {{1}, {2}}, 1}, {{464}, {{1}, {2}}, 0}});
  expect_error([&] { load_mc_task("b", put("t.bin", good.substr(0, good.size() - 2)), gpt2, 50257); },
               {"record 2", "truncated"});
  expect_error([&] { load_mc_task("b", put("x.bin", good + "ab"), gpt2, 50257); },
               {"bytes after its 2 examples"});
  std::string bad_label = good;
  bad_label[1024 + 6] = 7;  // record 1's label
  expect_error([&] { load_mc_task("b", put("l.bin", bad_label), gpt2, 50257); },
               {"record 1", "label 7 is out of range"});
  std::string bad_start = good;
  bad_start[1024] = 0;
  expect_error([&] { load_mc_task("b", put("s.bin", bad_start), gpt2, 50257); },
               {"record 1", "65535"});
  expect_error([&] { load_mc_task("b", put("h.bin", good.substr(0, 100)), gpt2, 50257); },
               {"1024-byte header"});
}

TEST_F(EvalTask, BadLinesAreNamed) {
  const std::string ok = R"({"ctx": "a", "endings": ["b", "c"], "label": 0})" "\n";
  struct Case {
    std::string line;
    std::vector<std::string> parts;
  } cases[] = {
      {R"({"ctx": "a", "endings": ["b", "c"], "label": 2})", {"line 2", "label 2 is out of range", "0..1"}},
      {R"({"ctx": "a", "endings": ["b", "c"], "label": -1})", {"line 2", "label -1"}},
      {R"({"ctx": "a", "endings": ["b", "c"], "label": "x"})", {"line 2", "`label` must be an integer"}},
      {R"({"ctx": "a", "endings": ["b", "c"]})", {"line 2", "no `label`"}},
      {R"({"ctx": "a", "endings": ["b"], "label": 0})", {"line 2", "at least 2"}},
      {R"({"ctx": "a", "endings": ["b", 3], "label": 0})", {"line 2", "not a string"}},
      {R"({"ctx": 5, "endings": ["b", "c"], "label": 0})", {"line 2", "`ctx`", "not a string"}},
      {R"({"ctx": "a", "endings": ["b", "c"], "label": 0)", {"line 2", "not a JSON object"}},
      {R"([1, 2])", {"line 2", "not a JSON object"}},
      {"{\"ctx\": \"a\xff\", \"endings\": [\"b\", \"c\"], \"label\": 0}", {"line 2", "not valid UTF-8"}},
      {"{\"ctx\": \"\xc0\xaf\", \"endings\": [\"b\", \"c\"], \"label\": 0}", {"line 2", "UTF-8"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    const std::string p = put("bad.jsonl", ok + c.line + "\n" + ok);
    auto parts = c.parts;
    parts.push_back(p);
    expect_error([&] { load_mc_task("t", p, byte, 257); }, parts);
  }
  expect_error([&] { load_mc_task("t", put("e.jsonl", ""), byte, 257); }, {"is empty"});
  expect_error([&] { load_mc_task("t", put("b.jsonl", "\n  \n"), byte, 257); }, {"no examples"});
  expect_error([&] { load_mc_task("t", d / "missing.jsonl", byte, 257); }, {"missing.jsonl", "no such file"});
  expect_error([&] { load_mc_task("t", d.path, byte, 257); }, {d.path, "not a regular file"});
  expect_error([&] { load_mc_task("t", "/dev/zero", byte, 257); }, {"/dev/zero", "not a regular file"});
  // A model whose vocab cannot hold the tokenizer's ids.
  expect_error([&] { load_mc_task("t", put("v.jsonl", ok), byte, 50); },
               {"line 1", "97", "outside the model's vocab of 50", "--tokenizer"});
}

TEST(EvalNames, ParseNamedPathAndMetricNames) {
  auto [n, p] = parse_named_path("--task", "hs=a=b.jsonl");
  EXPECT_EQ(n, "hs");
  EXPECT_EQ(p, "a=b.jsonl");
  for (const char* bad : {"hs", "=x", "hs=", "a/b=x", "a b=x"})
    expect_error([&] { parse_named_path("--task", bad); }, {"--task", bad});
  McScores s;
  s.n = 10, s.acc = 0.5, s.acc_se = 0.1;
  OrderedJson j;
  append_metrics(j, "hs", s);
  DataScores ds;
  ds.loss = 2, ds.ppl = std::exp(2.0), ds.tokens = 7;
  append_metrics(j, "val", ds);
  for (const char* k : {"hs/acc", "hs/acc_se", "hs/acc_norm", "hs/acc_norm_se", "hs/acc_token_mean",
                        "hs/acc_token_mean_se", "hs/n", "data/val/loss", "data/val/ppl",
                        "data/val/tokens"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["hs/acc"].get<double>(), 0.5);
  EXPECT_EQ(j["data/val/tokens"].get<long>(), 7);
}

}  // namespace

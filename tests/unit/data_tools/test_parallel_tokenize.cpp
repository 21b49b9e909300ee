// tokenize_parallel (OpenMP) against the tokenizer run on each whole document:
// equal ids for any thread count, also when long documents are cut into many
// pieces, and an exception thrown by the tokenizer in a worker thread reaches
// the caller instead of terminating the process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/gpt2_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "data_tools/parallel_tokenize.h"
#include "data_tools/shard_pipeline.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

// Debian's fortunes: real text with newlines between printable characters
// (where gpt2 may be cut), as one long document plus its short pieces.
std::vector<std::string> documents() {
  std::string text;
  for (const char* name : {"fortunes", "literature", "riddles"})
    text += read_file(std::string("/usr/share/games/fortunes/") + name);
  EXPECT_GT(text.size(), 50000u) << "fortunes missing: run scripts/install-deps.sh";
  std::vector<std::string> docs{text};
  for (size_t i = 0; i + 3000 < text.size(); i += 7919) docs.push_back(text.substr(i, 3000));
  docs.push_back("");
  return docs;
}

void expect_equal_for_any_thread_count(const Tokenizer& tok) {
  const std::vector<std::string> docs = documents();
  std::vector<const std::string*> ptrs;
  for (const auto& d : docs) ptrs.push_back(&d);
  // 1 KiB pieces: the long document becomes dozens of tasks.
  ASSERT_GT(safe_cuts(tok, docs[0], 1024).size(), 20u) << tok.name();
  std::vector<std::vector<uint32_t>> want;
  for (const auto& d : docs) want.push_back(tok.encode(d));
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::vector<uint32_t>> got;
    tokenize_parallel(tok, ptrs, threads, got, 1024);
    EXPECT_EQ(got, want) << tok.name() << ", " << threads << " threads";
  }
}

// Throws on any text holding "boom"; the others go through the byte tokenizer.
class FailingTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "failing"; }
  int vocab_size() const override { return 257; }
  int eot_token() const override { return 256; }
  std::vector<uint32_t> encode(const std::string& text) const override {
    if (text.find("boom") != std::string::npos) throw std::runtime_error("boom in a worker");
    return std::vector<uint32_t>(text.begin(), text.end());
  }
  std::string decode(const std::vector<uint32_t>&) const override { return ""; }
};

TEST(ParallelTokenize, ByteIdsEqualWholeDocumentsForAnyThreadCount) {
  expect_equal_for_any_thread_count(*make_tokenizer("byte"));
}

TEST(ParallelTokenize, Gpt2IdsEqualWholeDocumentsForAnyThreadCount) {
  const std::string dir = default_gpt2_dir();
  expect_equal_for_any_thread_count(Gpt2Tokenizer(dir + "/encoder.json", dir + "/vocab.bpe"));
}

TEST(ParallelTokenize, AWorkerExceptionReachesTheCaller) {
  std::vector<std::string> docs(64, "fine text");
  docs[37] = "a boom here";
  std::vector<const std::string*> ptrs;
  for (const auto& d : docs) ptrs.push_back(&d);
  std::vector<std::vector<uint32_t>> out;
  FailingTokenizer tok;
  try {
    tokenize_parallel(tok, ptrs, 4, out);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom in a worker");
  }
}

}  // namespace

// DocumentCutter's parts of a long document tile it and their ids joined
// are the whole document's; a tokenizer without known cut points is never cut.
TEST(DocumentCutter, PartsTileTheDocumentAndKeepItsIds) {
  const std::string dir = default_gpt2_dir();
  Gpt2Tokenizer tok(dir + "/encoder.json", dir + "/vocab.bpe");
  const std::string text = documents()[0];  // ~100 KB of fortunes
  const DocumentCutter cutter(tok);
  const std::vector<TextCut> cuts = cutter.cuts(text, 4096);
  ASSERT_GT(cuts.size(), 10u);
  std::vector<uint32_t> joined;
  size_t at = 0;
  for (const TextCut& c : cuts) {
    EXPECT_GE(c.end, at + 4096);
    EXPECT_EQ(c.resume, c.end);  // gpt2 never skips a byte
    std::vector<uint32_t> ids = tok.encode(text.substr(at, c.end - at));
    joined.insert(joined.end(), ids.begin(), ids.end());
    at = c.resume;
  }
  std::vector<uint32_t> ids = tok.encode(text.substr(at));
  joined.insert(joined.end(), ids.begin(), ids.end());
  EXPECT_EQ(joined, tok.encode(text));
  // Cuts found while the text arrives (complete = false) are cuts of the whole.
  TextCut first;
  ASSERT_TRUE(cutter.find(std::string_view(text).substr(0, 20000), 4096, false, &first));
  EXPECT_EQ(first, cuts[0]);
  class Opaque final : public Tokenizer {
   public:
    std::string name() const override { return "opaque"; }
    int vocab_size() const override { return 257; }
    int eot_token() const override { return 256; }
    std::vector<uint32_t> encode(const std::string&) const override { return {}; }
    std::string decode(const std::vector<uint32_t>&) const override { return ""; }
  } opaque;
  EXPECT_FALSE(DocumentCutter(opaque).can_cut());
  EXPECT_TRUE(DocumentCutter(opaque).cuts(text, 4096).empty());
}

// The single-document train/val cut computed from (length, last newline)
// while streaming equals the one computed on the whole text.
TEST(SingleDocumentCut, FromLengthAndLastNewlineEqualsWholeText) {
  for (const std::string& t : {std::string("abcdefghij"), std::string("ab\ncdefghij"),
                               std::string("abcdefgh\nij"), std::string("abcdefghij\n"),
                               std::string("a\nb\nc\nd\ne\nf\ng\n"), std::string("\n\n\n\n")}) {
    for (double f : {0.1, 0.3, 0.5, 0.9}) {
      // the reference: text_source's rule, written out
      const size_t n = t.size();
      size_t cut = std::clamp<size_t>((size_t)std::floor((1.0 - f) * (double)n), 1, n - 1), want;
      size_t nl = t.find('\n', cut - 1);
      if (nl != std::string::npos && nl + 1 < n) {
        want = nl + 1;
      } else {
        nl = t.rfind('\n', cut - 1);
        want = nl != std::string::npos && nl + 1 < n ? nl + 1 : cut;
      }
      EXPECT_EQ(single_document_cut(t, f, "x"), want) << t << " " << f;
    }
  }
}

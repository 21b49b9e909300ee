// tokenize_parallel (OpenMP) against the tokenizer run on each whole document:
// equal ids for any thread count, also when long documents are cut into many
// pieces, and an exception thrown by the tokenizer in a worker thread reaches
// the caller instead of terminating the process.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/gpt2_tokenizer.h"
#include "data/tokenizer.h"
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

// `ratchet shard` cuts long documents (and the train/val parts of a single
// one) into parts at safe_cuts: the parts tile each piece, carry its
// first/last flags, and their ids joined are the whole piece's.
TEST(CutLongPieces, PartsTileThePieceAndKeepItsIds) {
  const std::string dir = default_gpt2_dir();
  Gpt2Tokenizer tok(dir + "/encoder.json", dir + "/vocab.bpe");
  TextCorpus corpus;
  corpus.documents.push_back({documents()[0], 0, 0});  // ~100 KB of fortunes
  corpus.documents.push_back({"short one", 0, 0});
  const std::string& text = corpus.documents[0].text;
  const size_t cut = text.size() / 3;
  std::vector<ShardPiece> pieces{{0, 0, cut, false}, {0, cut, text.size(), true}, {1, 0, 9, false}};
  std::vector<ShardPiece> parts = cut_long_pieces(pieces, corpus, tok, 4096);
  ASSERT_GT(parts.size(), 10u);
  size_t k = 0;
  for (const ShardPiece& p : pieces) {
    std::vector<uint32_t> joined;
    size_t at = p.begin;
    bool first = true;
    for (;;) {
      ASSERT_LT(k, parts.size());
      const ShardPiece& q = parts[k++];
      EXPECT_EQ(q.doc, p.doc);
      EXPECT_EQ(q.val, p.val);
      EXPECT_EQ(q.begin, at);
      EXPECT_EQ(q.first, first);
      first = false;
      std::vector<uint32_t> ids = tok.encode(corpus.documents[q.doc].text.substr(q.begin, q.end - q.begin));
      joined.insert(joined.end(), ids.begin(), ids.end());
      at = q.end;
      if (q.last) break;
    }
    EXPECT_EQ(at, p.end);
    EXPECT_EQ(joined, tok.encode(corpus.documents[p.doc].text.substr(p.begin, p.end - p.begin)));
  }
  EXPECT_EQ(k, parts.size());
  // A tokenizer without known cut points keeps its pieces whole.
  class Opaque final : public Tokenizer {
   public:
    std::string name() const override { return "opaque"; }
    int vocab_size() const override { return 257; }
    int eot_token() const override { return 256; }
    std::vector<uint32_t> encode(const std::string&) const override { return {}; }
    std::string decode(const std::vector<uint32_t>&) const override { return ""; }
  } opaque;
  EXPECT_EQ(cut_long_pieces(pieces, corpus, opaque, 4096).size(), pieces.size());
}

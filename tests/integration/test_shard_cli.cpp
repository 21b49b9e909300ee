// `ratchet shard` end to end: text files in, shards out that TokenDataset
// reads back to the same text; bad inputs exit with code 2 and a message
// naming the flag or file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenizer/byte_tokenizer.h"
#include "data/shard_reader.h"
#include "data/token_dataset.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

const std::string kText =
    "In the beginning God created the heaven and the earth.\n"
    "And the earth was without form, and void; and darkness was upon the face of the deep.\n"
    "And the Spirit of God moved upon the face of the waters.\n"
    "And God said, Let there be light: and there was light.\n"
    "And God saw the light, that it was good: and God divided the light from the darkness.\n";

std::vector<int32_t> stream_of(const std::string& pattern) {
  TokenDataset d(pattern, "--train-data");
  std::vector<int32_t> t(d.num_tokens());
  d.read(0, t.size(), t.data());
  return t;
}

std::vector<int32_t> bytes_then_eot(const std::string& s) {
  std::vector<int32_t> t(s.begin(), s.end());
  for (auto& v : t) v = (unsigned char)v;
  t.push_back(ByteTokenizer::kEot);
  return t;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> n;
  for (const auto& e : fs::directory_iterator(dir)) n.push_back(e.path().filename());
  std::sort(n.begin(), n.end());
  return n;
}

void expect_usage_error(const RunResult& r, const std::vector<std::string>& needles) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
  for (const auto& n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << n << "\n" << r.output;
}

}  // namespace

TEST(ShardCli, SingleFileSplitsAtALineAndReadsBack) {
  TempDir dir;
  write_file(dir / "book.txt", kText);
  RunResult r = run_ratchet("shard --tokenizer byte --input " + (dir / "book.txt") +
                            " --output-dir " + (dir / "data") + " --val-fraction 0.3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(names_in(dir / "data"), (std::vector<std::string>{"train_000000.h5", "val_000000.h5"}));
  EXPECT_NE(r.output.find(dir / "data/train_000000.h5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir / "data/val_000000.h5"), std::string::npos) << r.output;

  // Train + val hold the whole text, cut at a line start near 70%.
  std::vector<int32_t> train = stream_of(dir / "data/train_*.h5");
  std::vector<int32_t> val = stream_of(dir / "data/val_*.h5");
  ASSERT_GE(train.size(), 2u);
  ASSERT_GE(val.size(), 2u);
  EXPECT_EQ(train.back(), ByteTokenizer::kEot);
  EXPECT_EQ(train[train.size() - 2], '\n');
  size_t cut = train.size() - 1;
  EXPECT_EQ(train, bytes_then_eot(kText.substr(0, cut)));
  EXPECT_EQ(val, bytes_then_eot(kText.substr(cut)));
  double val_share = (double)(kText.size() - cut) / kText.size();
  EXPECT_GT(val_share, 0.15);
  EXPECT_LT(val_share, 0.45);

  ShardFile f(dir / "data/train_000000.h5");
  EXPECT_EQ(f.meta().tokenizer, "byte");
  EXPECT_EQ(f.meta().vocab_size, 257);
  EXPECT_EQ(f.read_doc_offsets(), std::vector<uint64_t>{0});
}

TEST(ShardCli, ValFractionZeroAndStdin) {
  TempDir dir;
  write_file(dir / "in.txt", kText);
  RunResult r = run_shell("cat " + (dir / "in.txt") + " | " + RATCHET_EXE +
                          " shard --input - --output-dir " + (dir / "out") + " --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(names_in(dir / "out"), std::vector<std::string>{"train_000000.h5"});
  EXPECT_EQ(stream_of(dir / "out/train_*.h5"), bytes_then_eot(kText));
}

TEST(ShardCli, ManyFilesSplitByDocumentDeterministically) {
  TempDir dir;
  std::string inputs;
  for (int i = 0; i < 10; i++) {
    std::string name = dir / ("doc" + std::to_string(i) + ".txt");
    write_file(name, "document " + std::to_string(i) + "\n");
    inputs += " " + name;
  }
  auto shard = [&](const std::string& out, int seed) {
    RunResult r = run_ratchet("shard --input" + inputs + " --output-dir " + (dir / out) +
                              " --val-fraction 0.2 --seed " + std::to_string(seed));
    EXPECT_EQ(r.exit_code, 0) << r.output;
  };
  shard("a", 1);
  shard("b", 1);
  shard("c", 2);
  EXPECT_EQ(ShardFile(dir / "a/train_000000.h5").read_doc_offsets().size(), 8u);
  EXPECT_EQ(ShardFile(dir / "a/val_000000.h5").read_doc_offsets().size(), 2u);
  EXPECT_EQ(stream_of(dir / "a/train_*.h5"), stream_of(dir / "b/train_*.h5"));
  EXPECT_EQ(stream_of(dir / "a/val_*.h5"), stream_of(dir / "b/val_*.h5"));
  EXPECT_NE(stream_of(dir / "a/val_*.h5"), stream_of(dir / "c/val_*.h5"));
  // Every document lands in exactly one split.
  std::vector<int32_t> a_train = stream_of(dir / "a/train_*.h5"), a_val = stream_of(dir / "a/val_*.h5");
  for (int i = 0; i < 10; i++) {
    std::vector<int32_t> doc = bytes_then_eot("document " + std::to_string(i) + "\n");
    bool in_train = std::search(a_train.begin(), a_train.end(), doc.begin(), doc.end()) != a_train.end();
    bool in_val = std::search(a_val.begin(), a_val.end(), doc.begin(), doc.end()) != a_val.end();
    EXPECT_NE(in_train, in_val) << "document " << i;
  }
}

TEST(ShardCli, ShardTokensCutsSeveralFilesOfTheSameStream) {
  TempDir dir;
  write_file(dir / "book.txt", kText);
  RunResult r = run_ratchet("shard --input " + (dir / "book.txt") + " --output-dir " +
                            (dir / "small") + " --val-fraction 0 --shard-tokens 100");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t want_shards = (kText.size() + 1 + 99) / 100;
  EXPECT_EQ(names_in(dir / "small").size(), want_shards);
  EXPECT_TRUE(fs::exists(dir / "small/train_000001.h5"));
  EXPECT_EQ(stream_of(dir / "small/train_*.h5"), bytes_then_eot(kText));
}

TEST(ShardCli, ExistingShardsNeedOverwrite) {
  TempDir dir;
  write_file(dir / "book.txt", kText);
  std::string cmd = "shard --input " + (dir / "book.txt") + " --output-dir " + (dir / "d") +
                    " --val-fraction 0 --shard-tokens 100";
  ASSERT_EQ(run_ratchet(cmd).exit_code, 0);
  write_file(dir / "short.txt", "short\n");
  std::string again = "shard --input " + (dir / "short.txt") + " --output-dir " + (dir / "d") +
                      " --val-fraction 0";
  expect_usage_error(run_ratchet(again), {"--output-dir", dir / "d", "--overwrite"});
  RunResult r = run_ratchet(again + " --overwrite");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(names_in(dir / "d"), std::vector<std::string>{"train_000000.h5"});  // stale ones gone
  EXPECT_EQ(stream_of(dir / "d/train_*.h5"), bytes_then_eot("short\n"));
}

TEST(ShardCli, HelpShowsExamples) {
  RunResult r = run_ratchet("shard --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Examples"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--val-fraction"), std::string::npos) << r.output;
}

TEST(ShardCli, BadInputsExitWithCode2AndSayWhich) {
  TempDir dir;
  write_file(dir / "book.txt", kText);
  write_file(dir / "empty.txt", "");
  write_file(dir / "a_file", "x");
  const std::string out = " --output-dir " + (dir / "out");
  const std::string book = " --input " + (dir / "book.txt");

  expect_usage_error(run_ratchet("shard --input " + (dir / "nope.txt") + out),
                     {"--input", dir / "nope.txt", "No such file"});
  expect_usage_error(run_ratchet("shard --input '" + (dir / "nope*.txt") + "'" + out),
                     {"--input", "nope*.txt", "matches no file"});
  fs::create_directory(dir / "emptydir");
  expect_usage_error(run_ratchet("shard --input " + (dir / "emptydir") + out),
                     {"--input", "directory", "emptydir", "no files"});
  expect_usage_error(run_ratchet("shard --input " + (dir / "empty.txt") + out),
                     {"--input", dir / "empty.txt", "empty"});
  expect_usage_error(run_ratchet("shard --tokenizer gpt9" + book + out),
                     {"--tokenizer", "gpt9", "byte"});
  expect_usage_error(run_ratchet("shard --val-fraction 1" + book + out), {"--val-fraction", "1"});
  expect_usage_error(run_ratchet("shard --val-fraction -0.1" + book + out),
                     {"--val-fraction", "-0.1"});
  expect_usage_error(run_ratchet("shard --val-fraction abc" + book + out), {"val-fraction"});
  expect_usage_error(run_ratchet("shard" + book + " --output-dir " + (dir / "a_file/sub")),
                     {"--output-dir", dir / "a_file/sub"});
  expect_usage_error(run_ratchet("shard" + book), {"output-dir"});
  expect_usage_error(run_ratchet("shard" + out), {"input"});
  expect_usage_error(run_ratchet("shard --bogus" + book + out), {"--bogus"});
  expect_usage_error(run_ratchet("shard --shard-tokens 0" + book + out), {"--shard-tokens"});
  EXPECT_FALSE(fs::exists(dir / "out/train_000000.h5"));
}

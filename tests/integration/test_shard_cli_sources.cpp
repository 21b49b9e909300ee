// `ratchet shard` beyond plain files: directories, JSONL, separator and
// blank-line documents, the gpt2 tokenizer, dedup and its report, provenance
// attributes, identical output for 1 and 2 threads (h5dump and bytes), the
// progress bar, and bad input: invalid UTF-8, empty documents, malformed
// vocabulary files, unwritable output directory, a full disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenizer/gpt2_tokenizer.h"
#include "data/shard_format.h"
#include "data/shard_reader.h"
#include "core/sha256.h"
#include "data/token_dataset.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

std::vector<int32_t> stream_of(const std::string& pattern) {
  TokenDataset d(pattern, "--train-data");
  std::vector<int32_t> t(d.num_tokens());
  d.read(0, t.size(), t.data());
  return t;
}

// Documents of a byte-tokenized stream, split at eot (256).
std::vector<std::string> byte_docs(const std::vector<int32_t>& s) {
  std::vector<std::string> docs(1);
  for (int32_t t : s) {
    if (t == 256)
      docs.emplace_back();
    else
      docs.back().push_back((char)t);
  }
  docs.pop_back();
  return docs;
}

void expect_error(const RunResult& r, const std::vector<std::string>& needles, int code = 2) {
  EXPECT_EQ(r.exit_code, code) << r.output;
  for (const auto& n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << n << "\n" << r.output;
}

const Gpt2Tokenizer& gpt2() {
  static Gpt2Tokenizer* t = new Gpt2Tokenizer(default_gpt2_dir() + "/encoder.json",
                                              default_gpt2_dir() + "/vocab.bpe");
  return *t;
}

}  // namespace

TEST(ShardCliSources, DirectoryJsonlSeparatorAndBlankLines) {
  TempDir dir;
  fs::create_directories(dir / "corpus/sub");
  write_file(dir / "corpus/b.txt", "bee\n");
  write_file(dir / "corpus/sub/a.txt", "ay\n");
  write_file(dir / "corpus/.hidden", "never\n");
  RunResult r = run_ratchet("shard --input " + (dir / "corpus") + " --output-dir " + (dir / "o1") +
                            " --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(byte_docs(stream_of(dir / "o1/train_*.h5")), (std::vector<std::string>{"bee\n", "ay\n"}));

  write_file(dir / "c.jsonl",
             "{\"id\": 1, \"text\": \"first \\\"doc\\\"\\n\", \"meta\": {\"x\": [1, 2]}}\n"
             "\n"
             "{\"text\": \"caf\\u00e9 \\ud83d\\ude00\"}\n"
             "{\"text\": \"   \"}\n");
  r = run_ratchet("shard --input " + (dir / "c.jsonl") + " --jsonl-field text --output-dir " +
                  (dir / "o2") + " --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipped 1 empty document"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("c.jsonl:4"), std::string::npos) << r.output;
  EXPECT_EQ(byte_docs(stream_of(dir / "o2/train_*.h5")),
            (std::vector<std::string>{"first \"doc\"\n", "caf\xC3\xA9 \xF0\x9F\x98\x80"}));

  write_file(dir / "f.txt", "one\n%\ntwo\nlines\n%\n%\nthree\n");
  r = run_ratchet("shard --input " + (dir / "f.txt") + " --separator % --output-dir " +
                  (dir / "o3") + " --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(byte_docs(stream_of(dir / "o3/train_*.h5")),
            (std::vector<std::string>{"one\n", "two\nlines\n", "three\n"}));
  EXPECT_EQ(ShardFile(dir / "o3/train_000000.h5").read_doc_offsets(),
            (std::vector<uint64_t>{0, 5, 16}));

  write_file(dir / "p.txt", "para one\nstill one\n\n\n  \npara two\n");
  r = run_ratchet("shard --input " + (dir / "p.txt") + " --blank-lines --output-dir " +
                  (dir / "o4") + " --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(byte_docs(stream_of(dir / "o4/train_*.h5")),
            (std::vector<std::string>{"para one\nstill one\n", "para two\n"}));

  // JSONL from stdin.
  r = run_shell("printf '{\"t\": \"x\"}\\n{\"t\": \"y\"}\\n' | " + std::string(RATCHET_EXE) +
                " shard --input - --jsonl-field t --output-dir " + (dir / "o5") + " --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(byte_docs(stream_of(dir / "o5/train_*.h5")), (std::vector<std::string>{"x", "y"}));
}

TEST(ShardCliSources, Gpt2ShardsMatchTheTokenizerAndRecordProvenance) {
  TempDir dir;
  std::string a = "Hello world! It's 2024.\n", b = "Ünïcödé text 😀 and <|endoftext|> inside.\n";
  write_file(dir / "a.txt", a);
  write_file(dir / "b.txt", b);
  RunResult r = run_ratchet("shard --tokenizer gpt2 --input " + (dir / "a.txt") + " " +
                            (dir / "b.txt") + " --output-dir " + (dir / "o") + " --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<int32_t> want;
  for (const std::string& t : {a, b}) {
    for (uint32_t id : gpt2().encode(t)) want.push_back((int32_t)id);
    want.push_back(50256);
  }
  EXPECT_EQ(stream_of(dir / "o/train_*.h5"), want);
  ShardFile f(dir / "o/train_000000.h5");
  EXPECT_EQ(f.meta().tokenizer, "gpt2");
  EXPECT_EQ(f.meta().vocab_size, 50257);
  EXPECT_EQ(f.meta().eot_token, 50256);
  EXPECT_EQ(f.string_array_attr(shard_format::kAttrSourceFiles),
            (std::vector<std::string>{dir / "a.txt", dir / "b.txt"}));
  EXPECT_EQ(f.string_array_attr(shard_format::kAttrSourceSha256),
            (std::vector<std::string>{sha256_hex(a), sha256_hex(b)}));
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(f.string_array_attr(shard_format::kAttrTokenizerFiles).size(), 2u);
  EXPECT_NE(f.string_attr(shard_format::kAttrToolVersion).value_or("").find("ratchet"),
            std::string::npos);
  EXPECT_EQ(f.int_attr(shard_format::kAttrMaxToken).value_or(-1),
            *std::max_element(want.begin(), want.end()));

  // h5ls and h5dump read it.
  RunResult ls = run_shell("h5ls -v " + (dir / "o/train_000000.h5"));
  EXPECT_EQ(ls.exit_code, 0) << ls.output;
  EXPECT_NE(ls.output.find("doc_offsets"), std::string::npos) << ls.output;
  EXPECT_NE(ls.output.find("tokens"), std::string::npos) << ls.output;
  RunResult dump = run_shell("h5dump -a source_sha256 " + (dir / "o/train_000000.h5"));
  EXPECT_EQ(dump.exit_code, 0) << dump.output;
  EXPECT_NE(dump.output.find(sha256_hex(a)), std::string::npos) << dump.output;
}

TEST(ShardCliSources, SameOutputForOneAndTwoThreads) {
  TempDir dir;
  // The King James Bible split into books-ish documents plus one big
  // document (cut into pieces for parallel tokenization).
  RunResult bible = run_shell("bible -f 'Gen1:1-Rev22:21' > " + (dir / "kjv.txt"));
  ASSERT_EQ(bible.exit_code, 0) << "bible (bible-kjv) missing: run scripts/install-deps.sh";
  for (const char* tok : {"gpt2", "byte"})
    for (int threads : {1, 2}) {
      std::string out = dir / (std::string(tok) + std::to_string(threads));
      RunResult r = run_ratchet("shard --tokenizer " + std::string(tok) + " --input " +
                                (dir / "kjv.txt") + " /usr/share/games/fortunes/fortunes" +
                                " --output-dir " + out + " --threads " + std::to_string(threads) +
                                " --shard-tokens 400000 --val-fraction 0 --dedup near");
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
  for (const char* tok : {"gpt2", "byte"}) {
    std::string one = dir / (std::string(tok) + "1"), two = dir / (std::string(tok) + "2");
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(one)) names.push_back(e.path().filename());
    ASSERT_GE(names.size(), 3u);  // several shards + the dedup report
    for (const auto& n : names) {
      if (n.find(".h5") != std::string::npos) {
        EXPECT_EQ(read_file(one + "/" + n), read_file(two + "/" + n)) << tok << " " << n;
      }
    }
    // h5dump reads them and prints the same (from inside each directory, as
    // it prints the path too); the last shard is short, so this is quick.
    std::string last;
    for (const auto& n : names)
      if (n.find(".h5") != std::string::npos) last = std::max(last, n);
    RunResult d1 = run_shell("cd " + one + " && h5dump " + last + " | md5sum");
    RunResult d2 = run_shell("cd " + two + " && h5dump " + last + " | md5sum");
    EXPECT_EQ(d1.exit_code, 0) << d1.output;
    EXPECT_EQ(d1.output, d2.output) << tok;
  }
  // The gpt2 stream equals tokenizing the text directly.
  std::vector<int32_t> got = stream_of(dir / "gpt21/train_*.h5");
  std::vector<uint32_t> want = gpt2().encode(read_file(dir / "kjv.txt"));
  ASSERT_GT(got.size(), want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin()));
  EXPECT_EQ(got[want.size()], 50256);
}

TEST(ShardCliSources, DedupRemovesPlantedDuplicatesAndReports) {
  TempDir dir;
  std::string base;
  for (int i = 0; i < 60; i++) base += "word" + std::to_string(i * 7 % 13) + std::to_string(i) + " ";
  std::string near = base;
  near.replace(near.find("word"), 4, "WORT");  // one word of 60 changed
  std::string text = "unique one\n%\n" + base + "\n%\nUNIQUE   ONE\n%\n" + near + "\n%\nother\n";
  write_file(dir / "d.txt", text);
  RunResult r = run_ratchet("shard --input " + (dir / "d.txt") + " --separator % --dedup near " +
                            "--output-dir " + (dir / "o") + " --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("5 documents in, 1 exact and 1 near"), std::string::npos) << r.output;
  EXPECT_EQ(byte_docs(stream_of(dir / "o/train_*.h5")),
            (std::vector<std::string>{"unique one\n", base + "\n", "other\n"}));
  const std::vector<nlohmann::json> rep = read_jsonl(dir / "o/dedup_report.jsonl");
  ASSERT_EQ(rep.size(), 2u);
  EXPECT_EQ(rep[0], (nlohmann::json{{"removed", dir / "d.txt:5"}, {"reason", "exact"},
                                    {"kept", dir / "d.txt:1"}}));
  EXPECT_EQ(rep[1]["reason"], "near");
  EXPECT_GE(rep[1]["jaccard"].get<double>(), 0.8);

  // File names are JSON strings, escaped: a quote, a backslash and UTF-8.
  const std::string odd = dir / "q\"b\\s \u00e9.txt";
  write_file(odd, "same\n%\nsame\n");
  r = run_ratchet("shard --input '" + odd + "' --separator % --dedup exact --output-dir " +
                  (dir / "o2") + " --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<nlohmann::json> rep2 = read_jsonl(dir / "o2/dedup_report.jsonl");
  ASSERT_EQ(rep2.size(), 1u);
  EXPECT_EQ(rep2[0]["removed"], odd + ":3");
  EXPECT_EQ(rep2[0]["kept"], odd + ":1");
  ShardFile f(dir / "o/train_000000.h5");
  EXPECT_EQ(f.string_attr(shard_format::kAttrDedup).value_or(""), "exact+near");
  EXPECT_EQ(f.int_attr(shard_format::kAttrDedupIn).value_or(0), 5);
  EXPECT_EQ(f.int_attr(shard_format::kAttrDedupExact).value_or(0), 1);
  EXPECT_EQ(f.int_attr(shard_format::kAttrDedupNear).value_or(0), 1);
  EXPECT_DOUBLE_EQ(f.double_attr(shard_format::kAttrDedupThreshold).value_or(0), 0.8);
}

TEST(ShardCliSources, ProgressBarWhenAsked) {
  TempDir dir;
  write_file(dir / "a.txt", "some text\n");
  RunResult r = run_ratchet("shard --input " + (dir / "a.txt") + " --output-dir " + (dir / "o") +
                            " --val-fraction 0 --progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"tokenize [", "docs/s", "tok/s", "B/s", "ETA", "100%"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  r = run_ratchet("shard --input " + (dir / "a.txt") + " --output-dir " + (dir / "o") +
                  " --val-fraction 0 --overwrite");
  EXPECT_EQ(r.output.find("ETA"), std::string::npos) << r.output;  // not a terminal: no bar
}

TEST(ShardCliSources, BadInputsNameTheFile) {
  TempDir dir;
  const std::string out = " --output-dir " + (dir / "out") + " --val-fraction 0";
  // Invalid UTF-8: tokenized losslessly, reported.
  std::string bad = "ok \xff\xfe bytes \xc3(\n";
  write_file(dir / "bad.txt", bad);
  RunResult r = run_ratchet("shard --tokenizer gpt2 --input " + (dir / "bad.txt") + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not valid UTF-8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir / "bad.txt"), std::string::npos) << r.output;
  std::vector<int32_t> s = stream_of(dir / "out/train_*.h5");
  EXPECT_EQ(gpt2().decode(std::vector<uint32_t>(s.begin(), s.end() - 1)), bad);

  // Empty documents: an error on request, and an input of only empty ones.
  write_file(dir / "e.txt", "a\n%\n\n%\nb\n");
  expect_error(run_ratchet("shard --input " + (dir / "e.txt") + " --separator % --empty-docs error" +
                           out + " --overwrite"),
               {dir / "e.txt:3", "empty"});
  write_file(dir / "blank.txt", "\n\n  \n");
  expect_error(run_ratchet("shard --input " + (dir / "blank.txt") + out + " --overwrite"),
               {"no non-empty document"});
  // JSONL problems name file:line.
  write_file(dir / "j.jsonl", "{\"text\": \"a\"}\n{\"text\": 3}\n");
  expect_error(run_ratchet("shard --input " + (dir / "j.jsonl") + " --jsonl-field text" + out +
                           " --overwrite"),
               {dir / "j.jsonl:2", "not a string"});
  write_file(dir / "k.jsonl", "{\"body\": \"a\"}\n");
  expect_error(run_ratchet("shard --input " + (dir / "k.jsonl") + " --jsonl-field text" + out +
                           " --overwrite"),
               {dir / "k.jsonl:1", "no field \"text\""});
  write_file(dir / "l.jsonl", "{\"text\": \"a\"\n");
  expect_error(run_ratchet("shard --input " + (dir / "l.jsonl") + " --jsonl-field text" + out +
                           " --overwrite"),
               {dir / "l.jsonl:1", "not valid JSONL"});
  // Strict JSON: a lone surrogate escape or invalid UTF-8 inside a string.
  write_file(dir / "s.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"a \\ud800 b\"}\n");
  expect_error(run_ratchet("shard --input " + (dir / "s.jsonl") + " --jsonl-field text" + out +
                           " --overwrite"),
               {dir / "s.jsonl:2", "not valid JSONL", "surrogate"});
  write_file(dir / "u.jsonl", "{\"text\": \"a \xff b\"}\n");
  expect_error(run_ratchet("shard --input " + (dir / "u.jsonl") + " --jsonl-field text" + out +
                           " --overwrite"),
               {dir / "u.jsonl:1", "not valid JSONL", "UTF-8"});
  expect_error(run_ratchet("shard --input " + (dir / "e.txt") + " --separator '(' " + out +
                           " --overwrite"),
               {"--separator", "regular expression"});
  // Malformed vocabulary files.
  write_file(dir / "v.json", "{not json");
  expect_error(run_ratchet("shard --tokenizer gpt2 --vocab " + (dir / "v.json") + " --input " +
                           (dir / "e.txt") + out + " --overwrite"),
               {dir / "v.json", "malformed"});
  expect_error(run_ratchet("shard --tokenizer gpt2 --merges " + (dir / "nope.bpe") + " --input " +
                           (dir / "e.txt") + out + " --overwrite"),
               {dir / "nope.bpe", "No such file"});
  expect_error(run_ratchet("shard --vocab x.json --input " + (dir / "e.txt") + out), {"--vocab", "gpt2"});
  expect_error(run_ratchet("shard --dedup fuzzy --input " + (dir / "e.txt") + out), {"--dedup", "fuzzy"});
  expect_error(run_ratchet("shard --dedup near --near-dup-threshold 0 --input " + (dir / "e.txt") + out),
               {"--near-dup-threshold"});
}

TEST(ShardCliSources, UnwritableOutputAndFullDisk) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 20000; i++) text += "line " + std::to_string(i * 7919 % 100003) + " of text\n";
  write_file(dir / "big.txt", text);
  if (geteuid() != 0) {
    fs::create_directory(dir / "ro");
    fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    expect_error(run_ratchet("shard --input " + (dir / "big.txt") + " --output-dir " + (dir / "ro")),
                 {"--output-dir", dir / "ro", "not writable"});
  }
  write_file(dir / "file", "x");
  expect_error(run_ratchet("shard --input " + (dir / "big.txt") + " --output-dir " + (dir / "file/x")),
               {"--output-dir", dir / "file/x"});
  // A file-size limit stands in for a full disk: writes fail with EFBIG.
  RunResult r = run_shell("ulimit -f 64; trap '' XFSZ; " + std::string(RATCHET_EXE) +
                          " shard --input " + (dir / "big.txt") + " --output-dir " + (dir / "full") +
                          " --val-fraction 0 --shard-tokens 100000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir / "full/train_"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cannot"), std::string::npos) << r.output;
  // Nothing is left behind: the run created --output-dir, and removes it
  // again (issue 36); into an existing directory, no partial shard and no
  // temporary files.
  EXPECT_FALSE(fs::exists(dir / "full"));
  fs::create_directory(dir / "full2");
  r = run_shell("ulimit -f 64; trap '' XFSZ; " + std::string(RATCHET_EXE) + " shard --input " +
                (dir / "big.txt") + " --output-dir " + (dir / "full2") +
                " --val-fraction 0 --shard-tokens 100000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const auto& e : fs::directory_iterator(dir / "full2")) {
    std::string n = e.path().filename();
    EXPECT_EQ(n.find(".tmp-"), std::string::npos) << n;
    if (n.find(".h5") != std::string::npos) {
      EXPECT_NO_THROW(ShardFile(e.path().string())) << n;
    }
  }
}

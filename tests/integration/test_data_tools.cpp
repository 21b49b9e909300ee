// `ratchet inspect`, `verify` and `convert` end to end: summaries and
// decoding, every verification failure with a precise message and a non-zero
// exit, and llm.c token files to HDF5 and back (byte-identical).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/h5_util.h"
#include "data_tools/llmc_tokens.h"
#include "data/shard_reader.h"
#include "data_tools/shard_writer.h"
#include "data/token_dataset.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

const ShardMeta kByte{"byte", 257, 256};

std::vector<uint32_t> bytes_of(const std::string& s) {
  std::vector<uint32_t> t;
  for (unsigned char c : s) t.push_back(c);
  return t;
}

void expect_in(const RunResult& r, const std::vector<std::string>& needles) {
  for (const auto& n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << n << "\n" << r.output;
}

}  // namespace

TEST(DataTools, InspectSummarizesAndDecodes) {
  TempDir dir;
  write_file(dir / "a.txt", "first document\n%\nsecond, longer document here\n%\nthird\n");
  ASSERT_EQ(run_ratchet("shard --input " + (dir / "a.txt") + " --separator % --output-dir " +
                        (dir / "o") + " --val-fraction 0 --shard-tokens 30")
                .exit_code,
            0);
  RunResult r = run_ratchet("inspect '" + (dir / "o/train_*.h5") + "' --decode 0:20");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_in(r, {"train_000000.h5", "train_000001.h5", "total: 2 shard(s), 53 tokens, 3 documents",
                "tokenizer byte, vocab_size 257, eot_token 256", "compression ratio",
                "document length (tokens): min 7", "[4, 8)", "[16, 32)", "source " + (dir / "a.txt"),
                "first document\n\n<|endoftext|>\nseco"});
  r = run_ratchet("inspect " + (dir / "o/train_000000.h5") + " --decode 5:x");
  EXPECT_EQ(r.exit_code, 2);
  expect_in(r, {"--decode", "START:COUNT"});
  r = run_ratchet("inspect " + (dir / "nope.h5"));
  EXPECT_EQ(r.exit_code, 2);
  expect_in(r, {dir / "nope.h5"});
}

TEST(DataTools, VerifyPassesGoodShardsAndNamesEachProblem) {
  TempDir dir;
  std::vector<uint32_t> t(5000);
  for (size_t i = 0; i < t.size(); i++) t[i] = (uint32_t)(i * 31 % 256);
  write_shard(dir / "good_0.h5", kByte, t, {0, 100, 4000}, 1024);
  write_shard(dir / "good_1.h5", kByte, t, {0}, 1024);
  RunResult r = run_ratchet("verify '" + (dir / "good_*.h5") + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  expect_in(r, {"ok " + (dir / "good_0.h5"), "5 chunks", "all 2 shard(s) ok"});

  struct Case {
    std::string name;
    std::function<void(const std::string&)> damage;
    std::vector<std::string> needles;
  };
  auto edit = [](const std::string& path, const std::function<void(hid_t)>& fn) {
    h5_init();
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    fn(f);
    H5Fclose(f);
  };
  auto set_int = [](hid_t f, const char* name, int64_t v) {
    if (H5Aexists(f, name) > 0) H5Adelete(f, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(sp);
  };
  auto write_at = [](hid_t f, const char* dset, hid_t type, hsize_t at, const void* v) {
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    hid_t fs = H5Dget_space(d);
    hsize_t cnt[1] = {1}, off[1] = {at};
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, nullptr, cnt, nullptr);
    hid_t ms = H5Screate_simple(1, cnt, nullptr);
    H5Dwrite(d, type, ms, fs, H5P_DEFAULT, v);
    H5Sclose(ms), H5Sclose(fs), H5Dclose(d);
  };
  std::vector<Case> cases = {
      {"token", [&](const std::string& p) {
         edit(p, [&](hid_t f) {
           uint32_t v = 300;
           write_at(f, "tokens", H5T_NATIVE_UINT32, 3333, &v);
         });
       }, {"token 3333 is 300", "vocab_size 257"}},
      {"offsets", [&](const std::string& p) {
         edit(p, [&](hid_t f) {
           uint64_t v = 50;
           write_at(f, "doc_offsets", H5T_NATIVE_UINT64, 2, &v);
         });
       }, {"doc_offsets[2] = 50", "not greater than doc_offsets[1] = 100"}},
      {"ndocs", [&](const std::string& p) { edit(p, [&](hid_t f) { set_int(f, "num_documents", 4); }); },
       {"num_documents = 4", "/doc_offsets holds 3"}},
      {"maxtok", [&](const std::string& p) { edit(p, [&](hid_t f) { set_int(f, "max_token", 7); }); },
       {"max_token = 7", "largest token is 255"}},
      {"chunk", [&](const std::string& p) { corrupt_token_chunk(p, 2 * 1024); }, {"chunk 2", "tokens [2048, 3072)", "unreadable"}},
      {"truncated", [&](const std::string& p) { fs::resize_file(p, fs::file_size(p) / 2); }, {}},
      {"nothdf5", [&](const std::string& p) { write_file(p, "plain text"); }, {"not an HDF5 file"}},
      {"version", [&](const std::string& p) { edit(p, [&](hid_t f) { set_int(f, "format_version", 9); }); },
       {"format_version 9"}},
  };
  for (const Case& c : cases) {
    std::string p = dir / ("bad_" + c.name + ".h5");
    write_shard(p, kByte, t, {0, 100, 4000}, 1024);
    c.damage(p);
    r = run_ratchet("verify " + (dir / "good_0.h5") + " " + p);
    EXPECT_EQ(r.exit_code, 1) << c.name << "\n" << r.output;
    std::vector<std::string> needles = c.needles;
    needles.push_back("FAILED " + p);
    needles.push_back("1 of 2 shard(s) failed");
    expect_in(r, needles);
    EXPECT_EQ(r.output.find("FAILED " + (dir / "good_0.h5")), std::string::npos) << r.output;
  }

  // A shard whose tokenizer differs from the others.
  write_shard(dir / "other.h5", ShardMeta{"gpt2", 50257, 50256}, {1, 2, 50256}, {0});
  r = run_ratchet("verify " + (dir / "good_0.h5") + " " + (dir / "other.h5"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_in(r, {"FAILED " + (dir / "other.h5"), "disagrees with " + (dir / "good_0.h5"),
                "tokenizer ('byte' vs 'gpt2')"});
  // And the loader refuses to mix them too, naming both files.
  r = run_ratchet("verify '" + (dir / "nomatch_*.h5") + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_in(r, {"matches no file"});
}

TEST(DataTools, ConvertLlmcRoundTripIsByteIdentical) {
  TempDir dir;
  // An llm.c file as llm.c writes it: eot BEFORE each document.
  std::vector<uint32_t> tokens;
  for (const char* d : {"alpha", "beta gamma", "delta"}) {
    tokens.push_back(50256);
    for (uint32_t t : bytes_of(d)) tokens.push_back(t + 1000);
  }
  write_llmc_tokens(dir / "x.bin", tokens);
  EXPECT_EQ(fs::file_size(dir / "x.bin"), 1024 + 2 * tokens.size());
  RunResult r = run_ratchet("convert " + (dir / "x.bin") + " " + (dir / "x.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ShardFile f(dir / "x.h5");
  EXPECT_EQ(f.meta().tokenizer, "gpt2");
  EXPECT_EQ(f.meta().vocab_size, 50257);
  EXPECT_EQ(f.read_doc_offsets(), (std::vector<uint64_t>{0, 1, 7, 18}));
  std::vector<uint32_t> back(f.num_tokens());
  f.read_tokens(0, back.size(), back.data());
  EXPECT_EQ(back, tokens);
  r = run_ratchet("verify " + (dir / "x.h5"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("convert " + (dir / "x.h5") + " " + (dir / "y.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(dir / "x.bin"), read_file(dir / "y.bin"));
  // Output exists: needs --overwrite.
  r = run_ratchet("convert " + (dir / "x.h5") + " " + (dir / "y.bin"));
  EXPECT_EQ(r.exit_code, 2);
  expect_in(r, {"--overwrite"});

  // A ratchet byte shard exported to llm.c and read back.
  write_shard(dir / "b.h5", kByte, bytes_of("hello"), {0});
  ASSERT_EQ(run_ratchet("convert " + (dir / "b.h5") + " " + (dir / "b.bin")).exit_code, 0);
  EXPECT_EQ(read_llmc_tokens(dir / "b.bin"), bytes_of("hello"));
}

TEST(DataTools, ConvertRejectsBadLlmcFiles) {
  TempDir dir;
  write_llmc_tokens(dir / "ok.bin", {1, 2, 3, 4});
  std::string good = read_file(dir / "ok.bin");
  write_file(dir / "trunc.bin", good.substr(0, good.size() - 3));
  RunResult r = run_ratchet("convert " + (dir / "trunc.bin") + " " + (dir / "t.h5"));
  EXPECT_EQ(r.exit_code, 2);
  expect_in(r, {dir / "trunc.bin", "truncated"});
  std::string v2 = good;
  v2[4] = 2;
  write_file(dir / "v2.bin", v2);
  r = run_ratchet("convert " + (dir / "v2.bin") + " " + (dir / "t.h5"));
  EXPECT_EQ(r.exit_code, 2);
  expect_in(r, {dir / "v2.bin", "version 2"});
  std::string bigtok = good;
  bigtok[1024] = (char)0xFF, bigtok[1025] = (char)0xFF;  // 65535 >= 50257
  write_file(dir / "big.bin", bigtok);
  r = run_ratchet("convert " + (dir / "big.bin") + " " + (dir / "t.h5"));
  EXPECT_EQ(r.exit_code, 2);
  expect_in(r, {dir / "big.bin", "65535", "--vocab-size"});
  write_file(dir / "text.bin", "not a token file at all");
  r = run_ratchet("convert " + (dir / "text.bin") + " " + (dir / "t.h5"));
  EXPECT_EQ(r.exit_code, 2);
  expect_in(r, {dir / "text.bin", "not an HDF5 file"});
  EXPECT_FALSE(fs::exists(dir / "t.h5"));
  write_shard(dir / "wide.h5", ShardMeta{"big", 70000, 69999}, {1, 69999}, {0});
  r = run_ratchet("convert " + (dir / "wide.h5") + " " + (dir / "w.bin"));
  EXPECT_EQ(r.exit_code, 2);
  expect_in(r, {dir / "wide.h5", "uint16"});
}

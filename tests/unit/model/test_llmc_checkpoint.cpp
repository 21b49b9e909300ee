// llm.c GPT-2 checkpoint import/export: round trip and every bad-file case.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "model/llmc_checkpoint.h"
#include "model/param_layout.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

static std::vector<float> some_params(const GPTConfig& c) {
  std::vector<float> p(ParamLayout(c).total);
  Rng rng(1);
  for (auto& x : p) x = rng.normal();
  return p;
}

static std::string expect_error(const std::string& path) {
  GPTConfig c;
  try {
    load_llmc_checkpoint(path, &c);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << path;
  return "";
}

TEST(LlmcCheckpoint, RoundTripIsByteIdentical) {
  TempDir d;
  GPTConfig c = tiny_config();
  auto p = some_params(c);
  save_llmc_checkpoint(d / "a.bin", c, p);
  GPTConfig c2;
  auto q = load_llmc_checkpoint(d / "a.bin", &c2);
  EXPECT_EQ(c2.num_layers, c.num_layers);
  EXPECT_EQ(c2.padded_vocab, c.padded_vocab);
  ASSERT_EQ(q.size(), p.size());
  EXPECT_EQ(0, std::memcmp(q.data(), p.data(), p.size() * 4));
  save_llmc_checkpoint(d / "b.bin", c2, q);
  EXPECT_EQ(read_file(d / "a.bin"), read_file(d / "b.bin"));
  // header fields as llm.c writes them
  std::string raw = read_file(d / "a.bin");
  const int32_t* h = (const int32_t*)raw.data();
  EXPECT_EQ(h[0], 20240326);
  EXPECT_EQ(h[1], 3);
  EXPECT_EQ(h[7], 128);
  EXPECT_EQ(raw.size(), 1024 + p.size() * 4);
}

TEST(LlmcCheckpoint, Bf16ImportRoundsTheTopHalf) {
  TempDir d;
  GPTConfig c = tiny_config();
  auto p = some_params(c);
  save_llmc_checkpoint(d / "a.bin", c, p);
  // Make a version-5 file: header version 5, tensors truncated to bf16.
  std::string raw = read_file(d / "a.bin");
  std::string out = raw.substr(0, 1024);
  ((int32_t*)out.data())[1] = 5;
  for (size_t i = 0; i < p.size(); i++) {
    uint32_t bits;
    std::memcpy(&bits, &p[i], 4);
    uint16_t top = bits >> 16;
    out.append((const char*)&top, 2);
  }
  write_file(d / "bf16.bin", out);
  GPTConfig c2;
  auto q = load_llmc_checkpoint(d / "bf16.bin", &c2);
  for (size_t i = 0; i < p.size(); i++) {
    uint32_t bits;
    std::memcpy(&bits, &p[i], 4);
    bits &= 0xFFFF0000u;
    float t;
    std::memcpy(&t, &bits, 4);
    ASSERT_EQ(q[i], t);
  }
}

TEST(LlmcCheckpoint, BadFilesGiveClearErrors) {
  TempDir d;
  GPTConfig c = tiny_config();
  save_llmc_checkpoint(d / "good.bin", c, some_params(c));
  std::string raw = read_file(d / "good.bin");

  EXPECT_NE(expect_error(d / "missing.bin").find("cannot open checkpoint"), std::string::npos);

  std::string bad = raw;
  ((int32_t*)bad.data())[0] = 12345;
  write_file(d / "magic.bin", bad);
  std::string m = expect_error(d / "magic.bin");
  EXPECT_NE(m.find("magic 12345"), std::string::npos) << m;
  EXPECT_NE(m.find("magic.bin"), std::string::npos) << m;

  bad = raw;
  ((int32_t*)bad.data())[1] = 7;
  write_file(d / "version.bin", bad);
  EXPECT_NE(expect_error(d / "version.bin").find("version 7"), std::string::npos);

  write_file(d / "short.bin", raw.substr(0, raw.size() - 4));
  m = expect_error(d / "short.bin");
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;

  write_file(d / "tiny.bin", raw.substr(0, 100));
  EXPECT_NE(expect_error(d / "tiny.bin").find("shorter than"), std::string::npos);

  bad = raw;
  ((int32_t*)bad.data())[6] = 15;  // channels not divisible by heads
  write_file(d / "shape.bin", bad);
  EXPECT_NE(expect_error(d / "shape.bin").find("invalid header"), std::string::npos);
}

TEST(LlmcCheckpoint, UnwritableExportPathIsAnError) {
  GPTConfig c = tiny_config();
  EXPECT_THROW(save_llmc_checkpoint("/nonexistent-dir/x.bin", c, some_params(c)), Error);
}

// safetensors reader and writer (src/interop/safetensors.h) against an
// independent Python reader/writer (tests/data/safetensors_io.py: struct +
// json), and every corrupt-file error. Values are chosen so that every
// comparison is exact (F32 bits; BF16/F16 values with known roundings).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json.h"
#include "interop/safetensors.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"

namespace ratchet {
namespace {
using testing::read_file;
using testing::run_shell;
using testing::expect_error;
using testing::TempDir;
using testing::write_file;

const std::string kPy = std::string("python3 ") + RATCHET_TESTS_DIR + "/data/safetensors_io.py";

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> read_all(const SafetensorsFile& f, const std::string& name) {
  const StTensor* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> v(t->numel());
  f.read_f32(*t, v.data());
  return v;
}

// A raw file: 8-byte length (or `len` when given), header text, `data` bytes.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes,
               int64_t len = -1) {
  const uint64_t n = len < 0 ? header.size() : (uint64_t)len;
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = (char)((n >> (8 * i)) & 0xff);
  s += header;
  s.append(data_bytes, '\0');
  write_file(path, s);
}


TEST(Safetensors, ConversionsRoundToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f / 3), 0x3EAB);              // 0x3EAAAAAB rounds up
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);        // tie -> even (1.0)
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);    // tie -> even (1 + 2^-6)
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(INFINITY)), INFINITY);
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);               // largest normal
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);               // smallest subnormal
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7C00), INFINITY);
}

TEST(Safetensors, ReadsFilesWrittenByPython) {
  TempDir d;
  const std::vector<float> f32 = {0.1f, -1e-30f, 3.4e38f, 1.0f / 3, -0.0f, 7.0f};
  OrderedJson spec = {
      {"metadata", {{"format", "pt"}, {"note", "written by python"}}},
      {"tensors",
       {{{"name", "a.f32"}, {"dtype", "F32"}, {"shape", {2, 3}}, {"values", f32}},
        {{"name", "b.bf16"}, {"dtype", "BF16"}, {"shape", {4}}, {"values", {1.0 / 3, 1.5, -0.25, 1.0 + 1.0 / 256}}},
        {{"name", "c.f16"}, {"dtype", "F16"}, {"shape", {2, 2}},
         {"values", {0.5, -2.0, 65504.0, std::ldexp(3.0, -24)}}},
        {{"name", "d.empty"}, {"dtype", "F32"}, {"shape", {0, 4}}, {"values", OrderedJson::array()}},
        {{"name", "e.scalar"}, {"dtype", "F32"}, {"shape", OrderedJson::array()}, {"values", {2.5}}}}}};
  write_file(d / "spec.json", spec.dump());
  auto r = run_shell(kPy + " write " + (d / "spec.json") + " " + (d / "x.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  SafetensorsFile f(d / "x.safetensors");
  EXPECT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.metadata().at("note"), "written by python");
  const StTensor* a = f.find("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, StDtype::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  auto av = read_all(f, "a.f32");
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(bits(av[i]), bits(f32[i])) << i;
  EXPECT_EQ(read_all(f, "b.bf16"), (std::vector<float>{0.333984375f, 1.5f, -0.25f, 1.0f}));
  EXPECT_EQ(read_all(f, "c.f16"), (std::vector<float>{0.5f, -2.0f, 65504.0f, 3 * 0x1p-24f}));
  EXPECT_TRUE(read_all(f, "d.empty").empty());
  EXPECT_EQ(read_all(f, "e.scalar"), std::vector<float>{2.5f});
  EXPECT_EQ(f.find("nope"), nullptr);
}

// C++ writes, the Python reader decodes: F32 bit-exact, BF16 with the known roundings.
TEST(Safetensors, WriterReadBackByPython) {
  TempDir d;
  const std::vector<float> w = {1.0f / 3, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -123.456f, 1e-20f, 0.0f};
  const std::vector<float> g = {0.25f, -8.0f};
  std::vector<StWrite> ts = {{"layer.w", {2, 3}, w.data()}, {"layer.g", {2}, g.data()}};
  write_safetensors(d / "f32.safetensors", ts, StDtype::F32, {{"format", "pt"}});
  write_safetensors(d / "bf16.safetensors", ts, StDtype::BF16, {});
  EXPECT_EQ(std::filesystem::file_size(d / "f32.safetensors") % 8, (6 + 2) * 4 % 8);

  auto r = run_shell(kPy + " read " + (d / "f32.safetensors") + " > " + (d / "f32.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = testing::read_json_file(d / "f32.json");
  EXPECT_EQ(j["metadata"]["format"], "pt");
  EXPECT_EQ(j["tensors"]["layer.w"]["dtype"], "F32");
  EXPECT_EQ(j["tensors"]["layer.w"]["shape"], nlohmann::json({2, 3}));
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_EQ(bits(j["tensors"]["layer.w"]["values"][i].get<float>()), bits(w[i])) << i;
  EXPECT_EQ(j["tensors"]["layer.g"]["values"], nlohmann::json({0.25, -8.0}));

  r = run_shell(kPy + " read " + (d / "bf16.safetensors") + " > " + (d / "bf16.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = testing::read_json_file(d / "bf16.json");
  EXPECT_EQ(j["tensors"]["layer.w"]["dtype"], "BF16");
  const std::vector<double> want = {0.333984375, 1.0, 1.015625, -123.5, 1.0e-20, 0.0};
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = j["tensors"]["layer.w"]["values"][i].get<double>();
    // 1e-20 is not a bf16 value: its nearest one is within 2^-8 relative.
    EXPECT_NEAR(got, want[i], std::fabs(want[i]) * 0x1p-8) << i;
    if (i != 4) {
      EXPECT_EQ(got, want[i]) << i;
    }
  }
  // Nothing but the file itself is left behind (temp file renamed).
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(d.path)) files += e.path().extension() != ".json";
  EXPECT_EQ(files, 2);
}

TEST(Safetensors, ShardedCheckpointBothWays) {
  TempDir d;
  std::vector<float> a(100), b(60), c(10);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * i;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -1.0f * i;
  for (size_t i = 0; i < c.size(); ++i) c[i] = 3.0f + i;
  std::vector<StWrite> ts = {{"a", {10, 10}, a.data()}, {"b", {60}, b.data()}, {"c", {10}, c.data()}};
  std::filesystem::create_directory(d / "out");
  auto files = write_safetensors_checkpoint(d / "out", ts, StDtype::F32, {{"format", "pt"}}, 400);
  ASSERT_EQ(files.size(), 3u);  // a alone (400 B), b + c (280 B), the index
  EXPECT_EQ(files[0], "model-00001-of-00002.safetensors");
  EXPECT_EQ(files[2], "model.safetensors.index.json");

  auto r = run_shell(kPy + " read " + (d / "out") + " > " + (d / "out.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = testing::read_json_file(d / "out.json");
  EXPECT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["tensors"]["a"]["values"][99], 49.5);
  EXPECT_EQ(j["tensors"]["b"]["values"][59], -59.0);
  EXPECT_EQ(j["tensors"]["c"]["values"][0], 3.0);
  auto index = testing::read_json_file(d / "out/model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], 680);

  SafetensorsCheckpoint ck(d / "out");
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
  const SafetensorsFile* file = nullptr;
  const StTensor* t = ck.find("c", &file);
  ASSERT_NE(t, nullptr);
  std::vector<float> got(10);
  file->read_f32(*t, got.data());
  EXPECT_EQ(got, c);

  // A directory with one model.safetensors (no index) opens too.
  std::filesystem::create_directory(d / "single");
  write_safetensors_checkpoint(d / "single", ts, StDtype::BF16, {}, 1u << 20);
  EXPECT_FALSE(std::filesystem::exists(d / "single/model.safetensors.index.json"));
  EXPECT_EQ(SafetensorsCheckpoint(d / "single").names().size(), 3u);

  // Python's sharded Llama (BF16, several shards) opens here with every tensor.
  r = run_shell(kPy + " make-llama " + (d / "py") +
                " --layers 2 --channels 32 --heads 4 --kv-heads 2 --hidden 64 --vocab 50"
                " --dtype BF16 --shard-bytes 8000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsCheckpoint py(d / "py");
  EXPECT_EQ(py.names().size(), 1u + 2 * 9 + 1);
  EXPECT_NE(py.find("model.layers.1.mlp.down_proj.weight"), nullptr);
}

// An overwrite that fails part-way (here a file-size limit, as a full disk
// would) leaves the earlier checkpoint whole: before, the new first shard was
// already in place next to the old second shard and index (a mixed model that
// loads without a word).
TEST(Safetensors, FailedOverwriteKeepsTheEarlierCheckpoint) {
  TempDir d;
  std::vector<float> a(100, 1.0f), b(1000, 2.0f), a2(100, -1.0f), b2(1000, -2.0f);
  std::filesystem::create_directory(d / "out");
  const auto files = write_safetensors_checkpoint(d / "out", {{"a", {100}, a.data()}, {"b", {1000}, b.data()}},
                                                  StDtype::F32, {}, 500);
  ASSERT_EQ(files.size(), 3u);  // a (400 B), b (4000 B), the index
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
    const rlimit lim {2000, 2000};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      write_safetensors_checkpoint(d / "out", {{"a", {100}, a2.data()}, {"b", {1000}, b2.data()}},
                                   StDtype::F32, {}, 500);
    } catch (const Error&) {
      ::_exit(3);
    } catch (...) {
      ::_exit(4);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 3) << "the limited write should have failed with an Error";
  SafetensorsCheckpoint ck(d / "out");
  for (const auto& [name, want] : {std::pair{"a", &a}, std::pair{"b", &b}}) {
    const SafetensorsFile* f = nullptr;
    const StTensor* t = ck.find(name, &f);
    ASSERT_NE(t, nullptr) << name;
    std::vector<float> got(want->size());
    f->read_f32(*t, got.data());
    EXPECT_EQ(got, *want) << name << ": the failed overwrite replaced part of the checkpoint";
  }
  for (auto& e : std::filesystem::directory_iterator(d / "out"))
    EXPECT_NE(e.path().extension(), ".partial") << e.path();
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d / "out"), {}), 3);
}

// A huge index (sparse here, so it costs no disk) is refused by its size before
// parsing: it was read whole into memory.
TEST(SafetensorsErrors, HugeIndexIsRefusedBySize) {
  TempDir d;
  std::filesystem::create_directory(d / "m");
  write_file(d / "m/model.safetensors.index.json", "{\"weight_map\": {}}");
  std::filesystem::resize_file(d / "m/model.safetensors.index.json", 200u << 20);
  expect_error([&] { SafetensorsCheckpoint ck(d / "m"); },
               {d / "m/model.safetensors.index.json", "209715200 bytes", "100 MB"});
}

// ---- every validation error names the file and, where there is one, the tensor.

TEST(SafetensorsErrors, TooShortAndHeaderPastEnd) {
  TempDir d;
  write_file(d / "short.safetensors", "abc");
  expect_error([&] { SafetensorsFile f(d / "short.safetensors"); }, {d / "short.safetensors", "too short"});
  write_raw(d / "len.safetensors", "{}", 0, 1000);
  expect_error([&] { SafetensorsFile f(d / "len.safetensors"); },
               {d / "len.safetensors", "header length 1000 runs past the end"});
  expect_error([&] { SafetensorsFile f(d / "missing.safetensors"); }, {d / "missing.safetensors", "does not exist"});
}

TEST(SafetensorsErrors, BadJson) {
  TempDir d;
  write_raw(d / "j.safetensors", "{\"a\": {\"dtype\": ", 0);
  expect_error([&] { SafetensorsFile f(d / "j.safetensors"); }, {d / "j.safetensors", "not valid JSON"});
  write_raw(d / "arr.safetensors", "[1, 2]", 0);
  expect_error([&] { SafetensorsFile f(d / "arr.safetensors"); }, {d / "arr.safetensors", "not a JSON object"});
  write_raw(d / "entry.safetensors", R"({"w": {"dtype": "F32", "shape": [1]}})", 4);
  expect_error([&] { SafetensorsFile f(d / "entry.safetensors"); }, {d / "entry.safetensors", "'w'", "data_offsets"});
  write_raw(d / "neg.safetensors", R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4);
  expect_error([&] { SafetensorsFile f(d / "neg.safetensors"); }, {d / "neg.safetensors", "'w'", "non-negative"});
}

TEST(SafetensorsErrors, UnsupportedDtype) {
  TempDir d;
  write_raw(d / "i64.safetensors", R"({"ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16);
  expect_error([&] { SafetensorsFile f(d / "i64.safetensors"); },
               {d / "i64.safetensors", "'ids'", "unsupported dtype I64", "F32, BF16 and F16"});
}

TEST(SafetensorsErrors, SizeDoesNotMatchShape) {
  TempDir d;
  write_raw(d / "s.safetensors", R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 24]}})", 24);
  expect_error([&] { SafetensorsFile f(d / "s.safetensors"); },
               {d / "s.safetensors", "'w'", "span 24 bytes", "needs 12"});
}

TEST(SafetensorsErrors, OffsetsOutOfRangeOverlappingGapsReversed) {
  TempDir d;
  write_raw(d / "range.safetensors", R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8);
  expect_error([&] { SafetensorsFile f(d / "range.safetensors"); },
               {d / "range.safetensors", "'w'", "run past the data section"});
  write_raw(d / "overlap.safetensors",
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12);
  expect_error([&] { SafetensorsFile f(d / "overlap.safetensors"); },
               {d / "overlap.safetensors", "'b'", "overlap tensor 'a'"});
  write_raw(d / "gap.safetensors",
            R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})", 12);
  expect_error([&] { SafetensorsFile f(d / "gap.safetensors"); }, {d / "gap.safetensors", "'b'", "no gaps"});
  write_raw(d / "rev.safetensors", R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8);
  expect_error([&] { SafetensorsFile f(d / "rev.safetensors"); }, {d / "rev.safetensors", "'a'", "end before"});
  write_raw(d / "tail.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 12);
  expect_error([&] { SafetensorsFile f(d / "tail.safetensors"); }, {d / "tail.safetensors", "trailing bytes"});
}

TEST(SafetensorsErrors, IndexProblems) {
  TempDir d;
  std::vector<float> a(4, 1.0f);
  std::filesystem::create_directory(d / "ck");
  write_safetensors(d / "ck/s1.safetensors", {{"a", {4}, a.data()}, {"b", {4}, a.data()}}, StDtype::F32, {});
  const std::string index = d / "ck/model.safetensors.index.json";
  write_file(index, R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"}})");
  expect_error([&] { SafetensorsCheckpoint c(d / "ck"); }, {index, "names shard s2.safetensors", "does not exist"});
  write_file(index, R"({"weight_map": {"a": "s1.safetensors"}})");
  expect_error([&] { SafetensorsCheckpoint c(d / "ck"); }, {"s1.safetensors", "tensor 'b'", "does not list"});
  write_safetensors(d / "ck/s2.safetensors", {{"c", {4}, a.data()}}, StDtype::F32, {});
  write_file(index, R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors", "d": "s2.safetensors"}})");
  expect_error([&] { SafetensorsCheckpoint c(d / "ck"); }, {"s2.safetensors", "tensor 'c'", "does not list"});
  write_file(index, R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors",
                                        "d": "s2.safetensors"}})");
  expect_error([&] { SafetensorsCheckpoint c(d / "ck"); }, {index, "tensor 'd'", "does not hold it"});
  write_file(index, R"({"weight_map": {"a": "../s1.safetensors"}})");
  expect_error([&] { SafetensorsCheckpoint c(d / "ck"); }, {index, "not a file in the directory"});
  write_file(index, "{ nope");
  expect_error([&] { SafetensorsCheckpoint c(d / "ck"); }, {index, "not valid JSON"});
  std::filesystem::create_directory(d / "empty");
  expect_error([&] { SafetensorsCheckpoint c(d / "empty"); }, {d / "empty", "neither model.safetensors"});
}

}  // namespace
}  // namespace ratchet

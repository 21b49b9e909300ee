// Hugging Face Llama checkpoints (src/interop/hf_checkpoint.h): config.json
// both ways, the tensor-name map over the flat buffer, import of checkpoints
// written by the independent Python writer (tests/data/safetensors_io.py),
// export read back by its reader, and the errors naming file and tensor.
// All comparisons are exact: F32 copies bits; BF16 values are widened exactly.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <set>
#include <filesystem>
#include <stdexcept>
#include <fstream>

#include "core/error.h"
#include "interop/hf_checkpoint.h"
#include "model/param_layout.h"
#include "testing/expect_error.h"
#include "testing/test_util.h"

namespace ratchet {
namespace {
using testing::read_json_file;
using testing::run_shell;
using testing::expect_error;
using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

const std::string kPy = std::string("python3 ") + RATCHET_TESTS_DIR + "/data/safetensors_io.py";


GPTConfig small_llama(bool tied) {
  GPTConfig c;
  c.arch = Arch::llama;
  c.num_layers = 2, c.channels = 64, c.num_heads = 4, c.num_kv_heads = 2, c.ffn_hidden = 128;
  c.vocab_size = 300, c.max_seq_len = 256, c.tied_embeddings = tied;
  c.padded_vocab = 0;
  c.finalize();
  return c;
}

// Python's make-llama with small_llama's shape into dir.
void make_llama(const std::string& dir, const std::string& extra) {
  auto r = run_shell(kPy + " make-llama " + dir +
                     " --layers 2 --channels 64 --heads 4 --kv-heads 2 --hidden 128 --vocab 300 " + extra);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// Python's untied F32 Llama (seed 5) written to d/src and imported.
std::vector<float> load_python_llama(const TempDir& d, GPTConfig* c) {
  make_llama(d / "src", "--untied --dtype F32 --seed 5");
  return load_hf_checkpoint(d / "src", c);
}

nlohmann::json py_read(const std::string& path, const TempDir& d) {
  const std::string out = d / "read.json";
  auto r = run_shell(kPy + " read " + path + " > " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_json_file(out);
}

// Every tensor of `py` (the Python reader's JSON) equals params at the map's offsets, bit for bit.
void expect_tensors_equal(const nlohmann::json& py, const GPTConfig& c, const std::vector<float>& params) {
  const auto map = hf_tensor_map(c);
  EXPECT_EQ(py["tensors"].size(), map.size());
  for (const auto& t : map) {
    ASSERT_TRUE(py["tensors"].contains(t.name)) << t.name;
    const auto& v = py["tensors"][t.name]["values"];
    EXPECT_EQ(py["tensors"][t.name]["shape"], nlohmann::json(t.shape)) << t.name;
    size_t bad = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const float a = v[i].get<float>(), b = params[t.offset + i];
      bad += std::memcmp(&a, &b, 4) != 0;
    }
    EXPECT_EQ(bad, 0u) << t.name;
  }
}

TEST(HfCheckpoint, TensorMapTilesTheFlatBuffer) {
  for (bool tied : {true, false}) {
    const GPTConfig c = small_llama(tied);
    const ParamLayout lay(c);
    std::vector<int> hits(lay.total, 0);
    for (const auto& t : hf_tensor_map(c)) {
      size_t n = 1;
      for (auto d : t.shape) n *= d;
      ASSERT_LE(t.offset + n, lay.total) << t.name;
      for (size_t i = 0; i < n; ++i) hits[t.offset + i]++;
    }
    // Every element once, except wte's (and lmhead's) padded rows, which stay zero.
    size_t once = 0, never = 0;
    for (int h : hits) {
      ASSERT_LE(h, 1);
      (h == 1 ? once : never) += 1;
    }
    const size_t pad = (size_t)(c.padded_vocab - c.vocab_size) * c.channels * (tied ? 1 : 2);
    EXPECT_EQ(never, pad) << "tied " << tied;
    EXPECT_EQ(once + never, lay.total);
  }
  // q | k | v row blocks of layer 1 in qkvw (contract section 5).
  const GPTConfig c = small_llama(true);
  const ParamLayout lay(c);
  const auto map = hf_tensor_map(c);
  auto at = [&](const std::string& n) {
    for (const auto& t : map)
      if (t.name == n) return t;
    ADD_FAILURE() << n;
    return HfTensor{};
  };
  const size_t layer = (size_t)(4 + 2 * 2) * 16 * 64;  // (NH + 2KV) * hs rows of C
  EXPECT_EQ(at("model.layers.1.self_attn.q_proj.weight").offset, lay.offsets[P_QKVW] + layer);
  EXPECT_EQ(at("model.layers.1.self_attn.k_proj.weight").offset, lay.offsets[P_QKVW] + layer + 64 * 64);
  EXPECT_EQ(at("model.layers.1.self_attn.v_proj.weight").shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(at("model.layers.0.mlp.up_proj.weight").offset, lay.offsets[P_FCW] + 128 * 64);
}

TEST(HfCheckpoint, ConfigJsonRoundTrip) {
  GPTConfig c = small_llama(false);
  c.norm_eps = 1e-6f, c.rope_theta = 500000.f;
  c.rope_factor = 32.f, c.rope_low_freq_factor = 1.f, c.rope_high_freq_factor = 4.f,
  c.rope_original_max_pos = 8192;
  const OrderedJson j = hf_config_to_json(c, StDtype::BF16);
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["intermediate_size"], 128);
  EXPECT_EQ(j["head_dim"], 16);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  const GPTConfig b = hf_config_from_json(nlohmann::json::parse(j.dump()), "config.json");
  EXPECT_EQ(b.describe(), c.describe());
  EXPECT_EQ(b.norm_eps, c.norm_eps);
  EXPECT_EQ(b.rope_factor, 32.f);
  EXPECT_EQ(b.rope_original_max_pos, 8192);
  EXPECT_EQ(b.padded_vocab, 384);
}

TEST(HfCheckpoint, ConfigErrorsNameTheField) {
  const auto good = nlohmann::json::parse(hf_config_to_json(small_llama(true), StDtype::F32).dump());
  auto with = [&](const char* k, nlohmann::json v) {  // null reads as absent
    auto j = good;
    j[k] = v;
    return j;
  };
  expect_error([&] { hf_config_from_json(with("model_type", "gpt2"), "m/config.json"); },
               {"m/config.json", "model_type", "llama"});
  expect_error([&] { hf_config_from_json(with("hidden_act", "gelu"), "m/config.json"); },
               {"m/config.json", "hidden_act"});
  expect_error([&] { hf_config_from_json(with("attention_bias", true), "m/config.json"); },
               {"m/config.json", "attention_bias"});
  expect_error([&] { hf_config_from_json(with("hidden_size", nullptr), "m/config.json"); },
               {"m/config.json", "hidden_size"});
  // head_dim may differ from hidden / heads (issue 38), but RoPE needs it even.
  expect_error([&] { hf_config_from_json(with("head_dim", 15), "m/config.json"); },
               {"m/config.json", "head_dim 15", "even"});
  EXPECT_EQ(hf_config_from_json(with("head_dim", 32), "m/config.json").head_size(), 32);
  expect_error([&] { hf_config_from_json(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}}), "m/config.json"); },
               {"m/config.json", "rope_scaling", "yarn"});
  expect_error([&] { hf_config_from_json(with("num_key_value_heads", 3), "m/config.json"); },
               {"m/config.json", "must divide"});
  expect_error([&] { hf_config_from_json(with("vocab_size", -5), "m/config.json"); },
               {"m/config.json", "vocab_size", "positive integer"});
}

TEST(HfCheckpoint, ImportsPythonCheckpointsExactly) {
  TempDir d;
  // F32, untied, several shards with an index.
  make_llama(d / "f32", "--untied --dtype F32 --shard-bytes 60000");
  ASSERT_TRUE(fs::exists(d / "f32/model.safetensors.index.json"));
  GPTConfig c;
  auto params = load_hf_checkpoint(d / "f32", &c);
  EXPECT_EQ(c.describe(), small_llama(false).describe());
  ASSERT_EQ(params.size(), ParamLayout(c).total);
  expect_tensors_equal(py_read(d / "f32", d), c, params);
  // Padded vocab rows are zero.
  const ParamLayout lay(c);
  for (size_t i = (size_t)c.vocab_size * c.channels; i < lay.sizes[P_WTE]; ++i)
    ASSERT_EQ(params[lay.offsets[P_WTE] + i], 0.0f);

  // BF16, tied, one file, opened by its file name (config.json beside it).
  make_llama(d / "bf16", "--dtype BF16 --seed 3");
  params = load_hf_checkpoint(d / "bf16/model.safetensors", &c);
  EXPECT_TRUE(c.tied_embeddings);
  expect_tensors_equal(py_read(d / "bf16", d), c, params);
}

TEST(HfCheckpoint, ExportReadByPythonAndRoundTripsBitExact) {
  TempDir d;
  GPTConfig c;
  const auto params = load_python_llama(d, &c);
  save_hf_checkpoint(d / "out", c, params, StDtype::F32, false);
  expect_tensors_equal(py_read(d / "out", d), c, params);
  auto cfg = read_json_file(d / "out/config.json");
  EXPECT_EQ(cfg["model_type"], "llama");
  EXPECT_EQ(cfg["torch_dtype"], "float32");
  auto meta = py_read(d / "out/model.safetensors", d)["metadata"];
  EXPECT_EQ(meta["format"], "pt");  // transformers refuses safetensors without it
  GPTConfig c2;
  const auto back = load_hf_checkpoint(d / "out", &c2);
  EXPECT_EQ(c2.describe(), c.describe());
  EXPECT_EQ(std::memcmp(back.data(), params.data(), params.size() * 4), 0);

  // A second export into the same directory needs overwrite; a sharded
  // overwrite then replaces the single file (no stale model.safetensors).
  expect_error([&] { save_hf_checkpoint(d / "out", c, params, StDtype::BF16, false); },
               {d / "out", "--overwrite"});
  save_hf_checkpoint(d / "out", c, params, StDtype::BF16, true, 50000);
  EXPECT_FALSE(fs::exists(d / "out/model.safetensors"));
  EXPECT_TRUE(fs::exists(d / "out/model.safetensors.index.json"));
  const auto bf = load_hf_checkpoint(d / "out", &c2);
  for (size_t i = 0; i < params.size(); ++i) ASSERT_EQ(bf[i], bf16_to_f32(f32_to_bf16(params[i]))) << i;
  expect_error([&] { check_hf_export_dir("--export-hf", d / "out", false); }, {"--export-hf", d / "out"});
  check_hf_export_dir("--export-hf", d / "out", true);
}

// A NaN or inf in a checkpoint is refused at import, naming the tensor and
// element (before, it loaded and the run trained from damaged weights).
TEST(HfCheckpoint, NonFiniteWeightsAreRefused) {
  TempDir d;
  GPTConfig c;
  auto params = load_python_llama(d, &c);
  size_t at = 0;
  for (const auto& t : hf_tensor_map(c))
    if (t.name == "model.layers.1.mlp.up_proj.weight") at = t.offset + 7;
  ASSERT_GT(at, 0u);
  save_hf_checkpoint(d / "bad", c, params, StDtype::BF16, true);  // config.json and a good file
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    params[at] = bad;
    // The writer refuses them and writes nothing (issue 25: a NaN export was written)...
    EXPECT_THROW(save_hf_checkpoint(d / "refused", c, params, StDtype::BF16, true), std::runtime_error);
    EXPECT_FALSE(fs::exists(d / "refused"));
    // ... so the damaged file is written below that check, as another tool may have.
    std::vector<StWrite> ts;
    for (const auto& t : hf_tensor_map(c)) ts.push_back({t.name, t.shape, params.data() + t.offset});
    write_safetensors_checkpoint(d / "bad", ts, StDtype::BF16, {{"format", "pt"}}, 5'000'000'000ull);
    expect_error([&] { load_hf_checkpoint(d / "bad", &c); },
                 {"model.layers.1.mlp.up_proj.weight", "element 7", "finite"});
  }
}

// An overwrite replaces the earlier export's files only: a user's other files
// in the directory, model.orig.safetensors included, are left as they were
// (before, every model*.safetensors was deleted as a stale shard).
TEST(HfCheckpoint, OverwriteKeepsTheUsersOtherFiles) {
  TempDir d;
  GPTConfig c;
  const auto params = load_python_llama(d, &c);
  save_hf_checkpoint(d / "out", c, params, StDtype::F32, false);
  fs::copy_file(d / "out/model.safetensors", d / "out/model.orig.safetensors");
  const std::string orig = testing::read_file(d / "out/model.orig.safetensors");
  write_file(d / "out/model-backup.safetensors", "mine");
  write_file(d / "out/tokenizer.json", "{}");
  save_hf_checkpoint(d / "out", c, params, StDtype::BF16, true, 50000);  // sharded now
  EXPECT_FALSE(fs::exists(d / "out/model.safetensors"));  // the earlier export's file: replaced
  EXPECT_EQ(testing::read_file(d / "out/model.orig.safetensors"), orig);
  EXPECT_EQ(testing::read_file(d / "out/model-backup.safetensors"), "mine");
  EXPECT_EQ(testing::read_file(d / "out/tokenizer.json"), "{}");
  save_hf_checkpoint(d / "out", c, params, StDtype::BF16, true);  // single file again: shards go
  for (const auto& e : fs::directory_iterator(d / "out"))
    EXPECT_EQ(e.path().filename().string().find("-of-"), std::string::npos) << e.path();
  EXPECT_TRUE(fs::exists(d / "out/model.orig.safetensors"));
}

// Two exports into one directory at once (sweep trials sharing --export-hf,
// with --overwrite): the directory ends up holding one whole model, never
// shards of both under one index.
TEST(HfCheckpoint, ConcurrentExportsLeaveOneWholeModel) {
  TempDir d;
  const GPTConfig c = small_llama(false);
  std::vector<pid_t> kids;
  for (float v : {1.0f, 2.0f}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::vector<float> params(ParamLayout(c).total, v);
      try {
        for (int i = 0; i < 6; i++) save_hf_checkpoint(d / "out", c, params, StDtype::F32, true, 20000);
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(k, &status, 0), k);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  GPTConfig got;
  const auto params = load_hf_checkpoint(d / "out", &got);
  std::set<float> values;
  for (const auto& t : hf_tensor_map(got)) {
    int64_t n = 1;
    for (int64_t s : t.shape) n *= s;
    values.insert(params.begin() + t.offset, params.begin() + t.offset + n);
  }
  EXPECT_EQ(values.size(), 1u) << "tensors of both exports under one index";
  for (const auto& e : fs::directory_iterator(d / "out"))
    EXPECT_NE(e.path().extension(), ".partial") << e.path();
}

// Rewrites DIR/config.json with `key` set to `value`.
void set_config(const std::string& dir, const std::string& key, const nlohmann::json& value) {
  auto j = read_json_file(dir + "/config.json");
  j[key] = value;
  write_file(dir + "/config.json", j.dump());
}

TEST(HfCheckpoint, ImportErrorsNameFileAndTensor) {
  TempDir d;
  GPTConfig c;
  make_llama(d / "m", "--dtype F32");
  const std::string st = d / "m/model.safetensors";
  set_config(d / "m", "intermediate_size", 192);
  expect_error([&] { load_hf_checkpoint(d / "m", &c); },
               {st, "model.layers.0.mlp.gate_proj.weight", "[128, 64]", "[192, 64]", "config.json"});
  set_config(d / "m", "intermediate_size", 128);
  set_config(d / "m", "torch_dtype", "bfloat16");
  expect_error([&] { load_hf_checkpoint(d / "m", &c); },
               {st, "model.embed_tokens.weight", "is F32", "torch_dtype \"bfloat16\""});
  set_config(d / "m", "torch_dtype", "float32");
  set_config(d / "m", "tie_word_embeddings", false);
  expect_error([&] { load_hf_checkpoint(d / "m", &c); }, {"no tensor 'lm_head.weight'", "config.json"});
  set_config(d / "m", "tie_word_embeddings", true);
  set_config(d / "m", "num_hidden_layers", 1);
  expect_error([&] { load_hf_checkpoint(d / "m", &c); }, {st, "'model.layers.1.", "does not have"});
  set_config(d / "m", "num_hidden_layers", 3);
  expect_error([&] { load_hf_checkpoint(d / "m", &c); }, {"no tensor 'model.layers.2."});
  set_config(d / "m", "num_hidden_layers", 2);
  load_hf_checkpoint(d / "m", &c);  // restored: loads

  make_llama(d / "u", "--untied --dtype F32");
  set_config(d / "u", "tie_word_embeddings", true);
  expect_error([&] { load_hf_checkpoint(d / "u", &c); }, {"'lm_head.weight'", "tie_word_embeddings"});

  fs::create_directory(d / "lone");
  fs::copy_file(st, d / "lone/x.safetensors");
  expect_error([&] { load_hf_checkpoint(d / "lone/x.safetensors", &c); }, {"no config.json", d / "lone"});
  // A ratchet checkpoint directory is named as such, with what to do instead.
  fs::create_directory(d / "step_00000005");
  write_file(d / "step_00000005/COMMITTED", "");
  expect_error([&] { load_hf_checkpoint(d / "step_00000005", &c); },
               {"is a ratchet checkpoint, not a Hugging Face one", "--ckpt-dir", "ratchet ckpt export"});
}

}  // namespace
}  // namespace ratchet

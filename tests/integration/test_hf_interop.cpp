// Hugging Face interop through the real binary: a Llama written by the
// independent Python writer (tests/data/safetensors_io.py) fine-tunes here
// (--init-from DIR, BF16 shards), exports with --export-hf and `ckpt export
// --format hf`, and the Python reader reads the exports; HF -> ratchet -> HF
// is bit-exact in F32. Refusals (smaller vocab, GPT-2 export, an existing
// export) happen before the first step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

const std::string kPy = std::string("python3 ") + RATCHET_TESTS_DIR + "/data/safetensors_io.py";

class HfInterop : public BibleShardsSuite {
 protected:
  // A tiny Llama in HF layout: 2 layers, 64 channels, 4 heads, 2 KV heads,
  // hidden 128; vocab 300 >= the byte shards' 257.
  static void make_llama(const std::string& dir, const std::string& extra) {
    auto r = run_shell(kPy + " make-llama " + dir +
                       " --layers 2 --channels 64 --heads 4 --kv-heads 2 --hidden 128 " + extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static std::string train(const std::string& init, const std::string& rest) {
    return "train --init-from " + init + " --seq-len 32 --batch-size 2 --threads 2 --quiet "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' " + rest;
  }
  static nlohmann::json py_read(const std::string& path) {
    auto r = run_shell(kPy + " read " + path);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  }
  // Tensors of a and b: same names and shapes; returns how many values differ in bits.
  static size_t differing(const nlohmann::json& a, const nlohmann::json& b) {
    EXPECT_EQ(a["tensors"].size(), b["tensors"].size());
    size_t diff = 0;
    for (auto it = a["tensors"].begin(); it != a["tensors"].end(); ++it) {
      EXPECT_TRUE(b["tensors"].contains(it.key())) << it.key();
      if (!b["tensors"].contains(it.key())) continue;
      const auto& u = (*it)["values"];
      const auto& v = b["tensors"][it.key()]["values"];
      EXPECT_EQ((*it)["shape"], b["tensors"][it.key()]["shape"]) << it.key();
      for (size_t i = 0; i < std::min(u.size(), v.size()); ++i) {
        const float x = u[i].get<float>(), y = v[i].get<float>();
        diff += std::memcmp(&x, &y, 4) != 0;
      }
    }
    return diff;
  }
};

TEST_F(HfInterop, PythonCheckpointFineTunesAndExports) {
  TempDir d;
  make_llama(d / "hf", "--vocab 300 --dtype BF16 --shard-bytes 100000 --untied");
  ASSERT_TRUE(fs::exists(d / "hf/model.safetensors.index.json"));
  auto r = run_ratchet(train(d / "hf", "--steps 6 --lr 1e-3 --ckpt-dir " + (d / "ck") +
                                           " --export-hf " + (d / "out") + " --log-jsonl " + (d / "log.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("exported Hugging Face checkpoint"), std::string::npos) << r.output;
  // A random Llama over a vocab of 300 starts near ln(300) = 5.7 and learns.
  auto loss = jsonl_values(d / "log.jsonl", "loss");
  ASSERT_EQ(loss.size(), 6u);
  EXPECT_NEAR(loss.front(), std::log(300.0), 0.5);
  EXPECT_LT(loss.back(), loss.front());

  const auto in = py_read(d / "hf"), out = py_read(d / "out");
  auto cfg = read_json_file(d / "out/config.json");
  EXPECT_EQ(cfg["num_key_value_heads"], 2);
  EXPECT_EQ(cfg["tie_word_embeddings"], false);
  EXPECT_EQ(cfg["vocab_size"], 300);
  EXPECT_EQ(out["tensors"]["lm_head.weight"]["dtype"], "F32");  // --export-dtype f32 by default
  EXPECT_GT(differing(in, out), 0u) << "training changed nothing";

  // The final checkpoint exported by `ckpt export --format hf` is the same model, bit for bit.
  r = run_ratchet("ckpt export " + (d / "ck/step_00000006") + " --format hf --output " + (d / "ck_hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(differing(out, py_read(d / "ck_hf")), 0u);
  EXPECT_EQ(read_file(d / "out/config.json"), read_file(d / "ck_hf/config.json"));
  // ... and not twice without --overwrite.
  r = run_ratchet("ckpt export " + (d / "ck/step_00000006") + " --format hf --output " + (d / "ck_hf"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
  r = run_ratchet("ckpt export " + (d / "ck/step_00000006") + " --format hf --dtype bf16 --overwrite "
                  "--output " + (d / "ck_hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(py_read(d / "ck_hf")["tensors"]["model.norm.weight"]["dtype"], "BF16");
}

// HF (F32) -> ratchet -> HF: every tensor bit-exact. One step at --lr 1e-30
// changes no FP32 weight: AdamW's first update is lr * (±1 + wd * p), far
// below half an ulp of any weight the writer draws (|p| >> 1e-22).
TEST_F(HfInterop, RoundTripIsBitExactInF32) {
  TempDir d;
  make_llama(d / "hf", "--vocab 257 --dtype F32 --seed 9");
  auto r = run_ratchet(train(d / "hf/model.safetensors", "--steps 1 --lr 1e-30 --export-hf " + (d / "out")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(differing(py_read(d / "hf"), py_read(d / "out")), 0u);
  // Floats are written as the shortest decimal that reads back the same
  // (issue 25: rms_norm_eps was 9.999999747378752e-06).
  const std::string cfg = read_file(d / "out/config.json");
  EXPECT_NE(cfg.find("\"rms_norm_eps\": 1e-05,"), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("\"rope_theta\": 10000.0,"), std::string::npos) << cfg;
  EXPECT_EQ(read_file(d / "hf/config.json").find("9.99999"), std::string::npos);
}

// Issue 25: a directory with both model.safetensors and an index. transformers
// reads model.safetensors (from_pretrained looks for it first); so does
// ratchet, and says so. It used to load the shards without a word.
TEST_F(HfInterop, SingleFileWinsOverAnIndexAsInTransformers) {
  TempDir d;
  make_llama(d / "both", "--vocab 257 --dtype F32 --seed 1 --shard-bytes 20000");
  make_llama(d / "single", "--vocab 257 --dtype F32 --seed 2");
  ASSERT_TRUE(fs::exists(d / "both/model.safetensors.index.json"));
  fs::copy_file(d / "single/model.safetensors", d / "both/model.safetensors");
  auto r = run_ratchet(train(d / "both", "--steps 1 --lr 1e-30 --export-hf " + (d / "out")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("holds both model.safetensors and model.safetensors.index.json: reading "
                          "model.safetensors, as transformers does"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(differing(py_read(d / "single"), py_read(d / "out")), 0u);
}

TEST_F(HfInterop, DanglingSymlinkIsNamedAsOne) {
  TempDir d;
  make_llama(d / "hf", "--vocab 257 --dtype F32");
  fs::remove(d / "hf/model.safetensors");
  fs::create_symlink("/nonexistent/blobs/abc123", d / "hf/model.safetensors");
  auto r = run_ratchet(train(d / "hf", "--steps 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.safetensors is a dangling symbolic link (to /nonexistent/blobs/abc123"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("holds neither"), std::string::npos) << r.output;
  // The same for config.json and for a FILE.safetensors given directly.
  fs::remove(d / "hf/model.safetensors");
  fs::create_symlink("gone.safetensors", d / "hf/model.safetensors");
  r = run_ratchet(train(d / "hf/model.safetensors", "--steps 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("dangling symbolic link (to gone.safetensors"), std::string::npos) << r.output;
  fs::rename(d / "hf/config.json", d / "cfg.json");
  fs::create_symlink(d / "missing.json", d / "hf/config.json");
  r = run_ratchet(train(d / "hf", "--steps 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("config.json is a dangling symbolic link"), std::string::npos) << r.output;
}

// The meaning of the names: ratchet's first-step loss on a Python-written HF
// checkpoint equals the loss that transformers' Llama math gives from the HF
// tensors (tests/data/hf_llama_loss.py, float64 torch) on the same windows.
TEST_F(HfInterop, LossMatchesTransformersMathFromHfNames) {
  TempDir d;
  // Weights N(0, 0.25): attention far from uniform, so every block's meaning shows in the loss.
  make_llama(d / "hf", "--vocab 300 --dtype F32 --untied --seed 4 --std-milli 250");
  // A token stream of our own (llm.c token file -> `ratchet convert`), so
  // both sides see exactly the same windows.
  std::vector<uint16_t> tokens(400);
  uint32_t s = 12345;
  for (auto& t : tokens) t = (uint16_t)((s = s * 1664525u + 1013904223u) >> 16) % 257;
  int32_t header[256] = {20240520, 1, (int32_t)tokens.size()};
  std::string bin((const char*)header, sizeof header);
  bin.append((const char*)tokens.data(), tokens.size() * 2);
  write_file(d / "tokens.bin", bin);
  write_file(d / "tokens.json", nlohmann::json(tokens).dump());
  fs::create_directory(d / "data");
  auto r = run_ratchet("convert " + (d / "tokens.bin") + " " + (d / "data/train_000000.h5") +
                       " --tokenizer byte --vocab-size 257 --eot 256");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet("train --init-from " + (d / "hf") + " --train-data '" + (d / "data/train_*.h5") +
                  "' --no-shuffle --batch-size 2 --seq-len 16 --steps 1 --threads 1 --quiet --log-jsonl " +
                  (d / "log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto loss = jsonl_values(d / "log.jsonl", "loss");
  ASSERT_EQ(loss.size(), 1u);
  r = run_shell("/usr/bin/python3 " + std::string(RATCHET_TESTS_DIR) + "/data/hf_llama_loss.py " + (d / "hf") +
                " " + (d / "tokens.json") + " 2 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // FP32 against float64 over 32 tokens of a 2-layer model: measured 2e-8
  // apart; a wrong block (k/v or gate/up swapped, RoPE left out) measured
  // 0.28-0.61 apart. 1e-5 leaves FP32 room and catches any of those.
  EXPECT_NEAR(loss[0], std::stod(r.output), 1e-5) << r.output;
}

TEST_F(HfInterop, BudgetStopWritesTheExport) {
  TempDir d;
  make_llama(d / "hf", "--vocab 257 --dtype BF16");
  auto r = run_ratchet(train(d / "hf", "--steps 50 --lr 1e-3 --max-tokens 128 --export-hf " + (d / "out")));
  EXPECT_EQ(r.exit_code, 76) << r.output;  // budget reached
  EXPECT_TRUE(fs::exists(d / "out/model.safetensors")) << r.output;
  EXPECT_TRUE(fs::exists(d / "out/config.json"));
}

TEST_F(HfInterop, RefusalsComeBeforeTraining) {
  TempDir d;
  make_llama(d / "small", "--vocab 200 --dtype F32");
  auto r = run_ratchet(train(d / "small", "--steps 2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("vocab_size 200"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("vocab 257"), std::string::npos) << r.output;

  make_llama(d / "hf", "--vocab 257 --dtype F32");
  fs::create_directory(d / "taken");
  write_file(d / "taken/config.json", "{}");
  r = run_ratchet(train(d / "hf", "--steps 2 --export-hf " + (d / "taken")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--export-hf " + (d / "taken") + " already holds config.json"), std::string::npos)
      << r.output;
  EXPECT_EQ(read_file(d / "taken/config.json"), "{}");  // untouched

  r = run_ratchet("train --model custom --layers 1 --heads 2 --channels 32 --seq-len 16 --steps 1 --quiet "
                  "--train-data '" + (*dir_ / "data/train_*.h5") + "' --export-hf " + (d / "g"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--export-hf writes Llama models"), std::string::npos) << r.output;

  // A corrupt shard: the error names the file.
  write_file(d / "hf/model.safetensors", std::string("\x10\0\0\0\0\0\0\0{}", 10));
  r = run_ratchet(train(d / "hf", "--steps 2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(d / "hf/model.safetensors"), std::string::npos) << r.output;
}

// An export that fails after training (here a file-size limit standing in for
// a full disk; every path was fine before the first step) is a failed run,
// exit 1, not bad input (exit 2 before), and says where the weights are. The
// earlier export in the directory is left whole.
TEST_F(HfInterop, AnExportFailingAfterTrainingIsAFailedRun) {
  TempDir d;
  make_llama(d / "hf", "--vocab 257 --dtype F32");
  auto r = run_ratchet(train(d / "hf", "--steps 1 --export-hf " + (d / "out") + " --export-dtype bf16"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string before = read_file(d / "out/model.safetensors");
  r = run_shell("trap '' XFSZ; ulimit -f 100; " + std::string(RATCHET_EXE) + " " +
                train(d / "hf", "--steps 1 --export-hf " + (d / "out") + " --overwrite"));  // F32: 2x larger
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("the export failed after training"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not kept anywhere else"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(d / "out/model.safetensors"), before);
  EXPECT_EQ(read_json_file(d / "out/config.json")["torch_dtype"], "bfloat16");
  for (const auto& e : fs::directory_iterator(d / "out")) EXPECT_NE(e.path().extension(), ".partial") << e.path();
}

}  // namespace

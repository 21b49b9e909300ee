// Every 2026 family through the real binary (issue 38): a tiny random model
// of the family in Hugging Face layout fine-tunes (`train --init-from DIR`,
// no --arch: the family is config.json's model_type), exports with
// --export-hf bit-exact in F32 (lr 1e-30 leaves every weight's bits), and
// `sample --init-from` the export generates; a config.json the binary cannot
// train is refused with exit 2 naming file, field and value before a step.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "interop/hf_checkpoint.h"
#include "model/param_layout.h"
#include "testing/bible_shards_suite.h"
#include "testing/family_configs.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

class HfFamiliesCli : public BibleShardsSuite {
 protected:
  static std::string train(const std::string& init, const std::string& rest) {
    return "train --init-from " + init + " --seq-len 16 --batch-size 2 --threads 2 --quiet "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' " + rest;
  }
};

// The family's tiny config with a vocab the byte shards (257) fit, random weights, in dir.
std::vector<float> write_family(Family f, const std::string& dir, GPTConfig* c) {
  *c = tiny_family_config(f, f != Family::llama);
  c->vocab_size = 300, c->padded_vocab = 0;
  c->finalize();
  std::vector<float> p(ParamLayout(*c).total, 0.f);
  std::mt19937 rng(11 + (int)f);
  std::normal_distribution<float> n(0.f, 0.1f);
  for (const auto& t : hf_tensor_map(*c)) {
    size_t k = 1;
    for (auto d : t.shape) k *= d;
    for (size_t i = 0; i < k; i++) p[t.offset + i] = n(rng);
  }
  save_hf_checkpoint(dir, *c, p, StDtype::F32, false);
  return p;
}

TEST_F(HfFamiliesCli, EachFamilyTrainsExportsAndSamples) {
  TempDir d;
  for (const auto& [name, fam] : all_families()) {
    SCOPED_TRACE(name);
    GPTConfig c;
    const auto params = write_family(fam, d / ("src_" + name), &c);
    const std::string out = d / ("out_" + name);
    auto r = run_ratchet(train(d / ("src_" + name), "--steps 1 --lr 1e-30 --export-hf " + out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = read_json_file(out + "/config.json");
    EXPECT_EQ(j["model_type"], family_name(fam));
    EXPECT_EQ(j["architectures"][0], hf_architecture(fam));
    GPTConfig back;
    const auto p = load_hf_checkpoint(out, &back);
    EXPECT_EQ(first_config_difference(back, c), "");
    ASSERT_EQ(p.size(), params.size());
    EXPECT_EQ(std::memcmp(p.data(), params.data(), p.size() * 4), 0);
    r = run_ratchet("sample --init-from " + out + " --tokenizer byte --prompt 'In the' --tokens 4 --seed 3 --threads 2");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
}

TEST_F(HfFamiliesCli, UnsupportedFieldsAreRefusedBeforeTraining) {
  TempDir d;
  GPTConfig c;
  write_family(Family::qwen3, d / "q", &c);
  auto j = read_json_file(d / "q/config.json");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  write_file(d / "q/config.json", j.dump());
  auto r = run_ratchet(train(d / "q", "--steps 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(d / "q/config.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"yarn\""), std::string::npos) << r.output;
  j["rope_scaling"] = nullptr;
  j["model_type"] = "phi3";
  write_file(d / "q/config.json", j.dump());
  r = run_ratchet(train(d / "q", "--steps 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const char* t : {"\"phi3\"", "\"qwen2\"", "\"gemma3_text\"", "\"smollm3\""})
    EXPECT_NE(r.output.find(t), std::string::npos) << t << ": " << r.output;
}

}  // namespace

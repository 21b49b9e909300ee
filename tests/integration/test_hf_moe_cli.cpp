// The MoE families through the real binary (issue 39): a tiny random
// qwen3_moe (dense and MoE layers mixed), olmoe (clip_qkv) and mixtral
// (sliding window) in Hugging Face layout, per-expert tensor names, fine-tune
// (`train --init-from DIR`, the family from config.json's model_type),
// export with --export-hf and `ckpt export --format hf` bit-exact in F32
// (lr 1e-30 leaves every weight's bits), and `sample --init-from` and `eval
// --init-from` the export; a config.json field that changes the math and is
// not implemented is refused with exit 2 naming file, field and value.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "interop/hf_checkpoint.h"
#include "model/param_layout.h"
#include "testing/bible_shards_suite.h"
#include "testing/hf_moe_configs.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

class HfMoeCli : public BibleShardsSuite {
 protected:
  static std::string train(const std::string& init, const std::string& rest) {
    return "train --init-from " + init + " --seq-len 16 --batch-size 2 --threads 2 --quiet "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' " + rest;
  }
};

// The family's tiny HF config with a vocab the byte shards (257) fit, random weights, in dir.
std::vector<float> write_family(Family f, const std::string& dir, GPTConfig* c) {
  *c = hf_moe_config(f, /*tied=*/f == Family::olmoe);
  c->vocab_size = 300, c->padded_vocab = 0;
  c->finalize();
  std::vector<float> p(ParamLayout(*c).total, 0.f);  // unused slices (qwen3_moe's dense layers) stay zero
  std::mt19937 rng(23 + (int)f);
  std::normal_distribution<float> n(0.f, 0.1f);
  for (const auto& t : hf_tensor_map(*c)) {
    size_t k = 1;
    for (auto d : t.shape) k *= d;
    const bool router = t.name.find(".gate.weight") != std::string::npos;
    for (size_t i = 0; i < k; i++) p[t.offset + i] = (router ? 8.f : 1.f) * n(rng);
  }
  save_hf_checkpoint(dir, *c, p, StDtype::F32, false);
  return p;
}

TEST_F(HfMoeCli, EachFamilyTrainsExportsAndSamples) {
  TempDir d;
  for (const auto& [name, fam] : hf_moe_families()) {
    SCOPED_TRACE(name);
    GPTConfig c;
    const auto params = write_family(fam, d / ("src_" + name), &c);
    const std::string out = d / ("out_" + name), ck = d / ("ck_" + name);
    auto r = run_ratchet(train(d / ("src_" + name), "--steps 1 --lr 1e-30 --ckpt-dir " + ck +
                                                        " --export-hf " + out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = read_json_file(out + "/config.json");
    EXPECT_EQ(j["model_type"], family_name(fam));
    EXPECT_EQ(j["architectures"][0], hf_architecture(fam));
    EXPECT_EQ(j["num_experts_per_tok"], 2);
    GPTConfig back;
    const auto p = load_hf_checkpoint(out, &back);
    EXPECT_EQ(first_config_difference(back, c), "");
    EXPECT_EQ(back.router_aux_loss_coef, c.router_aux_loss_coef);
    EXPECT_EQ(back.clip_qkv, c.clip_qkv);
    ASSERT_EQ(p.size(), params.size());
    EXPECT_EQ(std::memcmp(p.data(), params.data(), p.size() * 4), 0);
    // The run's checkpoint exports the same files.
    r = run_ratchet("ckpt export " + ck + "/step_00000001 --format hf --output " + (d / ("ckhf_" + name)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(read_file(out + "/config.json"), read_file(d / ("ckhf_" + name) + "/config.json"));
    EXPECT_TRUE(read_file(out + "/model.safetensors") == read_file(d / ("ckhf_" + name) + "/model.safetensors"));
    r = run_ratchet("sample --init-from " + out + " --tokenizer byte --prompt 'In the' --tokens 4 --seed 3 --threads 2");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    r = run_ratchet("eval --init-from " + out + " --tokenizer byte --data val='" + (*dir_ / "data/val_*.h5") +
                    "' --seq-len 16 --threads 2");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
}

// dots1 (DeepSeek-V3's MoE on Qwen3's attention): 2 shared experts, layer 0
// dense (first_k_dense_replace 1), sigmoid scores times 2.5, and a random
// selection bias (mlp.gate.e_score_correction_bias). Fine-tuned on the cpu
// with the bias fixed (no --moe-bias-update-rate), the export (--export-hf
// and ckpt export) gives back the weights and the bias bit for bit, and
// eval reads it; n_group 3 (not dividing the 4 experts) is refused with
// exit 2 naming the key.
TEST_F(HfMoeCli, Dots1TrainsWithItsBiasAndExportsIt) {
  TempDir d;
  GPTConfig c = hf_moe_config(Family::qwen3_moe);
  c.family = Family::dots1;
  c.vocab_size = 300, c.padded_vocab = 0;
  c.decoder_sparse_step = 1, c.mlp_only_layers = {0};
  c.n_shared_experts = 2, c.moe_sigmoid = true, c.routed_scaling_factor = 2.5f;
  c.moe_selection_bias = true, c.router_aux_loss_coef = 0.f;
  c.finalize();
  std::vector<float> p(ParamLayout(c).total, 0.f), bias((size_t)c.num_layers * c.num_experts, 0.f);
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.f, 0.1f);
  for (const auto& t : hf_tensor_map(c)) {
    size_t k = 1;
    for (auto dd : t.shape) k *= dd;
    for (size_t i = 0; i < k; i++) p[t.offset + i] = n(rng);
  }
  for (const auto& t : hf_bias_map(c))
    for (int e = 0; e < c.num_experts; e++) bias[t.offset + e] = n(rng);
  save_hf_checkpoint(d / "src", c, p, StDtype::F32, false, 5'000'000'000ull, bias);
  const std::string out = d / "out", ck = d / "ck";
  auto r = run_ratchet(train(d / "src", "--device cpu --steps 1 --lr 1e-30 --ckpt-dir " + ck +
                                            " --export-hf " + out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_json_file(out + "/config.json")["model_type"], "dots1");
  GPTConfig back;
  std::vector<float> bias_back;
  const auto q = load_hf_checkpoint(out, &back, &bias_back);
  EXPECT_EQ(first_config_difference(back, c), "");
  ASSERT_EQ(q.size(), p.size());
  EXPECT_EQ(std::memcmp(q.data(), p.data(), p.size() * 4), 0);
  ASSERT_EQ(bias_back.size(), bias.size());
  EXPECT_EQ(std::memcmp(bias_back.data(), bias.data(), bias.size() * 4), 0) << "the selection bias";
  r = run_ratchet("ckpt export " + ck + "/step_00000001 --format hf --output " + (d / "ckhf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_file(out + "/model.safetensors") == read_file(d / "ckhf/model.safetensors"));
  r = run_ratchet("eval --init-from " + out + " --tokenizer byte --data val='" + (*dir_ / "data/val_*.h5") +
                  "' --seq-len 16 --threads 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto j = read_json_file(d / "src/config.json");
  j["n_group"] = 3;
  write_file(d / "src/config.json", j.dump());
  r = run_ratchet(train(d / "src", "--device cpu --steps 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("n_group"), std::string::npos) << r.output;
}

TEST_F(HfMoeCli, UnsupportedFieldsAreRefusedBeforeTraining) {
  TempDir d;
  GPTConfig c;
  write_family(Family::mixtral, d / "m", &c);
  auto j = read_json_file(d / "m/config.json");
  j["router_jitter_noise"] = 0.1;
  write_file(d / "m/config.json", j.dump());
  auto r = run_ratchet(train(d / "m", "--steps 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(d / "m/config.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("router_jitter_noise"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0.1"), std::string::npos) << r.output;
  j["router_jitter_noise"] = 0.0;
  j["num_experts_per_tok"] = 9;  // more than the 4 experts
  write_file(d / "m/config.json", j.dump());
  r = run_ratchet(train(d / "m", "--steps 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("num_experts_per_tok 9"), std::string::npos) << r.output;
}

// qwen2_moe from the command line: a shared_expert_intermediate_size of 0
// (every Qwen2-MoE builds its gated shared expert) and the field in another
// family are refused (exit 2) naming the file and the field;
// --shared-expert-ffn against the checkpoint's width is refused naming the
// flag; --family qwen2_moe from flags needs --shared-expert-ffn, and with it
// a step runs.
TEST_F(HfMoeCli, Qwen2MoeSharedExpertFieldsAndFlags) {
  TempDir d;
  GPTConfig c;
  write_family(Family::qwen2_moe, d / "q", &c);
  auto r = run_ratchet(train(d / "q", "--steps 1 --shared-expert-ffn 32"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--shared-expert-ffn"), std::string::npos) << r.output;
  auto j = read_json_file(d / "q/config.json");
  j["shared_expert_intermediate_size"] = 0;
  write_file(d / "q/config.json", j.dump());
  r = run_ratchet(train(d / "q", "--steps 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(d / "q/config.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shared_expert_intermediate_size"), std::string::npos) << r.output;
  write_family(Family::qwen3_moe, d / "m", &c);
  j = read_json_file(d / "m/config.json");
  j["shared_expert_intermediate_size"] = 64;
  write_file(d / "m/config.json", j.dump());
  r = run_ratchet(train(d / "m", "--steps 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("shared_expert_intermediate_size"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("qwen2_moe"), std::string::npos) << r.output;
  const std::string flags = "train --model custom --arch llama --layers 2 --heads 2 --channels 32 "
                            "--family qwen2_moe --num-experts 4 --experts-per-tok 2 --moe-ffn-hidden 16 "
                            "--seq-len 16 --batch-size 2 --threads 2 --quiet --device cpu --steps 1 "
                            "--train-data '" + (*dir_ / "data/train_*.h5") + "'";
  r = run_ratchet(flags);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--shared-expert-ffn"), std::string::npos) << r.output;
  r = run_ratchet(flags + " --shared-expert-ffn 24");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace

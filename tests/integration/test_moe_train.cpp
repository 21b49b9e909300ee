// `ratchet train` on a tiny Mixture-of-Experts model through the real binary
// (issue 39, docs/moe.md): --family qwen3_moe with --num-experts,
// --experts-per-tok, --moe-ffn-hidden and --router-aux-loss-coef trains with
// gradient accumulation, the JSONL keeps `loss` the cross-entropy and logs
// `aux_loss` and each MoE layer's load (moe_min/l, moe_max/l, moe_cv/l), the
// checkpoint holds the MoE fields and a preempted run resumes bit for bit
// (also with the DeepSeek-V3 selection bias and its update); bad MoE flags are
// refused naming the flag (exit 2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

class MoeTrain : public BibleShardsSuite {
 protected:
  // 3 layers, decoder_sparse_step 1: all MoE; 4 experts, top 2, I = 16;
  // B 2 x T 16, 2 micro-batches per step.
  static std::string train_cmd(const std::string& run, int steps = 6, const std::string& extra = "") {
    return "train --model custom --arch llama --family qwen3_moe --layers 3 --heads 4 --kv-heads 2 "
           "--channels 32 --num-experts 4 --experts-per-tok 2 --moe-ffn-hidden 16 "
           "--router-aux-loss-coef 0.02 --max-seq-len 32 --seq-len 16 --batch-size 2 "
           "--total-batch-tokens 64 --threads 1 --train-data '" + (*dir_ / "data/train_*.h5") +
           "' --warmup-steps 2 --steps " + std::to_string(steps) + " --lr 3e-3 --quiet "
           "--ckpt-dir " + run + "/ck --log-jsonl " + run + "/log.jsonl " + extra;
  }
};

TEST_F(MoeTrain, LogsAuxLossAndLoadAndResumesBitIdentically) {
  TempDir ref, run;
  auto r = run_ratchet(train_cmd(ref.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("experts=4 top2 moe_ffn=16 moe_layers=3"), std::string::npos) << r.output;
  const std::vector<nlohmann::json> recs = read_jsonl(ref / "log.jsonl");
  int steps = 0;
  for (const nlohmann::json& j : recs) {
    if (!j.contains("grad_norm")) continue;  // an evaluation record
    steps++;
    ASSERT_TRUE(j.contains("aux_loss")) << j.dump();
    const double aux = j["aux_loss"], loss = j["loss"];
    // Near-uniform routing at init: the aux loss is near k = 2 (its value
    // under uniform routing) and the CE near ln(vocab), far apart.
    EXPECT_GT(aux, 1.5) << j.dump();
    EXPECT_LT(aux, 4.0) << j.dump();
    EXPECT_GT(std::fabs(loss - aux), 1.0) << "loss must stay the cross-entropy: " << j.dump();
    for (int l = 0; l < 3; l++) {
      const std::string at = "/" + std::to_string(l);
      ASSERT_TRUE(j.contains("moe_min" + at) && j.contains("moe_max" + at) && j.contains("moe_cv" + at))
          << j.dump();
      const double lo = j["moe_min" + at], hi = j["moe_max" + at], cv = j["moe_cv" + at];
      // 2 micro-batches x 32 tokens x top 2 = 128 selections over 4 experts.
      EXPECT_LE(lo, 32.0);
      EXPECT_GE(hi, 32.0);
      EXPECT_LE(hi, 64.0);  // an expert gets a token at most once: 64 tokens
      EXPECT_GE(cv, 0.0);
      EXPECT_EQ(lo == hi, cv == 0.0);
    }
    EXPECT_FALSE(j.contains("moe_min/3"));
  }
  EXPECT_EQ(steps, 6);
  const Checkpoint ck = read_checkpoint(ref / "ck/step_00000006");
  EXPECT_EQ(ck.meta.model.family, Family::qwen3_moe);
  EXPECT_EQ(ck.meta.model.num_experts, 4);
  EXPECT_EQ(ck.meta.model.experts_per_tok, 2);
  EXPECT_EQ(ck.meta.model.moe_ffn_hidden, 16);
  EXPECT_TRUE(ck.meta.model.norm_topk_prob);
  EXPECT_FLOAT_EQ(ck.meta.model.router_aux_loss_coef, 0.02f);

  r = run_shell("RATCHET_FAULT=USR1@step-3 " RATCHET_EXE " " + train_cmd(run.path));
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = run_ratchet(train_cmd(run.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 3"), std::string::npos) << r.output;
  const std::vector<float> want = ck.params, got = read_checkpoint(run / "ck/step_00000006").params;
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << "resumed MoE weights differ";
}

// DeepSeek-V3 routing through the binary: sigmoid scores and
// routed_scaling_factor train (without the aux loss) and land in the
// checkpoint.
TEST_F(MoeTrain, SigmoidRoutingTrainsAndIsCheckpointed) {
  TempDir d;
  std::string cmd = train_cmd(d.path, 2);
  const std::string from = "--router-aux-loss-coef 0.02";
  cmd.replace(cmd.find(from), from.size(),
              "--router-aux-loss-coef 0 --moe-scoring sigmoid --routed-scaling-factor 2.5");
  const auto r = run_ratchet(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("moe_layers=3 scoring=sigmoid routed_scale=2.5"), std::string::npos)
      << r.output;
  const Checkpoint ck = read_checkpoint(d / "ck/step_00000002");
  EXPECT_TRUE(ck.meta.model.moe_sigmoid);
  EXPECT_EQ(ck.meta.model.routed_scaling_factor, 2.5f);
  for (const nlohmann::json& j : read_jsonl(d / "log.jsonl"))
    if (j.contains("grad_norm")) EXPECT_TRUE(std::isfinite((double)j["loss"])) << j.dump();
}

// DeepSeek-V3's selection bias through the binary (--moe-bias-update-rate,
// docs/moe.md): it moves after each step, is saved as state.h5's
// /moe_selection_bias, a preempted run resumes it bit for bit, and a resume
// that would drop or invent it is refused naming the dataset.
TEST_F(MoeTrain, SelectionBiasUpdatesAndResumesBitIdentically) {
  const std::string rate = " --moe-bias-update-rate 0.01";
  TempDir ref, run;
  auto r = run_ratchet(train_cmd(ref.path, 6, rate));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Checkpoint ck = read_checkpoint(ref / "ck/step_00000006");
  EXPECT_TRUE(ck.meta.model.moe_selection_bias);
  ASSERT_EQ(ck.meta.moe_bias.size(), 3u * 4u);  // (L, E)
  double mag = 0;
  for (int l = 0; l < 3; l++) {
    double sum = 0;
    for (int e = 0; e < 4; e++) sum += ck.meta.moe_bias[l * 4 + e], mag += std::fabs(ck.meta.moe_bias[l * 4 + e]);
    // Each update is rate·sign(...) minus its mean: a row keeps a zero sum,
    // to the FP32 rounding of a few 0.01-sized terms. (A row may be back at
    // exactly 0: sign updates oscillate, -0.01 + 0.01 is 0.)
    EXPECT_NEAR(sum, 0.0, 1e-6) << "layer " << l;
  }
  EXPECT_GT(mag, 0.005) << "the bias did not move";

  r = run_shell("RATCHET_FAULT=USR1@step-3 " RATCHET_EXE " " + train_cmd(run.path, 6, rate));
  ASSERT_EQ(r.exit_code, 75) << r.output;
  const Checkpoint mid = read_checkpoint(run / "ck/step_00000003");
  ASSERT_EQ(mid.meta.moe_bias.size(), ck.meta.moe_bias.size());
  EXPECT_NE(mid.meta.moe_bias, ck.meta.moe_bias) << "the bias must change between steps 3 and 6";
  r = run_ratchet(train_cmd(run.path, 6, rate));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 3"), std::string::npos) << r.output;
  const Checkpoint got = read_checkpoint(run / "ck/step_00000006");
  ASSERT_EQ(got.params.size(), ck.params.size());
  EXPECT_EQ(std::memcmp(got.params.data(), ck.params.data(), got.params.size() * sizeof(float)), 0)
      << "resumed weights differ";
  ASSERT_EQ(got.meta.moe_bias.size(), ck.meta.moe_bias.size());
  EXPECT_EQ(std::memcmp(got.meta.moe_bias.data(), ck.meta.moe_bias.data(),
                        got.meta.moe_bias.size() * sizeof(float)),
            0)
      << "resumed selection bias differs";

  // Resuming it without the flag would drop the bias: refused, naming the dataset.
  r = run_ratchet(train_cmd(run.path, 8));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("has a MoE selection bias (dataset /moe_selection_bias"), std::string::npos)
      << r.output;
  // A checkpoint without one, resumed with the flag: refused, naming the dataset.
  TempDir old;
  r = run_ratchet(train_cmd(old.path, 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_checkpoint(old / "ck/step_00000002").meta.moe_bias.empty());
  r = run_ratchet(train_cmd(old.path, 4, rate));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("has no dataset /moe_selection_bias in state.h5"), std::string::npos)
      << r.output;
}

TEST_F(MoeTrain, BadMoeFlagsAreRefusedNamingTheFlag) {
  struct Bad {
    std::string from, to, says;
  };
  TempDir out;  // where an --export-hf would write (refused before it does)
  const std::vector<Bad> bad = {
      {"--num-experts 4", "--num-experts 0", "--num-experts must be at least 1"},
      {"--experts-per-tok 2", "--experts-per-tok 5", "--experts-per-tok 5 exceeds --num-experts 4"},
      {"--moe-ffn-hidden 16", "--moe-ffn-hidden -3", "--moe-ffn-hidden must be at least 1"},
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef -1", "--router-aux-loss-coef must be"},
      {"--family qwen3_moe", "--family qwen3", "--num-experts needs a Mixture-of-Experts family"},
      {"--num-experts 4 ", "", "--family qwen3_moe needs --num-experts"},
      // DeepSeek-V3 routing (docs/moe.md)
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef 0.02 --moe-scoring tanh",
       "--moe-scoring is 'tanh'; it must be softmax or sigmoid"},
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef 0.02 --moe-scoring sigmoid",
       "add --router-aux-loss-coef 0"},
      {"--router-aux-loss-coef 0.02", "--routed-scaling-factor 0",
       "--routed-scaling-factor must be a positive finite number"},
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef 0.02 --moe-bias-update-rate -1",
       "--moe-bias-update-rate must be a finite number >= 0"},
      // --moe-ep-capacity F: a finite number >= 1 (docs/moe.md)
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef 0.02 --moe-ep-capacity 0.5",
       "--moe-ep-capacity must be a finite number >= 1 (got 0.5)"},
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef 0.02 --moe-ep-capacity nan",
       "--moe-ep-capacity must be a finite number >= 1 (got nan)"},
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef 0.02 --moe-ep-capacity inf",
       "--moe-ep-capacity must be a finite number >= 1 (got inf)"},
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef 0.02 --moe-ep-capacity two",
       "the argument ('two') for option '--moe-ep-capacity' is invalid"},
      // Group-limited selection: the shape rules name the flag
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef 0.02 --moe-n-group 3",
       "n_group (--moe-n-group) is 3 with 4 experts"},
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef 0.02 --moe-n-group 2 --moe-topk-group 3",
       "topk_group (--moe-topk-group) is 3 with n_group 2"},
      {"--router-aux-loss-coef 0.02", "--router-aux-loss-coef 0.02 --moe-n-group 4 --moe-topk-group 1",
       "(--experts-per-tok) 2 exceeds topk_group 1 x 1 experts per group"},
      {"--family qwen3_moe", "--family qwen3 --moe-n-group 2",
       "--num-experts needs a Mixture-of-Experts family"},
      // HF qwen3_moe has no field for them: refused before training, not after
      {"--router-aux-loss-coef 0.02",
       "--router-aux-loss-coef 0.02 --moe-n-group 2 --moe-topk-group 1 --export-hf " + out.path + "/hf",
       "this model's n_group is not"},
      {"--router-aux-loss-coef 0.02", "--moe-bias-update-rate 0.01 --export-hf " + out.path + "/hf",
       "this model's moe_selection_bias is not what a Hugging Face \"qwen3_moe\" model has"},
      {"--router-aux-loss-coef 0.02",
       "--router-aux-loss-coef 0 --moe-scoring sigmoid --export-hf " + out.path + "/hf",
       "this model's scoring_func is not"},
  };
  for (const Bad& b : bad) {
    TempDir d;
    std::string cmd = train_cmd(d.path, 1);
    const size_t at = cmd.find(b.from);
    ASSERT_NE(at, std::string::npos) << b.from;
    cmd.replace(at, b.from.size(), b.to);
    const auto r = run_ratchet(cmd);
    EXPECT_EQ(r.exit_code, 2) << b.to << "\n" << r.output;
    EXPECT_NE(r.output.find(b.says), std::string::npos) << b.to << "\n" << r.output;
  }
  // The coefficient on a dense model.
  TempDir d;
  const auto r = run_ratchet(
      "train --model custom --arch llama --layers 1 --heads 2 --channels 16 --seq-len 8 "
      "--batch-size 1 --steps 1 --threads 1 --router-aux-loss-coef 0.1 --train-data '" +
      (*dir_ / "data/train_*.h5") + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--router-aux-loss-coef needs a Mixture-of-Experts model"), std::string::npos)
      << r.output;
  const auto rb = run_ratchet(
      "train --model custom --arch llama --layers 1 --heads 2 --channels 16 --seq-len 8 "
      "--batch-size 1 --steps 1 --threads 1 --moe-bias-update-rate 0.1 --train-data '" +
      (*dir_ / "data/train_*.h5") + "'");
  EXPECT_EQ(rb.exit_code, 2) << rb.output;
  EXPECT_NE(rb.output.find("--moe-bias-update-rate needs a Mixture-of-Experts model"),
            std::string::npos)
      << rb.output;
}

}  // namespace

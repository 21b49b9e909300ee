// `mpirun -np 2 ratchet train --expert-parallel 2` end to end on a tiny MoE
// model (qwen3_moe, 3 layers all MoE, 4 experts, top 2; docs/moe.md):
//   - it equals the same run without expert parallelism (losses and the
//     final checkpoint's parameters), with evaluation in between (which runs
//     every expert locally, no exchange), and logs its all-to-all traffic
//     (a2a_bytes within the bound of the routed rows, a2a_ms);
//   - a run stopped at step 3 resumes on ONE process without expert
//     parallelism (the checkpoint holds every expert) and ends where the
//     uninterrupted run ends;
//   - with two micro-batches per step (B = 1) it equals the same without it;
//   - E not divisible by N is refused (exit 2) naming --expert-parallel and
//     num_experts.
// Tolerances (test_mpi_train's): the expert gradients are one GEMM over both
// ranks' rows instead of a + b of two (or accumulated over micro-batches),
// a few FP32 ulps per step that AdamW can magnify where gradients are near
// zero: losses 1e-5 relative; parameters 1/300 of lr per step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "mpi_testing.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

constexpr int kSteps = 6;
constexpr double kLr = 3e-3;

class MpiExpertParallelTrain : public BibleShardsSuite {
 protected:
  // B rows per rank, 64 tokens per step (2 ranks x 2 rows x T 16, or 1 x 4).
  static std::string cmd(const std::string& run, int B, const std::string& extra,
                         int experts = 4) {
    return "train --model custom --arch llama --family qwen3_moe --layers 3 --heads 4 --kv-heads 2 "
           "--channels 32 --num-experts " + std::to_string(experts) + " --experts-per-tok 2 "
           "--moe-ffn-hidden 16 --router-aux-loss-coef 0.02 --max-seq-len 32 --seq-len 16 "
           "--batch-size " + std::to_string(B) + " --total-batch-tokens 64 --threads 1 "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' --val-data '" +
           (*dir_ / "data/val_*.h5") + "' --eval-every 3 --eval-batches 4 --warmup-steps 2 "
           "--steps " + std::to_string(kSteps) + " --lr 3e-3 --quiet --ckpt-dir " + run +
           "/ck --log-jsonl " + run + "/log.jsonl " + extra;
  }
  static void expect_close(const std::string& a, const std::string& b, const std::string& what) {
    const std::vector<double> la = jsonl_values(a + "/log.jsonl", "loss"),
                              lb = jsonl_values(b + "/log.jsonl", "loss");
    ASSERT_EQ(la.size(), lb.size()) << what;
    ASSERT_FALSE(la.empty()) << what;
    double worst = 0;
    for (size_t i = 0; i < la.size(); i++)
      worst = std::max(worst, std::fabs(la[i] - lb[i]) / std::fabs(la[i]));
    EXPECT_LE(worst, 1e-5) << what << ": losses differ";
    const std::string last = "/ck/step_0000000" + std::to_string(kSteps);
    const std::vector<float> pa = read_checkpoint(a + last).params,
                             pb = read_checkpoint(b + last).params;
    ASSERT_EQ(pa.size(), pb.size()) << what;
    const double md = max_abs_diff(pa.data(), pb.data(), pa.size());
    EXPECT_LE(md, kSteps * kLr / 300) << what << ": parameters differ";
    std::printf("[ %s ] max relative loss difference %.2e, max parameter difference %.2e\n",
                what.c_str(), worst, md);
  }
};

TEST_F(MpiExpertParallelTrain, EqualsPlainDataParallelAndResumesOnOneProcess) {
  TempDir plain, ep, run;
  auto r = mpirun_ratchet(2, cmd(plain.path, 2, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(2, cmd(ep.path, 2, "--expert-parallel 2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("expert parallel: 1 group(s) of 2 ranks; this rank holds experts 0..1 of 4"),
            std::string::npos) << r.output;
  expect_close(plain.path, ep.path, "--expert-parallel 2 vs 1, 2 ranks");
  // Rank 0's all-to-all traffic per step. Per MoE layer (3) and micro-batch
  // (1): its counts (El = 2 ints to the other rank) and 4 row exchanges (to
  // the experts and back, forward and backward), each at most the N·k = 64
  // rows of C = 32 floats one rank routes: <= 3 (8 + 4 · 64 · 32 · 4) bytes.
  int records = 0;
  for (const nlohmann::json& j : read_jsonl(ep / "log.jsonl")) {
    if (!j.contains("grad_norm")) continue;  // an evaluation record
    records++;
    ASSERT_TRUE(j.contains("a2a_bytes") && j.contains("a2a_ms")) << j.dump();
    const double bytes = j["a2a_bytes"], ms = j["a2a_ms"];
    EXPECT_GT(bytes, 0) << j.dump();
    EXPECT_LE(bytes, 3 * (8 + 4 * 64 * 32 * 4)) << j.dump();
    EXPECT_GE(ms, 0) << j.dump();
  }
  EXPECT_EQ(records, kSteps);
  for (const nlohmann::json& j : read_jsonl(plain / "log.jsonl"))
    EXPECT_FALSE(j.contains("a2a_bytes")) << "no exchange without the flag: " << j.dump();

  r = mpirun_ratchet(2, cmd(run.path, 2, "--expert-parallel 2"), "RATCHET_FAULT=USR1@step-3");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = run_ratchet(cmd(run.path, 4, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expert_parallel changed from 2 to 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--expert-parallel changed from 2 to 1 since the checkpoint"),
            std::string::npos) << "the resume must say it is not bit-identical\n" << r.output;
  expect_close(ep.path, run.path, "2 ranks --expert-parallel 2 -> stop at 3 -> 1 process");
}

// Two micro-batches of 1 row per rank and step: each micro-batch exchanges
// its own rows, and the experts' gradients accumulate over both. Against
// the same micro-batches without the flag (not against B = 2 in one: each
// micro-batch's aux loss has its own statistics, docs/moe.md).
TEST_F(MpiExpertParallelTrain, AccumulatesOverMicroBatches) {
  TempDir plain, acc;
  auto r = mpirun_ratchet(2, cmd(plain.path, 1, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(2, cmd(acc.path, 1, "--expert-parallel 2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 micro-batch(es) per step"), std::string::npos) << r.output;
  expect_close(plain.path, acc.path, "--expert-parallel 2 with 2 micro-batches vs 1, 2 ranks");
}

TEST_F(MpiExpertParallelTrain, ExpertsNotDivisibleByTheGroupAreRefused) {
  TempDir d;
  const auto r = mpirun_ratchet(2, cmd(d.path, 2, "--expert-parallel 2", 3));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--expert-parallel 2 must divide num_experts 3"), std::string::npos)
      << r.output;
}

}  // namespace

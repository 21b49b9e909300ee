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
//     num_experts;
//   - at ZeRO-0 each rank holds its own experts only, weights, gradients and
//     AdamW state (the log's "expert state" line: half at N 2); ZeRO 1-2
//     (both ZeRO-1 layouts) hold their weights alone too, their state
//     sharded over the ranks holding the same experts; ZeRO 1-3 equal it too;
//   - a 6-expert run resumes from N 2 on 2 ranks at N 3 on 3 ranks and the
//     reverse, between ZeRO-0's, ZeRO-1's (flat and bucketed) and ZeRO-2's
//     expert slices, and from them at ZeRO-3 (every expert's weights),
//     ending where one process ends;
//   - a checkpoint whose expert moments' shard is damaged or missing is
//     refused naming the file, and the run resumes from the one before.
// Tolerances (test_mpi_train's): the expert gradients are one GEMM over both
// ranks' rows instead of a + b of two (or accumulated over micro-batches),
// a few FP32 ulps per step that AdamW can magnify where gradients are near
// zero: losses 1e-5 relative; parameters 1/300 of lr per step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_reader.h"
#include "mpi_testing.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

constexpr int kSteps = 6;
constexpr double kLr = 3e-3;
// ZeRO-1 in its flat layout: with --expert-parallel, its model holds the
// rank's experts alone (flat_shards.h).
const char* const kFlat1 = "1 --overlap-comm off";

class MpiExpertParallelTrain : public BibleShardsSuite {
 protected:
  // B rows per rank, 64 tokens per step (2 ranks x 2 rows x T 16, or 1 x 4).
  static std::string cmd(const std::string& run, int B, const std::string& extra,
                         int experts = 4, int tokens = 64) {
    return "train --model custom --arch llama --family qwen3_moe --layers 3 --heads 4 --kv-heads 2 "
           "--channels 32 --num-experts " + std::to_string(experts) + " --experts-per-tok 2 "
           "--moe-ffn-hidden 16 --router-aux-loss-coef 0.02 --max-seq-len 32 --seq-len 16 "
           "--batch-size " + std::to_string(B) + " --total-batch-tokens " + std::to_string(tokens) +
           " --threads 1 "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' --val-data '" +
           (*dir_ / "data/val_*.h5") + "' --eval-every 3 --eval-batches 4 --warmup-steps 2 "
           "--steps " + std::to_string(kSteps) + " --lr 3e-3 --quiet --ckpt-dir " + run +
           "/ck --log-jsonl " + run + "/log.jsonl " + extra;
  }
  // Each step's training loss, the last record of each step (a run resumed
  // from an earlier checkpoint than its stop appends those steps again).
  // With `val`, the evaluations' val_loss too (every expert run locally: the
  // experts other ranks updated must have come back to this one). Only
  // between uninterrupted runs on as many ranks: each rank evaluates its own
  // batches, and a stopped run's last evaluation is a final one.
  static std::vector<double> losses(const std::string& run, bool val) {
    std::map<std::pair<int, int>, double> by_step;
    for (const nlohmann::json& j : read_jsonl(run + "/log.jsonl")) {
      if (j.contains("grad_norm") && j.contains("loss")) by_step[{j["step"].get<int>(), 0}] = j["loss"];
      if (val && j.contains("val_loss")) by_step[{j["step"].get<int>(), 1}] = j["val_loss"];
    }
    std::vector<double> out;
    for (const auto& [step, loss] : by_step) out.push_back(loss);
    return out;
  }
  // The log's "expert state: AdamW m and v of H of T expert parameters".
  static std::pair<long, long> expert_state(const std::string& out) {
    std::smatch m;
    if (!std::regex_search(out, m, std::regex("expert state: AdamW m and v of ([0-9]+) of ([0-9]+)")))
      return {-1, -1};
    return {std::stol(m[1]), std::stol(m[2])};
  }
  // The same line's "its weights and gradients of W (an expert slice)": W, or -1.
  static long expert_weights(const std::string& out) {
    std::smatch m;
    if (!std::regex_search(out, m, std::regex("its weights and gradients of ([0-9]+) \\(an expert slice\\)")))
      return -1;
    return std::stol(m[1]);
  }
  static void expect_close(const std::string& a, const std::string& b, const std::string& what,
                           bool val = true) {
    const std::vector<double> la = losses(a, val), lb = losses(b, val);
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
  // With a sample every 3 steps: an expert slice's sample exchanges on
  // every rank of the group (a collective forward), and its traffic is not
  // the next step's (the a2a bound below).
  r = mpirun_ratchet(2, cmd(ep.path, 2, "--expert-parallel 2 --sample-every 3 --sample-tokens 8"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("expert parallel: 1 group(s) of 2 ranks; this rank holds experts 0..1 of 4"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("---- sample at step 3 (8 tokens"), std::string::npos) << r.output;
  // Rank 0 keeps AdamW state for 2 of the 4 experts: 3 layers x 2 experts x
  // (w1 2I·C + w2 C·I) = 3 · 2 · (32·32 + 32·16) elements of 3 · 4 · 1536.
  const auto held = expert_state(r.output);
  EXPECT_EQ(held.second, 3 * 4 * (32 * 32 + 32 * 16)) << r.output;
  EXPECT_EQ(held.first * 2, held.second) << "--expert-parallel 2 halves the expert state\n"
                                         << r.output;
  // At ZeRO-0 the model holds the slice alone: its weights and gradients too.
  EXPECT_NE(r.output.find("; its weights and gradients of " + std::to_string(held.first) +
                          " (an expert slice)"),
            std::string::npos)
      << r.output;
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
  expect_close(ep.path, run.path, "2 ranks --expert-parallel 2 -> stop at 3 -> 1 process", false);
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

// ZeRO 1-3 equal the plain run (4 ranks: the plain run on 4), and so do 4
// ranks in 2 groups of 2. ZeRO 0-2 (ZeRO-1 bucketed, and flat with
// --overlap-comm off) hold the rank's own experts' weights alone (the log's
// expert state line: half of them), ZeRO-0 all their state (half), ZeRO 1-2
// its shard of them over the ranks holding the same experts (a quarter on 4
// ranks: each expert's gradient summed over its 2 replicas, then sharded
// over them); ZeRO-3 keeps every expert's weights, their state sharded as
// the rest (each expert's gradient is its owners' plus the other ranks'
// zeros).
TEST_F(MpiExpertParallelTrain, ZeroStagesAndTwoGroupsEqualPlainDataParallel) {
  TempDir plain2, plain4;
  auto r = mpirun_ratchet(2, cmd(plain2.path, 2, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(4, cmd(plain4.path, 1, ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  struct Case {
    int ranks;
    std::string flags;
    int state;  // the log's share of the experts' state: 1/state (0: not checked)
    bool slice;  // the model holds half the experts' weights
  };
  for (const Case& c : {Case{2, "--zero 1", 2, true}, Case{2, "--zero 1 --overlap-comm off", 2, true},
                        Case{2, "--zero 2", 2, true}, Case{2, "--zero 3", 0, false},
                        Case{4, "--zero 0", 2, true}, Case{4, "--zero 1", 4, true},
                        Case{4, "--zero 1 --overlap-comm off", 4, true}, Case{4, "--zero 2", 4, true}}) {
    TempDir ep;
    const std::string what = std::to_string(c.ranks) + " ranks --expert-parallel 2 " + c.flags;
    r = mpirun_ratchet(c.ranks, cmd(ep.path, 4 / c.ranks, "--expert-parallel 2 " + c.flags));
    ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
    const auto held = expert_state(r.output);
    EXPECT_GT(held.second, 0) << r.output;
    if (c.state > 0) {
      // Rank 0's shard of its slice: the even split of the slice's experts
      // over its replicas (the first shard is the full one; bucketed, each
      // block's 3072 expert elements split evenly too).
      const long slice = held.second / 2, replicas = c.state / 2;
      EXPECT_EQ(held.first, (slice + replicas - 1) / replicas)
          << what << ": 1/" << c.state << " of the experts' state\n" << r.output;
    }
    EXPECT_EQ(expert_weights(r.output), c.slice ? held.second / 2 : -1)
        << what << (c.slice ? ": half the experts' weights" : ": every expert's weights") << "\n"
        << r.output;
    expect_close(c.ranks == 2 ? plain2.path : plain4.path, ep.path, what);
  }
}

// --init-from a Hugging Face directory: each expert slice reads only its
// experts (load_hf_checkpoint_slice), and the runs at --expert-parallel 2,
// ZeRO 0, 1 and 2, equal the run without it from the same weights. The
// directory is a plain run's --export-hf.
TEST_F(MpiExpertParallelTrain, InitFromHfDirectoryReadsTheSliceAndEqualsPlain) {
  TempDir first, plain;
  const std::string hf = first / "hf";
  auto r = run_ratchet(cmd(first.path, 4, "--export-hf " + hf));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::exists(hf + "/config.json")) << r.output;
  const std::string from = "--init-from " + hf + " ";
  r = mpirun_ratchet(2, cmd(plain.path, 2, from));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string zero : {"0", "1", "2"}) {
    TempDir ep;
    const std::string what = "--init-from, --expert-parallel 2 --zero " + zero;
    r = mpirun_ratchet(2, cmd(ep.path, 2, from + "--expert-parallel 2 --zero " + zero));
    ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
    EXPECT_NE(r.output.find("(an expert slice)"), std::string::npos) << r.output;
    expect_close(plain.path, ep.path, what);
  }
}

// 6 experts, 96 tokens a step (1 x 6, 2 x 3 or 3 x 2 rows of 16): a run
// stopped at step 3 at one expert-parallel size and world size resumes at
// another and ends where one uninterrupted process ends. The checkpoint at
// N 2 has each expert's moments only from its owner (each shard lists its
// experts' ranges); N 3 reads them from both shards. And 4 experts, 64
// tokens, 4 ranks in 2 groups of 2 at ZeRO 0 (group 1's replicas of the
// experts write nothing) and 1 (each rank its shard) resuming on one process.
TEST_F(MpiExpertParallelTrain, ResumesAtAnotherExpertParallelAndWorldSize) {
  TempDir one6, one4;
  auto r = run_ratchet(cmd(one6.path, 6, "", 6, 96));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ratchet(cmd(one4.path, 4, "", 4, 64));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The resumes change the ZeRO stage too (to_zero): ZeRO 0-2 hold each
  // rank's expert slice (model/expert_slice.h), ZeRO-3 every expert's
  // weights, and the checkpoint's global coordinates serve both ways.
  struct Case {
    int from_ranks, from_n, to_ranks, to_n;
    std::string zero;
    int experts, tokens;
    std::string to_zero = "0";
  };
  for (const Case& c : {Case{2, 2, 3, 3, "0", 6, 96}, Case{3, 3, 2, 2, "0", 6, 96},
                        Case{3, 3, 1, 1, "0", 6, 96}, Case{2, 2, 3, 3, "1", 6, 96},
                        Case{4, 2, 1, 1, "0", 4, 64}, Case{4, 2, 1, 1, "1", 4, 64},
                        Case{2, 2, 2, 2, "0", 6, 96, "1"}, Case{2, 2, 3, 3, "0", 6, 96, "3"},
                        // ZeRO-1 holds slices in both layouts (flat_shards.h,
                        // bucket_domains.h): flat N 2 to bucketed N 3.
                        Case{2, 2, 3, 3, kFlat1, 6, 96, "1"}, Case{4, 2, 1, 1, kFlat1, 4, 64},
                        Case{2, 2, 2, 2, "0", 6, 96, kFlat1}, Case{3, 3, 2, 2, kFlat1, 6, 96, "3"},
                        // And ZeRO-2's (bucket_domains.h), to and from the others.
                        Case{2, 2, 3, 3, "2", 6, 96, "1"}, Case{3, 3, 2, 2, "0", 6, 96, "2"}}) {
    TempDir run;
    const std::string what = "--expert-parallel " + std::to_string(c.from_n) + " --zero " +
                             c.zero + " on " + std::to_string(c.from_ranks) +
                             " ranks -> stop at 3 -> --expert-parallel " + std::to_string(c.to_n) +
                             " --zero " + c.to_zero + " on " + std::to_string(c.to_ranks);
    const int rows = c.tokens / 16;
    r = mpirun_ratchet(c.from_ranks,
                       cmd(run.path, rows / c.from_ranks,
                           "--zero " + c.zero + " --expert-parallel " + std::to_string(c.from_n),
                           c.experts, c.tokens),
                       "RATCHET_FAULT=USR1@step-3");
    ASSERT_EQ(r.exit_code, 75) << what << "\n" << r.output;
    const CheckpointReader reader(run / "ck/step_00000003");
    // A rank of group 1 whose even share is all experts writes no shard.
    ASSERT_GE(reader.shards().size(), (size_t)c.from_n) << what;
    ASSERT_LE(reader.shards().size(), (size_t)c.from_ranks) << what;
    // ZeRO-0: group 0's shards hold their share of the rest and their
    // experts' slices of expw1 and expw2 in each of the 3 layers.
    if (c.zero == "0") {
      for (size_t i = 0; i < (size_t)c.from_n; i++)
        EXPECT_GE(reader.shards()[i].ranges.size(), 6u) << what;
    }
    const std::string resume =
        cmd(run.path, rows / c.to_ranks,
            "--zero " + c.to_zero +
                (c.to_n > 1 ? " --expert-parallel " + std::to_string(c.to_n) : ""),
            c.experts, c.tokens);
    r = c.to_ranks > 1 ? mpirun_ratchet(c.to_ranks, resume) : run_ratchet(resume);
    ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
    EXPECT_NE(r.output.find("continuing from step 3"), std::string::npos) << r.output;
    expect_close(c.experts == 6 ? one6.path : one4.path, run.path, what, false);
  }
}

// The newest checkpoint's shard 1 (rank 1's experts' moments) damaged (a
// flipped byte) or missing: the resume names the file, skips that
// checkpoint and continues from the one before, ending where the
// uninterrupted run ends.
TEST_F(MpiExpertParallelTrain, ADamagedOrMissingExpertShardFallsBackToTheOlderCheckpoint) {
  TempDir straight;
  const std::string every = " --ckpt-every-steps 2 --keep-last 5";
  auto r = mpirun_ratchet(2, cmd(straight.path, 2, "--expert-parallel 2" + every));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string damage : {"flip", "missing"}) {
    TempDir run;
    r = mpirun_ratchet(2, cmd(run.path, 2, "--expert-parallel 2" + every),
                       "RATCHET_FAULT=USR1@step-5");
    ASSERT_EQ(r.exit_code, 75) << r.output;
    const std::string ck = run / "ck";
    const std::string shard = ck + "/step_00000005/shard_00001.h5";
    if (damage == "flip") {
      std::string bytes = read_file(shard);
      bytes[bytes.size() / 2] ^= 0x10;
      write_file(shard, bytes);
    } else {
      ASSERT_EQ(std::remove(shard.c_str()), 0) << shard;
    }
    r = mpirun_ratchet(2, cmd(run.path, 2, "--expert-parallel 2" + every));
    ASSERT_EQ(r.exit_code, 0) << damage << "\n" << r.output;
    const size_t skip = r.output.find("skipping " + ck + "/step_00000005: checkpoint ");
    ASSERT_NE(skip, std::string::npos) << damage << "\n" << r.output;
    EXPECT_NE(r.output.find(shard, skip), std::string::npos) << damage << "\n" << r.output;
    EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
    expect_close(straight.path, run.path, "an expert shard " + damage + ": resumed from step 4",
                 false);
  }
}

TEST_F(MpiExpertParallelTrain, ExpertsNotDivisibleByTheGroupAreRefused) {
  TempDir d;
  const auto r = mpirun_ratchet(2, cmd(d.path, 2, "--expert-parallel 2", 3));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--expert-parallel 2 must divide num_experts 3"), std::string::npos)
      << r.output;
}

}  // namespace

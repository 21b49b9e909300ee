// `mpirun -np N ratchet train --zero 2` end to end (docs/distributed.md stage 2), on
// the tiny model of test_mpi_train (L=3, C=15: an odd P, so every bucket's
// pieces pad), and through the cuda backend on the CPU (ratchet-simt, BF16
// and FP32 storage; the stand-in NCCL under the device-memory guard).
//
// What is exact, and why (docs/distributed.md "Reduction order"):
//   one micro-batch per rank, 2 ranks: stage 2 adds each element once over
//     the ranks, as stage 0's all-reduce does (a + b = b + a): bitwise equal,
//     BF16 included (AdamW's stochastic rounding draws by position in the
//     tensor, so updating it in bucket pieces rounds as whole: optim/adamw.h)
//   a checkpoint of either stage resumed by the other at that shape: bitwise
//     equal to the straight run
//   3 ranks, or several micro-batches: other sums (MPI's order for 3 ranks;
//     stage 2 adds the micro-batches' sums after the ranks'): within the
//     tolerances of test_mpi_train (float32 ulps magnified by AdamW), and a
//     resume that changes the order says so. test_mpi_zero2 replays stage 2's
//     order bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "ckpt/checkpoint.h"
#include "mpi_testing.h"
#include "zero_stage_checks.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

constexpr double kLossTol = 1e-5;   // test_mpi_train's: relative, per logged loss
constexpr double kParamTol = 1e-5;  // test_mpi_train's: max |difference| after 8 steps

class MpiTrainZero2 : public BibleShardsSuite {
 protected:
  static std::string train_args(int B, int total, const std::string& out, int steps = 8) {
    return tiny_train_args(B, total, out, steps);
  }
  using Diff = RunDiff;
  static Diff diff(const std::string& a, const std::string& b) { return diff_runs(a, b); }
};

TEST_F(MpiTrainZero2, TwoRanksOneMicroBatchEqualStage0Bitwise) {
  TempDir plain, zero;
  auto r = mpirun_ratchet(2, train_args(2, 64, plain.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(2, train_args(2, 64, zero.path) + " --zero 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ZeRO-2: gradients and optimizer state sharded"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("1 micro-batch(es) per step"), std::string::npos) << r.output;
  const Diff d = diff(plain.path, zero.path);
  EXPECT_TRUE(d.bitwise) << "loss " << d.loss << " params " << d.param;
  // --overlap-comm off: the same reductions, each waited for at once.
  TempDir off;
  r = mpirun_ratchet(2, train_args(2, 64, off.path) + " --zero 2 --overlap-comm off");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("after its backward (--overlap-comm off)"), std::string::npos) << r.output;
  const Diff o = diff(zero.path, off.path);
  EXPECT_TRUE(o.bitwise) << "loss " << o.loss << " params " << o.param;
}

TEST_F(MpiTrainZero2, ThreeRanksAndMicroBatchesWithinTolerance) {
  struct Case {
    int ranks, B, total;
  };
  // 3 ranks x 1 micro-batch; 2 ranks x 3 micro-batches (stage 2 adds their sums).
  for (const Case& c : {Case{3, 2, 96}, Case{2, 1, 96}}) {
    TempDir plain, zero;
    auto r = mpirun_ratchet(c.ranks, train_args(c.B, c.total, plain.path));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = mpirun_ratchet(c.ranks, train_args(c.B, c.total, zero.path) + " --zero 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Diff d = diff(plain.path, zero.path);
    EXPECT_LE(d.loss, kLossTol);
    EXPECT_LE(d.param, kParamTol);
    std::printf("[ %d ranks, B %d, %d tokens: --zero 2 vs 0 ] loss %.2e params %.2e%s\n", c.ranks,
                c.B, c.total, d.loss, d.param, d.bitwise ? " (bitwise)" : "");
  }
}

// A stage-2 checkpoint (2 ranks) resumed at stage 0 and stage 1 on 2 ranks
// equals the straight stage-2 run bit for bit; resumed on 3 ranks (stage 2)
// it continues within tolerance, and that checkpoint resumes on 1 rank.
TEST_F(MpiTrainZero2, CheckpointResumesAtAnotherStageAndWorldSize) {
  TempDir straight, run;
  auto r = mpirun_ratchet(2, train_args(3, 96, straight.path) + " --zero 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ck = run / "ck";
  r = mpirun_ratchet(2, train_args(3, 96, run.path) + " --zero 2 --ckpt-dir " + ck,
                     "RATCHET_FAULT=USR1@step-4");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  auto v = run_ratchet("ckpt verify " + ck + "/step_00000004");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  for (int stage : {0, 1, 2}) {
    TempDir again;
    fs::copy(ck, again / "ck", fs::copy_options::recursive);
    fs::copy(run / "log.jsonl", again / "log.jsonl");
    r = mpirun_ratchet(2, train_args(3, 96, again.path) + " --zero " + std::to_string(stage) +
                              " --ckpt-dir " + (again / "ck"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("will not be bit-identical"), std::string::npos) << r.output;
    const Diff d = diff(straight.path, again.path);
    EXPECT_TRUE(d.bitwise) << "stage " << stage << ": loss " << d.loss << " params " << d.param;
  }
  TempDir three;
  fs::copy(ck, three / "ck", fs::copy_options::recursive);
  fs::copy(run / "log.jsonl", three / "log.jsonl");
  r = mpirun_ratchet(3, train_args(2, 96, three.path) + " --zero 2 --ckpt-dir " + (three / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  const Diff d3 = diff(straight.path, three.path);
  EXPECT_LE(d3.loss, kLossTol);
  EXPECT_LE(d3.param, kParamTol);
  // The 3-rank stage-2 checkpoint at step 8, resumed on one process.
  r = run_ratchet(train_args(6, 96, three.path, 10) + " --ckpt-dir " + (three / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 8"), std::string::npos) << r.output;
}

// Several micro-batches: stage 2 sums them in another order than stage 0, and
// a resume that crosses between the two says so.
TEST_F(MpiTrainZero2, AResumeAcrossSummationOrdersSaysSo) {
  TempDir run;
  const std::string ck = run / "ck";
  auto r = mpirun_ratchet(2, train_args(1, 64, run.path) + " --zero 2 --ckpt-dir " + ck,
                          "RATCHET_FAULT=USR1@step-3");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = mpirun_ratchet(2, train_args(1, 64, run.path) + " --zero 0 --ckpt-dir " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("will not be bit-identical"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("micro-batch sums added in order"), std::string::npos) << r.output;
}

// The same additions in another setting: a 2-rank stage-2 checkpoint (one
// micro-batch each: a+b) resumed on ONE rank at stage 2, which accumulates
// the two micro-batches by adding their sums (a+b too): bit-identical to the
// straight 2-rank run, and no warning (the recorded orders, gradient_sum_tree,
// are equal although the texts differ). Resumed at stage 0 on one rank the
// backward accumulates the micro-batches itself: another order, which warns.
TEST_F(MpiTrainZero2, AResumeOnOneRankWithTheSameSumsDoesNotWarn) {
  TempDir straight, run;
  auto r = mpirun_ratchet(2, train_args(1, 32, straight.path) + " --zero 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ck = run / "ck";
  r = mpirun_ratchet(2, train_args(1, 32, run.path) + " --zero 2 --ckpt-dir " + ck,
                     "RATCHET_FAULT=USR1@step-4");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  TempDir zero0;
  fs::copy(ck, zero0 / "ck", fs::copy_options::recursive);
  fs::copy(run / "log.jsonl", zero0 / "log.jsonl");
  r = run_ratchet(train_args(1, 32, run.path) + " --zero 2 --ckpt-dir " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("will not be bit-identical"), std::string::npos) << r.output;
  const Diff d = diff(straight.path, run.path);
  EXPECT_TRUE(d.bitwise) << "loss " << d.loss << " params " << d.param;
  r = run_ratchet(train_args(1, 32, zero0.path) + " --zero 0 --ckpt-dir " + (zero0 / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("will not be bit-identical"), std::string::npos) << r.output;
}

// Overlapped ZeRO-1 (--zero 1 with --overlap-comm on, the default): the last
// micro-batch's buckets reduce-scattered during its backward into
// bucket-aligned shards. 2 ranks x 2 micro-batches: bitwise --zero 0 (the
// same sum per element), and the flat layout (--overlap-comm off) too; a
// checkpoint of one layout resumes in the other bit for bit.
TEST_F(MpiTrainZero2, OverlappedZero1EqualsStage0AndTheFlatLayout) {
  TempDir plain, over, flat, run;
  auto r = mpirun_ratchet(2, train_args(1, 64, plain.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(2, train_args(1, 64, over.path) + " --zero 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("reduce-scattered during the last backward"), std::string::npos)
      << r.output;
  r = mpirun_ratchet(2, train_args(1, 64, flat.path) + " --zero 1 --overlap-comm off");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ZeRO-1: optimizer state sharded\n"), std::string::npos) << r.output;
  Diff d = diff(plain.path, over.path);
  EXPECT_TRUE(d.bitwise) << "overlapped: loss " << d.loss << " params " << d.param;
  d = diff(plain.path, flat.path);
  EXPECT_TRUE(d.bitwise) << "flat: loss " << d.loss << " params " << d.param;
  const std::string ck = run / "ck";
  r = mpirun_ratchet(2, train_args(1, 64, run.path) + " --zero 1 --ckpt-dir " + ck,
                     "RATCHET_FAULT=USR1@step-4");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = mpirun_ratchet(2, train_args(1, 64, run.path) + " --zero 1 --overlap-comm off --ckpt-dir " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("will not be bit-identical"), std::string::npos) << r.output;
  d = diff(plain.path, run.path);
  EXPECT_TRUE(d.bitwise) << "resumed flat: loss " << d.loss << " params " << d.param;
}

// Hybrid sharding (--shard-group, distributed/shard_groups.h): each bucket is
// reduce-scattered in the group, then its shard all-reduced across the groups
// (distributed/grad_buckets.cpp, GradBuckets::finish), the order stage 1 uses: 2 ranks in groups
// of 1 equal stage 0 (a + b), 4 ranks in groups of 2 equal stage 1 in the same
// groups ((a + b) + (c + d)), bit for bit.
TEST_F(MpiTrainZero2, ShardGroupsSumAsStage1Does) {
  struct Case {
    int ranks, group;
    const char* other;
  };
  for (const Case& c : {Case{2, 1, "--zero 0"}, Case{4, 2, "--zero 1 --shard-group 2"}}) {
    TempDir ref, zero;
    const int total = c.ranks * 2 * 16;
    auto r = mpirun_ratchet(c.ranks, train_args(2, total, ref.path) + " " + c.other);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = mpirun_ratchet(c.ranks, train_args(2, total, zero.path) + " --zero 2 --shard-group " +
                                    std::to_string(c.group));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ZeRO-2"), std::string::npos) << r.output;
    const Diff d = diff(ref.path, zero.path);
    EXPECT_TRUE(d.bitwise) << c.ranks << " ranks, groups of " << c.group << ": loss " << d.loss
                           << " params " << d.param;
  }
}

// --zero auto: the lowest stage whose step fits --memory-budget-mb, saying
// why. A budget below everything names all four needs and takes the least;
// budgets at each need take the lowest stage within them (the needs parsed
// from that first log, to 1 kB); one rank: ZeRO-0 (nothing to shard).
TEST_F(MpiTrainZero2, ZeroAutoPicksTheLowestStageThatFits) {
  auto pick = [&](int ranks, const std::string& budget, std::string* out) {
    TempDir d;
    auto r = mpirun_ratchet(ranks, train_args(2, ranks * 32, d.path, 2) + " --zero auto" +
                                       (budget.empty() ? "" : " --memory-budget-mb " + budget));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (out) *out = r.output;
    const auto at = r.output.find("zero auto: ZeRO-");
    return at == std::string::npos ? -1 : r.output[at + 16] - '0';
  };
  std::string log;
  const int tiny = pick(2, "0.001", &log);
  auto need = [&](int s) {
    const std::string key = "ZeRO-" + std::to_string(s) + " needs ";
    const auto at = log.find(key);
    return at == std::string::npos ? -1.0 : std::stod(log.substr(at + key.size()));
  };
  const double n[4] = {need(0), need(1), need(2), need(3)};
  ASSERT_GT(n[3], 0) << log;
  // Stage 2 holds less than stage 0 (no flat gradient). On a model this
  // small ZeRO-1's bucket buffers (the embedding bucket is most of P) cost
  // more than its moment shard saves: auto then skips it.
  EXPECT_LT(n[2], n[0]) << log;
  auto expected = [&](double budget) {
    for (int s = 0; s <= 3; s++)
      if (n[s] <= budget) return s;
    return -1;
  };
  // Nothing fits 1 kB: the stage that needs least, said so (the needs are
  // printed to 1 kB: equal there, either may be it).
  ASSERT_TRUE(tiny >= 0 && tiny <= 3) << log;
  EXPECT_EQ(n[tiny], *std::min_element(n, n + 4)) << log;
  EXPECT_NE(log.find("none fits, so the one that needs least"), std::string::npos) << log;
  for (double budget : {n[3] + 0.002, n[2] + 0.002, n[1] + 0.002, n[0] + 0.002, 100000.0}) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", budget);
    EXPECT_EQ(pick(2, b, nullptr), expected(budget)) << "budget " << b << " MB\n" << log;
  }
  EXPECT_EQ(pick(1, "0.001", &log), 0) << log;
  EXPECT_NE(log.find("nothing to shard"), std::string::npos) << log;
  TempDir d;
  auto r = run_ratchet(train_args(2, 64, d.path) + " --zero two");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--zero must be 0, 1, 2, 3 or auto (got 'two')"), std::string::npos) << r.output;
}

// ---- the cuda backend on the CPU (ratchet-simt --device simt) ------------------------

#ifdef RATCHET_SIMT_EXE
// BF16 and FP32 storage, 2 ranks, one micro-batch each: stage 2 equals stage 0
// bit for bit (BF16's stochastic rounding included).
TEST_F(MpiTrainZero2, SimtTwoRanksEqualStage0Bitwise) {
  expect_simt_stage_equals_stage0(dir_->path, 2, 6);
}

// One rank, a model larger than the gradient norm's grid: bitwise (see the check).
TEST_F(MpiTrainZero2, SimtOneRankAboveTheNormGridEqualsStage0Bitwise) {
  expect_simt_stage_equals_stage0_above_norm_grid(dir_->path, 2);
}

#ifdef RATCHET_STUB_NCCL_EXE
// Through the stand-in NCCL (the device communicator) under the device-memory
// guard: stage 2 equals stage 0 bitwise, and its checkpoint resumes on one rank.
TEST_F(MpiTrainZero2, GuardedStubNcclEqualsStage0AndResumesOnOneRank) {
  expect_stub_nccl_stage_equals_stage0_and_resumes(dir_->path, 2, 6);
}
#endif  // RATCHET_STUB_NCCL_EXE
#endif  // RATCHET_SIMT_EXE

}  // namespace

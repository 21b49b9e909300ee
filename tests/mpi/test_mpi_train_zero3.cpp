// `mpirun -np N ratchet train --zero 3` end to end (docs/distributed.md stage 3,
// distributed/param_shards.h), on the tiny model of test_mpi_train (L=3, C=15: an
// odd P, so every bucket's pieces pad), and through the cuda backend on the
// CPU (ratchet-simt, BF16 and FP32 storage; the stand-in NCCL under the
// device-memory guard, whose arena is sized by the exact accounting: a
// stage-3 step that allocated more than planned would fail there).
//
// What is exact, and why (docs/distributed.md "stage 3"):
//   stage 3 reduces and updates exactly as stage 2 (the parameters gathered
//     per block hold the shards' bits): bitwise equal to stage 2 at ANY
//     world size and micro-batch count, --reshard-after-forward on or off
//   one micro-batch per rank, 2 ranks: bitwise equal to stage 0 (a + b)
//   evaluation and sampling: every rank makes the same forward passes
//     (distributed/forward_balance.h): the same numbers and the same sample text as
//     stage 0
//   a checkpoint written at stage 3 resumes at stages 0-3 bit for bit where
//     the sums are the same (2 ranks), within tolerance at another world size
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "mpi_testing.h"
#include "zero_stage_checks.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

constexpr double kLossTol = 1e-5;   // test_mpi_train's: relative, per logged loss
constexpr double kParamTol = 1e-5;  // test_mpi_train's: max |difference| after 8 steps

class MpiTrainZero3 : public BibleShardsSuite {
 protected:
  // --eval-batches 5: not a multiple of 2 or 3 ranks, so the ranks with
  // fewer validation batches make idle forwards.
  static std::string train_args(int B, int total, const std::string& out, int steps = 8) {
    std::string a = tiny_train_args(B, total, out, steps);
    const size_t at = a.find("--eval-batches 6");
    return at == std::string::npos ? a : a.replace(at, 16, "--eval-batches 5");
  }
  using Diff = RunDiff;
  static Diff diff(const std::string& a, const std::string& b) { return diff_runs(a, b); }
  // The validation losses of a run's log, in order.
  static std::vector<double> val_losses(const std::string& dir) {
    std::vector<double> v;
    for (const auto& j : read_jsonl(dir + "/log.jsonl"))
      if (j.contains("val_loss")) v.push_back(j["val_loss"].get<double>());
    return v;
  }
  // The sample blocks rank 0 printed.
  static std::string samples(const std::string& out) {
    std::string s;
    for (size_t at = out.find("---- sample at step"); at != std::string::npos;
         at = out.find("---- sample at step", at + 1)) {
      const size_t end = out.find("---- end of sample ----", at);
      if (end == std::string::npos) break;
      s += out.substr(at, end - at);
    }
    return s;
  }
};

// 2 ranks x 1 micro-batch: stage 3 equals stage 0 bit for bit, with the
// blocks freed after forward or kept (--reshard-after-forward off), and with
// the gradient reductions waited for at once (--overlap-comm off). The
// validation losses (5 batches on 2 ranks) and the samples are stage 0's.
TEST_F(MpiTrainZero3, TwoRanksOneMicroBatchEqualStage0Bitwise) {
  TempDir plain;
  const std::string sample = " --sample-every 4 --sample-tokens 6";
  auto r = mpirun_ratchet(2, train_args(2, 64, plain.path) + sample);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string plain_samples = samples(r.output);
  ASSERT_NE(plain_samples.find("sample at step 4"), std::string::npos) << r.output;
  for (const char* extra : {"", " --reshard-after-forward off", " --overlap-comm off"}) {
    TempDir zero;
    r = mpirun_ratchet(2, train_args(2, 64, zero.path) + sample + " --zero 3" + extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ZeRO-3: parameters, gradients and optimizer state sharded"),
              std::string::npos) << r.output;
    const Diff d = diff(plain.path, zero.path);
    EXPECT_TRUE(d.bitwise) << extra << ": loss " << d.loss << " params " << d.param;
    EXPECT_EQ(val_losses(plain.path), val_losses(zero.path)) << extra;
    EXPECT_EQ(val_losses(zero.path).size(), 3u) << extra;  // steps 0, 4 and the final
    EXPECT_EQ(samples(r.output), plain_samples) << extra;
  }
}

// Stage 3 = stage 2 bitwise wherever stage 2 is (the same sums and update):
// 3 ranks, and 2 ranks x 3 micro-batches (stage 2's per-micro-batch sums);
// both within test_mpi_train's tolerances of stage 0.
TEST_F(MpiTrainZero3, EqualsStage2BitwiseOnThreeRanksAndMicroBatches) {
  struct Case {
    int ranks, B, total;
  };
  for (const Case& c : {Case{3, 2, 96}, Case{2, 1, 96}}) {
    TempDir plain, two, three;
    auto r = mpirun_ratchet(c.ranks, train_args(c.B, c.total, plain.path));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = mpirun_ratchet(c.ranks, train_args(c.B, c.total, two.path) + " --zero 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = mpirun_ratchet(c.ranks, train_args(c.B, c.total, three.path) + " --zero 3");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Diff s2 = diff(two.path, three.path);
    EXPECT_TRUE(s2.bitwise) << c.ranks << " ranks, B " << c.B << ": loss " << s2.loss
                            << " params " << s2.param;
    EXPECT_EQ(val_losses(two.path), val_losses(three.path));
    const Diff d = diff(plain.path, three.path);
    EXPECT_LE(d.loss, kLossTol);
    EXPECT_LE(d.param, kParamTol);
  }
}

// Hybrid sharding: ZeRO-3 inside groups of 2 of 4 ranks gathers inside the
// group and sums as stage 2 in the same groups, bit for bit.
TEST_F(MpiTrainZero3, ShardGroupsEqualStage2InTheSameGroups) {
  TempDir two, three;
  auto r = mpirun_ratchet(4, train_args(2, 128, two.path) + " --zero 2 --shard-group 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(4, train_args(2, 128, three.path) + " --zero 3 --shard-group 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ZeRO-3"), std::string::npos) << r.output;
  const Diff d = diff(two.path, three.path);
  EXPECT_TRUE(d.bitwise) << "loss " << d.loss << " params " << d.param;
}

// A stage-3 checkpoint (2 ranks, its parameters written by each rank from
// its shard) resumed at stages 0, 1, 2 and 3 on 2 ranks equals the straight
// stage-3 run bit for bit; resumed on 3 ranks (stage 3) it continues within
// tolerance; a stage-0 checkpoint resumes at stage 3 bit for bit.
TEST_F(MpiTrainZero3, CheckpointResumesAtAnyStageAndWorldSize) {
  TempDir straight, run;
  auto r = mpirun_ratchet(2, train_args(3, 96, straight.path) + " --zero 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ck = run / "ck";
  r = mpirun_ratchet(2, train_args(3, 96, run.path) + " --zero 3 --ckpt-dir " + ck,
                     "RATCHET_FAULT=USR1@step-4");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  auto v = run_ratchet("ckpt verify " + ck + "/step_00000004");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  for (int stage : {0, 1, 2, 3}) {
    TempDir again;
    fs::copy(ck, again / "ck", fs::copy_options::recursive);
    fs::copy(run / "log.jsonl", again / "log.jsonl");
    r = mpirun_ratchet(2, train_args(3, 96, again.path) + " --zero " + std::to_string(stage) +
                              " --ckpt-dir " + (again / "ck"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("will not be bit-identical"), std::string::npos) << r.output;
    if (stage != 3) {
      EXPECT_NE(r.output.find("resume: zero_stage changed from 3 to " + std::to_string(stage)),
                std::string::npos) << r.output;
    }
    const Diff d = diff(straight.path, again.path);
    EXPECT_TRUE(d.bitwise) << "stage " << stage << ": loss " << d.loss << " params " << d.param;
  }
  TempDir three;
  fs::copy(ck, three / "ck", fs::copy_options::recursive);
  fs::copy(run / "log.jsonl", three / "log.jsonl");
  r = mpirun_ratchet(3, train_args(2, 96, three.path) + " --zero 3 --ckpt-dir " + (three / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  const Diff d3 = diff(straight.path, three.path);
  EXPECT_LE(d3.loss, kLossTol);
  EXPECT_LE(d3.param, kParamTol);
  // The other way: a stage-0 checkpoint, resumed at stage 3.
  TempDir zrun, zstraight;
  r = mpirun_ratchet(2, train_args(3, 96, zstraight.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(2, train_args(3, 96, zrun.path) + " --ckpt-dir " + (zrun / "ck"),
                     "RATCHET_FAULT=USR1@step-4");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = mpirun_ratchet(2, train_args(3, 96, zrun.path) + " --zero 3 --ckpt-dir " + (zrun / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  const Diff d0 = diff(zstraight.path, zrun.path);
  EXPECT_TRUE(d0.bitwise) << "stage 0 -> 3: loss " << d0.loss << " params " << d0.param;
}

// --init-from at stage 3: the imported weights land in the shards (each rank
// its pieces) and train as stage 0 does from them.
TEST_F(MpiTrainZero3, InitFromLandsInTheShards) {
  TempDir first, plain, zero;
  auto r = run_ratchet(train_args(2, 32, first.path, 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string from = " --init-from " + (first / "out.bin");
  r = mpirun_ratchet(2, train_args(2, 64, plain.path) + from);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(2, train_args(2, 64, zero.path) + from + " --zero 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Diff d = diff(plain.path, zero.path);
  EXPECT_TRUE(d.bitwise) << "loss " << d.loss << " params " << d.param;
}

// --profile at stage 3: the waits for the blocks' gathers (what the
// prefetch did not hide) are rows of the table, once per block and pass:
// 3 blocks x 1 micro-batch forward, and backward (3 blocks) again.
TEST_F(MpiTrainZero3, ProfileShowsTheGatherWaits) {
  TempDir d;
  auto r = mpirun_ratchet(2, train_args(2, 64, d.path, 3) + " --zero 3 --profile");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* row : {"zero3_gather_wait_fwd", "zero3_gather_wait_bwd"}) {
    const size_t at = r.output.find(row);
    ASSERT_NE(at, std::string::npos) << row << "\n" << r.output;
    // calls: 2 profiled steps x 3 blocks
    const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
    EXPECT_NE(line.find(" 6 "), std::string::npos) << line;
  }
  r = mpirun_ratchet(2, train_args(2, 64, d.path, 3) + " --zero 2 --profile");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("zero3_gather_wait"), std::string::npos) << r.output;
}

TEST_F(MpiTrainZero3, ReshardFlagIsCheckedAndNeedsStage3) {
  TempDir d;
  auto r = run_ratchet(train_args(2, 64, d.path) + " --zero 2 --reshard-after-forward off");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--reshard-after-forward applies to --zero 3 only"), std::string::npos)
      << r.output;
  r = run_ratchet(train_args(2, 64, d.path) + " --zero 3 --reshard-after-forward maybe");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--reshard-after-forward must be on or off (got 'maybe')"),
            std::string::npos) << r.output;
  r = run_ratchet(train_args(2, 64, d.path) + " --zero 4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--zero must be 0, 1, 2, 3 or auto (got 4)"), std::string::npos)
      << r.output;
}

// ---- the cuda backend on the CPU (ratchet-simt --device simt) ------------------------

#ifdef RATCHET_SIMT_EXE
// BF16 and FP32 storage, 2 ranks, one micro-batch each: stage 3 equals stage 0
// bit for bit (BF16's stochastic rounding of the shard's master included).
TEST_F(MpiTrainZero3, SimtTwoRanksEqualStage0Bitwise) {
  expect_simt_stage_equals_stage0(dir_->path, 3, 5);
}

// One rank, a model larger than the gradient norm's grid: bitwise (see the check).
TEST_F(MpiTrainZero3, SimtOneRankAboveTheNormGridEqualsStage0Bitwise) {
  expect_simt_stage_equals_stage0_above_norm_grid(dir_->path, 3);
}

#ifdef RATCHET_STUB_NCCL_EXE
// Through the stand-in NCCL (the device communicator: the per-block gathers
// are ncclAllGather on its stream) under the device-memory guard, in an
// arena sized by the accounting: stage 3 equals stage 0 bitwise, and its
// checkpoint resumes on one rank.
TEST_F(MpiTrainZero3, GuardedStubNcclEqualsStage0AndResumesOnOneRank) {
  expect_stub_nccl_stage_equals_stage0_and_resumes(dir_->path, 3, 5);
}
#endif  // RATCHET_STUB_NCCL_EXE
#endif  // RATCHET_SIMT_EXE

}  // namespace

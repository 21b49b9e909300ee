// `mpirun -np N ratchet train --zero 1 --shard-group G` end to end (hybrid
// sharding, distributed/shard_groups.h), on test_mpi_train's tiny model with an ODD
// parameter count (L=3, C=15: P = 14955, so every shard split pads).
//
// Exactness (docs/distributed.md's reduction order):
//   2 ranks: every group size (1: ZeRO-0, 2: plain ZeRO-1) adds each gradient
//     element once (a + b): bitwise equal to --zero 0, losses and weights.
//   4 ranks in groups of 2: (g0 + g1) + (g2 + g3); --zero 0 on 4 ranks adds in
//     MPI's all-reduce order, so against it test_mpi_train's tolerances apply
//     (kLossTol, kParamTol: a few float32 ulps per step, magnified by AdamW's
//     m/sqrt(v)); the exact replay of that order is test_mpi_shard_groups.
//   A checkpoint of 4 ranks in groups of 2 resumes on 4 ranks in groups of 2
//     bitwise (the same order); on 2 ranks in groups of 1 it resumes, says
//     the gradient sum order changed, and stays within the tolerances.
//   The stand-in NCCL (simt, BF16): 2 ranks in groups of 1 and of 2 through
//     the split device communicators equal --zero 0 bitwise (RNE(a + b)
//     either way).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "mpi_testing.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

constexpr double kLossTol = 1e-5;   // as tests/mpi/test_mpi_train.cpp (see the top there)
constexpr double kParamTol = 1e-5;  // as tests/mpi/test_mpi_train.cpp

class MpiTrainGroups : public BibleShardsSuite {
 protected:
  // B rows per rank, `total` tokens per step (T = 16), shuffled, with eval.
  static std::string train_args(int B, int total, const std::string& out_dir, int steps = 8) {
    return tiny_train_args(B, total, out_dir, steps);
  }
  static bool bitwise(const std::string& a, const std::string& b) {
    const std::string pa = read_file(a + "/out.bin");
    return !pa.empty() && pa == read_file(b + "/out.bin") &&
           read_losses(a + "/log.jsonl") == read_losses(b + "/log.jsonl") &&
           !read_losses(a + "/log.jsonl").empty();
  }
  static void expect_close(const std::string& a, const std::string& b, const std::string& what) {
    auto la = read_losses(a + "/log.jsonl"), lb = read_losses(b + "/log.jsonl");
    ASSERT_EQ(la.size(), lb.size()) << what;
    ASSERT_FALSE(la.empty()) << what;
    double worst = 0;
    for (size_t i = 0; i < la.size(); i++)
      worst = std::max(worst, std::fabs(la[i] - lb[i]) / std::fabs(la[i]));
    EXPECT_LE(worst, kLossTol) << what << ": losses differ";
    auto pa = read_export(a + "/out.bin"), pb = read_export(b + "/out.bin");
    ASSERT_EQ(pa.size(), pb.size()) << what;
    ASSERT_FALSE(pa.empty()) << what;
    const double md = max_abs_diff(pa.data(), pb.data(), pa.size());
    EXPECT_LE(md, kParamTol) << what << ": parameters differ";
    std::printf("[ %s ] max relative loss difference %.2e, max parameter difference %.2e\n",
                what.c_str(), worst, md);
  }
};

TEST_F(MpiTrainGroups, TwoRanksEveryGroupSizeEqualsStageZeroBitwise) {
  TempDir plain, g1, g2, node;
  auto r = mpirun_ratchet(2, train_args(2, 64, plain.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(2, train_args(2, 64, g1.path) + " --zero 1 --shard-group 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("shard groups: 2 rank(s) in 2 group(s) of 1 (--shard-group 1): groups "
                          "of one rank, ZeRO-0"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(bitwise(plain.path, g1.path)) << "--shard-group 1 vs --zero 0";
  r = mpirun_ratchet(2, train_args(2, 64, g2.path) + " --zero 1 --shard-group 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 group(s) of 2 (--shard-group 2): one group, plain ZeRO-k"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(bitwise(plain.path, g2.path)) << "--shard-group 2 vs --zero 0";
  // Open MPI on one machine: both ranks share the host, so `node` is the world.
  // Given in a --config INI file, as any train option.
  write_file(node / "run.ini", "zero = 1\nshard-group = node\n");
  r = mpirun_ratchet(2, train_args(2, 64, node.path) + " --config " + (node / "run.ini"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 group(s) of 2 (--shard-group node): one group, plain ZeRO-k"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(bitwise(plain.path, node.path)) << "--shard-group node vs --zero 0";
}

TEST_F(MpiTrainGroups, FourRanksInGroupsOfTwo) {
  TempDir plain, hybrid;
  auto r = mpirun_ratchet(4, train_args(2, 128, plain.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(4, train_args(2, 128, hybrid.path) + " --zero 1 --shard-group 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4 rank(s) in 2 group(s) of 2 (--shard-group 2): shards "
                          "reduce-scattered in each group, then all-reduced across the groups"),
            std::string::npos)
      << r.output;
  expect_close(plain.path, hybrid.path, "4 ranks: groups of 2 vs --zero 0");
}

// ZeRO-2 goes through the same two levels (per bucket): on 2 ranks in groups
// of 1 it adds once (bitwise = --zero 0); on 4 ranks in groups of 2 within
// the tolerances of 4-rank --zero 0.
TEST_F(MpiTrainGroups, Zero2InGroups) {
  TempDir plain2, g1, plain4, g2;
  auto r = mpirun_ratchet(2, train_args(2, 64, plain2.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(2, train_args(2, 64, g1.path) + " --zero 2 --shard-group 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ZeRO-2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 group(s) of 1"), std::string::npos) << r.output;
  EXPECT_TRUE(bitwise(plain2.path, g1.path)) << "--zero 2 --shard-group 1 vs --zero 0";
  r = mpirun_ratchet(4, train_args(2, 128, plain4.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(4, train_args(2, 128, g2.path) + " --zero 2 --shard-group 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 group(s) of 2"), std::string::npos) << r.output;
  expect_close(plain4.path, g2.path, "4 ranks: --zero 2 in groups of 2 vs --zero 0");
}

TEST_F(MpiTrainGroups, BadValuesAreRefusedWithExit2) {
  struct Case {
    int ranks;
    const char* value;
    const char* says;
  };
  for (const Case& c : {Case{2, "3", "--shard-group 3 must divide the number of ranks, 2"},
                        Case{1, "2", "--shard-group 2 must divide the number of ranks, 1"},
                        Case{2, "0", "--shard-group '0' must be a number of ranks"},
                        Case{2, "half", "--shard-group 'half' must be a number of ranks"}}) {
    TempDir d;
    auto r = mpirun_ratchet(c.ranks, train_args(2, 64 / (3 - c.ranks), d.path) +
                                         " --zero 1 --shard-group " + c.value);
    EXPECT_EQ(r.exit_code, 2) << c.value << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
  }
}

// Written by 4 ranks in groups of 2 (only group 0 writes the optimizer
// shards), stopped by a signal at step 4; resumed the same way it is
// bit-identical to the uninterrupted run; resumed on 2 ranks in groups of 1
// it says that the sum order changed and stays within the tolerances; a
// ZeRO-2 checkpoint in groups of 2 resumes as ZeRO-1 in groups of 2 bitwise.
TEST_F(MpiTrainGroups, CheckpointOfGroupsResumesAnywhere) {
  TempDir ref, same, other;
  const std::string hybrid = " --zero 1 --shard-group 2";
  auto r = mpirun_ratchet(4, train_args(2, 128, ref.path) + hybrid);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const TempDir* d : {&same, &other}) {
    r = mpirun_ratchet(4, train_args(2, 128, d->path) + hybrid + " --ckpt-dir " + (*d / "ck"),
                       "RATCHET_FAULT=USR1@step-4");
    ASSERT_EQ(r.exit_code, 75) << r.output;
    auto v = run_ratchet("ckpt verify " + (*d / "ck/step_00000004"));
    EXPECT_EQ(v.exit_code, 0) << v.output;
  }
  r = mpirun_ratchet(4, train_args(2, 128, same.path) + hybrid + " --ckpt-dir " + (same / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("bit-identical"), std::string::npos) << r.output;
  EXPECT_TRUE(bitwise(ref.path, same.path)) << "4 ranks, groups of 2 -> stop -> the same";

  // 2 ranks of 4 rows: the same 8 rows per step.
  r = mpirun_ratchet(2, train_args(4, 128, other.path) + " --zero 1 --shard-group 1 --ckpt-dir " +
                            (other / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resume: warning: this resume will not be bit-identical to an "
                          "uninterrupted run (the gradient is summed in another order: "
                          "2 ranks (a+b), then 2 groups (a+b) when saved, 2 ranks (a+b) now)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("resume: shard_group changed from 2 to 1"),
            std::string::npos)
      << r.output;
  expect_close(ref.path, other.path, "4 ranks in groups of 2 -> stop at 4 -> 2 ranks, groups of 1");

  // Another stage, the same sums: ZeRO-2 in groups of 2 stopped at step 4,
  // resumed as ZeRO-1 in groups of 2, is the uninterrupted ZeRO-1 run bit for bit.
  TempDir cross;
  r = mpirun_ratchet(4, train_args(2, 128, cross.path) + " --zero 2 --shard-group 2 --ckpt-dir " +
                            (cross / "ck"),
                     "RATCHET_FAULT=USR1@step-4");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = mpirun_ratchet(4, train_args(2, 128, cross.path) + hybrid + " --ckpt-dir " + (cross / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("bit-identical"), std::string::npos) << r.output;
  EXPECT_TRUE(bitwise(ref.path, cross.path)) << "ZeRO-2 in groups of 2 -> stop -> ZeRO-1 in groups of 2";
}

#ifdef RATCHET_STUB_NCCL_EXE
// simt (BF16) with the stand-in NCCL: the device communicator is split too.
TEST_F(MpiTrainGroups, StubNcclSplitsTheDeviceCommunicator) {
  auto simt_args = [&](const std::string& out) {
    return "train --device simt --model custom --layers 2 --heads 2 --channels 16 "
           "--max-seq-len 32 --seq-len 16 --batch-size 2 --total-batch-tokens 64 --threads 1 "
           "--train-data '" + (*dir_ / "data/train_*.h5") + "' --val-data '" +
           (*dir_ / "data/val_*.h5") + "' --eval-every 4 --eval-batches 6 --warmup-steps 2 "
           "--steps 8 --lr 3e-3 --quiet --log-jsonl " + out + "/log.jsonl --export " + out +
           "/out.bin";
  };
  auto runN = [](const std::string& args, const std::string& dir) {
    return run_shell(mpirun_prefix(2, "RATCHET_STUB_NCCL_DIR=" + dir) + RATCHET_STUB_NCCL_EXE +
                     " " + args);
  };
  TempDir plain, g1;
  auto r = runN(simt_args(plain.path), plain.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = runN(simt_args(g1.path) + " --zero 1 --shard-group 1", g1.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Two splits (intra, inter) on each rank, each destroyed with every rank there.
  EXPECT_NE(r.output.find("stub nccl: split s0c"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stub nccl: split s1c"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("still waiting"), std::string::npos) << r.output;
  EXPECT_TRUE(bitwise(plain.path, g1.path)) << "stub nccl: --shard-group 1 vs --zero 0";
  // Groups of 2: the reduce-scatter and all-gather go through the intra split
  // (groups of 1 above make them backend copies, and use the inter split).
  TempDir g2;
  r = runN(simt_args(g2.path) + " --zero 1 --shard-group 2", g2.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 group(s) of 2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("still waiting"), std::string::npos) << r.output;
  EXPECT_TRUE(bitwise(plain.path, g2.path)) << "stub nccl: --shard-group 2 vs --zero 0";
}
#endif  // RATCHET_STUB_NCCL_EXE

}  // namespace

// `mpirun -np N ratchet train` end to end, on a tiny model with an ODD
// parameter count (L=3, C=15: P = 14955, so every ZeRO-1 shard split pads).
//
// Tolerances. N ranks × B rows and one rank accumulating N micro-batches of B
// see the same windows; only the order in which the per-row gradients are
// summed differs (MPI's reduction tree vs the accumulation order; ZeRO-1's
// reduce-scatter vs all-reduce, and its norm summed by shards): a few float32
// ulps per step, which AdamW's m/sqrt(v) can magnify for parameters whose
// gradients are near zero. Over 8 steps at lr 3e-3 we allow
//   losses:     relative |Δ| <= 1e-5 per step
//   parameters: max |Δ| <= 1e-5 (1/300 of one step's largest update)
// Measured on the 2-core test machine: losses equal to the 9 digits the JSONL
// log keeps; parameters within 4e-7 (N ranks vs accumulation), 2e-7 (ZeRO-1),
// 3e-8 (resume 2 -> 3 ranks).
//
// The same through the cuda backend on the CPU (`ratchet-simt train --device
// simt`, MpiTrainSimt below; L=2, C=16: cuBLASLt wants 16-byte rows):
//   FP32 storage: as above (kLossTol, kParamTol); measured 9e-8 / 9e-7.
//   BF16 storage: the gradients are BF16, so 2 ranks' RNE(g0 + g1) and one
//     rank's accumulation of the second micro-batch into the first round
//     differently (1 BF16 ulp, 2^-8 relative), and AdamW's m/sqrt(v) turns that
//     into up to ~lr for parameters whose gradient is near zero. The bound is
//     therefore relative to the same noise on ONE rank: 2 ranks may differ
//     from 1 rank × 2 micro-batches by at most 3× what 1 rank × 1 micro-batch
//     of 2B differs from it (measured 4.7e-3 vs 5.1e-3, lr 3e-3); losses
//     within 1e-3 relative (measured 3e-5).
//   --overlap-comm on vs off: 2 ranks add the same two numbers (a+b = b+a)
//     whether a layer's slices go alone or in one buffer: bitwise equal.
//   ZeRO-1 vs all-reduce (BF16), 2 ranks: the same sums, and the one tensor
//     the shard boundary cuts (wpe) is cut in rows past T, which the forward
//     never reads (a cut tensor's BF16 copy is stochastically rounded with
//     another seed): bitwise equal here. On 3 ranks (padded shards) MPI may
//     reduce in another order: the BF16 bound as above.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "ckpt/checkpoint.h"
#include "mpi_testing.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet::testing;
namespace fs = std::filesystem;

namespace {

constexpr double kLossTol = 1e-5;
constexpr double kParamTol = 1e-5;

class MpiTrain : public BibleShardsSuite {
 protected:

  // B rows per rank, `total` tokens per step (T = 16), shuffled, with eval.
  static std::string train_args(int B, int total, const std::string& out_dir, int steps = 8) {
    return tiny_train_args(B, total, out_dir, steps);
  }

  static void expect_close(const std::string& a, const std::string& b, const std::string& what,
                           size_t skip_losses = 0) {
    auto la = read_losses(a + "/log.jsonl"), lb = read_losses(b + "/log.jsonl");
    ASSERT_EQ(la.size(), lb.size() + skip_losses) << what;
    ASSERT_FALSE(lb.empty()) << what;
    double worst = 0;
    for (size_t i = 0; i < lb.size(); i++)
      worst = std::max(worst, std::fabs(la[i + skip_losses] - lb[i]) / std::fabs(la[i + skip_losses]));
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

TEST_F(MpiTrain, OneRankUnderMpirunIsBitIdenticalToAPlainRun) {
  TempDir a, b;
  auto r = run_ratchet(train_args(2, 64, a.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = mpirun_ratchet(1, train_args(2, 64, b.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_file(a / "out.bin") == read_file(b / "out.bin"));
  EXPECT_EQ(read_losses(a / "log.jsonl"), read_losses(b / "log.jsonl"));
}

TEST_F(MpiTrain, NRanksEqualOneRankAccumulatingNMicroBatches) {
  for (int n : {2, 3, 4}) {
    TempDir one, many;
    const int total = n * 2 * 16;  // N·B·T on both
    auto r = run_ratchet(train_args(2, total, one.path));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::to_string(n) + " micro-batch(es) per step"), std::string::npos);
    r = mpirun_ratchet(n, train_args(2, total, many.path));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("data parallel: " + std::to_string(n) + " rank(s)"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("1 micro-batch(es) per step"), std::string::npos) << r.output;
    // Only rank 0 prints: one final line, not N.
    const auto first = r.output.find("trained 8 steps");
    ASSERT_NE(first, std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("trained 8 steps", first + 1), std::string::npos) << r.output;
    expect_close(one.path, many.path, std::to_string(n) + " ranks vs 1 rank accumulating");
  }
}

TEST_F(MpiTrain, Zero1EqualsUnshardedWithAnOddParameterCount) {
  for (int n : {2, 4}) {
    TempDir plain, zero;
    const int total = n * 2 * 16;
    auto r = mpirun_ratchet(n, train_args(2, total, plain.path));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = mpirun_ratchet(n, train_args(2, total, zero.path) + " --zero 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("0.01M parameters"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("ZeRO-1"), std::string::npos) << r.output;
    expect_close(plain.path, zero.path, "ZeRO-1 vs all-reduce on " + std::to_string(n) + " ranks");
  }
}

// Llama (GQA, SwiGLU, RoPE, untied lm_head: the lmhead slot at the end of
// the buffer is reduced with the final group): 2 ranks equal 1 rank
// accumulating 2 micro-batches, and ZeRO-1 equals the all-reduce, within the
// tolerances above. Llama has no llm.c export: parameters are compared from
// the final checkpoints.
TEST_F(MpiTrain, LlamaDataParallelAndZero1) {
  auto llama = [](const std::string& out, int B) {
    std::string a = train_args(B, 64, out);
    const std::string gpt2 = "--model custom --layers 3 --heads 3 --channels 15";
    a.replace(a.find(gpt2), gpt2.size(),
              "--model custom --arch llama --layers 2 --heads 4 --kv-heads 2 --channels 16 "
              "--ffn-hidden 24 --untied");
    a.replace(a.find(" --export "), std::string::npos, " --ckpt-dir " + out + "/ck");
    return a;
  };
  auto params = [](const std::string& out) {
    return ratchet::read_checkpoint(out + "/ck/step_00000008").params;
  };
  TempDir one, two, zero;
  auto r = run_ratchet(llama(one.path, 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 micro-batch(es) per step"), std::string::npos) << r.output;
  r = mpirun_ratchet(2, llama(two.path, 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: llama"), std::string::npos) << r.output;
  r = mpirun_ratchet(2, llama(zero.path, 2) + " --zero 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ZeRO-1"), std::string::npos) << r.output;
  const auto l1 = read_losses(one / "log.jsonl"), l2 = read_losses(two / "log.jsonl"),
             lz = read_losses(zero / "log.jsonl");
  ASSERT_EQ(l1.size(), l2.size());
  ASSERT_EQ(l2.size(), lz.size());
  for (size_t i = 0; i < l1.size(); i++) {
    EXPECT_LE(std::fabs(l1[i] - l2[i]) / std::fabs(l1[i]), kLossTol) << i;
    EXPECT_LE(std::fabs(l2[i] - lz[i]) / std::fabs(l2[i]), kLossTol) << i;
  }
  const auto p1 = params(one.path), p2 = params(two.path), pz = params(zero.path);
  ASSERT_EQ(p1.size(), p2.size());
  ASSERT_EQ(p2.size(), pz.size());
  const double d2 = max_abs_diff(p1.data(), p2.data(), p1.size()),
               dz = max_abs_diff(p2.data(), pz.data(), p2.size());
  EXPECT_LE(d2, kParamTol) << "2 ranks vs 1";
  EXPECT_LE(dz, kParamTol) << "ZeRO-1 vs all-reduce";
  std::printf("[ llama ] max parameter difference: 2 ranks vs 1 %.2e, ZeRO-1 vs all-reduce %.2e\n",
              d2, dz);
}

// Written by 2 ranks with sharded optimizer state (ZeRO-1), stopped by a
// signal at step 4, resumed on 3 ranks (B 3 -> 2: the same 6 rows per step):
// the loss curve continues the uninterrupted 2-rank run's.
TEST_F(MpiTrain, ShardedCheckpointResumesOnADifferentWorldSize) {
  TempDir ref, run;
  auto r = mpirun_ratchet(2, train_args(3, 96, ref.path) + " --zero 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const std::string ck = run / "ck";
  r = mpirun_ratchet(2, train_args(3, 96, run.path) + " --zero 1 --ckpt-dir " + ck,
                     "RATCHET_FAULT=USR1@step-4");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("stopping at step 4"), std::string::npos) << r.output;
  for (const char* f : {"state.h5", "shard_00000.h5", "shard_00001.h5", "manifest.json", "COMMITTED"})
    EXPECT_TRUE(fs::exists(ck + "/step_00000004/" + f)) << f;
  EXPECT_FALSE(fs::exists(ck + "/step_00000004/shard_00002.h5"));
  auto v = run_ratchet("ckpt verify " + ck + "/step_00000004");
  EXPECT_EQ(v.exit_code, 0) << v.output;

  const std::string first_log = read_file(run / "log.jsonl");
  r = mpirun_ratchet(3, train_args(2, 96, run.path) + " --zero 1 --ckpt-dir " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("optimizer state in 2 shard(s), now sharded over 3 rank(s)"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch_size changed from 3 to 2"), std::string::npos) << r.output;
  // The log was appended to: 4 losses before the stop, 4 after, as the reference.
  expect_close(ref.path, run.path, "2 ranks -> stop at 4 -> 3 ranks");
  EXPECT_TRUE(fs::exists(ck + "/step_00000008/shard_00002.h5"));
  (void)first_log;

  // And the 3-shard checkpoint resumes on one process without ZeRO.
  TempDir one;
  fs::copy(ck, one / "ck", fs::copy_options::recursive);
  r = run_ratchet(train_args(6, 96, one.path, 10) + " --ckpt-dir " + (one / "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 8"), std::string::npos) << r.output;
}

// A stop signal that reaches only rank 1 stops every rank at the same step.
TEST_F(MpiTrain, AStopSignalOnOneRankStopsAllRanksAtTheSameStep) {
  TempDir d;
  const std::string cmd =
      mpirun_prefix(2) + "sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then export "
                         "RATCHET_FAULT=USR1@step-3; fi; exec " RATCHET_EXE " " +
      train_args(2, 64, d.path) + " --ckpt-dir " + (d / "ck") + "'";
  auto r = run_shell(cmd);
  ASSERT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("stopping at step 3: SIGUSR1 received (on rank 1)"), std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(d / "ck/step_00000003/COMMITTED"));
}

TEST_F(MpiTrain, AFailingRankEndsTheJobPromptlyNamingItself) {
  struct Case {
    const char* fail;
    int code;
  };
  for (const Case& c : {Case{"2@step-3", 1}, Case{"1@setup", 2}}) {
    TempDir d;
    const double t0 = now_seconds();
    // 100000 steps: without the abort the other ranks would wait forever.
    auto r = mpirun_ratchet(3, train_args(2, 96, d.path, 100000),
                            std::string("RATCHET_TEST_FAIL=") + c.fail);
    const double took = now_seconds() - t0;
    EXPECT_EQ(r.exit_code, c.code) << c.fail << "\n" << r.output;
    const std::string rank = std::string(c.fail).substr(0, 1);
    EXPECT_NE(r.output.find("error on rank " + rank + " of 3"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("injected failure"), std::string::npos) << r.output;
    EXPECT_LT(took, 15.0) << c.fail;
  }
}

// ---- the cuda backend on the CPU (ratchet-simt --device simt) ------------------------

#ifdef RATCHET_SIMT_EXE
constexpr double kBf16LossTol = 1e-3;

class MpiTrainSimt : public MpiTrain {
 protected:
  static std::string simt_args(int B, int total, const std::string& out, int layers = 2) {
    return "train --device simt --model custom --layers " + std::to_string(layers) +
           " --heads 2 --channels 16 --max-seq-len 32 --seq-len 16 --batch-size " +
           std::to_string(B) + " --total-batch-tokens " + std::to_string(total) +
           " --threads 1 --train-data '" + (*dir_ / "data/train_*.h5") + "' --val-data '" +
           (*dir_ / "data/val_*.h5") + "' --eval-every 4 --eval-batches 6 --warmup-steps 2 "
           "--steps 8 --lr 3e-3 --quiet --log-jsonl " + out + "/log.jsonl --export " + out +
           "/out.bin";
  }
  static RunResult run1(const std::string& args) {
    return run_shell(std::string(RATCHET_SIMT_EXE) + " " + args);
  }
  static RunResult runN(int n, const std::string& args) {
    return run_shell(mpirun_prefix(n) + RATCHET_SIMT_EXE + " " + args);
  }
  using Diff = RunDiff;
  static Diff diff(const std::string& a, const std::string& b) {  // 8 steps each
    EXPECT_EQ(read_losses(a + "/log.jsonl").size(), 8u) << a;
    EXPECT_EQ(read_losses(b + "/log.jsonl").size(), 8u) << b;
    return diff_runs(a, b);
  }
};

TEST_F(MpiTrainSimt, Fp32TwoRanksEqualOneRankAccumulating) {
  TempDir one, two;
  auto r = run1(simt_args(2, 64, one.path) + " --storage f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = runN(2, simt_args(2, 64, two.path) + " --storage f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("backend simt (f32)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("data parallel: 2 rank(s) (mpi"), std::string::npos) << r.output;
  const Diff d = diff(one.path, two.path);
  EXPECT_LE(d.loss, kLossTol);
  EXPECT_LE(d.param, kParamTol);
  std::printf("[ simt f32: 2 ranks vs 1 rank x 2 ] loss %.2e, params %.2e\n", d.loss, d.param);
}

TEST_F(MpiTrainSimt, Bf16TwoRanksEqualOneRankAccumulating) {
  TempDir one, wide, two;
  auto r = run1(simt_args(2, 64, one.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("backend simt (bf16)"), std::string::npos) << r.output;
  r = run1(simt_args(4, 64, wide.path));  // the same rows in one micro-batch: the noise floor
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = runN(2, simt_args(2, 64, two.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("backend simt (bf16)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("all-reduced during the backward"), std::string::npos) << r.output;
  const Diff noise = diff(one.path, wide.path), d = diff(one.path, two.path);
  EXPECT_GT(noise.param, 0.0);
  EXPECT_LE(d.loss, kBf16LossTol);
  EXPECT_LE(d.param, 3 * noise.param);
  std::printf("[ simt bf16: 2 ranks vs 1 rank x 2 ] loss %.2e, params %.2e (1 rank 1x2B vs 2xB: "
              "loss %.2e, params %.2e)\n", d.loss, d.param, noise.loss, noise.param);
}

TEST_F(MpiTrainSimt, Bf16Zero1EqualsAllReduce) {
  TempDir plain, zero;
  auto r = runN(2, simt_args(2, 64, plain.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = runN(2, simt_args(2, 64, zero.path) + " --zero 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ZeRO-1"), std::string::npos) << r.output;
  const Diff d = diff(plain.path, zero.path);
  EXPECT_TRUE(d.bitwise) << "loss " << d.loss << " params " << d.param;
  std::printf("[ simt bf16 ZeRO-1 vs all-reduce, 2 ranks ] loss %.2e, params %.2e%s\n", d.loss,
              d.param, d.bitwise ? " (bitwise)" : "");
}

// 3 ranks, L=3: P = 16576 is not a multiple of 3 (the last shard is padded).
TEST_F(MpiTrainSimt, Bf16Zero1EqualsAllReduceWithPaddedShards) {
  TempDir one, wide, plain, zero;
  auto r = run1(simt_args(3, 96, one.path, 3));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run1(simt_args(1, 96, wide.path, 3));  // the noise floor: 6 micro-batches of 1 vs 2 of 3
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = runN(3, simt_args(1, 96, plain.path, 3));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = runN(3, simt_args(1, 96, zero.path, 3) + " --zero 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Diff noise = diff(wide.path, one.path), d = diff(plain.path, zero.path);
  EXPECT_LE(d.loss, kBf16LossTol);
  EXPECT_LE(d.param, 3 * noise.param);
  std::printf("[ simt bf16 ZeRO-1 vs all-reduce, 3 ranks ] loss %.2e, params %.2e%s (noise "
              "%.2e)\n", d.loss, d.param, d.bitwise ? " (bitwise)" : "", noise.param);
}

TEST_F(MpiTrainSimt, OverlapOnEqualsOffBitwise) {
  for (const char* storage : {"bf16", "f32"}) {
    TempDir on, off;
    auto r = runN(2, simt_args(1, 64, on.path) + " --storage " + storage);  // 2 micro-batches
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("all-reduced during the backward"), std::string::npos) << r.output;
    r = runN(2, simt_args(1, 64, off.path) + " --storage " + storage + " --overlap-comm off");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("all-reduced during the backward"), std::string::npos) << r.output;
    const Diff d = diff(on.path, off.path);
    EXPECT_TRUE(d.bitwise) << storage << ": loss " << d.loss << " params " << d.param;
  }
}
// Issue 24's crash, as the GPU node ran it: `mpirun -np 1` with --zero 1. Under
// simt's device-memory guard (RATCHET_SIMT_GUARD=1: a host access to device
// memory faults, as on a GPU) ZeRO-1 on one rank trains and equals --zero 0 bit
// for bit. Before the fix the single-process communicator's memmove of the
// gradient shards died here of SIGSEGV.
TEST_F(MpiTrainSimt, GuardedZero1OnOneRankUnderMpirunEqualsZero0) {
  TempDir plain, zero;
  const std::string guard = "RATCHET_SIMT_GUARD=1";
  auto r = run_shell(mpirun_prefix(1, guard) + RATCHET_SIMT_EXE + " " + simt_args(2, 64, plain.path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_shell(mpirun_prefix(1, guard) + RATCHET_SIMT_EXE + " " + simt_args(2, 64, zero.path) +
                " --zero 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("data parallel: 1 rank(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ZeRO-1: optimizer state sharded"), std::string::npos) << r.output;
  const Diff d = diff(plain.path, zero.path);
  EXPECT_TRUE(d.bitwise) << "loss " << d.loss << " params " << d.param;
}

#ifdef RATCHET_STUB_NCCL_EXE
// The device-communicator (NCCL) paths of the trainer, with NCCL stubbed at
// the Communicator interface (tests/mpi/stub_device_comm_main.cpp): its
// destroy waits for every rank, as ncclCommDestroy waits for quiescence.
class MpiTrainStubNccl : public MpiTrainSimt {
 protected:
  static RunResult runN(int n, const std::string& args, const std::string& env) {
    return run_shell(mpirun_prefix(n, env) + RATCHET_STUB_NCCL_EXE + " " + args);
  }
};

// A normal run goes through the stub (gradients averaged by it) and ends:
// every rank reaches destroy, so the modelled wait completes.
TEST_F(MpiTrainStubNccl, TrainsThroughTheDeviceCommunicatorAndEnds) {
  TempDir d;
  auto r = runN(2, simt_args(2, 64, d.path), "RATCHET_STUB_NCCL_DIR=" + d.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("stub nccl: up on rank 1 of 2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("still waiting"), std::string::npos) << r.output;
  EXPECT_EQ(read_losses(d / "log.jsonl").size(), 8u);
  // Overlap groups each layer's twelve all-reduces: 2 layers x 8 steps.
  EXPECT_NE(r.output.find("stub nccl: rank 0 ran 16 grouped all-reduce sets"), std::string::npos)
      << r.output;
}

// One rank throws after NCCL is up while the other waits in a gradient
// collective: the failing rank aborts the communicator (ncclCommAbort) and
// the job BEFORE anything destroys it; destroying it first would wait 60 s
// for a rank that never comes (a real ncclCommDestroy: until walltime).
TEST_F(MpiTrainStubNccl, AFailingRankAbortsNcclAndEndsTheJobPromptly) {
  TempDir d;
  const double t0 = now_seconds();
  std::string args = simt_args(2, 64, d.path);
  args.replace(args.find("--steps 8 "), 10, "--steps 100000 ");  // forever, but for the abort
  auto r = runN(2, args,
                "RATCHET_STUB_NCCL_DIR=" + d.path + " RATCHET_TEST_FAIL=1@step-3");
  const double took = now_seconds() - t0;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error on rank 1 of 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stub nccl: ncclCommAbort on rank 1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("still waiting"), std::string::npos) << r.output;
  // Reaching step 3 takes 10-25 s of simt on 2 shared cores; without the
  // abort the stub's destroy alone would add 60 s (and print "still waiting").
  EXPECT_LT(took, 55.0) << r.output;
}

// The hang watchdog polls the device communicator's asynchronous error
// (ncclCommGetAsyncError; train/watchdog.h: start_run_watchdog's `device`):
// rank 1's stub reports one from its 6th collective on, while the training
// itself goes on; the watchdog ends the job at once with 75 (not after the
// 120 s --hang-timeout), aborting the device communicator first, and its
// flight record gives the library's message as the reason.
TEST_F(MpiTrainStubNccl, AnAsyncDeviceErrorEndsTheJobThroughTheWatchdog) {
  TempDir d;
  const double t0 = now_seconds();
  std::string args = simt_args(2, 64, d.path);
  // Long enough (minutes of simt) that only the abort ends it in time.
  args.replace(args.find("--steps 8 "), 10, "--steps 60 ");
  auto r = runN(2, args + " --hang-timeout 120 --run-dir " + d / "rd",
                "RATCHET_STUB_NCCL_DIR=" + d.path + " RATCHET_STUB_NCCL_ASYNC_ERROR=1@6");
  const double took = now_seconds() - t0;
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("hang watchdog"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stub nccl: ncclCommAbort on rank 1"), std::string::npos) << r.output;
  const std::string rec = read_file(d / "rd/flight/rank_1.json");
  EXPECT_NE(rec.find("injected asynchronous error"), std::string::npos) << rec;
  EXPECT_LT(took, 100.0) << r.output;  // well inside the 120 s timeout
}
// Two ranks under the device-memory guard, gradients through the stand-in
// NCCL (which alone may touch device memory, as NCCL's kernels do): ZeRO-1
// equals the all-reduce bit for bit (BF16, see the top), and its sharded
// checkpoint, stopped at step 4, resumes on ONE rank (another world size;
// the guard on) and finishes.
TEST_F(MpiTrainStubNccl, GuardedZero1EqualsAllReduceAndResumesOnOneRank) {
  TempDir plain, zero, run;
  const std::string env = "RATCHET_SIMT_GUARD=1 RATCHET_STUB_NCCL_DIR=";
  auto r = runN(2, simt_args(2, 64, plain.path), env + plain.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("data parallel: 2 rank(s) (stub-nccl"), std::string::npos) << r.output;
  r = runN(2, simt_args(2, 64, zero.path) + " --zero 1", env + zero.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ZeRO-1"), std::string::npos) << r.output;
  const Diff d = diff(plain.path, zero.path);
  EXPECT_TRUE(d.bitwise) << "loss " << d.loss << " params " << d.param;

  const std::string ck = run / "ck";
  r = runN(2, simt_args(2, 64, run.path) + " --zero 1 --ckpt-dir " + ck,
           env + run.path + " RATCHET_FAULT=USR1@step-4");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  EXPECT_TRUE(fs::exists(ck + "/step_00000004/shard_00001.h5"));
  // One rank, 2 micro-batches of 2 rows: the same 4 rows per step.
  r = run_shell(mpirun_prefix(1, "RATCHET_SIMT_GUARD=1") + RATCHET_SIMT_EXE + " " +
                simt_args(2, 64, run.path) + " --zero 1 --ckpt-dir " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("optimizer state in 2 shard(s), now sharded over 1 rank(s)"),
            std::string::npos) << r.output;
  const Diff c = diff(zero.path, run.path);
  EXPECT_LE(c.loss, kBf16LossTol);
}
#endif  // RATCHET_STUB_NCCL_EXE

#endif  // RATCHET_SIMT_EXE

}  // namespace

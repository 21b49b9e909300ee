// The checks every sharded stage (--zero 2, --zero 3) passes through the
// cuda backend on the CPU, in one place for test_mpi_train_zero2/3: against
// --zero 0 on 2 ranks with one micro-batch each, where every stage adds the
// same two gradients (a + b): bitwise equal. Needs RATCHET_SIMT_EXE (and
// RATCHET_STUB_NCCL_EXE for the stand-in NCCL), set per test target.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "mpi_testing.h"

namespace ratchet::testing {

#ifdef RATCHET_SIMT_EXE
// ratchet-simt, BF16 and FP32 storage: `--zero stage` equals --zero 0 bit for
// bit (BF16's stochastic rounding included: it draws by position in the tensor).
inline void expect_simt_stage_equals_stage0(const std::string& base, int stage, int eval_batches) {
  const std::string name = "ZeRO-" + std::to_string(stage);
  for (const char* storage : {"bf16", "f32"}) {
    TempDir plain, zero;
    const std::string st = std::string(" --storage ") + storage;
    auto r = run_shell(mpirun_prefix(2) + RATCHET_SIMT_EXE + " " +
                       simt_train_args(base, 2, 64, plain.path, eval_batches) + st);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_shell(mpirun_prefix(2) + RATCHET_SIMT_EXE + " " +
                  simt_train_args(base, 2, 64, zero.path, eval_batches) + st + " --zero " +
                  std::to_string(stage));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(name), std::string::npos) << r.output;
    const RunDiff d = diff_runs(plain.path, zero.path);
    EXPECT_TRUE(d.bitwise) << name << " " << storage << ": loss " << d.loss << " params " << d.param;
  }
}

// One rank (gpu-check's `mpirun -np 1 --zero N` == --zero 0), BF16, a model of
// 1.6M parameters: more than the gradient norm's fixed grid of 131072 threads,
// so each thread sums many squares, of the flat layout (stage 0) in one order
// and of the buckets (stages 2 and 3) in another. The norm must not depend on
// that order (kernels/global_norm.cu: FP64 from the first square); with FP32
// per-thread sums it did, and this run parted after step 1, as d12 did on an
// H200 (bench/gpu/results/2026-11-30-h200).
inline void expect_simt_stage_equals_stage0_above_norm_grid(const std::string& base, int stage) {
  const std::string args = "train --device simt --storage bf16 --model custom --layers 2 --heads 4 "
                           "--channels 256 --max-seq-len 64 --seq-len 64 --batch-size 4 --threads 1 "
                           "--train-data '" + base + "/data/train_*.h5' --steps 2 --seed 1 --lr 1e-3 "
                           "--warmup-steps 1 --quiet";
  TempDir plain, zero;
  auto r = run_shell(mpirun_prefix(1) + RATCHET_SIMT_EXE + " " + args + " --log-jsonl " + plain.path +
                     "/log.jsonl --export " + plain.path + "/out.bin");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_shell(mpirun_prefix(1) + RATCHET_SIMT_EXE + " " + args + " --zero " + std::to_string(stage) +
                " --log-jsonl " + zero.path + "/log.jsonl --export " + zero.path + "/out.bin");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const RunDiff d = diff_runs(plain.path, zero.path);
  EXPECT_TRUE(d.bitwise) << "ZeRO-" << stage << " on one rank: loss " << d.loss << " params " << d.param;
}

#ifdef RATCHET_STUB_NCCL_EXE
// Through the stand-in NCCL (the device communicator) under the device-memory
// guard, in an arena sized by the accounting: `--zero stage` equals --zero 0
// bitwise, and its checkpoint resumes on one rank.
inline void expect_stub_nccl_stage_equals_stage0_and_resumes(const std::string& base, int stage,
                                                             int eval_batches) {
  const std::string z = " --zero " + std::to_string(stage);
  TempDir plain, zero, run;
  const std::string env = "RATCHET_SIMT_GUARD=1 RATCHET_STUB_NCCL_DIR=";
  auto stub = [&](const std::string& args, const std::string& e) {
    return run_shell(mpirun_prefix(2, e) + RATCHET_STUB_NCCL_EXE + " " + args);
  };
  auto args = [&](const std::string& out) { return simt_train_args(base, 2, 64, out, eval_batches); };
  auto r = stub(args(plain.path), env + plain.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = stub(args(zero.path) + z, env + zero.path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("data parallel: 2 rank(s) (stub-nccl"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ZeRO-" + std::to_string(stage)), std::string::npos) << r.output;
  const RunDiff d = diff_runs(plain.path, zero.path);
  EXPECT_TRUE(d.bitwise) << "loss " << d.loss << " params " << d.param;

  const std::string ck = run / "ck";
  r = stub(args(run.path) + z + " --ckpt-dir " + ck, env + run.path + " RATCHET_FAULT=USR1@step-4");
  ASSERT_EQ(r.exit_code, 75) << r.output;
  // One rank, 2 micro-batches of 2 rows: the same 4 rows per step.
  r = run_shell(mpirun_prefix(1, "RATCHET_SIMT_GUARD=1") + RATCHET_SIMT_EXE + " " + args(run.path) +
                z + " --ckpt-dir " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 4"), std::string::npos) << r.output;
  const RunDiff c = diff_runs(zero.path, run.path);
  EXPECT_LE(c.loss, 1e-3);  // BF16: 2 micro-batches on one rank round otherwise (test_mpi_train)
}
#endif  // RATCHET_STUB_NCCL_EXE
#endif  // RATCHET_SIMT_EXE

}  // namespace ratchet::testing

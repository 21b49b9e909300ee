// `ratchet train --device simt` end to end: the whole cuda backend host code
// (run on the CPU by kernels/simt and the matmul wrapper's stand-in) trains a
// tiny model through the real binary, with the same losses as --device cpu
// to 3 decimals (FP32 storage: see test_cuda_backend.cpp for the tolerances),
// and in BF16. Also: --device cuda without a usable device fails with a
// message that says what to do. The first test runs `ratchet-simt` (built
// next to `ratchet` with the simt backend).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "model/memory.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet::testing;

namespace {

std::vector<double> losses(const std::string& out) { return printed_losses(out); }

class CudaBackendTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = run_shell("bible -f 'Gen1:1-Gen3:24' > " + (*dir_ / "gen.txt"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_ratchet("shard --tokenizer byte --input " + (*dir_ / "gen.txt") + " --output-dir " +
                    (*dir_ / "data") + " --val-fraction 0.1 --seed 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string flags(int steps = 4, const std::string& batch = "4") {
    return "--model custom --layers 2 --heads 2 --channels 64 --max-seq-len 64 --seq-len 32 "
           "--batch-size " + batch + " --steps " + std::to_string(steps) +
           " --threads 2 --train-data '" + (*dir_ / "data/train_*.h5") + "'";
  }
  static TempDir* dir_;
};
TempDir* CudaBackendTrain::dir_ = nullptr;

// ratchet-simt: the same program as ratchet with the simt build registered as
// "simt", built next to it whenever the simt backend is (default builds).
std::string simt_exe() {
  return sibling_program(RATCHET_EXE, "ratchet-simt");
}

TEST_F(CudaBackendTrain, DeviceSimtTrainsLikeCpu) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  auto s = run_shell(simt_exe() + " train " + flags() + " --device simt --storage f32");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("backend simt (f32)"), std::string::npos) << s.output;
  auto c = run_ratchet("train " + flags() + " --device cpu");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto ls = losses(s.output), lc = losses(c.output);
  ASSERT_EQ(ls.size(), 4u) << s.output;
  ASSERT_EQ(lc.size(), 4u) << c.output;
  for (size_t i = 0; i < ls.size(); i++) EXPECT_NEAR(ls[i], lc[i], 1e-3) << "step " << i + 1;
  // BF16 storage (the default): the same curve to BF16 precision (activations
  // and gradients rounded to 8 bits of mantissa; measured within 1e-4).
  auto b = run_shell(simt_exe() + " train " + flags() + " --device simt");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("backend simt (bf16)"), std::string::npos) << b.output;
  auto lb = losses(b.output);
  ASSERT_EQ(lb.size(), 4u) << b.output;
  for (size_t i = 0; i < lb.size(); i++) EXPECT_NEAR(lb[i], lc[i], 2e-3) << "step " << i + 1;
  for (size_t i = 0; i < lb.size(); i++)
    std::printf("step %zu: cpu %.4f simt f32 %.4f simt bf16 %.4f\n", i + 1, lc[i], ls[i], lb[i]);
}

// Preemption on the cuda backend in BF16: a run stopped after 3 steps and
// resumed for 3 more ends with byte-identical weights to one that ran 6
// (FP32 master weights in the checkpoint; the BF16 weights rebuilt with the
// last step's stochastic rounding), under every recompute policy tried (the
// straight run keeps everything: each policy gives its bits, gelu+ln through
// the re-run GELU epilogue GEMM). Also logs the arena sized by the memory
// accounting.
TEST_F(CudaBackendTrain, DeviceSimtBf16ResumeIsBitIdentical) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  TempDir d;
  const std::string base = simt_exe() + " train " + flags(6) + " --device simt --quiet ";
  auto straight = run_shell(base + "--export " + (d / "straight.bin"));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  EXPECT_NE(straight.output.find("device memory:"), std::string::npos) << straight.output;
  EXPECT_NE(straight.output.find("MB arena"), std::string::npos) << straight.output;
  for (const char* policy : {"none", "gelu+ln", "blocks"}) {
    const std::string ck = d / (std::string("ck-") + policy);
    const std::string rp = std::string(" --recompute ") + policy;
    // preempted (SIGUSR1) after step 3: saves and exits 75 ("requeue me")
    auto first = run_shell("RATCHET_FAULT=USR1@step-3 " + base + rp + " --ckpt-dir " + ck);
    ASSERT_EQ(first.exit_code, 75) << first.output;
    auto second = run_shell(base + rp + " --ckpt-dir " + ck + " --export " +
                            (d / (std::string("resumed-") + policy + ".bin")));
    ASSERT_EQ(second.exit_code, 0) << second.output;
    EXPECT_NE(second.output.find("continuing from step 3"), std::string::npos) << second.output;
    EXPECT_TRUE(read_file(d / (std::string("resumed-") + policy + ".bin")) ==
                read_file(d / "straight.bin"))
        << policy << ": resumed weights differ from the uninterrupted run";
  }
}

// ZeRO-1 on one process through the cuda backend's host code, under simt's
// device-memory guard (kernels/simt/device_guard.h: host access to device
// memory faults, as on a GPU). Issue 24: `mpirun -np 1 ratchet train --device
// cuda --zero 1` segfaulted on the host: with one rank the gradients' reduce-
// scatter went to the single-process communicator, whose memmove touched
// device pointers; simt could not see it until the guard. ZeRO-1 on one rank
// must equal --zero 0 bit for bit (the same sums, norm and AdamW), in both
// storages, and a sharded checkpoint saved and resumed under the guard must
// continue bit for bit.
TEST_F(CudaBackendTrain, DeviceSimtZero1UnderTheDeviceGuardEqualsZero0) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  TempDir d;
  const std::string guard = "RATCHET_SIMT_GUARD=1 ";
  for (const char* storage : {"bf16", "f32"}) {
    const std::string base = guard + simt_exe() + " train " + flags(6) +
                             " --device simt --quiet --storage " + storage;
    const std::string z0 = d / (std::string("z0-") + storage + ".bin"),
                      z1 = d / (std::string("z1-") + storage + ".bin");
    auto r = run_shell(base + " --export " + z0);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_shell(base + " --zero 1 --export " + z1);
    ASSERT_EQ(r.exit_code, 0) << storage << " --zero 1 under the guard:\n" << r.output;
    EXPECT_NE(r.output.find("ZeRO-1: optimizer state sharded"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("simt device guard"), std::string::npos) << r.output;
    EXPECT_TRUE(read_file(z0) == read_file(z1)) << storage << ": --zero 1 differs from --zero 0";
  }
  // Stopped at step 3 (SIGUSR1: sharded optimizer state saved), resumed: the
  // straight --zero 1 run's weights, byte for byte.
  const std::string base = guard + simt_exe() + " train " + flags(6) + " --device simt --quiet";
  const std::string ck = d / "ck";
  auto first = run_shell("RATCHET_FAULT=USR1@step-3 " + base + " --zero 1 --ckpt-dir " + ck);
  ASSERT_EQ(first.exit_code, 75) << first.output;
  auto second = run_shell(base + " --zero 1 --ckpt-dir " + ck + " --export " + (d / "res.bin"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("continuing from step 3"), std::string::npos) << second.output;
  EXPECT_TRUE(read_file(d / "res.bin") == read_file(d / "z1-bf16.bin"))
      << "the resumed --zero 1 run differs from the straight one";
}

// --batch-size auto on a device: the largest micro-batch whose exact step
// memory (model/memory.h, with the backend's own workspace and rounding)
// fits the budget; the run then trains inside an arena of exactly that size.
TEST_F(CudaBackendTrain, DeviceSimtBatchSizeAutoFitsTheBudget) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  using namespace ratchet;
  auto be = make_cuda_backend("bf16");
  const GPTConfig cfg = tiny_config(2, 2, 64, 257, 64);  // flags() on byte-level shards
  auto need = [&](int B, const char* p) {
    return (double)step_memory(cfg, B, 32, parse_recompute(p), *be, ParamLayout(cfg).total, 0)
        .total();
  };
  // 8 rows per step; a budget between B=4 and B=8 without recompute
  const double mb = (need(4, "none") + need(8, "none")) / 2 / 1e6;
  const std::string cmd = simt_exe() + " train " + flags(1, "auto") +
                          " --device simt --total-batch-tokens 256 "
                          "--memory-budget-mb " + std::to_string(mb);
  auto r = run_shell(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("batch-size auto: B=4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MB arena"), std::string::npos) << r.output;
  // recomputing blocks fits all 8 rows in the same budget
  ASSERT_LT(need(8, "blocks"), mb * 1e6);
  r = run_shell(cmd + " --recompute blocks");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("batch-size auto: B=8"), std::string::npos) << r.output;
}

TEST_F(CudaBackendTrain, DeviceCudaWithoutGpuSaysWhatToDo) {
  auto r = run_ratchet("train " + flags() + " --device cuda");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device cuda"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--device cpu"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Aborted"), std::string::npos) << r.output;
}

TEST_F(CudaBackendTrain, DeviceAutoFallsBackToCpuWithANote) {
  auto r = run_ratchet("train " + flags(1) + " --device auto");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("using the CPU backend"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("backend cpu"), std::string::npos) << r.output;
}

TEST_F(CudaBackendTrain, DeviceSimtInTheCudaBuildPointsToRatchetSimt) {
#if RATCHET_DEVICE_SIMT_BUILT
  GTEST_SKIP() << "this ratchet has the simt device built in (-DRATCHET_DEVICE_SIMT=ON)";
#endif
  auto r = run_ratchet("train " + flags(1) + " --device simt");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("ratchet-simt"), std::string::npos) << r.output;
}

// --tf32 only means something for FP32 storage: with BF16 it is refused,
// naming the flag and why.
TEST_F(CudaBackendTrain, Tf32WithBf16StorageIsAUsageError) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  auto r = run_shell(simt_exe() + " train " + flags(1) + " --device simt --tf32");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--tf32 applies to --storage f32 (got --storage bf16)"),
            std::string::npos) << r.output;
}

TEST_F(CudaBackendTrain, UnknownDeviceIsAUsageError) {
  auto r = run_ratchet("train " + flags() + " --device tpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cpu, cuda, auto, simt"), std::string::npos) << r.output;
}

}  // namespace

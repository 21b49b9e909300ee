// DeepSeek-V3's router options through `ratchet-simt train` (the cuda
// backend's host code on simt; docs/moe.md): the selection bias with its
// update (--moe-bias-update-rate), group-limited selection (--moe-n-group,
// --moe-topk-group) and shared experts (--n-shared-experts) train like
// `ratchet train --device cpu`, and a preempted run with the bias resumes
// bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "testing/bible_shards_suite.h"
#include "testing/test_util.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

std::vector<double> losses(const std::string& out) {
  std::vector<double> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    auto p = line.find("| loss ");
    if (line.rfind("step", 0) == 0 && p != std::string::npos) v.push_back(std::stod(line.substr(p + 7)));
  }
  return v;
}

std::string simt_exe() {
  const std::string exe = RATCHET_EXE;
  return exe.substr(0, exe.find_last_of('/') + 1) + "ratchet-simt";
}

class CudaBackendMoeTrain : public BibleShardsSuite {
 protected:
  // test_moe_train.cpp's model (3 MoE layers, 4 experts, top 2, I = 16,
  // C = 32: multiples of 4 for the cuda path in FP32), sigmoid scores without
  // the aux loss (DeepSeek-V3's way), 2 micro-batches per step.
  static std::string cmd(const std::string& run, int steps, const std::string& extra) {
    return "train --model custom --arch llama --family qwen3_moe --layers 3 --heads 4 "
           "--kv-heads 2 --channels 32 --num-experts 4 --experts-per-tok 2 --moe-ffn-hidden 16 "
           "--moe-scoring sigmoid --router-aux-loss-coef 0 --max-seq-len 32 --seq-len 16 "
           "--batch-size 2 --total-batch-tokens 64 --threads 1 --train-data '" +
           (*dir_ / "data/train_*.h5") + "' --warmup-steps 2 --steps " + std::to_string(steps) +
           " --lr 3e-3 --ckpt-dir " + run + "/ck " + extra;
  }
  // The simt run in FP32 storage and the cpu run; compares the losses and the
  // final selection bias.
  static void simt_equals_cpu(const std::string& extra, bool bias) {
    TempDir s, c;
    auto rs = run_shell(simt_exe() + " " + cmd(s.path, 5, extra) + " --device simt --storage f32");
    ASSERT_EQ(rs.exit_code, 0) << rs.output;
    EXPECT_NE(rs.output.find("backend simt (f32)"), std::string::npos) << rs.output;
    auto rc = run_ratchet(cmd(c.path, 5, extra) + " --device cpu");
    ASSERT_EQ(rc.exit_code, 0) << rc.output;
    const auto ls = losses(rs.output), lc = losses(rc.output);
    ASSERT_EQ(ls.size(), 5u) << rs.output;
    ASSERT_EQ(lc.size(), 5u) << rc.output;
    // test_cuda_backend_train's DeviceSimtTrainsLikeCpu tolerance: FP32 in
    // other GEMM and reduction orders; a different routing would be O(1e-2).
    for (size_t i = 0; i < ls.size(); i++) {
      EXPECT_NEAR(ls[i], lc[i], 1e-3) << "step " << i + 1;
      std::printf("step %zu: cpu %.5f simt f32 %.5f\n", i + 1, lc[i], ls[i]);
    }
    const Checkpoint ks = read_checkpoint(s / "ck/step_00000005");
    const Checkpoint kc = read_checkpoint(c / "ck/step_00000005");
    EXPECT_EQ(ks.meta.model.n_group, kc.meta.model.n_group);
    EXPECT_EQ(ks.meta.model.topk_group, kc.meta.model.topk_group);
    if (!bias) return;
    // The bias moves by rate * sign(...) from exact counts: the same routing
    // gives the same counts and so the same bits on both backends.
    ASSERT_EQ(ks.meta.moe_bias.size(), 3u * 4u);
    EXPECT_EQ(ks.meta.moe_bias, kc.meta.moe_bias) << "the selection bias differs: another routing";
    double mag = 0;
    for (float b : ks.meta.moe_bias) mag += std::fabs(b);
    EXPECT_GT(mag, 0.005) << "the bias did not move";
  }
};

TEST_F(CudaBackendMoeTrain, SelectionBiasTrainsLikeCpu) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  simt_equals_cpu("--moe-bias-update-rate 0.01", true);
}

TEST_F(CudaBackendMoeTrain, GroupLimitedSelectionWithBiasTrainsLikeCpu) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  simt_equals_cpu("--moe-bias-update-rate 0.01 --moe-n-group 2 --moe-topk-group 1", true);
}

// As dots1 routes: 2 shared experts beside the routed ones, scale 2.5, the bias.
TEST_F(CudaBackendMoeTrain, SharedExpertsTrainLikeCpu) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  simt_equals_cpu("--n-shared-experts 2 --routed-scaling-factor 2.5 --moe-bias-update-rate 0.01", true);
}

// MoeTrain.SelectionBiasUpdatesAndResumesBitIdentically on the cuda backend
// (BF16 storage, the default): weights and bias bit for bit after a resume.
TEST_F(CudaBackendMoeTrain, SelectionBiasResumesBitIdentically) {
  if (!std::ifstream(simt_exe()).good()) GTEST_SKIP() << simt_exe() << " was not built";
  const std::string extra = "--moe-bias-update-rate 0.01 --moe-n-group 2 --moe-topk-group 1 --device simt";
  TempDir ref, run;
  auto r = run_shell(simt_exe() + " " + cmd(ref.path, 6, extra));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_shell("RATCHET_FAULT=USR1@step-3 " + simt_exe() + " " + cmd(run.path, 6, extra));
  ASSERT_EQ(r.exit_code, 75) << r.output;
  r = run_shell(simt_exe() + " " + cmd(run.path, 6, extra));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing from step 3"), std::string::npos) << r.output;
  const Checkpoint want = read_checkpoint(ref / "ck/step_00000006");
  const Checkpoint got = read_checkpoint(run / "ck/step_00000006");
  EXPECT_NE(read_checkpoint(run / "ck/step_00000003").meta.moe_bias, want.meta.moe_bias)
      << "the bias must change between steps 3 and 6";
  ASSERT_EQ(got.params.size(), want.params.size());
  EXPECT_EQ(std::memcmp(got.params.data(), want.params.data(), got.params.size() * sizeof(float)), 0)
      << "resumed weights differ";
  EXPECT_EQ(got.meta.moe_bias, want.meta.moe_bias) << "resumed selection bias differs";
}

}  // namespace

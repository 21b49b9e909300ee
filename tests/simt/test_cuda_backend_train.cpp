// `ratchet train --device simt` end to end: the whole cuda backend host code
// (run on the CPU by kernels/simt and the matmul wrapper's stand-in) trains a
// tiny model through the real binary, with the same losses as --device cpu
// to 3 decimals (FP32 storage: see test_cuda_backend.cpp for the tolerances).
// Also: --device cuda without a usable device fails with a message that says
// what to do. Needs a ratchet built with -DRATCHET_DEVICE_SIMT=ON for the
// first test (skipped otherwise).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "testing/test_util.h"

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
  static std::string flags(int steps = 4) {
    return "--model custom --layers 2 --heads 2 --channels 64 --max-seq-len 64 --seq-len 32 "
           "--batch-size 4 --steps " + std::to_string(steps) + " --threads 2 --train-data '" + (*dir_ / "data/train_*.h5") +
           "'";
  }
  static TempDir* dir_;
};
TempDir* CudaBackendTrain::dir_ = nullptr;

TEST_F(CudaBackendTrain, DeviceSimtTrainsLikeCpu) {
#if !RATCHET_DEVICE_SIMT_BUILT
  GTEST_SKIP() << "ratchet was built without -DRATCHET_DEVICE_SIMT=ON";
#endif
  auto s = run_ratchet("train " + flags() + " --device simt");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("backend simt"), std::string::npos) << s.output;
  auto c = run_ratchet("train " + flags() + " --device cpu");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto ls = losses(s.output), lc = losses(c.output);
  ASSERT_EQ(ls.size(), 4u) << s.output;
  ASSERT_EQ(lc.size(), 4u) << c.output;
  for (size_t i = 0; i < ls.size(); i++) EXPECT_NEAR(ls[i], lc[i], 1e-3) << "step " << i + 1;
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

TEST_F(CudaBackendTrain, UnknownDeviceIsAUsageError) {
  auto r = run_ratchet("train " + flags() + " --device tpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cpu, cuda, auto, simt"), std::string::npos) << r.output;
}

}  // namespace

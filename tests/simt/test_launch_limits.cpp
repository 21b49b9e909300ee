// Launch geometry and 32-bit index safety at the largest shapes:
//   - launch_config_problem (kernels/common.cuh) against the CUDA limits;
//   - a launch that breaks them fails naming the kernel instead of launching;
//   - every non-attention launcher, dry-run (checked and recorded, not run) at
//     d48 B=64 T=1024 and d12 B=512 T=1024 (B*T*Vp up to 2.6e10 > 2^31);
//   - the fused classifier RUN on rows whose offsets pass 2^31 elements
//     (B*T*Vp > 2^31), on a sparse mapping: only the touched pages exist.
// (Attention's launchers are left to the attention family's own tests.)
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/classifier.cuh"
#include "launch_shapes.h"

namespace {

using namespace ratchet::kernels;
using namespace ratchet::testing::launch;

TEST(LaunchLimits, ConfigProblemNamesWhatIsWrong) {
  EXPECT_EQ(launch_config_problem(dim3(65536), dim3(1024), 0), "");
  EXPECT_EQ(launch_config_problem(dim3(2147483647u, 65535, 65535), dim3(32, 32), 48 * 1024), "");
  EXPECT_NE(launch_config_problem(dim3(1), dim3(1025), 0).find("1025 threads"), std::string::npos);
  EXPECT_NE(launch_config_problem(dim3(1), dim3(1, 1, 65), 0).find("block.z"), std::string::npos);
  EXPECT_NE(launch_config_problem(dim3(2147483648u), dim3(32), 0).find("grid.x"),
            std::string::npos);
  EXPECT_NE(launch_config_problem(dim3(1, 65536), dim3(32), 0).find("grid.y 65536"),
            std::string::npos);
  EXPECT_NE(launch_config_problem(dim3(1, 1, 70000), dim3(32), 0).find("grid.z 70000"),
            std::string::npos);
  EXPECT_NE(launch_config_problem(dim3(0), dim3(32), 0).find("zero"), std::string::npos);
  EXPECT_NE(launch_config_problem(dim3(1), dim3(32), 48 * 1024 + 1).find("shared memory"),
            std::string::npos);
}

__global__ void noop_kernel(int) {}

TEST(LaunchLimitsDeathTest, ABadLaunchFailsNamingTheKernel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(RATCHET_LAUNCH(noop_kernel, dim3(1, 70000), 32, 0, nullptr, 0),
               "grid.y 70000.*noop_kernel");
}

template <class T>
void expect_largest_shapes_launch() {
  for (const Shape& s : kShapes) {
    const std::vector<LaunchRecord> launches = dry_run_step<T>(s);  // dies on a bad config
    ASSERT_GT(launches.size(), 12u) << s.name;
    EXPECT_GT((double)s.B * s.T * s.Vp, 2147483647.0) << s.name << ": not past 2^31";
    bool classifier = false;
    for (const LaunchRecord& r : launches) {
      EXPECT_EQ(launch_config_problem(r.grid, r.block, r.smem), "") << r.name;
      if (r.name.find("fused_classifier") != std::string::npos) {
        classifier = true;
        EXPECT_EQ(r.grid.x, (unsigned)(s.B * s.T)) << s.name << ": one block per row";
      }
    }
    EXPECT_TRUE(classifier) << s.name;
  }
}
TEST(LaunchLimits, EveryLauncherFitsAtTheLargestShapesFp32) { expect_largest_shapes_launch<float>(); }
TEST(LaunchLimits, EveryLauncherFitsAtTheLargestShapesBf16) { expect_largest_shapes_launch<bf16>(); }

// The classifier really run past 2^31 elements: 3 rows of Vp = 2^30 (row 2
// starts at element 2^31, one past INT_MAX), V = 256 real columns, forward
// only (dloss 0: only the V columns and the target are touched). Logits are
// small integers, exact in BF16; the reference loss is computed in double.
// With 32-bit row offsets row 2 would read 2^31 elements BEFORE the buffer.
TEST(LaunchLimits, ClassifierRowsPast2To31ElementsAreRight) {
  const int BT = 3, V = 256;
  const size_t Vp = size_t(1) << 30;
  const size_t bytes = BT * Vp * sizeof(bf16);  // 6 GiB of address space
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(mem, MAP_FAILED) << "cannot map " << bytes << " bytes of address space";
  bf16* logits = static_cast<bf16*>(mem);
  std::vector<int> targets = {5, 100, 255};
  std::vector<double> expect(BT);
  for (int r = 0; r < BT; r++) {
    double mx = -1e30, sum = 0;
    std::vector<float> row(V);
    for (int j = 0; j < V; j++) row[j] = (float)((j * 7 + r * 13) % 11 - 5);
    for (int j = 0; j < V; j++) {
      logits[r * Vp + j] = __float2bfloat16(row[j]);
      mx = std::max(mx, (double)row[j]);
    }
    for (int j = 0; j < V; j++) sum += std::exp(row[j] - mx);
    expect[r] = mx + std::log(sum) - row[targets[r]];
  }
  std::vector<float> losses(BT, -1.0f);
  fused_classifier<bf16>(logits, losses.data(), targets.data(), BT, V, (int)Vp, 0.0f, nullptr);
  RATCHET_CHECK_LAUNCH();
  // FP32 online softmax over 256 terms: a few ulp of the loss (~2.5).
  for (int r = 0; r < BT; r++) EXPECT_NEAR(losses[r], expect[r], 1e-5 * expect[r]) << "row " << r;
  munmap(mem, bytes);
}

}  // namespace

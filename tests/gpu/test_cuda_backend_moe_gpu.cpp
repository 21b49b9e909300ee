// The whole MoE layer on a device (src/backend/cuda/cuda_moe.h: the nvcc
// kernels and one cuBLASLt call per expert) against the cpu backend, FP32 and
// BF16 storage: the cases of tests/simt/moe_layer_cases.h plus two larger
// shapes, and the same bits on a second run. Skips without a device.
#include <gtest/gtest.h>

#include <cstring>

#include "moe_layer_cases.h"
#include "skip_without_device.h"

namespace {

using namespace ratchet::testing::moecases;
using ratchet::kernels::bf16;

// Larger than simt can run quickly: 4096 slots over 16 experts with real
// cuBLASLt plans, and 4096 slots with an empty expert (C 64: exact logits).
const Case kGpuCases[] = {
    {"N 1024, C 128, E 16, k 4, I 64", {1024, 128, 16, 4, 64, true}, -1},
    {"N 2048, C 64, E 8, k 2, I 64, expert 3 empty", {2048, 64, 8, 2, 64, false}, 3},
};

TEST(CudaBackendGpuMoe, LayerMatchesCpuBackend) {
  SKIP_WITHOUT_DEVICE();
  for (const Case& c : kCases) {
    compare_case<float>(c);
    compare_case<bf16>(c);
  }
  for (const Case& c : kGpuCases) {
    compare_case<float>(c);
    compare_case<bf16>(c);
  }
}

// No float atomics and pinned cuBLASLt plans: a second run gives the same bits.
TEST(CudaBackendGpuMoe, SameBitsEveryRun) {
  SKIP_WITHOUT_DEVICE();
  for (const Case& c : kGpuCases) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c.s, 2, 11, c.empty_expert);
    const Outputs a = run_cuda<bf16>(c.s, in), b = run_cuda<bf16>(c.s, in);
    expect_same_bits(a, b);
  }
}

// --expert-parallel's device path (cuda_moe.h: uploaded permutations, the
// gather kernels, the experts' slices, device-to-device rows) over an
// exchange of one rank: the local path's bits (one GPU has no peer; real
// NCCL: tests/mpi/test_mpi_expert_parallel_cuda.cpp, 2 GPUs).
TEST(CudaBackendGpuMoe, ExpertParallelPathOverOneRankIsBitwiseTheLocalPath) {
  SKIP_WITHOUT_DEVICE();
  for (const Case& c : kGpuCases) {
    expect_self_exchange_same_bits<float>(c);
    expect_self_exchange_same_bits<bf16>(c);
  }
}

}  // namespace

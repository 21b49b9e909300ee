// The whole MoE layer on the cuda backend under simt against the cpu
// backend (the cases: moe_layer_cases.h), FP32 and BF16 storage; the same
// bits on a second run with another simt thread order and thread count;
// shapes the cuda path cannot take refused by name.
#include <gtest/gtest.h>

#include <cstring>

#include <string>

#include "core/error.h"
#include "kernels/common.cuh"  // simt::set_seed, set_threads
#include "moe_layer_cases.h"

namespace {

using namespace ratchet::testing::moecases;
using ratchet::kernels::bf16;
using ratchet::moe::MoeShape;

TEST(CudaBackendSimtMoe, LayerMatchesCpuBackendFp32) {
  for (const Case& c : kCases) compare_case<float>(c);
}

TEST(CudaBackendSimtMoe, LayerMatchesCpuBackendBf16) {
  for (const Case& c : kCases) compare_case<bf16>(c);
}

// The same bits on a second run under another simt thread order and OS
// thread count: no atomics on floats, every sum in a fixed order.
TEST(CudaBackendSimtMoe, SameBitsEveryRun) {
  const MoeShape s{300, 32, 8, 2, 16, true};
  for (int bf : {0, 1}) {
    SCOPED_TRACE(bf ? "bf16" : "f32");
    const Inputs in = make_inputs(s, bf ? 2 : 4, 7, 3);
    simt::set_seed(1);
    simt::set_threads(1);
    const Outputs a = bf ? run_cuda<bf16>(s, in) : run_cuda<float>(s, in);
    simt::set_seed(99);
    simt::set_threads(3);
    const Outputs b = bf ? run_cuda<bf16>(s, in) : run_cuda<float>(s, in);
    expect_same_bits(a, b);
  }
}

// --expert-parallel's path (cuda_moe.h) over an exchange of one rank: the
// same bits as the local path, every case, FP32 and BF16 (the multi-rank
// exchange: tests/mpi/test_mpi_expert_parallel_cuda.cpp).
TEST(CudaBackendSimtMoe, ExpertParallelPathOverOneRankIsBitwiseTheLocalPath) {
  for (const Case& c : kCases) {
    expect_self_exchange_same_bits<float>(c);
    expect_self_exchange_same_bits<bf16>(c);
  }
}

// No tokens: nothing runs, nothing is written, nothing fails.
TEST(CudaBackendSimtMoe, NoTokens) {
  const MoeShape s{0, 8, 4, 2, 8, true};
  const Inputs in = make_inputs(s, 4, 3, -1);
  const Outputs d = run_cuda<float>(s, in);
  EXPECT_EQ(d.dw1, in.dw1);
  EXPECT_EQ(d.counts, std::vector<int>(4, 0));
}

void expect_refused(const MoeShape& s, bool bf, const std::string& says) {
  try {
    ratchet::moe::check_cuda_shape(s, bf ? 2 : 4);
    ADD_FAILURE() << "accepted C " << s.C << ", I " << s.I << ", E " << s.E;
  } catch (const ratchet::Error& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(CudaBackendSimtMoe, ShapesTheCudaPathCannotTakeAreRefused) {
  expect_refused({4, 12, 4, 2, 8, true}, true, "channels 12 and moe_intermediate_size 8 must be multiples of 8");
  expect_refused({4, 8, 4, 2, 6, true}, false, "must be multiples of 4");
  expect_refused({4, 8, 2000, 2, 8, true}, false, "num_experts is 2000");
  expect_refused({4, 8, 4, 5, 8, true}, false, "num_experts_per_tok (top-k) is 5");
  // DeepSeek-V3's shared expert is in the cpu ops only.
  expect_refused({4, 8, 4, 2, 8, true, true, 1.0f, 8}, false, "shared experts (n_shared_experts)");
  // The layer itself refuses before touching memory.
  auto owner = ratchet::make_cuda_backend("bf16");
  auto& be = dynamic_cast<ratchet::cuda::CudaBackend<bf16>&>(*owner);
  ratchet::moe::CudaMoeCache cache;
  EXPECT_THROW(ratchet::moe::moe_forward<bf16>(be, {4, 12, 4, 2, 8, true}, nullptr, nullptr,
                                               nullptr, nullptr, nullptr, cache),
               ratchet::Error);
}

}  // namespace

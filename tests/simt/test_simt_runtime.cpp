// simt runtime: CUDA semantics of indices, barriers, warp collectives, shared
// memory, atomics and bf16; and planted bugs that simt must catch (a missing
// __syncthreads, a wrong shuffle width, an out-of-bounds write, a barrier not
// every thread reaches).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/common.cuh"
#include "guarded.h"

using namespace ratchet::kernels;
using ratchet::testing::Guarded;

namespace {

// ---- kernels ---------------------------------------------------------------------------------
__global__ void write_ids(int* out) {
  int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  int nt = blockDim.x * blockDim.y * blockDim.z;
  out[bid * nt + tid] = bid * 100000 + tid;
}

// Reverses each block's chunk through shared memory; `with_barrier` false is
// the planted bug.
template <bool with_barrier>
__global__ void reverse_block(float* out, const float* in) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = in[i];
  if (with_barrier) __syncthreads();
  out[i] = tile[blockDim.x - 1 - threadIdx.x];
}

// Warp sum with a shuffle width: 32 is right, 16 is the planted bug.
__global__ void warp_sum_width(float* out, const float* in, int width) {
  float x = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off, width);
  if (threadIdx.x % 32 == 0) out[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = x;
}

// Writes n+1 elements: the planted out-of-bounds write.
__global__ void write_one_too_many(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 1.0f;
}

__global__ void early_exit_then_barrier(float* out) {
  if (threadIdx.x < 10) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void lane_exits_before_shuffle(float* out) {
  if (threadIdx.x == 7) return;
  float x = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  out[threadIdx.x] = x;
}

__global__ void shuffles(int* out, int width, int param) {  // 6 results per thread
  int lane = threadIdx.x % 32;
  int v = 1000 + lane;
  int* o = out + 6 * threadIdx.x;
  o[0] = __shfl_sync(0xffffffffu, v, param, width);
  o[1] = __shfl_up_sync(0xffffffffu, v, param, width);
  o[2] = __shfl_down_sync(0xffffffffu, v, param, width);
  o[3] = __shfl_xor_sync(0xffffffffu, v, param, width);
  o[4] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
  o[5] = __any_sync(0xffffffffu, lane == param) * 2 + __all_sync(0xffffffffu, lane < 32);
}

__global__ void partial_mask(int* out) {  // lanes 0..15 and 16..31 shuffle separately
  int lane = threadIdx.x % 32;
  unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  out[threadIdx.x] = __shfl_down_sync(mask, lane, 1, 16);
  __syncwarp();
}

__global__ void atomics(float* fsum, int* isum, unsigned* cas_count) {
  atomicAdd(fsum, 1.0f);
  atomicAdd(isum, (int)threadIdx.x);
  unsigned old = *cas_count, assumed;
  do {
    assumed = old;
    old = atomicCAS(cas_count, assumed, assumed + 1);
  } while (old != assumed);
}

// Block sum through dynamic shared memory, 2-D block.
__global__ void dyn_smem_sum(float* out, const float* in) {
  float* s = dynamic_smem<float>();
  int t = threadIdx.y * blockDim.x + threadIdx.x;
  int n = blockDim.x * blockDim.y;
  s[t] = in[blockIdx.x * n + t];
  __syncthreads();
  for (int stride = n / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

__global__ void block_sum_kernel(float* out, const float* in) {
  __shared__ float scratch[32];
  float x = in[blockIdx.x * blockDim.x + threadIdx.x];
  float s = block_sum(x, scratch);
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// Each thread takes a ticket in the order threads run: once before a barrier.
__global__ void take_ticket(int* tickets, int* counter) {
  tickets[threadIdx.x] = atomicAdd(counter, 1);
}

// Vector types and 128-bit packs: CUDA's float4 / make_float4, Packed128 of bf16.
__global__ void vector_types(float4* out4, bf16* outb, const bf16* inb) {
  int i = threadIdx.x;
  float4 v = make_float4(i, 2.0f * i, 3.0f * i, 4.0f * i);
  out4[i] = v;
  Packed128<bf16> p = load128(inb + 8 * i);
  for (int k = 0; k < Packed128<bf16>::size; k++)
    p[k] = __float2bfloat16(__bfloat162float(p[k]) * 2.0f);
  store128(outb + 8 * i, p);
}

__global__ void throws_kernel(float*) { throw std::runtime_error("boom"); }

std::vector<float> iota_f(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = (float)(i % 97) - 40.0f;
  return v;
}

struct SimtTest : ::testing::Test {
  void SetUp() override {
    simt::get_last_error();
    simt::set_seed(1);
  }
};

}  // namespace

TEST_F(SimtTest, IndicesCover3dGridAnd3dBlock) {
  dim3 grid(3, 2, 2), block(4, 3, 2);
  int nt = 24, nb = 12;
  std::vector<int> out(nt * nb, -1);
  RATCHET_LAUNCH(write_ids, grid, block, 0, nullptr, out.data());
  RATCHET_CHECK_LAUNCH();
  for (int b = 0; b < nb; b++)
    for (int t = 0; t < nt; t++) ASSERT_EQ(out[b * nt + t], b * 100000 + t);
}

TEST_F(SimtTest, BlocksOf1024ThreadsOnSeveralOsThreads) {
  simt::set_threads(2);
  int n = 1024 * 8;
  auto in = iota_f(n);
  std::vector<float> out(n);
  RATCHET_LAUNCH(block_sum_kernel, 8, 1024, 0, nullptr, out.data(), in.data());
  RATCHET_CHECK_LAUNCH();
  for (int b = 0; b < 8; b++) {
    double ref = 0;
    for (int i = 0; i < 1024; i++) ref += in[b * 1024 + i];
    for (int i = 0; i < 1024; i++) ASSERT_EQ(out[b * 1024 + i], (float)ref);
  }
  simt::set_threads(0);
}

// Regression: a pool thread created for a later launch once ran the previous
// launch's (dead) closure and corrupted the caller's stack.
TEST_F(SimtTest, GrowingTheOsThreadPoolBetweenLaunches) {
  int n = 256 * 16;
  auto in = iota_f(n);
  for (int threads : {1, 2, 1, 3, 4, 2}) {
    simt::set_threads(threads);
    std::vector<float> out(n);
    RATCHET_LAUNCH((reverse_block<true>), 16, 256, 0, nullptr, out.data(), in.data());
    RATCHET_CHECK_LAUNCH();
    for (int i = 0; i < n; i++) ASSERT_EQ(out[i], in[(i / 256) * 256 + 255 - i % 256]);
  }
  simt::set_threads(0);
}

TEST_F(SimtTest, BarrierMakesSharedMemoryExchangeCorrect) {
  int n = 256 * 4;
  auto in = iota_f(n);
  std::vector<float> out(n);
  RATCHET_LAUNCH((reverse_block<true>), 4, 256, 0, nullptr, out.data(), in.data());
  RATCHET_CHECK_LAUNCH();
  for (int i = 0; i < n; i++) ASSERT_EQ(out[i], in[(i / 256) * 256 + 255 - i % 256]);
}

TEST_F(SimtTest, PlantedMissingSyncthreadsChangesResults) {
  int n = 256 * 4;
  auto in = iota_f(n);
  for (uint64_t seed : {1, 2, 3}) {
    simt::set_seed(seed);
    std::vector<float> out(n);
    RATCHET_LAUNCH((reverse_block<false>), 4, 256, 0, nullptr, out.data(), in.data());
    RATCHET_CHECK_LAUNCH();
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += out[i] != in[(i / 256) * 256 + 255 - i % 256];
    EXPECT_GT(wrong, n / 10) << "seed " << seed << ": the missing barrier went unnoticed";
  }
}

TEST_F(SimtTest, PlantedWrongShuffleWidthChangesResults) {
  int n = 128;
  auto in = iota_f(n);
  std::vector<float> right(4), wrong(4);
  RATCHET_LAUNCH(warp_sum_width, 1, 128, 0, nullptr, right.data(), in.data(), 32);
  RATCHET_CHECK_LAUNCH();
  RATCHET_LAUNCH(warp_sum_width, 1, 128, 0, nullptr, wrong.data(), in.data(), 16);
  RATCHET_CHECK_LAUNCH();
  for (int w = 0; w < 4; w++) {
    float ref = 0, half = 0;
    for (int l = 0; l < 32; l++) ref += in[w * 32 + l];
    for (int l = 0; l < 16; l++) half += in[w * 32 + l];
    EXPECT_EQ(right[w], ref);
    // Offset 16 leaves each 16-lane segment: lanes keep their own value (x2).
    EXPECT_EQ(wrong[w], 2 * half) << "width 16 must only sum the first 16 lanes";
    EXPECT_NE(wrong[w], ref);
  }
}

TEST_F(SimtTest, PlantedOutOfBoundsWriteHitsTheGuard) {
  Guarded<float> out(100);
  RATCHET_LAUNCH(write_one_too_many, 1, 128, 0, nullptr, out.data(), 100);
  RATCHET_CHECK_LAUNCH();
  std::string g = out.check();
  EXPECT_NE(g.find("after the buffer"), std::string::npos) << g;
  Guarded<float> ok(100);
  RATCHET_LAUNCH(write_one_too_many, 1, 128, 0, nullptr, ok.data(), 99);
  RATCHET_CHECK_LAUNCH();
  EXPECT_EQ(ok.check(), "");
}

TEST_F(SimtTest, BarrierNotReachedByAllThreadsIsAnErrorNamingTheKernel) {
  std::vector<float> out(64);
  RATCHET_LAUNCH(early_exit_then_barrier, 2, 64, 0, nullptr, out.data());
  EXPECT_EQ(simt::peek_last_error(), cudaErrorLaunchFailure);
  std::string msg = simt::last_error_message();
  EXPECT_NE(msg.find("early_exit_then_barrier"), std::string::npos) << msg;
  EXPECT_NE(msg.find("__syncthreads reached by 54 of 64"), std::string::npos) << msg;
  EXPECT_THROW(RATCHET_CHECK_LAUNCH(), simt::LaunchError);
  EXPECT_EQ(simt::peek_last_error(), cudaSuccess);  // check_launch clears it
}

TEST_F(SimtTest, ShuffleWithAnExitedLaneIsAnError) {
  std::vector<float> out(32);
  RATCHET_LAUNCH(lane_exits_before_shuffle, 1, 32, 0, nullptr, out.data());
  std::string msg = simt::last_error_message();
  EXPECT_EQ(simt::get_last_error(), cudaErrorLaunchFailure);
  EXPECT_NE(msg.find("lane_exits_before_shuffle"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has exited"), std::string::npos) << msg;
}

TEST_F(SimtTest, ExceptionInAKernelIsALaunchError) {
  RATCHET_LAUNCH(throws_kernel, 2, 32, 0, nullptr, (float*)nullptr);
  EXPECT_THROW(RATCHET_CHECK_LAUNCH(), simt::LaunchError);
}

// The runtime itself refuses a block of 2048 threads (launched directly);
// through RATCHET_LAUNCH the launch helper refuses it first, naming the
// kernel and the limit (kernels/common.cuh, launch_config_problem).
TEST_F(SimtTest, InvalidBlockSizeIsALaunchError) {
  std::vector<int> out(2048);
  simt::launch("write_ids", dim3(1), dim3(2048), 0, [&] { write_ids(out.data()); });
  EXPECT_EQ(simt::get_last_error(), cudaErrorLaunchFailure);
}
TEST(SimtDeathTest, InvalidBlockSizeThroughTheLaunchHelperIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<int> out(2048);
  EXPECT_DEATH(RATCHET_LAUNCH(write_ids, 1, 2048, 0, nullptr, out.data()),
               "2048 threads per block \\(limit 1024\\).*write_ids");
}

// The PTX rules for shfl.sync with a width, computed independently.
static int expect_shfl(int mode, int lane, int p, int w) {
  int seg = lane & ~(w - 1);
  switch (mode) {
    case 0: return seg + (p & (w - 1));
    case 1: return (lane - seg) >= p ? lane - p : lane;
    case 2: return (lane - seg) + p < w ? lane + p : lane;
    default: return (lane ^ p) <= (seg | (w - 1)) ? lane ^ p : lane;
  }
}

TEST_F(SimtTest, ShufflesVotesMatchCudaSemantics) {
  for (int width : {1, 2, 8, 16, 32})
    for (int param : {0, 1, 3, 5, 16, 31}) {
      std::vector<int> out(64 * 6);
      RATCHET_LAUNCH(shuffles, 1, 64, 0, nullptr, out.data(), width, param);
      RATCHET_CHECK_LAUNCH();
      unsigned ballot = 0;
      for (int l = 0; l < 32; l++) ballot |= (l % 3 == 0 ? 1u : 0u) << l;
      for (int t = 0; t < 64; t++) {
        int lane = t % 32;
        const int* o = &out[6 * t];
        for (int mode = 0; mode < 4; mode++)
          ASSERT_EQ(o[mode], 1000 + expect_shfl(mode, lane, param, width))
              << "mode " << mode << " lane " << lane << " width " << width << " p " << param;
        ASSERT_EQ((unsigned)o[4], ballot);
        ASSERT_EQ(o[5], (param < 32 ? 2 : 0) + 1);
      }
    }
}

TEST_F(SimtTest, PartialMasksRunIndependently) {
  std::vector<int> out(32);
  RATCHET_LAUNCH(partial_mask, 1, 32, 0, nullptr, out.data());
  RATCHET_CHECK_LAUNCH();
  for (int l = 0; l < 32; l++) EXPECT_EQ(out[l], (l % 16) == 15 ? l : l + 1) << l;
}

TEST_F(SimtTest, AtomicsAcrossBlocksAndOsThreads) {
  simt::set_threads(2);
  float fsum = 0;
  int isum = 0;
  unsigned cas = 0;
  RATCHET_LAUNCH(atomics, 40, 96, 0, nullptr, &fsum, &isum, &cas);
  RATCHET_CHECK_LAUNCH();
  EXPECT_EQ(fsum, 40.0f * 96);
  EXPECT_EQ(isum, 40 * (95 * 96 / 2));
  EXPECT_EQ(cas, 40u * 96);
  simt::set_threads(0);
}

TEST_F(SimtTest, DynamicSharedMemoryIsPerBlock) {
  dim3 block(16, 8);
  int n = 128 * 6;
  auto in = iota_f(n);
  std::vector<float> out(6);
  RATCHET_LAUNCH(dyn_smem_sum, 6, block, 128 * sizeof(float), nullptr, out.data(), in.data());
  RATCHET_CHECK_LAUNCH();
  for (int b = 0; b < 6; b++) {
    float ref = 0;
    for (int i = 0; i < 128; i++) ref += in[b * 128 + i];
    EXPECT_EQ(out[b], ref);
  }
}

TEST_F(SimtTest, ThreadOrderIsShuffledAndSeeded) {
  auto order = [](uint64_t seed) {
    simt::set_seed(seed);
    std::vector<int> tickets(256);
    int counter = 0;
    RATCHET_LAUNCH(take_ticket, 1, 256, 0, nullptr, tickets.data(), &counter);
    RATCHET_CHECK_LAUNCH();
    return tickets;
  };
  auto a = order(7), b = order(7), c = order(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int> in_order(256);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_NE(a, in_order);
  // After the barrier the order is drawn again.
  int moved = 0;
  for (int i = 0; i < 256; i++) moved += a[i] % 1000 != a[i] / 1000 - 1;
  (void)moved;
}

TEST_F(SimtTest, VectorTypesAndPacked128) {
  std::vector<float4> out4(32);
  Guarded<bf16> inb(256), outb(256);
  for (int i = 0; i < 256; i++) inb[i] = __float2bfloat16((float)(i % 50));
  RATCHET_LAUNCH(vector_types, 1, 32, 0, nullptr, out4.data(), outb.data(), (const bf16*)inb.data());
  RATCHET_CHECK_LAUNCH();
  for (int i = 0; i < 32; i++) {
    EXPECT_EQ(out4[i].x, (float)i);
    EXPECT_EQ(out4[i].w, 4.0f * i);
  }
  for (int i = 0; i < 256; i++) EXPECT_EQ(__bfloat162float(outb[i]), 2.0f * (i % 50));
  EXPECT_EQ(outb.check(), "");
}

TEST_F(SimtTest, Bf16ConversionsFollowCuda) {
  // Round to nearest even on ties; NaN stays NaN; overflow to Inf.
  EXPECT_EQ(__bfloat162float(__float2bfloat16(1.00390625f)), 1.0f);          // tie -> even
  EXPECT_EQ(__bfloat162float(__float2bfloat16(1.01171875f)), 1.015625f);     // tie -> even
  EXPECT_EQ(__bfloat162float(__float2bfloat16(std::nextafter(1.00390625f, 2.0f))), 1.0078125f);    // above tie
  EXPECT_TRUE(std::isnan(__bfloat162float(__float2bfloat16(NAN))));
  EXPECT_TRUE(std::isinf(__bfloat162float(__float2bfloat16(3.4e38f))));
  EXPECT_EQ(__bfloat162float(__float2bfloat16_rz(1.0078f)), 1.0f);
  EXPECT_EQ(__half2float(__float2half(0.1f)), 0.0999755859375f);
}

TEST_F(SimtTest, StochasticRoundingIsUnbiased) {
  float x = 1.0f + 0.3f * 0.0078125f;  // 30% of the way to the next bf16
  double sum = 0;
  int n = 20000;
  for (int i = 0; i < n; i++) sum += __bfloat162float(stochastic_round_bf16(x, hash_u32(i, 42)));
  EXPECT_NEAR(sum / n, x, 2e-4);
}

// The NCCL communicator under mpirun (1 and 2 ranks). The bootstrap (rank 0
// creates the unique id, MPI broadcasts it) runs without a GPU; the device
// collectives skip themselves when cudaGetDeviceCount fails (error 35 on a
// machine with the toolkit but no driver) or finds fewer GPUs than ranks.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/nccl_communicator.h"

using namespace ratchet;

namespace {

Communicator* g_host = nullptr;

TEST(NcclBootstrap, EveryRankGetsRankZerosUniqueId) {
  const ncclUniqueId id = nccl_bootstrap_id(*g_host);
  const int W = g_host->world();
  std::vector<uint8_t> all(sizeof id * W);
  g_host->all_gather(&id, all.data(), sizeof id, DType::U8);
  for (int r = 0; r < W; r++)
    EXPECT_EQ(std::memcmp(all.data() + r * sizeof id, &id, sizeof id), 0) << "rank " << r;
  ncclUniqueId zero{};
  EXPECT_NE(std::memcmp(&id, &zero, sizeof id), 0) << "the id is all zeros";
}

TEST(NcclBootstrap, NoDeviceIsAClearError) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) GTEST_SKIP() << n << " device(s) present";
  EXPECT_THROW(nccl_pick_device(g_host->local_rank()), Error);
}

TEST(NcclDevice, AllReduceReduceScatterAllGather) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  // Every rank must take the same branch: agree on skipping.
  const bool skip = g_host->agree(e != cudaSuccess || n < 1);
  if (skip) GTEST_SKIP() << "no CUDA device (" << cudaGetErrorString(e) << ")";
  auto nccl = make_nccl_communicator(*g_host);
  const int W = nccl->world(), r = nccl->rank();
  const size_t count = 1000;
  std::vector<float> h(count * W);
  for (size_t i = 0; i < h.size(); i++) h[i] = (float)(r + 1) * (float)(i % 13);
  float *d = nullptr, *s = nullptr;
  ASSERT_EQ(cudaMalloc(&d, h.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&s, count * 4), cudaSuccess);
  cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
  nccl->all_reduce(d, h.size(), DType::F32, ReduceOp::Sum);
  std::vector<float> out(h.size());
  cudaMemcpy(out.data(), d, out.size() * 4, cudaMemcpyDeviceToHost);
  const float ranks = W * (W + 1) / 2.0f;
  for (size_t i = 0; i < out.size(); i++) ASSERT_EQ(out[i], ranks * (float)(i % 13));
  nccl->reduce_scatter(d, s, count, DType::F32, ReduceOp::Avg);
  nccl->all_gather(s, d, count, DType::F32);
  cudaMemcpy(out.data(), d, out.size() * 4, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < out.size(); i++) ASSERT_EQ(out[i], ranks * (float)(i % 13));
  cudaFree(d);
  cudaFree(s);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<Communicator> host = make_communicator();
  g_host = host.get();
  const int rc = RUN_ALL_TESTS();
  return host->agree(rc != 0) ? 1 : 0;
}

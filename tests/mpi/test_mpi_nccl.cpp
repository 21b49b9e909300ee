// The NCCL communicator under mpirun (1 and 2 ranks). The bootstrap (rank 0
// creates the unique id, MPI broadcasts it) runs without a GPU; the device
// collectives (F32, BF16, asynchronous) skip themselves when
// cudaGetDeviceCount fails (error 35 on a machine with the toolkit but no
// driver) or finds no GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/nccl_communicator.h"
#include "testing/bf16_bits.h"

using namespace ratchet;
using ratchet::testing::from_bf16;
using ratchet::testing::to_bf16;

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

// Records the host calls the bootstrap makes, forwarding them.
class Recording final : public Communicator {
 public:
  explicit Recording(Communicator& h) : h_(h) {}
  std::string calls;
  std::string name() const override { return "recording"; }
  int rank() const override { return h_.rank(); }
  int world() const override { return h_.world(); }
  int local_rank() const override { return h_.local_rank(); }
  int local_world() const override { return h_.local_world(); }
  void all_reduce(void* b, size_t n, DType t, ReduceOp op) override {
    calls += "all_reduce ";
    h_.all_reduce(b, n, t, op);
  }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    h_.reduce_scatter(s, r, n, t, op);
  }
  void all_gather(const void* s, void* r, size_t n, DType t) override { h_.all_gather(s, r, n, t); }
  void broadcast(void* b, size_t bytes, int root) override {
    calls += "broadcast ";
    h_.broadcast(b, bytes, root);
  }
  void barrier() override {
    calls += "barrier ";
    h_.barrier();
  }
  bool agree(bool f) override { return h_.agree(f); }
  [[noreturn]] void abort_job(int code) override {
    h_.abort_job(code);
    std::_Exit(code);  // not reached
  }

 private:
  Communicator& h_;
};

// With collective offload (HCOLL) a broadcast may complete only at a later
// MPI call: the id's broadcast is followed by a barrier before anyone enters
// the blocking ncclCommInitRank.
TEST(NcclBootstrap, TheIdBroadcastIsFollowedByABarrier) {
  Recording rec(*g_host);
  nccl_bootstrap_id(rec);
  EXPECT_EQ(rec.calls, "broadcast barrier ");
}

// One GPU per rank: more local ranks than devices is refused (here: with no
// device, every count is too many).
TEST(NcclBootstrap, MoreRanksThanDevicesIsAClearError) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  EXPECT_THROW(nccl_pick_device(0, n + 1), Error);
}

TEST(NcclBootstrap, NoDeviceIsAClearError) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) GTEST_SKIP() << n << " device(s) present";
  EXPECT_THROW(nccl_pick_device(g_host->local_rank(), g_host->local_world()), Error);
}

// Whether this rank has no usable GPU, agreed over ranks (every rank must
// take the same branch: skipping, or entering the collectives); *why says why.
bool no_gpu_anywhere(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  *why = e != cudaSuccess ? cudaGetErrorString(e)
                          : n < 1 ? "no device"
                                  : std::to_string(g_host->local_world()) + " ranks on " +
                                        std::to_string(n) + " device(s): one GPU per rank";
  return g_host->agree(e != cudaSuccess || n < g_host->local_world());
}

TEST(NcclDevice, AllReduceReduceScatterAllGather) {
  std::string why;
  if (no_gpu_anywhere(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")";
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

// F32 and BF16 in device buffers: all_reduce (Sum, Avg), reduce_scatter,
// all_gather (in place, as ZeRO-1 uses it), and all_reduce_start + wait_all.
// Small integers: exact in BF16 too. Needs one GPU per rank (skips otherwise;
// it has never run on the machine this was written on: no GPU there).
TEST(NcclDevice, F32AndBf16CollectivesAndAsync) {
  std::string why;
  if (no_gpu_anywhere(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")";
  auto nccl = make_nccl_communicator(*g_host);
  const int W = nccl->world(), r = nccl->rank();
  const size_t count = 513;
  const float ranks = W * (W + 1) / 2.0f;
  for (DType t : {DType::F32, DType::BF16}) {
    const size_t eb = dtype_bytes(t);
    auto up = [&](void* d, const std::vector<float>& h) {
      std::vector<uint8_t> raw(h.size() * eb);
      for (size_t i = 0; i < h.size(); i++) {
        if (t == DType::F32) {
          std::memcpy(&raw[i * 4], &h[i], 4);
        } else {
          const uint16_t b = to_bf16(h[i]);
          std::memcpy(&raw[i * 2], &b, 2);
        }
      }
      ASSERT_EQ(cudaMemcpy(d, raw.data(), raw.size(), cudaMemcpyHostToDevice), cudaSuccess);
    };
    auto down = [&](const void* d, size_t elems) {
      cudaDeviceSynchronize();  // the compute (default) stream waited for the collectives
      std::vector<uint8_t> raw(elems * eb);
      cudaMemcpy(raw.data(), d, raw.size(), cudaMemcpyDeviceToHost);
      std::vector<float> h(elems);
      for (size_t i = 0; i < elems; i++) {
        if (t == DType::F32) {
          std::memcpy(&h[i], &raw[i * 4], 4);
        } else {
          uint16_t b;
          std::memcpy(&b, &raw[i * 2], 2);
          h[i] = from_bf16(b);
        }
      }
      return h;
    };
    void *big = nullptr, *a = nullptr, *b = nullptr;
    ASSERT_EQ(cudaMalloc(&big, count * W * eb), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&a, count * eb), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b, count * eb), cudaSuccess);
    std::vector<float> h(count * W);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)(r + 1) * (float)(i % 7);
    up(big, h);
    nccl->all_reduce(big, h.size(), t, ReduceOp::Sum);
    std::vector<float> out = down(big, h.size());
    for (size_t i = 0; i < out.size(); i++)
      ASSERT_EQ(out[i], ranks * (float)(i % 7)) << dtype_name(t) << " " << i;
    // reduce-scatter (Avg) of the reduced values, then all-gather in place.
    nccl->reduce_scatter(big, a, count, t, ReduceOp::Avg);
    out = down(a, count);
    for (size_t j = 0; j < count; j++)
      ASSERT_EQ(out[j], ranks * (float)((r * count + j) % 7)) << dtype_name(t) << " " << j;
    cudaMemcpy((char*)big + r * count * eb, a, count * eb, cudaMemcpyDeviceToDevice);
    nccl->all_gather((char*)big + r * count * eb, big, count, t);
    out = down(big, h.size());
    for (size_t i = 0; i < out.size(); i++)
      ASSERT_EQ(out[i], ranks * (float)(i % 7)) << dtype_name(t) << " " << i;
    // Asynchronous: two buffers in flight, then the compute stream waits.
    std::vector<float> ha(count), hb(count);
    for (size_t i = 0; i < count; i++) {
      ha[i] = (float)(r + 1);
      hb[i] = (float)(W * (r + 1)) * (float)(i % 3);
    }
    up(a, ha);
    up(b, hb);
    nccl->all_reduce_start(a, count, t, ReduceOp::Sum);
    nccl->all_reduce_start(b, count, t, ReduceOp::Avg);
    nccl->wait_all();
    out = down(a, count);
    for (size_t i = 0; i < count; i++) ASSERT_EQ(out[i], ranks) << dtype_name(t);
    out = down(b, count);
    for (size_t i = 0; i < count; i++) ASSERT_EQ(out[i], ranks * (float)(i % 3)) << dtype_name(t);
    cudaFree(big);
    cudaFree(a);
    cudaFree(b);
  }
}

// Communicator::split on NCCL (ncclCommSplit, --shard-group): each rank
// alone (color = rank), and every rank together (color 0, reversed by key);
// the splits' collectives see only their ranks, and their host splits agree.
TEST(NcclDevice, SplitCommunicatorsReduceWithinTheirRanks) {
  std::string why;
  if (no_gpu_anywhere(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")";
  auto nccl = make_nccl_communicator(*g_host);
  const int W = nccl->world(), r = nccl->rank();
  auto alone = nccl->split(r, 0);
  auto all = nccl->split(0, -r);
  EXPECT_EQ(alone->world(), 1);
  EXPECT_EQ(alone->rank(), 0);
  EXPECT_EQ(all->world(), W);
  EXPECT_EQ(all->rank(), W - 1 - r);
  EXPECT_EQ(all->name(), "nccl");
  const size_t count = 257;
  std::vector<float> h(count, (float)(r + 1));
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, count * 4), cudaSuccess);
  cudaMemcpy(d, h.data(), count * 4, cudaMemcpyHostToDevice);
  alone->all_reduce(d, count, DType::F32, ReduceOp::Sum);  // its own values
  std::vector<float> out(count);
  cudaMemcpy(out.data(), d, count * 4, cudaMemcpyDeviceToHost);
  for (float x : out) ASSERT_EQ(x, (float)(r + 1));
  all->all_reduce(d, count, DType::F32, ReduceOp::Sum);
  cudaMemcpy(out.data(), d, count * 4, cudaMemcpyDeviceToHost);
  for (float x : out) ASSERT_EQ(x, W * (W + 1) / 2.0f);
  EXPECT_TRUE(all->agree(r == 0));  // through the split host communicator
  cudaFree(d);
}

// Expert parallelism's exchanges on NCCL (grouped ncclSend/ncclRecv per peer,
// src/distributed/nccl_communicator.cpp): all_to_all of I32 counts, then
// all_to_allv of F32 rows with uneven and empty blocks, in device memory; the
// same values as Collectives.AllToAllAndAllToAllv checks on MPI. One rank
// sends to itself (one GPU suffices).
TEST(NcclDevice, AllToAllAndAllToAllvMoveEveryBlock) {
  std::string why;
  if (no_gpu_anywhere(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")";
  auto nccl = make_nccl_communicator(*g_host);
  const int W = nccl->world(), r = nccl->rank();
  std::vector<int> send(2 * W), recv(2 * W, -1);
  for (int q = 0; q < W; q++) send[2 * q] = r * 10 + q, send[2 * q + 1] = -(r * 10 + q);
  int *ds = nullptr, *dr = nullptr;
  ASSERT_EQ(cudaMalloc(&ds, send.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dr, recv.size() * 4), cudaSuccess);
  cudaMemcpy(ds, send.data(), send.size() * 4, cudaMemcpyHostToDevice);
  nccl->all_to_all(ds, dr, 2, DType::I32);
  cudaMemcpy(recv.data(), dr, recv.size() * 4, cudaMemcpyDeviceToHost);
  for (int p = 0; p < W; p++) {
    EXPECT_EQ(recv[2 * p], p * 10 + r) << "from rank " << p;
    EXPECT_EQ(recv[2 * p + 1], -(p * 10 + r)) << "from rank " << p;
  }
  std::vector<size_t> sc(W), rc(W);
  std::vector<float> sv, rv;
  for (int q = 0; q < W; q++) {
    // 0..3 rows (empty blocks from 3 ranks on; one rank still moves a row)
    sc[q] = (size_t)((r + q) % 3 + (q % 2 == 0));
    rc[q] = (size_t)((q + r) % 3 + (r % 2 == 0));
    for (size_t i = 0; i < sc[q]; i++) sv.push_back((float)(r * 100 + q) + (float)i / 8);
  }
  size_t total = 0;
  for (size_t c : rc) total += c;
  rv.assign(total, -1.0f);
  float *dsv = nullptr, *drv = nullptr;
  ASSERT_EQ(cudaMalloc(&dsv, (sv.size() + 1) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&drv, (rv.size() + 1) * 4), cudaSuccess);
  cudaMemcpy(dsv, sv.data(), sv.size() * 4, cudaMemcpyHostToDevice);
  nccl->all_to_allv(dsv, sc.data(), drv, rc.data(), DType::F32);
  cudaMemcpy(rv.data(), drv, rv.size() * 4, cudaMemcpyDeviceToHost);
  size_t at = 0;
  for (int p = 0; p < W; p++)
    for (size_t i = 0; i < rc[p]; i++, at++)
      EXPECT_EQ(rv[at], (float)(p * 100 + r) + (float)i / 8) << "from rank " << p << " value " << i;
  cudaFree(ds);
  cudaFree(dr);
  cudaFree(dsv);
  cudaFree(drv);
}

// The hang watchdog's NCCL path (train/watchdog.cpp, issue 40): it polls
// async_error() (ncclCommGetAsyncError on the communicator and its splits)
// at every check, and its abort calls abort_collectives() (ncclCommAbort,
// splits first) from the monitor thread. A healthy communicator reports no
// error, also after a collective; the abort may come from another thread
// while the owner is idle; afterwards async_error() is empty (the handle is
// gone, not polled) and a second abort is a no-op, as the destructor's is.
TEST(NcclDevice, AsyncErrorIsEmptyWhenHealthyAndAbortFromAnotherThreadEndsIt) {
  std::string why;
  if (no_gpu_anywhere(&why)) GTEST_SKIP() << "no CUDA device (" << why << ")";
  auto nccl = make_nccl_communicator(*g_host);
  auto alone = nccl->split(nccl->rank(), 0);
  EXPECT_EQ(nccl->async_error(), "");
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64 * 4), cudaSuccess);
  cudaMemset(d, 0, 64 * 4);
  nccl->all_reduce(d, 64, DType::F32, ReduceOp::Sum);
  alone->all_reduce(d, 64, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(nccl->async_error(), "");
  EXPECT_EQ(alone->async_error(), "");
  std::thread monitor([&] { nccl->abort_collectives(); });
  monitor.join();
  EXPECT_EQ(nccl->async_error(), "");
  EXPECT_EQ(alone->async_error(), "");
  nccl->abort_collectives();  // again: nothing left to abort
  cudaFree(d);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<Communicator> host = make_communicator();
  g_host = host.get();
  const int rc = RUN_ALL_TESTS();
  return host->agree(rc != 0) ? 1 : 0;
}

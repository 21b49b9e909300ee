// Communicator::all_gather_start (ZeRO-3's per-block parameter prefetch,
// distributed/communicator.h) as N ranks under mpirun (CTest: N = 1, 2, 3; 1 is the
// single-process communicator's blocking default). Checked against the
// blocking all_gather and against the values each rank sent: several gathers
// in flight at once and waited for out of order, in place (send = this rank's
// slot of recv), BF16 bit patterns, interleaved with reduce_scatter_start,
// and completed by wait_all(); and all_reduce_start, the ticketed all-reduce.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "distributed/communicator.h"
#include "mpi_gtest_main.h"

using namespace ratchet;

namespace {

Communicator* g_comm = nullptr;

// What rank q sends as element i of gather k: distinct for every (k, q, i).
float value(int k, int q, size_t i) { return (float)(k * 100000 + q * 1000) + (float)(i % 997); }

TEST(AllGatherAsync, SeveralInFlightWaitedOutOfOrder) {
  const int W = g_comm->world(), r = g_comm->rank();
  const size_t n[3] = {1, 777, 4099};  // odd sizes; 4099 is bigger than a small MPI eager limit
  std::vector<std::vector<float>> send(3), recv(3);
  std::vector<Communicator::Ticket> t(3);
  for (int k = 0; k < 3; k++) {
    send[k].resize(n[k]);
    for (size_t i = 0; i < n[k]; i++) send[k][i] = value(k, r, i);
    recv[k].assign(n[k] * W, -1.0f);
    t[k] = g_comm->all_gather_start(send[k].data(), recv[k].data(), n[k], DType::F32);
  }
  g_comm->progress();
  for (int k : {2, 0, 1}) g_comm->wait(t[k]);  // any order completes each
  for (int k = 0; k < 3; k++)
    for (int q = 0; q < W; q++)
      for (size_t i = 0; i < n[k]; i++)
        ASSERT_EQ(recv[k][(size_t)q * n[k] + i], value(k, q, i)) << "gather " << k << " rank " << q;
}

TEST(AllGatherAsync, InPlaceEqualsTheBlockingGather) {
  const int W = g_comm->world(), r = g_comm->rank();
  const size_t n = 513;
  std::vector<float> a(n * W, -1.0f), b(n * W, -2.0f), mine(n);
  for (size_t i = 0; i < n; i++) mine[i] = a[(size_t)r * n + i] = value(7, r, i);
  const Communicator::Ticket t = g_comm->all_gather_start(a.data() + (size_t)r * n, a.data(), n,
                                                          DType::F32);
  g_comm->wait(t);
  g_comm->all_gather(mine.data(), b.data(), n, DType::F32);
  EXPECT_EQ(a, b);
}

// BF16 is moved, not converted: every 16-bit pattern arrives as sent.
TEST(AllGatherAsync, Bf16BitsArriveAsSent) {
  const int W = g_comm->world(), r = g_comm->rank();
  const size_t n = 1000;
  std::vector<uint16_t> send(n), recv(n * W, 0);
  for (size_t i = 0; i < n; i++) send[i] = (uint16_t)(i * 65 + (size_t)r * 7919);
  g_comm->wait(g_comm->all_gather_start(send.data(), recv.data(), n, DType::BF16));
  for (int q = 0; q < W; q++)
    for (size_t i = 0; i < n; i++)
      ASSERT_EQ(recv[(size_t)q * n + i], (uint16_t)(i * 65 + (size_t)q * 7919));
}

// A gather and a reduce-scatter in flight together (ZeRO-3's backward: the
// next block's parameters arrive while this block's gradient is reduced),
// completed by wait_all().
// all_reduce_start (hybrid sharding's all-reduce across groups): several in
// flight, waited for out of order, equal to the blocking all_reduce; Avg
// divided at the wait.
TEST(AllReduceStart, SeveralInFlightEqualTheBlockingAllReduce) {
  const int W = g_comm->world(), r = g_comm->rank();
  const size_t n[3] = {1, 777, 4099};
  std::vector<std::vector<float>> a(3), b(3);
  std::vector<Communicator::Ticket> t(3);
  for (int k = 0; k < 3; k++) {
    a[k].resize(n[k]);
    for (size_t i = 0; i < n[k]; i++) a[k][i] = value(k, r, i) * 0.001f;
    b[k] = a[k];
    t[k] = g_comm->all_reduce_start(a[k].data(), n[k], DType::F32,
                                    k == 1 ? ReduceOp::Avg : ReduceOp::Sum);
  }
  g_comm->progress();
  for (int k : {1, 2, 0}) g_comm->wait(t[k]);
  for (int k = 0; k < 3; k++) {
    g_comm->all_reduce(b[k].data(), n[k], DType::F32, k == 1 ? ReduceOp::Avg : ReduceOp::Sum);
    EXPECT_EQ(a[k], b[k]) << "all-reduce " << k << " on " << W << " rank(s)";
  }
  // Integers in F32: the exact sum over ranks, whatever the order.
  std::vector<float> c(5, (float)(r + 1));
  g_comm->wait_all();
  g_comm->wait(g_comm->all_reduce_start(c.data(), c.size(), DType::F32, ReduceOp::Sum));
  for (float x : c) EXPECT_EQ(x, (float)(W * (W + 1) / 2));
}

TEST(AllGatherAsync, WithReduceScatterStartAndWaitAll) {
  const int W = g_comm->world(), r = g_comm->rank();
  const size_t n = 300;
  std::vector<float> gsend(n), grecv(n * W, 0.0f), rsend(n * W), rrecv(n, 0.0f);
  for (size_t i = 0; i < n; i++) gsend[i] = value(3, r, i);
  for (size_t i = 0; i < n * W; i++) rsend[i] = (float)((r + 1) * (int)(i % 13));
  g_comm->reduce_scatter_start(rsend.data(), rrecv.data(), n, DType::F32, ReduceOp::Sum);
  g_comm->all_gather_start(gsend.data(), grecv.data(), n, DType::F32);
  g_comm->wait_all();
  for (int q = 0; q < W; q++)
    for (size_t i = 0; i < n; i++) ASSERT_EQ(grecv[(size_t)q * n + i], value(3, q, i));
  const float ranks = (float)(W * (W + 1) / 2);
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ(rrecv[i], ranks * (float)((r * n + i) % 13)) << i;  // exact: small integers
}

}  // namespace

int main(int argc, char** argv) { return ratchet::testing::run_mpi_gtests(argc, argv, &g_comm); }

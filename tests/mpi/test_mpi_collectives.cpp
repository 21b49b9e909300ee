// The Communicator's collectives (F32, F64, I32, BF16; blocking and
// asynchronous) and the data-parallel optimizer step (ZeRO-1, the overlapped
// all-reduce), run as N ranks under mpirun (CTest runs it with N = 1..4;
// N = 1 exercises the single-process communicator). Integer-valued data, so
// every sum is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "testing/bf16_bits.h"
#include "testing/strategy_testing.h"
#include "testing/tiny_model.h"
#include "mpi_gtest_main.h"

using namespace ratchet;
using ratchet::testing::from_bf16;
using ratchet::testing::to_bf16;

namespace {

Communicator* g_comm = nullptr;

TEST(Collectives, RankAndWorldMatchTheLauncher) {
  const LaunchInfo li = detect_launch();
  EXPECT_EQ(g_comm->rank(), li.rank);
  EXPECT_EQ(g_comm->world(), li.world);
  EXPECT_EQ(g_comm->local_rank(), li.local_rank);
  EXPECT_EQ(g_comm->name(), li.world > 1 ? "mpi" : "single");
  EXPECT_GE(g_comm->local_world(), 1);
}

TEST(Collectives, AllReduceSumAvgMax) {
  const int W = g_comm->world(), r = g_comm->rank();
  const size_t n = 1003;  // not a multiple of anything in particular
  std::vector<float> f(n);
  std::vector<double> d(n);
  std::vector<int32_t> i32(n);
  for (size_t i = 0; i < n; i++) f[i] = d[i] = i32[i] = (float)(r + 1) * (float)(i % 17);
  g_comm->all_reduce(f.data(), n, DType::F32, ReduceOp::Sum);
  g_comm->all_reduce(d.data(), n, DType::F64, ReduceOp::Avg);
  g_comm->all_reduce(i32.data(), n, DType::I32, ReduceOp::Max);
  const double ranks_sum = W * (W + 1) / 2.0;
  for (size_t i = 0; i < n; i++) {
    ASSERT_EQ(f[i], (float)(ranks_sum * (i % 17))) << i;
    ASSERT_EQ(d[i], ranks_sum * (i % 17) / W) << i;
    ASSERT_EQ(i32[i], (int32_t)(W * (i % 17))) << i;
  }
  EXPECT_EQ(g_comm->all_reduce_sum(0.5 * (r + 1)), 0.5 * ranks_sum);
}

TEST(Collectives, ReduceScatterAndAllGather) {
  const int W = g_comm->world(), r = g_comm->rank();
  const size_t n = 37;
  std::vector<float> send(n * W), recv(n, -1.0f);
  for (size_t i = 0; i < send.size(); i++) send[i] = (float)(i + 1000 * r);
  g_comm->reduce_scatter(send.data(), recv.data(), n, DType::F32, ReduceOp::Sum);
  // element j of rank r's block: sum over ranks q of (r·n + j + 1000 q)
  for (size_t j = 0; j < n; j++)
    ASSERT_EQ(recv[j], (float)(W * (r * n + j) + 1000.0 * W * (W - 1) / 2)) << j;
  std::vector<float> avg(n);
  g_comm->reduce_scatter(send.data(), avg.data(), n, DType::F32, ReduceOp::Avg);
  for (size_t j = 0; j < n; j++) ASSERT_FLOAT_EQ(avg[j], recv[j] / W);

  std::vector<int32_t> mine(n), all(n * W, -1);
  for (size_t j = 0; j < n; j++) mine[j] = (int32_t)(r * 100 + j);
  g_comm->all_gather(mine.data(), all.data(), n, DType::I32);
  for (int q = 0; q < W; q++)
    for (size_t j = 0; j < n; j++) ASSERT_EQ(all[q * n + j], (int32_t)(q * 100 + j));
  // In place: this rank's block of the output is the input.
  std::vector<int32_t> inplace(n * W, -1);
  for (size_t j = 0; j < n; j++) inplace[r * n + j] = (int32_t)(r * 100 + j);
  g_comm->all_gather(inplace.data() + r * n, inplace.data(), n, DType::I32);
  EXPECT_EQ(inplace, all);
}

// all_to_all, and all_to_allv with uneven blocks and empty ones (expert
// parallelism's exchanges): rank r sends (r + q) % 3 values r·100 + q + i/8
// to rank q, so some blocks are empty, the sizes differ between peers, and every
// value says where it came from.
TEST(Collectives, AllToAllAndAllToAllv) {
  const int W = g_comm->world(), r = g_comm->rank();
  std::vector<int> send(2 * W), recv(2 * W, -1);
  for (int q = 0; q < W; q++) send[2 * q] = r * 10 + q, send[2 * q + 1] = -(r * 10 + q);
  g_comm->all_to_all(send.data(), recv.data(), 2, DType::I32);
  for (int p = 0; p < W; p++) {
    EXPECT_EQ(recv[2 * p], p * 10 + r) << "from rank " << p;
    EXPECT_EQ(recv[2 * p + 1], -(p * 10 + r)) << "from rank " << p;
  }
  std::vector<size_t> sc(W), rc(W);
  std::vector<float> sv, rv;
  for (int q = 0; q < W; q++) {
    sc[q] = (size_t)((r + q) % 3);
    rc[q] = (size_t)((q + r) % 3);
    for (size_t i = 0; i < sc[q]; i++) sv.push_back((float)(r * 100 + q) + (float)i / 8);
  }
  size_t total = 0;
  for (size_t c : rc) total += c;
  rv.assign(total, -1.0f);
  g_comm->all_to_allv(sv.data(), sc.data(), rv.data(), rc.data(), DType::F32);
  size_t at = 0;
  for (int p = 0; p < W; p++)
    for (size_t i = 0; i < rc[p]; i++, at++)
      EXPECT_EQ(rv[at], (float)(p * 100 + r) + (float)i / 8) << "from rank " << p << " value " << i;
}

// BF16: small integers are exact, so sums are too; Avg divides after; the
// user-defined sum rounds to nearest even once (1 + 3·2^-8 is a tie between
// 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6; truncation would give 1 + 2^-7).
TEST(Collectives, Bf16AllReduceReduceScatterAllGather) {
  const int W = g_comm->world(), r = g_comm->rank();
  const size_t n = 37;
  std::vector<uint16_t> sum(n * W), avg(n * W), mx(n * W);
  for (size_t i = 0; i < sum.size(); i++)
    sum[i] = avg[i] = mx[i] = to_bf16((float)(r + 1) * (float)(i % 7));
  g_comm->all_reduce(sum.data(), sum.size(), DType::BF16, ReduceOp::Sum);
  g_comm->all_reduce(avg.data(), avg.size(), DType::BF16, ReduceOp::Avg);
  g_comm->all_reduce(mx.data(), mx.size(), DType::BF16, ReduceOp::Max);
  const float ranks = W * (W + 1) / 2.0f;
  for (size_t i = 0; i < sum.size(); i++) {
    ASSERT_EQ(from_bf16(sum[i]), ranks * (float)(i % 7)) << i;
    ASSERT_EQ(from_bf16(mx[i]), (float)W * (float)(i % 7)) << i;
    // (W+1)/2 · k: exact in BF16 for these k and W <= 4
    ASSERT_EQ(from_bf16(avg[i]), (float)(W + 1) / 2.0f * (float)(i % 7)) << i;
  }
  std::vector<uint16_t> send(n * W), recv(n);
  for (size_t i = 0; i < send.size(); i++) send[i] = to_bf16((float)((i + r) % 11));
  g_comm->reduce_scatter(send.data(), recv.data(), n, DType::BF16, ReduceOp::Sum);
  for (size_t j = 0; j < n; j++) {
    float want = 0;
    for (int q = 0; q < W; q++) want += (float)((r * n + j + q) % 11);
    ASSERT_EQ(from_bf16(recv[j]), want) << j;
  }
  std::vector<uint16_t> all(n * W);
  g_comm->all_gather(recv.data(), all.data(), n, DType::BF16);
  EXPECT_EQ(std::vector<uint16_t>(all.begin() + r * n, all.begin() + r * n + n), recv);
  // Rounding: rank 0 has 1, rank 1 has 3·2^-8, the rest 0.
  uint16_t x = to_bf16(r == 0 ? 1.0f : r == 1 ? 3.0f / 256 : 0.0f);
  g_comm->all_reduce(&x, 1, DType::BF16, ReduceOp::Sum);
  EXPECT_EQ(from_bf16(x), W == 1 ? 1.0f : 1.0f + 1.0f / 64);
}

// all_reduce_start + wait_all: the same results as the blocking calls.
TEST(Collectives, AsyncAllReduceThenWaitAll) {
  const int W = g_comm->world(), r = g_comm->rank();
  std::vector<float> a(1000), b(77);
  std::vector<uint16_t> c(333);
  for (size_t i = 0; i < a.size(); i++) a[i] = (float)(r + 1) * (float)(i % 5);
  for (size_t i = 0; i < b.size(); i++) b[i] = (float)(W * (r + 1));
  for (size_t i = 0; i < c.size(); i++) c[i] = to_bf16((float)(r + 1) * (float)(i % 3));
  g_comm->all_reduce_start(a.data(), a.size(), DType::F32, ReduceOp::Sum);
  g_comm->all_reduce_start(b.data(), b.size(), DType::F32, ReduceOp::Avg);
  g_comm->progress();
  g_comm->all_reduce_start(c.data(), c.size(), DType::BF16, ReduceOp::Sum);
  g_comm->wait_all();
  const float ranks = W * (W + 1) / 2.0f;
  for (size_t i = 0; i < a.size(); i++) ASSERT_EQ(a[i], ranks * (float)(i % 5)) << i;
  for (size_t i = 0; i < b.size(); i++) ASSERT_EQ(b[i], ranks) << i;
  for (size_t i = 0; i < c.size(); i++) ASSERT_EQ(from_bf16(c[i]), ranks * (float)(i % 3)) << i;
  g_comm->wait_all();  // nothing pending: a no-op
}

TEST(Collectives, BroadcastFromEveryRoot) {
  const int W = g_comm->world(), r = g_comm->rank();
  for (int root = 0; root < W; root++) {
    std::vector<uint8_t> b(1 << 16, (uint8_t)(r == root ? 7 + root : 0));
    g_comm->broadcast(b.data(), b.size(), root);
    for (uint8_t x : b) ASSERT_EQ(x, 7 + root);
    std::string s = r == root ? "hello from " + std::to_string(root) : "";
    g_comm->broadcast_string(&s, root);
    EXPECT_EQ(s, "hello from " + std::to_string(root));
  }
  g_comm->barrier();
}

TEST(Collectives, AgreeIsALogicalOr) {
  const int W = g_comm->world(), r = g_comm->rank();
  EXPECT_FALSE(g_comm->agree(false));
  EXPECT_TRUE(g_comm->agree(true));
  for (int who = 0; who < W; who++) EXPECT_TRUE(g_comm->agree(r == who)) << who;
}

// A fake environment for detect_launch_from().
struct Env {
  static const char* get(const char* n) {
    for (auto& kv : vars)
      if (kv.first == n) return kv.second.c_str();
    return nullptr;
  }
  static inline std::vector<std::pair<std::string, std::string>> vars;
};

TEST(Launch, VariablesAreReadInOrder) {
  Env::vars = {};
  LaunchInfo li = detect_launch_from(Env::get);
  EXPECT_EQ(li.world, 1);
  EXPECT_EQ(li.source, "none");
  // mpirun inside a Slurm job: every rank sees SLURM_PROCID=0; OMPI wins.
  Env::vars = {{"OMPI_COMM_WORLD_RANK", "3"},       {"OMPI_COMM_WORLD_SIZE", "4"},
               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
               {"SLURM_PROCID", "0"},               {"SLURM_NTASKS", "1"}};
  li = detect_launch_from(Env::get);
  EXPECT_EQ(li.rank, 3);
  EXPECT_EQ(li.world, 4);
  EXPECT_EQ(li.local_rank, 1);
  EXPECT_EQ(li.local_world, 2);
  // srun --mpi=pmix: PMIX_RANK, the rest from Slurm.
  Env::vars = {{"PMIX_RANK", "5"},     {"SLURM_PROCID", "5"},   {"SLURM_NTASKS", "6"},
               {"SLURM_LOCALID", "2"}, {"SLURM_NODEID", "1"},   {"SLURM_STEP_TASKS_PER_NODE", "3(x2)"}};
  li = detect_launch_from(Env::get);
  EXPECT_EQ(li.rank, 5);
  EXPECT_EQ(li.world, 6);
  EXPECT_EQ(li.local_rank, 2);
  EXPECT_EQ(li.local_world, 3);
  EXPECT_NE(li.source.find("PMIx"), std::string::npos);
  // A batch shell of a 2-task job is not a rank of a step: one process.
  Env::vars = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
               {"SLURM_TASKS_PER_NODE", "2"}};
  li = detect_launch_from(Env::get);
  EXPECT_EQ(li.world, 1);
  EXPECT_NE(li.source.find("batch shell"), std::string::npos);
  // srun -n 1 inside that job: the step's task count wins.
  Env::vars = {{"PMIX_RANK", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
               {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}};
  EXPECT_EQ(detect_launch_from(Env::get).world, 1);
  // plain srun (no PMIx)
  Env::vars = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"},
               {"SLURM_STEP_ID", "3"}, {"SLURM_TASKS_PER_NODE", "2"}};
  li = detect_launch_from(Env::get);
  EXPECT_EQ(li.rank, 1);
  EXPECT_EQ(li.world, 2);
  EXPECT_EQ(li.local_world, 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("x", 0), -1);
  Env::vars = {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}};
  EXPECT_THROW(detect_launch_from(Env::get), Error);
}

TEST(Zero, ShardsTileAnyCountWithPadding) {
  for (size_t P : {1ul, 7ul, 5085ul, 4096ul})
    for (int W = 1; W <= 5; W++) {
      size_t next = 0;
      for (int r = 0; r < W; r++) {
        const ShardRange s = shard_range(P, W, r);
        EXPECT_EQ(s.lo, next);
        EXPECT_LE(s.hi - s.lo, s.padded);
        EXPECT_GE(s.padded * W, P);
        next = s.hi;
      }
      EXPECT_EQ(next, P) << P << " " << W;
    }
}

// Stage 0 and stage 1 agree over a few steps of a tiny GPT with an ODD
// parameter count (C = 15: P = 5085, padded on every W > 1), each rank
// training on its own tokens.
TEST(Zero, Stage1MatchesStage0WithAnOddParameterCount) {
  const GPTConfig c = ratchet::testing::tiny_config(1, 3, 15);  // odd P
  const int W = g_comm->world(), r = g_comm->rank();
  auto be = make_cpu_backend(1);
  GPT a(c, *be), b(c, *be);
  ASSERT_EQ(a.num_params() % 2, 1u) << a.num_params();
  a.init_random(3);
  b.init_random(3);
  AdamWConfig ac;
  auto dp0 = ratchet::testing::make_dp(*g_comm, *be, a.layout(), ac, 0);
  auto dp1 = ratchet::testing::make_dp(*g_comm, *be, b.layout(), ac, 1);
  const auto s = dp1->owned_ranges().at(0);
  EXPECT_EQ(s.second - s.first, shard_range(a.num_params(), W, r).hi - shard_range(a.num_params(), W, r).lo);
  const int B = 2, T = 8;
  for (int step = 0; step < 3; step++) {
    auto x = ratchet::testing::random_tokens(B * T, c.vocab_size, 100 * step + r);
    auto y = ratchet::testing::random_tokens(B * T, c.vocab_size, 100 * step + r + 50);
    a.zero_grad();
    b.zero_grad();
    a.forward_backward(x.data(), y.data(), B, T, 1.0f / W);
    b.forward_backward(x.data(), y.data(), B, T, 1.0f / W);
    const float n0 = dp0->step(a, 1e-2f);
    const float n1 = dp1->step(b, 1e-2f);
    EXPECT_NEAR(n0, n1, 1e-5 * n0);
  }
  std::vector<float> pa(a.num_params()), pb(b.num_params());
  a.get_params(pa.data());
  b.get_params(pb.data());
  double md = 0;
  for (size_t i = 0; i < pa.size(); i++) md = std::max(md, (double)std::fabs(pa[i] - pb[i]));
  // The same gradient sums up to the order of summation (reduce-scatter vs
  // all-reduce trees on 3+ ranks; the norm summed by shards): a few float32
  // ulps, which AdamW's m/sqrt(v) magnifies for near-zero gradients. Bound:
  // 1e-3 of the 3 steps' largest possible update (lr each); measured ~4e-6.
  EXPECT_LT(md, 1e-3 * 3 * 1e-2);
  // And every rank holds the same parameters.
  std::vector<float> p0 = pb;
  g_comm->broadcast(p0.data(), p0.size() * sizeof(float), 0);
  EXPECT_EQ(p0, pb);
}

// g_comm, counting the asynchronous all-reduces that pass through it.
class CountingComm final : public Communicator {
 public:
  explicit CountingComm(Communicator& c) : c_(c) {}
  std::string name() const override { return c_.name(); }
  int rank() const override { return c_.rank(); }
  int world() const override { return c_.world(); }
  int local_rank() const override { return c_.local_rank(); }
  int local_world() const override { return c_.local_world(); }
  void all_reduce(void* b, size_t n, DType t, ReduceOp op) override {
    blocking++;
    c_.all_reduce(b, n, t, op);
  }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    c_.reduce_scatter(s, r, n, t, op);
  }
  void all_gather(const void* s, void* r, size_t n, DType t) override { c_.all_gather(s, r, n, t); }
  void broadcast(void* b, size_t bytes, int root) override { c_.broadcast(b, bytes, root); }
  void barrier() override { c_.barrier(); }
  bool agree(bool f) override { return c_.agree(f); }
  [[noreturn]] void abort_job(int code) override {
    c_.abort_job(code);
    std::abort();  // not reached
  }
  Ticket all_reduce_start(void* b, size_t n, DType t, ReduceOp op) override {
    async++;
    elems += n;
    return c_.all_reduce_start(b, n, t, op);
  }
  void progress() override { c_.progress(); }
  void wait_all() override {
    waits++;
    c_.wait_all();
  }
  int blocking = 0, async = 0, waits = 0;
  size_t elems = 0;

 private:
  Communicator& c_;
};

// Stage 0 with the all-reduce overlapped with the last of 2 backward passes
// per step: 12 slices per layer plus wte+wpe and lnf, every element once, and
// the same parameters as one blocking all-reduce after the backward (bitwise
// on 2 ranks: each element is a + b either way; MPI may pick another
// reduction order for other message sizes on more ranks).
TEST(Zero, OverlappedAllReduceMatchesBlocking) {
  const GPTConfig c = ratchet::testing::tiny_config(2, 3, 15);  // odd P
  const int W = g_comm->world(), r = g_comm->rank();
  auto be = make_cpu_backend(1);
  GPT a(c, *be), b(c, *be);
  a.init_random(5);
  b.init_random(5);
  AdamWConfig ac;
  CountingComm counting(*g_comm);
  auto dpa = ratchet::testing::make_dp(*g_comm, *be, a.layout(), ac, 0, &counting, nullptr, true);
  auto dpb = ratchet::testing::make_dp(*g_comm, *be, b.layout(), ac, 0);
  const int micro = 2;
  dpa->attach(a, micro);
  EXPECT_EQ(dpa->overlapping(), W > 1);
  const int B = 2, T = 8;
  for (int step = 0; step < 3; step++) {
    a.zero_grad();
    b.zero_grad();
    for (int m = 0; m < micro; m++) {
      auto x = ratchet::testing::random_tokens(B * T, c.vocab_size, 1000 * step + 10 * m + r);
      auto y = ratchet::testing::random_tokens(B * T, c.vocab_size, 1000 * step + 10 * m + r + 5);
      a.forward_backward(x.data(), y.data(), B, T, 1.0f / (micro * W));
      b.forward_backward(x.data(), y.data(), B, T, 1.0f / (micro * W));
    }
    const float na = dpa->step(a, 1e-2f);
    const float nb = dpb->step(b, 1e-2f);
    if (W <= 2) {
      EXPECT_EQ(na, nb);
    }
  }
  if (W > 1) {
    EXPECT_EQ(counting.async, 3 * (12 * c.num_layers + 2));
    EXPECT_EQ(counting.elems, 3 * a.num_params());
    EXPECT_EQ(counting.waits, 3);
    EXPECT_EQ(counting.blocking, 0);
  }
  std::vector<float> pa(a.num_params()), pb(b.num_params());
  a.get_params(pa.data());
  b.get_params(pb.data());
  if (W <= 2) {
    EXPECT_EQ(pa, pb);
  } else {
    double md = 0;
    for (size_t i = 0; i < pa.size(); i++) md = std::max(md, (double)std::fabs(pa[i] - pb[i]));
    EXPECT_LT(md, 1e-3 * 3 * 1e-2);  // as in Stage1MatchesStage0WithAnOddParameterCount
  }
}

// The bytes a strategy allocates are what its needs say.
TEST(Zero, BufferBytesAreWhatIsAllocated) {
  const GPTConfig c = ratchet::testing::tiny_config(1, 3, 15);  // odd P
  auto be = make_cpu_backend(1);
  const ParamLayout layout(c);
  for (int stage : {0, 1}) {
    const size_t before = be->bytes_in_use();
    size_t moments = 0;
    {
      auto dp = ratchet::testing::make_dp(*g_comm, *be, layout, AdamWConfig(), stage);
      const auto own = dp->owned_ranges().at(0);
      moments = 2 * be->alloc_size(std::max<size_t>(1, own.second - own.first) * 4);
      EXPECT_EQ(be->bytes_in_use() - before,
                ratchet::testing::needs_of(be->memory_model(), c, g_comm->world(), g_comm->rank(), stage)
                        .buffer_bytes +
                    moments)
          << "stage " << stage;
    }
  }
  ASSERT_EQ(layout.total, 5085u);
  EXPECT_EQ(ratchet::testing::needs_of(be->memory_model(), c, 1, 0, 0).buffer_bytes, 0u);
  const size_t S = (5085 + 3) / 4;
  EXPECT_EQ(ratchet::testing::needs_of(be->memory_model(), c, 4, 0, 1).buffer_bytes,
            be->alloc_size(4 * S * 4) + be->alloc_size(S * 4));
}

// Communicator::gather_strings: every rank's string in rank order, of
// different lengths (rank 0's empty, one holding '\0'), and all empty.
TEST(Collectives, GatherStringsInRankOrder) {
  const int W = g_comm->world(), r = g_comm->rank();
  auto of = [](int q) { return q == 0 ? std::string() : std::string(q, 'a' + q) + '\0' + "end"; };
  const std::vector<std::string> got = g_comm->gather_strings(of(r));
  ASSERT_EQ((int)got.size(), W);
  for (int q = 0; q < W; q++) EXPECT_EQ(got[q], of(q)) << q;
  for (const std::string& e : g_comm->gather_strings("")) EXPECT_EQ(e, "");
}

}  // namespace

int main(int argc, char** argv) { return ratchet::testing::run_mpi_gtests(argc, argv, &g_comm); }

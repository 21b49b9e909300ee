// The Communicator's collectives and the data-parallel optimizer step, run
// as N ranks under mpirun (CTest runs it with N = 1..4; N = 1 exercises the
// single-process communicator). Integer-valued data, so every sum is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/zero.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "testing/tiny_model.h"

using namespace ratchet;

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
  GPTConfig c = ratchet::testing::tiny_config();
  c.num_layers = 1;
  c.num_heads = 3;
  c.channels = 15;
  c.padded_vocab = 0;
  c.finalize();
  const int W = g_comm->world(), r = g_comm->rank();
  auto be = make_cpu_backend(1);
  GPT a(c, *be), b(c, *be);
  ASSERT_EQ(a.num_params() % 2, 1u) << a.num_params();
  a.init_random(3);
  b.init_random(3);
  AdamWConfig ac;
  DataParallel dp0(*g_comm, *be, a.layout(), ac, 0), dp1(*g_comm, *be, b.layout(), ac, 1);
  const ShardRange s = dp1.range();
  EXPECT_EQ(s.hi - s.lo, shard_range(a.num_params(), W, r).hi - shard_range(a.num_params(), W, r).lo);
  const int B = 2, T = 8;
  for (int step = 0; step < 3; step++) {
    auto x = ratchet::testing::random_tokens(B * T, c.vocab_size, 100 * step + r);
    auto y = ratchet::testing::random_tokens(B * T, c.vocab_size, 100 * step + r + 50);
    a.zero_grad();
    b.zero_grad();
    a.forward_backward(x.data(), y.data(), B, T, 1.0f / W);
    b.forward_backward(x.data(), y.data(), B, T, 1.0f / W);
    const float n0 = dp0.step(a.params(), a.grads(), 1e-2f);
    const float n1 = dp1.step(b.params(), b.grads(), 1e-2f);
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

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<Communicator> comm = make_communicator();
  g_comm = comm.get();
  if (comm->rank() != 0) {  // one rank's report is enough; failures on others still count
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  const bool any_failed = comm->agree(rc != 0);
  if (rc != 0) std::fprintf(stderr, "rank %d: tests FAILED\n", comm->rank());
  return any_failed ? 1 : 0;
}

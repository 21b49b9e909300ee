// ZeRO-2 (docs/distributed.md "stage 2", distributed/buckets.h) as N ranks under mpirun
// (CTest runs it with N = 1, 2, 3): the bucket pieces tile the parameters,
// one micro-batch per rank equals stage 0 (bitwise on 1 and 2 ranks), several
// micro-batches equal a replay of the documented reduction order (bitwise on
// any N: the replay makes the same per-bucket reduce-scatters), and the bytes
// held equal `ratchet plan`'s figure (plan/zero_plan.h) on every rank, at
// stages 1 and 2 with the FP32 master of the owned ranges only (simt BF16:
// bitwise the whole master's training, params_f32 its FP32 values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#ifdef RATCHET_ZERO2_SIMT
#include "backend/cuda/cuda_backend.h"
#endif
#include "distributed/buckets.h"
#include "distributed/communicator.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/recompute.h"
#include "optim/adamw.h"
#include "plan/zero_plan.h"
#include "testing/strategy_testing.h"
#include "testing/tiny_model.h"
#include "mpi_gtest_main.h"
#include "zero_step_util.h"

using namespace ratchet;
using namespace ratchet::zero_testing;

namespace {

Communicator* g_comm = nullptr;

GPTConfig llama_config() {
  GPTConfig c = ratchet::testing::tiny_config(2, 4, 16);
  c.arch = Arch::llama;
  c.num_kv_heads = 2;
  c.ffn_hidden = 24;
  c.tied_embeddings = false;
  c.finalize();
  return c;
}

// Every parameter is in exactly one rank's pieces, each piece inside one
// tensor, the shard offsets of a rank disjoint and inside its shard; rank 0
// owns the most; the ranges are the pieces merged.
TEST(Zero2Buckets, PiecesTileEveryParameterOnce) {
  for (const GPTConfig& c : {ratchet::testing::tiny_config(3, 3, 15), llama_config()}) {
    const ParamLayout layout(c);
    for (int W = 1; W <= 5; W++) {
      const BucketLayout bk(layout, c.num_layers, W);
      ASSERT_EQ(bk.buckets().size(), (size_t)c.num_layers + 1);
      std::vector<int> owner(layout.total, -1);
      size_t most = 0;
      for (int r = 0; r < W; r++) {
        std::vector<char> used(bk.shard_elems(), 0);
        size_t n = 0;
        for (const OwnedPiece& p : bk.pieces(r)) {
          ASSERT_GE(p.lo, layout.offsets[p.tensor]);
          ASSERT_LE(p.lo + p.n, layout.offsets[p.tensor] + layout.sizes[p.tensor]);
          for (size_t e = p.lo; e < p.lo + p.n; e++) {
            ASSERT_EQ(owner[e], -1) << "element " << e << " owned twice";
            owner[e] = r;
          }
          ASSERT_LE(p.shard + p.n, bk.shard_elems());
          for (size_t s = p.shard; s < p.shard + p.n; s++) {
            ASSERT_FALSE(used[s]);
            used[s] = 1;
          }
          n += p.n;
        }
        EXPECT_EQ(n, bk.owned_elems(r));
        size_t in_ranges = 0, prev = 0;
        for (const auto& [lo, hi] : bk.owned_ranges(r)) {
          EXPECT_LT(lo, hi);
          EXPECT_TRUE(in_ranges == 0 || lo > prev) << "ranges sorted, adjacent ones merged";
          for (size_t e = lo; e < hi; e++) EXPECT_EQ(owner[e], r);
          in_ranges += hi - lo;
          prev = hi;
        }
        EXPECT_EQ(in_ranges, n);
        if (r == 0) most = n;
        EXPECT_LE(n, most);
      }
      EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0) << "W " << W;
      // Each rank's shard holds one piece per bucket.
      size_t S = 0;
      for (const Bucket& b : bk.buckets()) S += b.S;
      EXPECT_EQ(bk.shard_elems(), S);
    }
  }
}

// One micro-batch per rank: stage 2 sums each element once over the ranks,
// as stage 0's all-reduce does. On 2 ranks that is a + b either way: bitwise.
void one_micro_batch_equals_stage0(const GPTConfig& c, const Recompute& policy = Recompute()) {
  const int W = g_comm->world(), r = g_comm->rank();
  auto be = make_cpu_backend(1);
  GPT a(c, *be), b(c, *be, ratchet::testing::flat_grads(2));
  EXPECT_EQ(b.grads(), nullptr);
  b.set_recompute(policy);  // the gradients keep their bits under every policy
  a.init_random(3);
  b.init_random(3);
  AdamWConfig ac;
  auto dp0 = ratchet::testing::make_dp(*g_comm, *be, a.layout(), ac, 0);
  auto dp2 = ratchet::testing::make_dp(*g_comm, *be, b.layout(), ac, 2, nullptr, nullptr, true);
  dp0->attach(a, 1);
  dp2->attach(b, 1);
  const int B = 2, T = 8;
  for (int step = 0; step < 3; step++) {
    const Pair t = tokens(c, B, T, 100 * step + r);
    a.zero_grad();
    b.zero_grad();
    a.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / W);
    b.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / W);
    const float n0 = dp0->step(a, 1e-2f);
    const float n2 = dp2->step(b, 1e-2f);
    EXPECT_NEAR(n0, n2, 1e-6 * n0);
  }
  const std::vector<float> pa = params_of(a), pb = params_of(b);
  if (W <= 2) {
    EXPECT_TRUE(pa == pb) << "max difference " << max_diff(pa, pb);
  } else {
    // MPI's reduce-scatter and all-reduce may add 3+ ranks in other orders:
    // a few float32 ulps, magnified by AdamW for near-zero gradients; as
    // test_mpi_collectives' Stage1MatchesStage0 (1e-3 of 3 steps' lr).
    EXPECT_LT(max_diff(pa, pb), 1e-3 * 3 * 1e-2);
  }
  // Every rank holds the same parameters.
  std::vector<float> p0 = pb;
  g_comm->broadcast(p0.data(), p0.size() * sizeof(float), 0);
  EXPECT_TRUE(p0 == pb);
}

TEST(Zero2, OneMicroBatchPerRankEqualsStage0) {
  one_micro_batch_equals_stage0(ratchet::testing::tiny_config(2, 3, 15));  // odd P
}
TEST(Zero2, LlamaOneMicroBatchPerRankEqualsStage0) { one_micro_batch_equals_stage0(llama_config()); }
// The store places a block's gradients before its recompute runs.
TEST(Zero2, RecomputedBlocksEqualStage0) {
  one_micro_batch_equals_stage0(ratchet::testing::tiny_config(2, 3, 15), parse_recompute("blocks"));
  one_micro_batch_equals_stage0(llama_config(), parse_recompute("gelu+ln"));
}

// Overlapped ZeRO-1 (docs/distributed.md): the micro-batches accumulate in the flat
// grads, the last one's buckets are reduce-scattered as the backward finishes
// each block. The shards are stage 2's bucket pieces (on more than one rank);
// the sums per element are stage 0's: bitwise on 2 ranks.
TEST(Zero2, OverlappedZero1EqualsStage0) {
  const GPTConfig c = ratchet::testing::tiny_config(2, 3, 15);
  const int W = g_comm->world(), r = g_comm->rank(), micro = 2, B = 2, T = 8;
  auto be = make_cpu_backend(1);
  GPT a(c, *be), b(c, *be);
  a.init_random(4);
  b.init_random(4);
  AdamWConfig ac;
  auto dp0 = ratchet::testing::make_dp(*g_comm, *be, a.layout(), ac, 0, nullptr, nullptr, true);
  auto dp1 = ratchet::testing::make_dp(*g_comm, *be, b.layout(), ac, 1, nullptr, nullptr, /*overlap=*/true);
  dp0->attach(a, micro);
  dp1->attach(b, micro);
  EXPECT_EQ(dp1->overlapping(), W > 1);
  if (W > 1) {
    EXPECT_EQ(dp1->owned_ranges(), BucketLayout(a.layout(), c.num_layers, W).owned_ranges(r));
    EXPECT_NE(dp1->describe().find("reduce-scattered during the last backward"), std::string::npos);
  }
  EXPECT_EQ(dp1->optimizer().moment_elems(), ratchet::testing::moment_elems(c, W, r, 1, true));
  for (int step = 0; step < 3; step++) {
    a.zero_grad();
    b.zero_grad();
    for (int m = 0; m < micro; m++) {
      const Pair t = tokens(c, B, T, 1000 * step + 10 * m + r);
      a.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / (micro * W));
      b.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / (micro * W));
    }
    const float n0 = dp0->step(a, 1e-2f);
    const float n1 = dp1->step(b, 1e-2f);
    EXPECT_NEAR(n0, n1, 1e-6 * n0);
  }
  const std::vector<float> pa = params_of(a), pb = params_of(b);
  if (W <= 2)
    EXPECT_TRUE(pa == pb) << "max difference " << max_diff(pa, pb);
  else
    EXPECT_LT(max_diff(pa, pb), 1e-3 * 3 * 1e-2);  // as OneMicroBatchPerRankEqualsStage0
  // A step with fewer backward passes than attach() was told starts nothing
  // during the backward: step() reduces every bucket after it (the same sums).
  a.zero_grad();
  b.zero_grad();
  const Pair t = tokens(c, B, T, 77 + r);
  a.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / W);
  b.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / W);
  dp0->step(a, 1e-2f);
  dp1->step(b, 1e-2f);
  if (W <= 2) {
    EXPECT_TRUE(params_of(a) == params_of(b));
  }
}

// Several micro-batches: stage 2 reduce-scatters each micro-batch's buckets
// and adds the sums in micro-batch order (docs/distributed.md). The replay computes
// each micro-batch's flat gradient on a model WITHOUT the bucket store, makes
// the same per-bucket reduce-scatters of it, adds the shards in order, and
// runs AdamW on the same pieces and gathers: the same bits on any N. Against
// stage 0 (which accumulates inside the GEMMs first) only to rounding.
TEST(Zero2, MicroBatchesAddInTheDocumentedOrder) {
  const GPTConfig c = ratchet::testing::tiny_config(2, 3, 15);
  const int W = g_comm->world(), r = g_comm->rank(), micro = 3, B = 2, T = 8;
  auto be = make_cpu_backend(1);
  GPT z(c, *be, false), ref(c, *be), plain(c, *be);
  z.init_random(9);
  ref.init_random(9);
  plain.init_random(9);
  AdamWConfig ac;
  auto dp2 = ratchet::testing::make_dp(*g_comm, *be, z.layout(), ac, 2, nullptr, nullptr, true);
  auto dp0 = ratchet::testing::make_dp(*g_comm, *be, plain.layout(), ac, 0, nullptr, nullptr, true);
  dp2->attach(z, micro);
  dp0->attach(plain, micro);
  const ParamLayout& lay = ref.layout();
  const BucketLayout bk(lay, c.num_layers, W);
  std::vector<AdamWPiece> pieces;
  for (const OwnedPiece& p : bk.pieces(r)) pieces.push_back({p.lo, p.n, p.shard});
  AdamW opt(*be, lay, ac, pieces);
  EXPECT_EQ(dp2->owned_ranges(), bk.owned_ranges(r));
  EXPECT_EQ(dp2->optimizer().moment_elems(), bk.owned_elems(r));
  std::vector<float> acc(bk.shard_elems()), rs(bk.shard_elems());
  for (int step = 0; step < 3; step++) {
    z.zero_grad();
    plain.zero_grad();
    for (int m = 0; m < micro; m++) {
      const Pair t = tokens(c, B, T, 1000 * step + 10 * m + r);
      const float scale = 1.0f / (micro * W);
      z.forward_backward(t.x.data(), t.y.data(), B, T, scale);
      plain.forward_backward(t.x.data(), t.y.data(), B, T, scale);
      ref.zero_grad();
      ref.forward_backward(t.x.data(), t.y.data(), B, T, scale);
      const float* g = static_cast<const float*>(ref.grads());  // cpu: host memory
      for (size_t b = 0; b < bk.buckets().size(); b++) {
        const Bucket& bu = bk.buckets()[b];
        std::vector<float> send((size_t)W * bu.S, 0.0f);
        for (const BucketSlice& s : bu.slices) std::memcpy(&send[s.pos], g + s.flat, s.n * 4);
        float* out = rs.data() + bk.shard_offset(b);
        if (W == 1) {
          std::memcpy(out, send.data(), bu.S * 4);
        } else {
          g_comm->wait(g_comm->reduce_scatter_start(send.data(), out, bu.S, DType::F32,
                                                    ReduceOp::Sum));
        }
      }
      for (size_t i = 0; i < acc.size(); i++) acc[i] = m == 0 ? rs[i] : acc[i] + rs[i];
    }
    double ssq = 0;
    void* dacc = be->alloc(acc.size() * 4);
    be->upload_bytes(dacc, acc.data(), acc.size() * 4);
    ssq = be->sum_squares(dacc, acc.size());
    const double norm = std::sqrt(g_comm->all_reduce_sum(ssq));
    opt.step_shard(ref.params(), dacc, 1e-2f, norm);
    be->release(dacc);
    // Gather: every rank's pieces of the updated params.
    float* p = static_cast<float*>(ref.params());
    for (size_t b = 0; b < bk.buckets().size(); b++) {
      const Bucket& bu = bk.buckets()[b];
      std::vector<float> all((size_t)W * bu.S, 0.0f);
      for (const BucketSlice& s : bu.slices) std::memcpy(&all[s.pos], p + s.flat, s.n * 4);
      if (W > 1) g_comm->all_gather(&all[(size_t)r * bu.S], all.data(), bu.S, DType::F32);
      for (const BucketSlice& s : bu.slices) std::memcpy(p + s.flat, &all[s.pos], s.n * 4);
    }
    const float nz = dp2->step(z, 1e-2f);
    const float n0 = dp0->step(plain, 1e-2f);
    EXPECT_EQ(nz, (float)norm) << "step " << step;
    EXPECT_NEAR(nz, n0, 1e-5 * n0);
  }
  const std::vector<float> pz = params_of(z), pr = params_of(ref), p0 = params_of(plain);
  EXPECT_TRUE(pz == pr) << "max difference from the replay " << max_diff(pz, pr);
  // Stage 0's order differs by rounding only (bound as above).
  const double d0 = max_diff(pz, p0);
  EXPECT_LT(d0, 1e-3 * 3 * 1e-2);
  if (r == 0) std::printf("[ %d ranks x %d micro-batches ] stage 2 vs stage 0: %.2e\n", W, micro, d0);
}

// The bytes a rank holds after a step are step_memory's with this rank's
// moments (and, on several ranks, its FP32 master of the owned ranges: the
// model built with them as master ranges, as train builds it), and on rank 0
// (which owns the most) `ratchet plan`'s figure: the cpu backend's count, and
// simt's (BF16 storage: the FP32 master copy too; its peak as well) when built.
// Stage 2, and stage 1 as train runs it (--overlap-comm on: bucket-aligned).
void memory_equals_plan(std::unique_ptr<Backend> be, const GPTConfig& c, int stage) {
  const int W = g_comm->world(), r = g_comm->rank(), B = 2, T = 8;
  const size_t base = be->bytes_in_use();
  const bool sharded = ratchet::testing::master_sharded(stage, W);
  {
    const auto owned = ratchet::testing::owned_ranges(c, W, r, stage, true);
    GPT m(c, *be, ratchet::testing::flat_grads(stage), true, sharded ? &owned : nullptr);
    m.init_random(1);
    auto dp = ratchet::testing::make_dp(*g_comm, *be, m.layout(), AdamWConfig(), stage, nullptr, nullptr, true);
    EXPECT_EQ(dp->owned_ranges(), owned);
    dp->attach(m, 1);
    const Pair t = tokens(c, B, T, r);
    m.zero_grad();
    m.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / W);
    dp->step(m, 1e-3f);
    auto accounted = [&](int rank) {
      return step_memory(c, B, T, Recompute(), *be, ratchet::testing::moment_elems(c, W, rank, stage, true),
                         ratchet::testing::buffer_bytes(be->memory_model(), c, W, stage, true),
                         ratchet::testing::flat_grads(stage), true, sharded);
    };
    const StepMemory mine = accounted(r);
    EXPECT_EQ(be->bytes_in_use(), mine.total()) << "rank " << r << " stage " << stage;
    EXPECT_EQ(mine.grads == 0, stage == 2);
    // The master: 4 bytes per owned element on several ranks, 4P on one.
    const StepMemory whole = step_memory(
        c, B, T, Recompute(), *be, ratchet::testing::moment_elems(c, W, r, stage, true),
        ratchet::testing::buffer_bytes(be->memory_model(), c, W, stage, true), ratchet::testing::flat_grads(stage));
    if (be->memory_model().extra_bytes_per_param > 0) {
      EXPECT_EQ(mine.master, sharded ? be->alloc_size(ratchet::testing::moment_elems(c, W, r, stage, true) * 4)
                                     : be->alloc_size(m.num_params() * 2) * 2);
      if (W > 1) {
        EXPECT_LT(mine.master, whole.master);
      }
    } else {
      EXPECT_EQ(mine.master, 0u);
    }
    const plan::ZeroMemory planned =
        plan::zero_memory(c, B, T, Recompute(), be->memory_model(), {stage, true}, W);
    EXPECT_LE(be->bytes_in_use(), planned.total());
    if (r == 0) {
      EXPECT_EQ(be->bytes_in_use(), planned.total());
    }
    EXPECT_EQ(planned.total(), accounted(0).total());
    EXPECT_EQ(planned.master, accounted(0).master);
    // Stage 2 holds less than stage 1 once the gradient is sharded.
    if (W > 1 && stage == 2) {
      EXPECT_LT(planned.total(),
                plan::zero_memory(c, B, T, Recompute(), be->memory_model(), {1, true}, W).total());
    }
    EXPECT_EQ(be->peak_bytes_in_use(), be->bytes_in_use());
    if (r == 0)
      std::printf("[ stage %d on %d rank(s), %s ] %zu bytes held = plan's %zu (master %zu, whole %zu)\n",
                  stage, W, be->name().c_str(), be->bytes_in_use(), planned.total(), mine.master,
                  whole.master);
  }
  EXPECT_GE(be->bytes_in_use(), base);
}

TEST(Zero2, MemoryEqualsThePlan) {
  for (int stage : {1, 2}) {
    memory_equals_plan(make_cpu_backend(1), ratchet::testing::tiny_config(3, 3, 15), stage);
#ifdef RATCHET_ZERO2_SIMT
    // cuBLASLt wants 16-byte rows: C = 16.
    memory_equals_plan(make_cuda_backend("bf16"), ratchet::testing::tiny_config(3, 2, 16), stage);
#endif
  }
}

#ifdef RATCHET_ZERO2_SIMT
// BF16 storage (simt): a model whose FP32 master covers only this rank's
// owned ranges trains bit for bit as one with the whole master (the only
// master values ever read are the owned ones), at stage 1 (flat and
// bucket-aligned) and 2; ratchet::testing::params_f32 gives every rank the FP32
// values the whole-master model gives after sync_master; and a state moved
// through those FP32 values and the moments (a checkpoint's content) into a
// model of another stage continues bit for bit.
struct SimtRun {
  SimtRun(Backend& be, const GPTConfig& c, int stage, bool overlap, bool sharded_master)
      : owned(ratchet::testing::owned_ranges(c, g_comm->world(), g_comm->rank(), stage, overlap)),
        m(c, be, ratchet::testing::flat_grads(stage), true, sharded_master ? &owned : nullptr),
        dp(ratchet::testing::make_dp(*g_comm, be, m.layout(), AdamWConfig(), stage, nullptr, nullptr,
                                     overlap)) {
    dp->attach(m, 2);
    m.init_random(21);
  }
  void step(const GPTConfig& c, int s) {
    const int W = g_comm->world(), r = g_comm->rank(), B = 2, T = 8;
    m.zero_grad();
    for (int k = 0; k < 2; k++) {
      const Pair t = tokens(c, B, T, 1000 * s + 10 * k + r);
      m.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / (2 * W));
    }
    dp->step(m, 1e-2f);
  }
  std::vector<uint16_t> bits() {  // the BF16 parameters as stored
    std::vector<uint16_t> b(m.num_params());
    m.backend().download_bytes(b.data(), m.params(), b.size() * 2);
    return b;
  }
  std::vector<float> f32() {  // collective
    std::vector<float> p(m.num_params());
    dp->params_f32(m, p.data());
    return p;
  }
  std::vector<std::pair<size_t, size_t>> owned;
  GPT m;
  std::unique_ptr<DistributedStrategy> dp;
};

TEST(Zero2, SimtShardedMasterEqualsWholeMasterBitwise) {
  const GPTConfig c = ratchet::testing::tiny_config(3, 2, 16);
  const int W = g_comm->world();
  struct Case {
    int stage;
    bool overlap;
  };
  for (const Case k : {Case{1, false}, Case{1, true}, Case{2, true}}) {
    SCOPED_TRACE("stage " + std::to_string(k.stage) + (k.overlap ? " overlap" : " flat"));
    auto be = make_cuda_backend("bf16");
    const size_t before = be->bytes_in_use();
    SimtRun whole(*be, c, k.stage, k.overlap, false);
    const size_t whole_bytes = be->bytes_in_use() - before;
    SimtRun part(*be, c, k.stage, k.overlap, ratchet::testing::master_sharded(k.stage, W));
    const size_t part_bytes = be->bytes_in_use() - before - whole_bytes;
    const size_t P = whole.m.num_params(), owned = whole.dp->optimizer().moment_elems();
    // The master: round_up(4·owned, 256) instead of round_up(4·P', 256).
    if (W > 1)
      EXPECT_EQ(whole_bytes - part_bytes,
                be->alloc_size(be->alloc_size(P * 2) * 2) - be->alloc_size(owned * 4));
    else
      EXPECT_EQ(whole_bytes, part_bytes);
    for (int s = 0; s < 3; s++) {
      whole.step(c, s);
      part.step(c, s);
      EXPECT_TRUE(whole.bits() == part.bits()) << "step " << s;
    }
    // The owned ranges' FP32 values (a checkpoint shard reads these) are the
    // whole master's there.
    for (const auto& [lo, hi] : part.owned) {
      std::vector<float> a(hi - lo), b(hi - lo);
      be->download_f32(a.data(), static_cast<const char*>(whole.m.params()) + lo * 2, hi - lo);
      be->download_f32(b.data(), static_cast<const char*>(part.m.params()) + lo * 2, hi - lo);
      EXPECT_TRUE(a == b) << "[" << lo << ", " << hi << ")";
    }
    // Every rank's FP32 view: the gather on the host, = the whole master's after sync_master.
    const std::vector<float> fp = part.f32(), fw = whole.f32();
    EXPECT_TRUE(fp == fw) << "max difference " << max_diff(fp, fw);
    whole.dp->sync_master(whole.m);
    EXPECT_TRUE(fp == params_of(whole.m));
    std::vector<float> p0 = fp;
    g_comm->broadcast(p0.data(), p0.size() * sizeof(float), 0);
    EXPECT_TRUE(p0 == fp) << "every rank holds the same FP32 values";
    // Outside the owned ranges the sharded model reads the BF16 values (not
    // FP32 masters it does not keep): they differ from the FP32 ones somewhere.
    if (W > 1) {
      const std::vector<float> local = params_of(part.m);
      bool differs = false;
      for (size_t i = 0; i < P; i++) differs = differs || local[i] != fp[i];
      EXPECT_TRUE(differs);
    }
    // Resume: the FP32 values and the moments into a fresh sharded-master
    // model of the other stage (2 <-> 1 overlapped: the same owned ranges),
    // rounded as the last step did; one more step equals the straight run.
    const int other = k.stage == 2 ? 1 : 2;
    if (k.overlap) {
      SimtRun next(*be, c, other, true, ratchet::testing::master_sharded(other, W));
      ASSERT_EQ(next.owned, part.owned);
      next.m.set_params(fp.data());
      AdamW& a = part.dp->optimizer();
      AdamW& b = next.dp->optimizer();
      ASSERT_EQ(a.moment_elems(), b.moment_elems());
      copy_optimizer_state(*be, a, b);
      next.dp->restore_params(next.m);
      EXPECT_TRUE(next.bits() == part.bits()) << "rounded as the last step did";
      // Stages 1 and 2 add micro-batches in different orders (docs/distributed.md):
      // the reference is a whole-master run of `other` from the same state.
      SimtRun ref(*be, c, other, true, false);
      ref.m.set_params(fp.data());
      copy_optimizer_state(*be, a, ref.dp->optimizer());
      ref.dp->restore_params(ref.m);
      next.step(c, 3);
      ref.step(c, 3);
      EXPECT_TRUE(next.bits() == ref.bits());
      EXPECT_TRUE(next.f32() == ref.f32());
    }
    if (g_comm->rank() == 0)
      std::printf("[ simt bf16 stage %d %s, %d rank(s) ] sharded master = whole bitwise; model+optimizer "
                  "%zu bytes vs %zu\n", k.stage, k.overlap ? "overlap" : "flat", W, part_bytes, whole_bytes);
  }
}
#endif  // RATCHET_ZERO2_SIMT

}  // namespace

int main(int argc, char** argv) { return ratchet::testing::run_mpi_gtests(argc, argv, &g_comm); }

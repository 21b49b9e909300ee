// `ratchet plan`'s ZeRO model (plan/zero_plan.h) against figures worked by
// hand: the llama3.1-8b preset's parameter count from its shapes, the ring
// collective formulas, the ZeRO paper's model-state example, each stage's
// itemised memory, and the step time's overlap model in its two limits
// (compute-bound: only the first/last collectives show; communication-bound:
// every collective shows).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/memory_model.h"
#include "distributed/buckets.h"
#include "distributed/strategy.h"
#include "model/memory.h"
#include "model/param_layout.h"
#include "plan/plan.h"
#include "plan/zero_plan.h"
#include "testing/strategy_testing.h"

using namespace ratchet;
using namespace ratchet::plan;

namespace {

GPTConfig llama8b() { return preset_config("llama3.1-8b", 50257, 8192); }

TEST(PlanZero, Llama31_8bPresetHasThePublishedShapeAndCount) {
  const GPTConfig c = llama8b();
  EXPECT_TRUE(c.llama());
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.channels, 4096);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.kv_heads(), 8);
  EXPECT_EQ(c.ffn(), 14336);
  EXPECT_EQ(c.vocab_size, 128256);  // its own vocab, not the 50257 passed
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.rope_theta, 500000.f);
  EXPECT_EQ(c.rope_factor, 8.f);
  EXPECT_EQ(c.rope_low_freq_factor, 1.f);
  EXPECT_EQ(c.rope_high_freq_factor, 4.f);
  EXPECT_EQ(c.rope_original_max_pos, 8192);
  // From the shapes: embed and lm_head V·C each; per layer q and o C², k and
  // v C·(8·128), gate/up/down C·H, two RMSNorm gains C; a final norm C.
  const long V = 128256, C = 4096, KV = 8 * 128, H = 14336, L = 32;
  const long per_layer = C * C + 2 * C * KV + C * C + 3 * C * H + 2 * C;
  const long total = 2 * V * C + L * per_layer + C;
  EXPECT_EQ(total, 8030261248L);  // Meta's published 8.03B
  EXPECT_EQ((long)ParamLayout(c).total, total);
  const ParamSplit s = param_split(c);
  EXPECT_EQ((long)s.per_block, per_layer);
  EXPECT_EQ((long)s.non_block, 2 * V * C + C);
}

TEST(PlanZero, RingFormulas) {
  // 1 GB over 4 ranks at 10 GB/s: reduce-scatter and all-gather 3/4 · 0.1 s,
  // all-reduce twice that.
  EXPECT_NEAR(ring_reduce_scatter_seconds(1e9, 4, 1e10), 0.075, 1e-15);
  EXPECT_NEAR(ring_all_gather_seconds(1e9, 4, 1e10), 0.075, 1e-15);
  EXPECT_NEAR(ring_allreduce_seconds(1e9, 4, 1e10), 0.15, 1e-15);
  // 8 ranks: 7/8.
  EXPECT_NEAR(ring_reduce_scatter_seconds(16e9, 8, 450e9), 7.0 / 8 * 16 / 450, 1e-15);
  EXPECT_EQ(ring_reduce_scatter_seconds(1e9, 1, 1e10), 0.0);
  EXPECT_EQ(ring_all_gather_seconds(1e9, 1, 1e10), 0.0);
}

TEST(PlanZero, HierarchicalCollectives) {
  Fabric f;
  f.intra_bytes_per_s = 450e9;
  f.inter_bytes_per_s = 50e9;
  // 8 GB over 2 nodes of 8: the node ring on 8 GB (2·7/8·8/450 s), then 1 GB
  // (8 GB / 8 ranks) across the 2 nodes on each rank's link (2·1/2·1/50 s).
  EXPECT_NEAR(collective_seconds(Collective::all_reduce, 8e9, 8, 2, f),
              2 * 7.0 / 8 * 8 / 450 + 2 * 0.5 * 1 / 50, 1e-12);
  EXPECT_NEAR(collective_seconds(Collective::reduce_scatter, 8e9, 8, 2, f),
              7.0 / 8 * 8 / 450 + 0.5 * 1 / 50, 1e-12);
  // one node: NVLink only; one rank per node: the link only
  EXPECT_NEAR(collective_seconds(Collective::all_gather, 8e9, 8, 1, f), 7.0 / 8 * 8 / 450, 1e-12);
  EXPECT_NEAR(collective_seconds(Collective::all_gather, 8e9, 1, 4, f), 3.0 / 4 * 8 / 50, 1e-12);
}

// Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models" (arXiv:1910.02054), Figure 1 / Table 1: psi =
// 7.5B parameters, N = 64, K = 12: baseline (2+2+K)·psi = 120 GB, P_os
// (2+2+K/N)·psi = 31.4 GB, P_os+g (2+(2+K)/N)·psi = 16.6 GB, P_os+g+p
// (2+2+K)·psi/N = 1.9 GB. The paper prints one decimal: tolerance 0.05 GB.
TEST(PlanZero, PaperModelStatesExample) {
  const double psi = 7.5e9;
  EXPECT_NEAR(zero_paper_model_state_bytes(0, psi, 64) / 1e9, 120.0, 0.05);
  EXPECT_NEAR(zero_paper_model_state_bytes(1, psi, 64) / 1e9, 31.4, 0.05);
  EXPECT_NEAR(zero_paper_model_state_bytes(2, psi, 64) / 1e9, 16.6, 0.05);
  EXPECT_NEAR(zero_paper_model_state_bytes(3, psi, 64) / 1e9, 1.9, 0.05);
  // The Llama 3.1 8B on 8: ZeRO-1 (2+2+12/8)·8.03e9 = 44.2 GB, ZeRO-3 16.1 GB.
  EXPECT_NEAR(zero_paper_model_state_bytes(1, 8030261248.0, 8) / 1e9, 44.17, 0.01);
  EXPECT_NEAR(zero_paper_model_state_bytes(3, 8030261248.0, 8) / 1e9, 16.06, 0.01);
}

// Stages 0 and 1 are model/memory.h's step_memory (what train allocates, the
// accounting test_plan_memory checks against the backend); stages 2 and 3
// itemised as zero_plan.h describes, each buffer rounded as the backend
// rounds it.
TEST(PlanZero, StageMemoryItemised) {
  const GPTConfig c = llama8b();
  const BackendMemoryModel be = backend_memory_model(find_device("h100"), c);
  const Recompute r = parse_recompute("gelu+ln");
  const int N = 8, B = 1, T = 2048;
  const size_t P = ParamLayout(c).total, S = (P + N - 1) / N;
  const ParamSplit ps = param_split(c);
  auto bf16 = [&](size_t n) { return be.alloc_size(n * 2); };
  auto fp32 = [&](size_t n) { return be.alloc_size(n * 4); };

  const StepMemory s0 = step_memory(c, B, T, r, be, P, 0);
  const ZeroMemory z0 = zero_memory(c, B, T, r, be, {0, true}, N);
  EXPECT_EQ(z0.total(), s0.total());
  // Stage 1 as train runs it with --overlap-comm on (its default): the
  // bucket-aligned shard (distributed/sharded_optimizer.h, bucketed).
  // The FP32 master covers the owned elements only (distributed/strategy.h: the model
  // is built with them as master ranges), as the moments do.
  const StepMemory s1 = step_memory(c, B, T, r, be, ratchet::testing::moment_elems(c, N, 0, 1, true),
                                    ratchet::testing::buffer_bytes(be, c, N, 1, true), true, true, true);
  const ZeroMemory z1 = zero_memory(c, B, T, r, be, {1, true}, N);
  EXPECT_EQ(z1.total(), s1.total());
  EXPECT_EQ(z1.master, fp32(ratchet::testing::moment_elems(c, N, 0, 1, true)));
  EXPECT_EQ(z1.moments, 2 * z1.master);
  EXPECT_LT(z1.master, fp32(P) / N + fp32(c.num_layers + 1));
  // One rank: nothing to shard, the master is whole.
  EXPECT_EQ(zero_memory(c, B, T, r, be, {1, true}, 1).master, fp32(P));
  // Without overlap: one flat padded copy and a shard (the flat layout).
  EXPECT_EQ(ratchet::testing::buffer_bytes(be, c, N, 1, false), bf16(N * S) + bf16(S));
  EXPECT_EQ(ratchet::testing::moment_elems(c, N, 0, 1, false), S);

  // Stage 2 as train runs it (distributed/sharded_gradients.h): no flat gradient; the shard of
  // the summed gradient (one piece of every bucket, distributed/buckets.h); two
  // block buckets and the rest's bucket, with their receive buffers (1/N of
  // each); master and moments for rank 0's pieces.
  const ZeroMemory z2 = zero_memory(c, B, T, r, be, {2, true}, N);
  const BucketLayout bk(ParamLayout(c), c.num_layers, N);
  size_t own0 = 0;
  for (const OwnedPiece& p : bk.pieces(0)) own0 += p.n;
  EXPECT_EQ(bk.block(0).S, (ps.per_block + N - 1) / N);
  EXPECT_EQ(bk.rest().S, (ps.non_block + N - 1) / N);
  EXPECT_EQ(z2.params, bf16(P));
  EXPECT_EQ(z2.grads, bf16(c.num_layers * bk.block(0).S + bk.rest().S));
  EXPECT_EQ(z2.buckets, 2 * bf16(N * bk.block(0).S) + bf16(N * bk.rest().S) +
                            2 * bf16(bk.block(0).S) + bf16(bk.rest().S));
  EXPECT_EQ(z2.master, fp32(own0));
  EXPECT_EQ(z2.moments, 2 * fp32(own0));
  EXPECT_EQ(z2.gather, 0u);
  EXPECT_EQ(z2.activations, s0.activations);
  // And that is step_memory's figure with train's own buffers.
  EXPECT_EQ(z2.total(), step_memory(c, B, T, r, be, ratchet::testing::moment_elems(c, N, 0, 2),
                                    ratchet::testing::buffer_bytes(be, c, N, 2), false, true, true)
                            .total());

  const ZeroMemory z3 = zero_memory(c, B, T, r, be, {3, true}, N);
  EXPECT_EQ(z3.params, bf16(S));
  EXPECT_EQ(z3.gather, bf16(ps.non_block) + 2 * bf16(ps.per_block));
  const ZeroMemory z3k = zero_memory(c, B, T, r, be, {3, false}, N);
  EXPECT_EQ(z3k.gather, bf16(P));  // every block kept from forward to backward

  // Without the buffers, stages 2 and 3 hold the paper's count (to the
  // backend's 256-byte rounding of each of 4 buffers).
  const double paper2 = zero_paper_model_state_bytes(2, (double)P, N),
               paper3 = zero_paper_model_state_bytes(3, (double)P, N);
  // Stage 2: five allocations rounded to 256 bytes, and rank 0's pieces are
  // at most one element per bucket (L + 1 of them) more than P/N, at 2 + 4 + 8
  // bytes each (gradient shard, master, moments).
  EXPECT_NEAR((double)(z2.params + z2.grads + z2.master + z2.moments), paper2,
              5 * 256.0 + 14.0 * (c.num_layers + 1));
  EXPECT_NEAR((double)(z3.params + z3.grads + z3.master + z3.moments), paper3, 4 * 256.0);
  // Less memory at each stage (3 keep holds the shard and the full copy).
  EXPECT_GT(z0.total(), z1.total());
  EXPECT_GT(z1.total(), z2.total());
  EXPECT_GT(z3k.total(), z2.total());
  EXPECT_GT(z2.total(), z3.total());
}

// On cpu there is no master copy (FP32 storage): stages 2 and 3 hold none.
TEST(PlanZero, CpuStagesHoldNoMaster) {
  const GPTConfig c = preset_config("d2", 257, 64);
  const BackendMemoryModel be = backend_memory_model(find_device("cpu"), c);
  for (const ZeroStage& z : all_zero_stages())
    EXPECT_EQ(zero_memory(c, 2, 32, Recompute(), be, z, 4).master, 0u) << z.name();
}

StepTimeInputs inputs(double fwd, double bwd, int world, int group, int accum = 1) {
  StepTimeInputs in;
  in.fwd_s = fwd, in.bwd_s = bwd, in.accum = accum;
  in.world = world, in.group = group, in.gpus_per_node = 8;
  in.fabric.intra_bytes_per_s = 450e9;
  in.fabric.inter_bytes_per_s = 50e9;
  in.storage_bytes = 2;
  return in;
}

TEST(PlanZero, StepTimeLimits) {
  const ParamSplit ps = param_split(llama8b());
  const int L = 32;
  const double blk = ps.per_block * 2.0, nb = ps.non_block * 2.0, P = ps.total * 2.0;
  // one rank: no collectives
  for (const ZeroStage& z : all_zero_stages()) {
    const StepTime t = zero_step_time(ps, z, inputs(1, 2, 1, 1, 3));
    EXPECT_EQ(t.exposed_s, 0) << z.name();
    EXPECT_EQ(t.efficiency, 1) << z.name();
    EXPECT_EQ(t.compute_s, 9) << z.name();
  }
  auto ar = [](double b) { return 2 * 7.0 / 8 * b / 450e9; };
  auto rs = [](double b) { return 7.0 / 8 * b / 450e9; };
  // Compute-bound (1 s forward, 2 s backward on one node of 8): every block's
  // collective hides; stage 0 shows the last block's all-reduce and the
  // non-block bucket's; stage 1 its last reduce-scatters and the all-gather.
  StepTime t = zero_step_time(ps, {0, true}, inputs(1, 2, 8, 8));
  EXPECT_NEAR(t.exposed_s, ar(blk) + ar(nb), 1e-12);
  EXPECT_NEAR(t.comm_s, L * ar(blk) + ar(nb), 1e-12);
  t = zero_step_time(ps, {1, true}, inputs(1, 2, 8, 8));
  EXPECT_NEAR(t.exposed_s, rs(blk) + rs(nb) + rs(P), 1e-12);
  // stage 2: the last reduce-scatters, then the all-gather of the parameters
  t = zero_step_time(ps, {2, true}, inputs(1, 2, 8, 8));
  EXPECT_NEAR(t.exposed_s, rs(blk) + rs(nb) + rs(P), 1e-12);
  // stage 3: the first gathers (non-block unit and block 0) and the last reduces
  t = zero_step_time(ps, {3, true}, inputs(1, 2, 8, 8));
  EXPECT_NEAR(t.exposed_s, rs(nb) + rs(blk) + rs(blk) + rs(nb), 1e-12);
  EXPECT_NEAR(t.step_s, 3 + t.exposed_s, 1e-12);
  // Communication-bound (no compute): everything is exposed, serially.
  for (const ZeroStage& z : all_zero_stages()) {
    t = zero_step_time(ps, z, inputs(0, 0, 64, 64, 2));
    EXPECT_NEAR(t.exposed_s, t.comm_s, 1e-12 * t.comm_s) << z.name();
    EXPECT_EQ(t.efficiency, 0) << z.name();
  }
  // Stage 3 moves 1.5x stage 0's volume (the paper's 3·psi against 2·psi:
  // the blocks gathered again for backward), less what is not gathered
  // twice: the non-block unit and the last block, kept from forward.
  const double b0 = zero_step_time(ps, {0, true}, inputs(1, 2, 8, 8)).bytes_per_rank,
               b3 = zero_step_time(ps, {3, true}, inputs(1, 2, 8, 8)).bytes_per_rank;
  EXPECT_NEAR(b0, 2 * P, 1e-12 * P);
  EXPECT_NEAR(b3, 2 * P + (L - 1) * blk, 1e-12 * P);
  EXPECT_NEAR(b3, 3 * P - nb - blk, 1e-9 * P);
  EXPECT_LT(b3, 1.5 * b0);
  EXPECT_GT(b3, 1.4 * b0);
}

// A shard group smaller than the world adds the cross-group all-reduce of
// each bucket's 1/N on the last micro-batch: more time across nodes.
TEST(PlanZero, ShardGroupAddsTheCrossGroupAllReduce) {
  const ParamSplit ps = param_split(llama8b());
  const StepTime whole = zero_step_time(ps, {2, true}, inputs(0, 0, 16, 16));
  const StepTime node = zero_step_time(ps, {2, true}, inputs(0, 0, 16, 8));
  // Group of 8 on one node: the reduce-scatter never leaves NVLink; the
  // cross-group all-reduce is 2 ranks on the link: 2·1/2·(bytes/8)/50e9.
  const double P = ps.total * 2.0;
  const double rs_node = 7.0 / 8 * P / 450e9, ag_node = rs_node;
  const double cross = 2 * 0.5 * (P / 8) / 50e9;
  EXPECT_NEAR(node.comm_s, rs_node + cross + ag_node, 1e-9);
  EXPECT_GT(whole.comm_s, 0);
}

}  // namespace

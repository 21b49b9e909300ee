// `ratchet plan` for Mixture-of-Experts models (issue 39): FLOPs per token
// (and so MFU and step time) on the active parameters, memory on all of
// them; the qwen3-30b-a3b preset sized on two 8-GPU nodes; every
// expert-parallel size listed with its memory (the exchange buffers at
// --moe-ep-capacity), fit and all-to-all time, and the fastest that fits.
#include <gtest/gtest.h>

#include "backend/memory_model.h"
#include "distributed/strategy.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "model/moe_cost.h"
#include "plan/plan.h"
#include "testing/hf_moe_configs.h"

using namespace ratchet;
using namespace ratchet::plan;

namespace {

TEST(PlanMoe, ActiveParametersByHand) {
  // qwen3-30b-a3b per layer: attention 2·2048·(32+4)·128 = 18,874,368, norms
  // 2·2048 + q/k norms 2·128, router 128·2048, 8 of 128 experts of 3·2048·768.
  const GPTConfig q = preset_config("qwen3-30b-a3b", 257, 4096);
  const double layer = 18874368.0 + 4096 + 256 + 262144 + 8 * 3 * 2048 * 768.0;
  EXPECT_EQ(active_param_count(q), 48 * layer + 2 * 151936.0 * 2048 + 2048);
  EXPECT_EQ(unused_matmul_params(q), 48 * 120 * 3 * 2048 * 768.0);
  // A dense model is all active.
  const GPTConfig d = preset_config("qwen3-8b", 257, 4096);
  EXPECT_EQ(active_param_count(d), d.param_count());
  EXPECT_EQ(unused_matmul_params(d), 0);
  // A mixed model: the zero slices are unused too (layers 0, 2, 3 dense, 1 MoE).
  const GPTConfig m = ratchet::testing::hf_moe_config(Family::qwen3_moe);
  const double C = 32, H = 40, E = 4, k = 2, I = 24;
  EXPECT_EQ(unused_matmul_params(m), 1 * (E - k) * 3 * C * I + 1 * 3 * C * H + 3 * (E * C + 3 * E * C * I));
  EXPECT_EQ(active_param_count(m), m.param_count() - (E - k) * 3 * C * I);
}

// Shared experts (n_shared_experts, Is = I·n): 3·C·Is per MoE layer, all of
// it active; the dense layers of a mixed model hold unused zero slices of
// them. FLOPs follow: 6 per active shared parameter.
TEST(PlanMoe, SharedExpertsAreActive) {
  GPTConfig m = ratchet::testing::hf_moe_config(Family::qwen3_moe);  // layers 0, 2, 3 dense, 1 MoE
  GPTConfig s = m;
  s.n_shared_experts = 2;
  s.finalize();
  const double C = 32, E = 4, k = 2, I = 24, Is = 48;
  EXPECT_EQ(s.param_count() - m.param_count(), 1 * 3 * C * Is);
  EXPECT_EQ(active_param_count(s), s.param_count() - (E - k) * 3 * C * I);
  EXPECT_EQ(unused_matmul_params(s), unused_matmul_params(m) + 3 * 3 * C * Is);
  EXPECT_DOUBLE_EQ(active_train_flops_per_token(s, 16) - active_train_flops_per_token(m, 16),
                   6 * 3 * C * Is);
}

TEST(PlanMoe, FlopsFollowActiveMemoryFollowsTotal) {
  PlanInputs in;
  in.cfg = preset_config("qwen3-30b-a3b", 257, 4096);
  in.model_name = "qwen3-30b-a3b";
  in.T = 4096, in.B = 1, in.steps = 10, in.device = "h100";
  const Plan p = make_plan(in);
  // 6 per active matmul parameter (wte is a lookup: untied) + attention over T keys, NH·hs = 4096.
  const double active_matmul = active_param_count(in.cfg) - 151936.0 * 2048;
  EXPECT_DOUBLE_EQ(p.flops_per_token, 6 * active_matmul + 12.0 * 4096 * 48 * 4096);
  EXPECT_EQ(p.flops_per_token, active_train_flops_per_token(in.cfg, 4096));
  EXPECT_LT(p.flops_per_token, train_flops_per_token(in.cfg, 4096) / 5);  // 3.35B of 30.5B
  EXPECT_EQ(p.active_params, active_param_count(in.cfg));
  // Memory, gradients and checkpoints hold every parameter.
  EXPECT_EQ(p.n_params, (double)ParamLayout(in.cfg).total);
  EXPECT_EQ(p.mem.params, ParamLayout(in.cfg).total * 2);  // BF16 storage
  EXPECT_EQ(p.ckpt_bytes, 12.0 * p.n_params);
  // The MoE layers' kept buffers (router probabilities, packed expert rows:
  // StepMemory::moe, on the cuda backend) count with the activations, in the
  // plan's table and in every ZeRO stage's.
  const StepMemory& s = p.mem.plain.front();
  EXPECT_GT(s.moe, 0u);
  EXPECT_EQ(p.mem.activations_of(p.mem.policies.front()), s.activations + s.moe);
  EXPECT_EQ(p.mem.total_of(p.mem.policies.front(), false), s.total());
  for (const ZeroRow& r : p.zero.rows) EXPECT_EQ(r.by_policy.front().activations, s.activations + s.moe);
  // Recomputing every block runs each block's active matmuls again (2 per
  // parameter a token uses) and a third of its attention.
  Recompute blocks;
  blocks.kind = Recompute::kBlocks;
  const ParamLayout lay(in.cfg);
  double layered = 0;
  for (int i : kBlockTensors) layered += (double)lay.sizes[i];
  EXPECT_DOUBLE_EQ(recompute_flops_on(find_device("h100"), in.cfg, 4096, blocks),
                   2.0 * (layered - unused_matmul_params(in.cfg)) + 4.0 * 4096 * 48 * 4096);
}

TEST(PlanMoe, Qwen3_30B_A3B_OnTwoNodes) {
  // The sizing: 16 H100 in two nodes of 8, T 4096.
  PlanInputs in;
  in.cfg = preset_config("qwen3-30b-a3b", 257, 4096);
  in.model_name = "qwen3-30b-a3b";
  in.T = 4096, in.B = 1, in.steps = 100, in.device = "h100", in.world = 16;
  in.zero.gpus_per_node = 8;
  const Plan p = make_plan(in);
  EXPECT_EQ(p.zero.nodes, 2);
  // 30.5B parameters' 16 bytes (BF16 params and grads, FP32 master, m, v)
  // are 488 GB: no stage short of sharding the model states fits 80 GB.
  ASSERT_GE(p.zero.chosen, 0) << plan_table(p);
  EXPECT_GE(p.zero.rows[p.zero.chosen].stage.stage, 2) << plan_table(p);
  const std::string t = plan_table(p);
  EXPECT_NE(t.find("moe:     128 experts, top 8, 48 of 48 layers MoE"), std::string::npos) << t;
  EXPECT_NE(t.find("active parameters per token (3,353,032,704)"), std::string::npos) << t;
  // Every expert-parallel size dividing 16 ranks and 128 experts, at the
  // pick (ZeRO-3, at --recompute none: the MoE layers share one scratch): P = 1 has the pick's memory and
  // step, each larger P more memory (its exchange buffers) and all-to-all
  // time; P = 16 crosses the nodes. The fastest that fits is P = 1: every
  // rank holds every expert's weights, so P only adds (the wording says so).
  const ExpertParallelPlan& ep = p.expert_parallel;
  ASSERT_EQ(ep.rows.size(), 5u) << t;
  const ZeroRow& pick = p.zero.rows[p.zero.chosen];
  size_t pi = 0;
  while (p.zero.policies[pi].name() != p.zero.chosen_policy.name()) pi++;
  EXPECT_EQ(ep.stage, pick.stage.name());
  EXPECT_EQ(ep.rows[0].bytes, pick.by_policy[pi].total());
  EXPECT_EQ(ep.rows[0].a2a_s, 0.0);
  EXPECT_EQ(ep.rows[0].step_s, pick.time.step_s);
  for (size_t i = 1; i < ep.rows.size(); i++) {
    SCOPED_TRACE("P " + std::to_string(ep.rows[i].size));
    EXPECT_EQ(ep.rows[i].size, 1 << i);
    EXPECT_GT(ep.rows[i].bytes, ep.rows[i - 1].bytes);
    EXPECT_GT(ep.rows[i].a2a_s, ep.rows[i - 1].a2a_s);
    EXPECT_DOUBLE_EQ(ep.rows[i].step_s, pick.time.step_s + ep.rows[i].a2a_s);
    EXPECT_DOUBLE_EQ(ep.rows[i].a2a_bytes, moe_a2a_bytes(in.cfg, 1, 4096, p.accum, 1 << i, 2));
  }
  EXPECT_EQ(ep.best, 0);
  EXPECT_NE(t.find("expert parallel (--expert-parallel P; ZeRO-3 at --recompute none, --moe-ep-capacity 2; "
                   "every rank holds every\n    expert's weights; the experts' AdamW moments are "
                   "sharded as the rest"), std::string::npos) << t;
  EXPECT_NE(t.find("fastest that fits: --expert-parallel 1, step"), std::string::npos) << t;
  EXPECT_EQ(t.find("shards the experts' weights"), std::string::npos) << t;
  const std::string j = plan_json(p);
  EXPECT_NE(j.find("\"active_params\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"expert_parallel\":null"), std::string::npos) << j;  // not given
  EXPECT_NE(j.find("\"fastest_that_fits\":1"), std::string::npos) << j;
  EXPECT_NE(j.find("\"expert_weights_on_every_rank\":true"), std::string::npos) << j;
}

// The olmoe command at --expert-parallel 8: the exchange buffers
// for ceil(2·N·k) received rows (--moe-ep-capacity 2), not 8·N·k, so the
// activations stay within a small factor of no expert parallelism (they
// were 89.37 GiB against 14.72 before the capacity: ~6x).
TEST(PlanMoe, OlmoeExpertParallelEightWithinASmallFactor) {
  PlanInputs in;
  in.cfg = preset_config("olmoe-1b-7b", 0, 1024);
  in.model_name = "olmoe-1b-7b";
  in.T = 1024, in.B = 4, in.steps = 10, in.device = "h100", in.world = 8;
  in.expert_parallel_given = true;
  const Plan one = make_plan(in);
  in.expert_parallel = 8;
  const Plan eight = make_plan(in);
  in.moe_ep_capacity = 8;  // the worst case: every row of the group to one rank
  const Plan worst = make_plan(in);
  const Recompute none;
  const double gib = 1024.0 * 1024 * 1024;
  const double a1 = (double)one.mem.activations_of(none), a8 = (double)eight.mem.activations_of(none);
  // The table's figures (`ratchet plan ... --expert-parallel 1` / `8`), to
  // the 0.005 GiB it prints.
  EXPECT_NEAR(a1 / gib, 10.60, 0.005);
  EXPECT_NEAR(a8 / gib, 18.27, 0.005);
  EXPECT_LT(a8 / a1, 2.5);
  // By the formula: 16 MoE layers' states at P 8, F 2 against P 1 (N = B·T).
  BackendMemoryModel m = backend_memory_model(find_device("h100"), in.cfg);
  const GPTConfig& c = in.cfg;
  auto state = [&] { return m.moe_state_bytes(4096, c.channels, c.num_experts, c.experts_per_tok, c.moe_ffn_hidden); };
  auto scratch = [&] { return m.moe_scratch_bytes(4096, c.channels, c.num_experts, c.experts_per_tok, c.moe_ffn_hidden); };
  const size_t s1 = state(), x1 = scratch();
  m.expert_parallel = 8;
  const size_t s8 = state(), x8 = scratch();
  ASSERT_EQ(c.moe_layer_count(), 16);
  // Every layer's state, and the scratch they share once.
  EXPECT_EQ(eight.mem.activations_of(none) - one.mem.activations_of(none), 16 * (s8 - s1) + (x8 - x1));
  EXPECT_GT((double)worst.mem.activations_of(none), 2.5 * a1) << "F = P: the worst case is larger";
}

// moe_a2a_seconds by hand: a group inside one node runs at NVLink; one of
// 16 ranks over two nodes of 8 sends 7/15 of its bytes inside its node and
// 8/15 over its own link, both at once.
TEST(PlanMoe, AllToAllSecondsByHand) {
  Fabric f;
  f.intra_bytes_per_s = 450e9;
  f.inter_bytes_per_s = 50e9;
  EXPECT_EQ(moe_a2a_seconds(1e9, 1, 8, f), 0.0);
  EXPECT_DOUBLE_EQ(moe_a2a_seconds(1e9, 8, 8, f), 1e9 / 450e9);
  EXPECT_DOUBLE_EQ(moe_a2a_seconds(1.5e9, 16, 8, f), std::max(1.5e9 * 7 / 15 / 450e9, 1.5e9 * 8 / 15 / 50e9));
  EXPECT_DOUBLE_EQ(moe_a2a_seconds(1e9, 4, 1, f), 1e9 / 50e9);  // one GPU a node: all across
}

// --expert-parallel N counts the cuda backend's exchange buffers in every
// MoE state, as `ratchet train` does (Trainer::memory_for): N 2 adds
// exactly moe_state_bytes at N 2 less at N 1 per MoE layer (and the shared
// scratch's growth once), in the plan's
// table and in every ZeRO stage's activations.
TEST(PlanMoe, ExpertParallelCountsTheExchangeBuffers) {
  PlanInputs in;
  in.cfg = ratchet::testing::hf_moe_config(Family::olmoe);  // 4 layers, all MoE
  in.model_name = "custom";
  in.T = 16, in.B = 2, in.steps = 10, in.device = "h100", in.world = 2;
  const Plan one = make_plan(in);
  in.expert_parallel = 2;
  const Plan two = make_plan(in);
  BackendMemoryModel m = backend_memory_model(find_device("h100"), in.cfg);
  const GPTConfig& c = in.cfg;
  auto state = [&] { return m.moe_state_bytes(2 * 16, c.channels, c.num_experts, c.experts_per_tok, c.moe_ffn_hidden); };
  auto scratch = [&] { return m.moe_scratch_bytes(2 * 16, c.channels, c.num_experts, c.experts_per_tok, c.moe_ffn_hidden); };
  const size_t a = state(), xa = scratch();
  m.expert_parallel = 2;
  const size_t b = state(), xb = scratch();
  ASSERT_GT(b, a);
  ASSERT_GT(xb, xa);
  // Per layer its state's growth, and the shared scratch's once.
  const size_t more = (size_t)c.moe_layer_count() * (b - a) + (xb - xa);
  EXPECT_EQ(c.moe_layer_count(), 4);
  EXPECT_EQ(two.mem.plain.front().moe, one.mem.plain.front().moe + more);
  ASSERT_EQ(two.zero.rows.size(), one.zero.rows.size());
  ASSERT_FALSE(one.zero.rows.empty());
  for (size_t i = 0; i < one.zero.rows.size(); i++)
    EXPECT_EQ(two.zero.rows[i].by_policy.front().activations,
              one.zero.rows[i].by_policy.front().activations + more)
        << "row " << i;
}

// --expert-parallel P at ZeRO-0 holds the rank's own E/P experts only (their
// weights, gradients and AdamW moments), as train does
// (model/expert_slice.h): the plan counts what train allocates,
// strategy_needs' moment_elems and the slice's layout, and by hand the
// experts' (P-1)/P dropped. ZeRO-1 keeps every expert's weights and shards
// their moments as the rest, so P changes none of its model states.
TEST(PlanMoe, ExpertParallelAtZero0HoldsTheRanksOwnExperts) {
  const GPTConfig c = ratchet::testing::hf_moe_config(Family::olmoe);  // 4 layers, all MoE
  const int B = 2, T = 16, P = 2;
  BackendMemoryModel be = backend_memory_model(find_device("h100"), c);
  const Recompute none;
  const ParamLayout lay(c);
  const size_t experts = lay.sizes[P_EXPW1] + lay.sizes[P_EXPW2];
  ASSERT_GT(experts, 0u);
  for (int stage : {0, 1}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(stage));
    ZeroStage z;
    z.stage = stage;
    be.expert_parallel = 1;
    const ZeroMemory all = zero_memory(c, B, T, none, be, z, P);
    be.expert_parallel = P;
    const ZeroMemory own = zero_memory(c, B, T, none, be, z, P);
    DistributedConfig d;
    d.stage = stage;
    d.overlap = true;
    d.expert_parallel = P;
    const size_t elems = strategy_needs(d, be, c, P, 0).moment_elems;
    EXPECT_EQ(own.moments, 2 * be.alloc_size(elems * sizeof(float)));
    // Both stages: the parameters and gradients of all but the other experts.
    EXPECT_EQ(own.params, be.alloc_size(ParamLayout(c, P).total * be.storage_bytes));
    EXPECT_EQ(own.params, be.alloc_size((lay.total - experts / P) * be.storage_bytes));
    EXPECT_LT(own.params, all.params);
    EXPECT_LT(own.grads, all.grads);
    if (stage == 0) {  // every parameter but the other experts
      EXPECT_EQ(elems, lay.total - experts / P);
      EXPECT_LT(own.moments, all.moments);
      EXPECT_LT(own.master, all.master);
    } else {
      // The rank's shard of the slice's buckets and of the rest's: about
      // 1/P of everything either way (the ranks' shards tile the model).
      EXPECT_NEAR((double)own.moments, (double)all.moments, 0.05 * (double)all.moments);
    }
    // With a shard group smaller than the world (--shard-group), ZeRO-1
    // keeps every expert's weights, as train does; ZeRO-0 does not shard.
    const ZeroMemory hybrid = zero_memory(c, B, T, none, be, z, P, 2 * P);
    EXPECT_EQ(hybrid.params, stage == 0 ? own.params : all.params);
    // A P that does not divide the shard group (train refuses it) is counted
    // without the slice at ZeRO-1, not an error.
    BackendMemoryModel b3 = be;
    b3.expert_parallel = 4;
    EXPECT_NO_THROW(zero_memory(c, B, T, none, b3, z, 2));
  }
  // The plan's expert-parallel lines at --zero 0: each P's row is that
  // memory, and the table and the JSON say each rank holds its own experts.
  PlanInputs in;
  in.cfg = c;
  in.model_name = "custom";
  in.T = T, in.B = B, in.steps = 10, in.device = "h100", in.world = P;
  in.zero.zero = "0";
  const Plan p = make_plan(in);
  const ExpertParallelPlan& ep = p.expert_parallel;
  ASSERT_EQ(ep.rows.size(), 2u);
  EXPECT_EQ(ep.stage, "ZeRO-0");
  EXPECT_TRUE(ep.experts_split);
  EXPECT_LT(ep.rows[1].bytes, ep.rows[0].bytes) << "P 2 holds half the experts";
  BackendMemoryModel bp = backend_memory_model(find_device("h100"), c);
  bp.expert_parallel = P;
  EXPECT_EQ(ep.rows[1].bytes, zero_memory(c, B, T, ep.policy, bp, ZeroStage{0}, P).total());
  const std::string t = plan_table(p);
  EXPECT_NE(t.find("each rank holds its own E/P\n    experts only: their weights, gradients and "
                   "AdamW moments"), std::string::npos) << t;
  EXPECT_NE(plan_json(p).find("\"own_experts_only\":true"), std::string::npos);
  EXPECT_NE(plan_json(p).find("\"expert_weights_on_every_rank\":false"), std::string::npos);
  // At --zero 1 too (train's ZeRO-1 holds the slice, its shard of the state).
  in.zero.zero = "1";
  const Plan p1 = make_plan(in);
  ASSERT_EQ(p1.expert_parallel.rows.size(), 2u);
  EXPECT_EQ(p1.expert_parallel.stage, "ZeRO-1");
  EXPECT_TRUE(p1.expert_parallel.experts_split);
  // Its row is zero_memory's count (the slice's weights, above); on this
  // tiny model the exchange buffers outweigh what the slice saves.
  EXPECT_EQ(p1.expert_parallel.rows[1].bytes,
            zero_memory(c, B, T, p1.expert_parallel.policy, bp, ZeroStage{1}, P, P).total());
  EXPECT_NE(plan_table(p1).find("each rank holds its own E/P\n    experts only: their weights, "
                                "gradients and its shard of their AdamW moments"),
            std::string::npos)
      << plan_table(p1);
}

TEST(PlanMoe, NothingFitsSaysExpertParallelismIsMissing) {
  // Mixtral 8x7B on one H100: 46.7B parameters' states are far beyond 80 GB
  // at every ZeRO stage (one rank shards nothing); the expert-parallel
  // line says that none fits and what would, without inventing a size.
  PlanInputs in;
  in.cfg = preset_config("mixtral-8x7b", 257, 4096);
  in.model_name = "mixtral-8x7b";
  in.T = 4096, in.B = 1, in.steps = 10, in.device = "h100";
  const Plan p = make_plan(in);
  EXPECT_LT(p.zero.chosen, 0);
  const std::string t = plan_table(p);
  ASSERT_EQ(p.expert_parallel.rows.size(), 1u);  // one rank: P = 1 only
  EXPECT_FALSE(p.expert_parallel.rows[0].fits);
  EXPECT_EQ(p.expert_parallel.best, -1);
  EXPECT_NE(t.find("none fits at ZeRO-3 with --recompute blocks at any P (every rank holds every expert's "
                   "weights); more devices (--world-size), a smaller --batch-size, or --zero 0, 1 or 2, where "
                   "each rank holds its own experts only, would"), std::string::npos) << t;
}

TEST(PlanMoe, EveryMoePresetPlans) {
  for (const char* name : {"qwen3-30b-a3b", "olmoe-1b-7b", "mixtral-8x7b"}) {
    PlanInputs in;
    in.cfg = preset_config(name, 257, 4096);
    in.model_name = name;
    in.T = 4096, in.B = 1, in.steps = 10, in.device = "h100";
    const Plan p = make_plan(in);
    EXPECT_EQ(p.n_params, in.cfg.param_count()) << name;  // no padding, every layer MoE: no zero slices
    EXPECT_LT(p.active_params, p.n_params) << name;
    EXPECT_GT(p.step_s, 0) << name;
  }
}

}  // namespace

// The all-to-all bytes a rank sends per step (moe_a2a_bytes) by hand, for the
// mixed model (1 MoE layer of 4 experts, top 2, C 32) at B 2, T 16.
TEST(PlanMoe, AllToAllBytesByHand) {
  const GPTConfig m = ratchet::testing::hf_moe_config(Family::qwen3_moe);
  ASSERT_EQ(m.moe_layer_count(), 1);
  // N 2: counts 1 rank x 2 experts x 4 bytes; rows 4 exchanges x 1/2 of
  // 2·16·2 rows x 32 floats x 4 bytes.
  EXPECT_EQ(moe_a2a_bytes(m, 2, 16, 1, 2), 8 + 4 * 0.5 * 64 * 32 * 4);
  // N 4: 3 ranks x 1 expert; 3/4 of the rows. Two micro-batches: twice.
  EXPECT_EQ(moe_a2a_bytes(m, 2, 16, 2, 4), 2 * (12 + 4 * 0.75 * 64 * 32 * 4));
  EXPECT_EQ(moe_a2a_bytes(m, 2, 16, 1, 1), 0);
  EXPECT_EQ(moe_a2a_bytes(preset_config("qwen3-8b", 257, 4096), 2, 16, 1, 2), 0);  // dense
}

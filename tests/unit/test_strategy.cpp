// The data-parallel strategy's pure parts (distributed/strategy.h), without
// MPI: the --zero auto rule train and plan share, what each stage asks of the
// model, and the strategies on one rank (single-process communicator).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "distributed/bucket_domains.h"
#include "distributed/communicator.h"
#include "distributed/expert_shards.h"
#include "distributed/sharded_gradients.h"
#include "distributed/sharded_optimizer.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "testing/moe_configs.h"
#include "testing/strategy_testing.h"
#include "testing/tiny_model.h"

namespace ratchet {
namespace {

StageChoice pick(const std::vector<double>& need, double budget, int shards,
                 std::vector<size_t>* asked = nullptr) {
  return choose_stage(
      need.size(),
      [&](size_t i) {
        if (asked) asked->push_back(i);
        return need[i];
      },
      budget, shards);
}

TEST(ChooseStage, TheFirstThatFitsAskingNoFurther) {
  std::vector<size_t> asked;
  const StageChoice c = pick({10, 8, 6, 7}, 8, 4, &asked);
  EXPECT_EQ(c.index, 1u);
  EXPECT_TRUE(c.fits);
  EXPECT_EQ(asked, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(c.needs, (std::vector<double>{10, 8}));
}

TEST(ChooseStage, NoneFitsTakesTheLeastNeedingFirstOfEquals) {
  const StageChoice c = pick({10, 9, 6, 6}, 1, 4);
  EXPECT_EQ(c.index, 2u);
  EXPECT_FALSE(c.fits);
  EXPECT_EQ(c.needs.size(), 4u);
}

TEST(ChooseStage, OneShardShardsNothing) {
  std::vector<size_t> asked;
  StageChoice c = pick({10, 5, 4, 3}, 6, 1, &asked);
  EXPECT_EQ(c.index, 0u);
  EXPECT_FALSE(c.fits);
  EXPECT_EQ(asked, (std::vector<size_t>{0}));
  c = pick({10, 5}, 10, 1);
  EXPECT_EQ(c.index, 0u);
  EXPECT_TRUE(c.fits);
}

TEST(StrategyNeeds, WhatEachStageAsksOfTheModel) {
  const GPTConfig c = testing::tiny_config(2, 3, 15);
  const size_t P = ParamLayout(c).total;
  const BackendMemoryModel be;
  for (int W : {1, 3}) {
    for (int stage = 0; stage <= 3; stage++) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " on " + std::to_string(W));
      const StrategyNeeds n = testing::needs_of(be, c, W, 0, stage, true);
      EXPECT_EQ(n.flat_grads, stage < 2);
      EXPECT_EQ(n.flat_params, stage < 3);
      EXPECT_EQ(n.master_sharded, (stage == 1 || stage == 2) && W > 1);
      size_t owned = 0;
      for (const auto& [lo, hi] : n.owned) owned += hi - lo;
      EXPECT_EQ(owned, n.moment_elems);
      if (stage == 0 || W == 1) {
        EXPECT_EQ(owned, P);
      }
      if (stage > 0 && W > 1) {
        EXPECT_LT(owned, P);
      }
      EXPECT_EQ(n.buffer_bytes == 0, stage == 0);
    }
  }
  DistributedConfig d;
  d.stage = 4;
  EXPECT_THROW(strategy_needs(d, be, c, 1, 0), Error);
}

// --expert-parallel N counted before its groups exist (DistributedConfig::
// expert_parallel / expert_index): at ZeRO 0-2 the model holds its
// expert slice alone (model/expert_slice.h): the parameters and gradients of
// everything but the other ranks' experts. ZeRO-0 owns all of them; ZeRO-1's
// owned ranges (global coordinates) tile the whole model over the world, in
// both layouts (flat_shards.h, bucket_domains.h); ZeRO-2's are the bucketed
// ones. ZeRO-3 as without (every expert's weights, their state sharded as
// the rest).
TEST(StrategyNeeds, ExpertParallelCountsTheRanksOwnExpertsState) {
  const GPTConfig c = testing::tiny_moe_config(Family::qwen3_moe);  // 4 experts
  const size_t P = ParamLayout(c).total;
  const BackendMemoryModel be;
  const size_t experts = ranges_elems(expert_ranges(c, 1, -1));
  ASSERT_GT(experts, 0u);
  for (int W : {2, 4}) {
    std::vector<char> covered(P, 0), covered_bucketed(P, 0);
    size_t moments = 0, moments_bucketed = 0;
    for (int r = 0; r < W; r++) {
      SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(W));
      const int q = r % 2;
      DistributedConfig d;
      d.expert_parallel = 2;
      d.expert_index = q;
      const size_t own = ranges_elems(expert_ranges(c, 2, q));
      EXPECT_EQ(own * 2, experts);
      d.stage = 0;
      StrategyNeeds n = strategy_needs(d, be, c, W, r);
      EXPECT_EQ(n.moment_elems, P - experts + own);
      EXPECT_EQ(n.moment_elems, ParamLayout(c, 2).total);
      EXPECT_EQ(ranges_elems(n.owned), n.moment_elems);
      EXPECT_EQ(n.expert_shards, 2);
      // The step's parameters and gradients are the slice's (FP32: 4 bytes).
      const StepMemory m = strategy_step_memory(n, c, 2, 8, Recompute(), be);
      EXPECT_EQ(m.params, be.alloc_size((P - experts + own) * be.storage_bytes));
      EXPECT_EQ(m.grads, m.params);
      // ZeRO-1, flat: the slice's weights; its owned ranges are global, lie
      // in the slice, and the ranks' tile the whole model.
      d.stage = 1;
      n = strategy_needs(d, be, c, W, r);
      EXPECT_EQ(n.expert_shards, 2);
      EXPECT_EQ(ranges_elems(n.owned), n.moment_elems);
      EXPECT_TRUE(subtract_ranges(n.owned, global_ranges(c, ExpertSlice{2, q})).empty())
          << "owned ranges outside the slice";
      for (const auto& [lo, hi] : n.owned)
        for (size_t i = lo; i < hi; i++) covered[i]++;
      moments += n.moment_elems;
      EXPECT_TRUE(n.master_sharded);
      const StepMemory m1 = strategy_step_memory(n, c, 2, 8, Recompute(), be);
      EXPECT_EQ(m1.params, m.params);
      // Packs of (P - experts) and own·2/W elements, padded, and the shard.
      const size_t rest = P - experts, S = (rest + W - 1) / W, Se = (own + W / 2 - 1) / (W / 2);
      const size_t sb = be.storage_bytes;
      EXPECT_EQ(n.buffer_bytes, be.alloc_size(S * W * sb) + be.alloc_size(Se * (W / 2) * sb) +
                                    be.alloc_size((S + Se) * sb));
      // ZeRO-1 with overlap (bucketed): the slice too, its plan's ranges.
      d.overlap = true;
      n = strategy_needs(d, be, c, W, r);
      const BucketPlan plan(c, ExpertSlice{2, q}, W, r);
      EXPECT_EQ(n.expert_shards, 2);
      EXPECT_EQ(n.moment_elems, plan.owned_elems());
      EXPECT_EQ(n.owned, plan.owned());
      EXPECT_EQ(n.buffer_bytes, plan.buffer_bytes(be, false));
      EXPECT_TRUE(subtract_ranges(n.owned, global_ranges(c, ExpertSlice{2, q})).empty())
          << "owned ranges outside the slice";
      for (const auto& [lo, hi] : n.owned)
        for (size_t i = lo; i < hi; i++) covered_bucketed[i]++;
      moments_bucketed += n.moment_elems;
      EXPECT_EQ(strategy_step_memory(n, c, 2, 8, Recompute(), be).params, m.params);
      // ZeRO-2: the slice, its gradient shard and buckets in the plan's two domains.
      d.overlap = false;
      d.stage = 2;
      n = strategy_needs(d, be, c, W, r);
      EXPECT_EQ(n.expert_shards, 2);
      EXPECT_FALSE(n.flat_grads);
      EXPECT_EQ(n.owned, plan.owned());
      EXPECT_EQ(n.moment_elems, plan.owned_elems());
      EXPECT_EQ(n.buffer_bytes, plan.buffer_bytes(be, true));
      EXPECT_GT(n.buffer_bytes, plan.buffer_bytes(be, false)) << "the receive buffers";
      // ZeRO-3 keeps every expert's weights (its parameter shards).
      d.stage = 3;
      EXPECT_EQ(strategy_needs(d, be, c, W, r).expert_shards, 1);
    }
    EXPECT_EQ(moments, P);
    EXPECT_EQ(moments_bucketed, P);
    EXPECT_EQ(std::count(covered_bucketed.begin(), covered_bucketed.end(), 1), (ptrdiff_t)P)
        << "bucketed ZeRO-1's owned ranges on " << W << " ranks do not cover each element once";
    EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), (ptrdiff_t)P)
        << "ZeRO-1's owned ranges on " << W << " ranks do not cover each element once";
  }
}

// On one rank every stage computes the same update (nothing to sum): the
// parameters after a few steps are bitwise stage 0's.
TEST(Strategy, EveryStageOnOneRankEqualsStage0) {
  const GPTConfig c = testing::tiny_config(2, 3, 15);
  auto comm = make_single_communicator();
  auto be = make_cpu_backend(1);
  const int B = 2, T = 8;
  std::vector<float> ref;
  for (int stage = 0; stage <= 3; stage++) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const StrategyNeeds n = testing::needs_of(be->memory_model(), c, 1, 0, stage, true);
    GPT m(c, *be, n.flat_grads, n.flat_params);
    auto dp = testing::make_dp(*comm, *be, m.layout(), AdamWConfig(), stage, nullptr, nullptr, true);
    EXPECT_EQ(dp->zero_stage(), stage);
    EXPECT_EQ(dp->sharded(), stage > 0);
    EXPECT_EQ(dp->shard_count(), 1);
    EXPECT_TRUE(dp->shard_writer());
    EXPECT_EQ(dp->owned_ranges(), n.owned);
    dp->attach(m, 1);
    m.init_random(5);
    for (int s = 0; s < 3; s++) {
      const auto x = testing::random_tokens(B * T, c.vocab_size, 10 * s);
      const auto y = testing::random_tokens(B * T, c.vocab_size, 10 * s + 1);
      m.zero_grad();
      m.forward_backward(x.data(), y.data(), B, T, 1.0f);
      EXPECT_TRUE(std::isfinite(dp->step(m, 1e-2f)));
    }
    std::vector<float> p(m.num_params());
    dp->params_f32(m, p.data());
    if (stage == 0) ref = p;
    else EXPECT_TRUE(p == ref);
  }
}

}  // namespace
}  // namespace ratchet

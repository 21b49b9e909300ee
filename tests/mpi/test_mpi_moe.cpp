// Mixture-of-Experts models (issue 39) over the data-parallel group, as N
// ranks under mpirun (CTest: N = 1, 2), on the tiny MoE configs of
// tests/testing/moe_configs.h (mixed dense/MoE layer patterns, the aux loss
// on). Each rank's model sums its router statistics over the ranks
// (GPT::set_moe_stats_reducer, as `ratchet train` sets it), so:
//   - N ranks x B rows equal 1 process x N·B rows in one micro-batch: the
//     same aux loss (the statistics of the whole global batch) and the same
//     parameters after 3 AdamW steps, within rounding;
//   - ZeRO stages 1, 2 and 3 equal stage 0 bit for bit (1 and 2 ranks), also
//     with recomputed blocks at stage 3, and with shared experts.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "distributed/communicator.h"
#include "distributed/strategy.h"
#include "model/gpt.h"
#include "model/recompute.h"
#include "optim/adamw.h"
#include "testing/moe_configs.h"
#include "testing/strategy_testing.h"
#include "mpi_gtest_main.h"
#include "zero_step_util.h"

using namespace ratchet;
using namespace ratchet::zero_testing;

namespace {

Communicator* g_comm = nullptr;

void sum_over_ranks(double* buf, size_t n) { g_comm->all_reduce(buf, n, DType::F64, ReduceOp::Sum); }

// A model built for `stage` as train builds it (test_mpi_zero_families'),
// with the statistics reducer train installs.
struct StageRun {
  StageRun(Backend& be, const GPTConfig& c, int stage, uint64_t seed,
           const Recompute& rp = Recompute())
      : owned(ratchet::testing::owned_ranges(c, g_comm->world(), g_comm->rank(), stage, true)),
        m(c, be, ratchet::testing::flat_grads(stage), ratchet::testing::flat_params(stage),
          ratchet::testing::master_sharded(stage, g_comm->world()) ? &owned : nullptr),
        dp(ratchet::testing::make_dp(*g_comm, be, m.layout(), AdamWConfig(), stage, nullptr,
                                     nullptr, true)) {
    m.set_recompute(rp);
    dp->attach(m, 1);
    m.set_moe_stats_reducer(sum_over_ranks, g_comm->world());
    m.init_random(seed);
  }
  // One step on this rank's B rows; returns the (global) aux loss.
  double step(const GPTConfig& c, int s, int B, int T) {
    const int W = g_comm->world(), r = g_comm->rank();
    m.zero_grad();
    const Pair t = tokens(c, B, T, 1000 * s + r);
    m.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / W);
    dp->step(m, 1e-2f);
    return m.moe_stats().aux_loss;
  }
  std::vector<float> f32() {
    std::vector<float> p(m.num_params());
    dp->params_f32(m, p.data());
    return p;
  }
  std::vector<std::pair<size_t, size_t>> owned;
  GPT m;
  std::unique_ptr<DistributedStrategy> dp;
};

TEST(MpiMoe, RanksEqualOneProcessWithTheWholeBatch) {
  const int W = g_comm->world();
  const int B = 2, T = 8, steps = 3;
  for (const auto& [name, f] : ratchet::testing::moe_families()) {
    SCOPED_TRACE(name);
    const GPTConfig c = ratchet::testing::tiny_moe_config(f, 0.5f);
    auto be = make_cpu_backend(1);
    StageRun run(*be, c, 0, 8);
    GPT one(c, *be);  // every rank's rows in one micro-batch of W·B rows
    one.init_random(8);
    AdamW opt(*be, one.layout(), AdamWConfig());
    for (int s = 0; s < steps; s++) {
      const double aux = run.step(c, s, B, T);
      Pair all;
      for (int q = 0; q < W; q++) {
        const Pair t = tokens(c, B, T, 1000 * s + q);
        all.x.insert(all.x.end(), t.x.begin(), t.x.end());
        all.y.insert(all.y.end(), t.y.begin(), t.y.end());
      }
      one.zero_grad();
      one.forward_backward(all.x.data(), all.y.data(), W * B, T, 1.0f);
      opt.step(one.params(), one.grads(), 1e-2f);
      // The same statistics: exact counts; the FP32 probabilities of one
      // W·B-row GEMM may differ from two B-row ones by an ulp, and the FP64
      // sums add them in another order: 1e-6 relative.
      EXPECT_NEAR(aux, one.moe_stats().aux_loss, 1e-6 * aux) << "step " << s;
      if (W == 1) {
        EXPECT_EQ(aux, one.moe_stats().aux_loss);
      }
    }
    const std::vector<float> p1 = params_of(one), pr = run.f32();
    // test_mpi_zero_families' bound: the CE mean of W·B rows vs the sum of W
    // means scaled by 1/W, and W·B-row GEMMs vs B-row ones plus a + b, differ
    // by a few ulps, magnified by AdamW where gradients are near zero: 1/300
    // of a step's largest update (~lr) per step.
    if (W == 1)
      EXPECT_TRUE(p1 == pr) << "max difference " << max_diff(p1, pr);
    else
      EXPECT_LT(max_diff(p1, pr), steps * 1e-2 / 300) << "one process vs " << W << " ranks";
  }
}

// DeepSeek-V3's selection bias (docs/moe.md): updated after every step from
// the step's GLOBAL counts (the reducer's), N ranks x B rows make the same
// bias as 1 process x N·B rows, so every rank holds the same bias and routes
// as the single process does.
TEST(MpiMoe, SelectionBiasRanksEqualOneProcess) {
  const int W = g_comm->world();
  const int B = 2, T = 8, steps = 4;
  for (const auto& [name, f] : ratchet::testing::moe_families()) {
    SCOPED_TRACE(name);
    GPTConfig c = ratchet::testing::tiny_moe_config(f, 0.5f);
    c.moe_selection_bias = true;
    c.moe_bias_update_rate = 0.05f;  // large beside the probabilities: it changes the routing
    c.finalize();
    auto be = make_cpu_backend(1);
    StageRun run(*be, c, 0, 8);
    GPT one(c, *be);
    one.init_random(8);
    AdamW opt(*be, one.layout(), AdamWConfig());
    for (int s = 0; s < steps; s++) {
      run.step(c, s, B, T);
      run.m.moe_bias_update(run.m.moe_stats().counts);
      Pair all;
      for (int q = 0; q < W; q++) {
        const Pair t = tokens(c, B, T, 1000 * s + q);
        all.x.insert(all.x.end(), t.x.begin(), t.x.end());
        all.y.insert(all.y.end(), t.y.begin(), t.y.end());
      }
      one.zero_grad();
      one.forward_backward(all.x.data(), all.y.data(), W * B, T, 1.0f);
      opt.step(one.params(), one.grads(), 1e-2f);
      one.moe_bias_update(one.moe_stats().counts);
      // Exact: the counts are integers and the update is computed in double
      // from them; the choices agree unless an FP32 ulp flips a near tie, which
      // these seeds do not give (the test would say so here, not silently).
      EXPECT_EQ(run.m.moe_stats().counts, one.moe_stats().counts) << "step " << s;
      EXPECT_TRUE(run.m.moe_bias() == one.moe_bias()) << "step " << s;
    }
    const std::vector<float>& b = one.moe_bias();
    ASSERT_EQ(b.size(), (size_t)c.num_layers * c.num_experts);
    double moved = 0;
    for (int l = 0; l < c.num_layers; l++)
      for (int e = 0; e < c.num_experts; e++) {
        const float v = b[(size_t)l * c.num_experts + e];
        if (!c.layer_is_moe(l)) {
          EXPECT_EQ(v, 0.f) << "dense layer " << l;
        }
        moved += std::fabs(v);
      }
    EXPECT_GT(moved, 0.0) << "the bias never moved";
    // The bias is the same on every rank (rank 0's broadcast equals each).
    std::vector<float> r0 = run.m.moe_bias();
    g_comm->broadcast(r0.data(), r0.size() * sizeof(float), 0);
    EXPECT_TRUE(r0 == run.m.moe_bias()) << "rank " << g_comm->rank() << " differs from rank 0";
    const std::vector<float> p1 = params_of(one), pr = run.f32();
    if (W == 1)
      EXPECT_TRUE(p1 == pr) << "max difference " << max_diff(p1, pr);
    else  // RanksEqualOneProcessWithTheWholeBatch's bound
      EXPECT_LT(max_diff(p1, pr), steps * 1e-2 / 300) << "one process vs " << W << " ranks";
  }
}

TEST(MpiMoe, EveryStageEqualsStage0) {
  if (g_comm->world() > 2) GTEST_SKIP() << "bitwise only on 1 and 2 ranks";
  const int B = 2, T = 8, steps = 3;
  auto cases = ratchet::testing::moe_families();
  const size_t plain = cases.size();
  cases.push_back({"mixtral shared experts", Family::mixtral});  // shw1 / shw2 sharded too
  cases.push_back({"qwen2_moe gated shared expert", Family::qwen2_moe});  // and shgate
  for (size_t k = 0; k < cases.size(); k++) {
    const auto& [name, f] = cases[k];
    SCOPED_TRACE(name);
    const GPTConfig c = k < plain                  ? ratchet::testing::tiny_moe_config(f, 0.5f)
                        : f == Family::qwen2_moe ? ratchet::testing::tiny_gated_config(0.5f)
                                                 : ratchet::testing::tiny_shared_config(f, 0.5f);
    auto be = make_cpu_backend(1);
    std::vector<std::vector<float>> final(5);
    for (int stage = 0; stage <= 3; stage++) {
      StageRun run(*be, c, stage, 8);
      for (int s = 0; s < steps; s++) run.step(c, s, B, T);
      final[stage] = run.f32();
    }
    {
      StageRun run(*be, c, 3, 8, parse_recompute("blocks:2"));
      for (int s = 0; s < steps; s++) run.step(c, s, B, T);
      final[4] = run.f32();
    }
    for (int stage = 1; stage <= 4; stage++)
      EXPECT_TRUE(final[stage] == final[0])
          << (stage == 4 ? "stage 3 with blocks:2" : "stage " + std::to_string(stage))
          << " vs 0: max difference " << max_diff(final[stage], final[0]);
  }
}

}  // namespace

int main(int argc, char** argv) { return ratchet::testing::run_mpi_gtests(argc, argv, &g_comm); }

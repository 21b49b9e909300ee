// `ratchet plan` arithmetic against cases computed by hand (the working is in
// each comment), and the recompute policies' memory against the model's own
// activation layout.
#include <gtest/gtest.h>

#include <cmath>

#include "ckpt/young_daly.h"
#include "core/error.h"
#include "core/json.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "plan/plan.h"
#include "plan/zero_plan.h"

using namespace ratchet;
using namespace ratchet::plan;

namespace {

GPTConfig d12() { return preset_config("d12", 50257, 1024); }

TEST(Plan, Gpt2SmallHas124475904Parameters) {
  // Vp·C + maxT·C + L·(12C² + 13C) + 2C with Vp 50304, C 768, L 12, maxT 1024:
  // 38,633,472 + 786,432 + 12·7,087,872 + 1,536 = 124,475,904 (llm.c's count).
  PlanInputs in;
  in.cfg = d12();
  in.steps = 1;
  Plan p = make_plan(in);
  EXPECT_EQ(p.n_params, 124475904.0);
  EXPECT_EQ(nearest_preset(124475904.0, 50257, 1024), "d12");
  EXPECT_EQ(nearest_preset(1.05 * 124475904.0, 50257, 1024), "d12");
}

// plan --json escapes its strings: a name with a quote, a backslash, a
// control character and non-ASCII text reads back unchanged, and the figures
// keep their types (integers stay integers, booleans booleans).
TEST(Plan, JsonEscapesStringsAndRoundTrips) {
  PlanInputs in;
  in.cfg = d12();
  in.steps = 10;
  in.model_name = "my \"d12\" \\ run\t\u00e9\u6f22 \U0001F600";
  const Plan p = make_plan(in);
  const nlohmann::json j = nlohmann::json::parse(plan_json(p));
  EXPECT_EQ(j["model"]["name"], in.model_name);
  EXPECT_TRUE(j["model"]["params"].is_number_integer());
  EXPECT_EQ(j["model"]["params"], 124475904);
  EXPECT_TRUE(j["model"]["from_budget"].is_boolean());
  EXPECT_EQ(j["compute"]["steps"], 10);
  EXPECT_TRUE(j["memory"]["activations_bytes"].contains("none"));
  EXPECT_TRUE(j["time"]["step_s"].is_number_float());
}

TEST(Plan, ComputeOptimalIsSixNDWithTwentyTokensPerParameter) {
  // C = 6·N·20N = 120 N²: C = 1.2e20 -> N = 1e9, D = 2e10.
  ComputeOptimal o = compute_optimal(1.2e20);
  EXPECT_NEAR(o.params, 1e9, 1e-3);
  EXPECT_NEAR(o.tokens, 2e10, 1e-2);
  EXPECT_NEAR(6 * o.params * o.tokens, 1.2e20, 1e8);
}

TEST(Plan, BudgetChoosesTheNearestPresetAndSpendsTheBudget) {
  PlanInputs in;
  in.cfg = d12();
  in.model_given = false;
  in.T = 1024;
  in.budget_flops = 1.2e20;  // optimum N = 1e9
  Plan p = make_plan(in);
  EXPECT_TRUE(p.has_budget);
  EXPECT_EQ(p.in.model_name, p.suggested_preset);
  EXPECT_EQ(p.suggested_preset, nearest_preset(1e9, 50257, 1024));
  // the whole budget, but not more: one more step would exceed it
  const double step_flops = p.flops_per_token * p.tokens_per_step;
  EXPECT_LE(p.total_flops, 1.2e20);
  EXPECT_GT(p.total_flops + step_flops, 1.2e20);

  // $100 of H100 at $2/h, MFU 0.5: 50 h · 3600 · 989e12 · 0.5 = 8.901e19 FLOPs
  in = PlanInputs();
  in.cfg = d12();
  in.device = "h100";
  in.mfu = 0.5;
  in.price = 2.0;
  in.budget_money = 100;
  p = make_plan(in);
  EXPECT_NEAR(p.budget_flops, 8.901e19, 1e14);
  EXPECT_NEAR(p.optimal.params, std::sqrt(8.901e19 / 120), 1.0);
}

TEST(Plan, RingAllReduceMoves2NMinus1OverNOfTheBytes) {
  // 1 GB over 4 ranks at 10 GB/s: 2·3/4 · 1e9 / 1e10 = 0.15 s
  EXPECT_NEAR(ring_allreduce_seconds(1e9, 4, 1e10), 0.15, 1e-12);
  EXPECT_EQ(ring_allreduce_seconds(1e9, 1, 1e10), 0.0);
  // through make_plan: d12 grads in bf16 (2·124,475,904 bytes) over 8 ranks at
  // 80 Gb/s = 10 GB/s: 2·7/8 · 248,951,808 / 1e10 = 43.566566 ms
  PlanInputs in;
  in.cfg = d12();
  in.device = "h100";
  in.world = 8;
  in.link_gbps = 80;
  in.steps = 10;
  Plan p = make_plan(in);
  EXPECT_NEAR(p.allreduce_s, 0.0435665664, 1e-9);
  // compute: FLOPs per rank / (peak · MFU) = 7.49214720e8 · 256 / (989e12 · 0.4)
  // (tokens per step B·T·world = 4·64·8 = 2048, per rank 256)
  EXPECT_EQ(p.tokens_per_step, 2048);
  EXPECT_NEAR(p.compute_s, 749214720.0 * 256 / (989e12 * 0.4), 1e-12);
  EXPECT_NEAR(p.dp_efficiency, p.compute_s / (p.compute_s + p.allreduce_s), 1e-12);
  EXPECT_NEAR(p.work_hours, 10 * p.step_s / 3600, 1e-15);
}

TEST(Plan, YoungDalyInterval) {
  // save 60 s, MTBF 2 h: sqrt(2 · 60 · 7200) = sqrt(864000) = 929.5160 s
  EXPECT_NEAR(young_daly_interval_seconds(60, 7200), 929.516003, 1e-5);
  PlanInputs in;
  in.cfg = d12();
  in.steps = 1;
  in.save_seconds = 60;
  in.preemptions_per_hour = 0.5;
  Plan p = make_plan(in);
  EXPECT_TRUE(p.interval_from_young_daly);
  EXPECT_NEAR(p.interval_s, 929.516003, 1e-5);
  // default save time: 12 bytes/parameter at 1 GB/s = 1.493710848 s
  in.save_seconds = 0;
  p = make_plan(in);
  EXPECT_NEAR(p.save_s, 1.493710848, 1e-9);
  EXPECT_NEAR(p.restart_s, p.save_s, 0);
  // a given interval wins; no preemptions and no interval: no periodic saves
  in.ckpt_interval_minutes = 30;
  EXPECT_EQ(make_plan(in).interval_s, 1800);
  in.ckpt_interval_minutes = 0;
  in.preemptions_per_hour = 0;
  p = make_plan(in);
  EXPECT_EQ(p.interval_s, 0);
  EXPECT_EQ(p.on_demand.wall_factor, 1.0);
  EXPECT_EQ(p.spot.wall_factor, 1.0);
}

TEST(Plan, SpotVersusOnDemandCost) {
  // 100 h of work on 8 devices at $2/h; checkpoint every 900 s, save 60 s.
  // on-demand: factor 1 + 60/900 = 1.0666667; 106.6667 h; 853.333 device-h; $1706.67
  CostEstimate od = on_demand_cost(100, 8, 2.0, 900, 60);
  EXPECT_NEAR(od.wall_factor, 1.0 + 60.0 / 900, 1e-12);
  EXPECT_NEAR(od.wall_hours, 106.666667, 1e-5);
  EXPECT_NEAR(od.device_hours, 853.333333, 1e-5);
  EXPECT_NEAR(od.cost, 1706.666667, 1e-5);
  EXPECT_EQ(od.preemptions, 0);
  // spot at 35%, 0.5 preemptions/h, restart 120 s: each preemption loses
  // 450 + 120 s; factor 1 + 60/900 + 0.5 · 570/3600 = 1.1458333;
  // 114.58333 h; 916.6667 device-h; 57.29 preemptions; 916.6667 · 2 · 0.35 = $641.67
  CostEstimate sp = spot_cost(100, 8, 2.0, 0.35, 0.5, 900, 60, 120);
  EXPECT_NEAR(sp.wall_factor, 1.1458333333, 1e-9);
  EXPECT_NEAR(sp.wall_hours, 114.583333, 1e-5);
  EXPECT_NEAR(sp.device_hours, 916.666667, 1e-5);
  EXPECT_NEAR(sp.preemptions, 57.2916667, 1e-6);
  EXPECT_NEAR(sp.cost, 641.666667, 1e-5);
}

TEST(Plan, MemoryPerRankWithAndWithoutZero1) {
  const GPTConfig c = d12();
  const size_t P = 124475904;
  const Recompute none;
  // cpu (FP32): params and grads 4P each = GPT::param_bytes; no master copy;
  // m and v 4P each. d12 at B=4, T=64 (4P is a multiple of 64: no rounding).
  MemoryPlan m = memory_per_rank(c, 4, 64, cpu_memory_model(), 4);
  const size_t acts = GPT::activation_bytes(c, 4, 64, 4);
  EXPECT_EQ(m.params + m.grads, GPT::param_bytes(c, 4));
  EXPECT_EQ(m.params, 4 * P);
  EXPECT_EQ(m.master, 0u);
  EXPECT_EQ(m.adam, 8 * P);
  EXPECT_EQ(m.workspace + m.overhead, 0u);
  // ZeRO-1 over 4: shard of 31,118,976 elements -> m and v 2 · 124,475,904
  // bytes. Staging as train runs ZeRO-1 (--overlap-comm on, its default:
  // bucket-aligned shards), so this table and the ZeRO section give one
  // figure for one stage: the same bytes as zero_memory's stage-1 row, whose
  // layout test_plan_zero derives by hand.
  const ZeroStage z1{1};
  const ZeroMemory zm = zero_memory(c, 4, 64, none, cpu_memory_model(), z1, 4);
  EXPECT_EQ(m.adam_zero1, 2u * 124475904);
  EXPECT_EQ(m.adam_zero1, zm.moments);
  EXPECT_EQ(m.dp_buffers_zero1, zm.staging);
  EXPECT_LT(m.dp_buffers_zero1, 4 * P + 124475904u);  // less than the flat layout's padded buffer + shard
  EXPECT_EQ(m.activations_of(none), acts);
  EXPECT_EQ(m.total_of(none, false), 16 * P + acts);
  EXPECT_EQ(m.total_of(none, true), zm.total());
  // GPU (BF16, the cuda backend): params, grads 2P each (multiples of 256);
  // FP32 master 4P, under ZeRO-1 of the owned shard only (the model keeps
  // the master of its owned range). ZeRO-1 over 5: ceil(P/5) = 24,895,181
  // elements -> 99,580,724 bytes, rounded up to 256: 99,580,928 for the
  // master, m and v each. Overhead: sum_squares'
  // FP64 result (256 as allocated) + the 32 MiB cuBLASLt workspace.
  // Materialized attention here (the flash default: below).
  MemoryPlan g = memory_per_rank(
      c, 4, 64, cuda_memory_model(2, kCublasLtWorkspaceBytes, AttentionImpl::materialized), 5);
  EXPECT_EQ(g.params, 2 * P);
  EXPECT_EQ(g.master, 4 * P);
  EXPECT_EQ(g.master_zero1, 99580928u);
  EXPECT_EQ(g.adam_zero1, 2u * 99580928);
  EXPECT_EQ(g.overhead, 256u + (32u << 20));
  // The op scratch at B=4, T=64, C=768, NH=12 is attention backward's: 7 (B,T,C)
  // bf16 buffers (393,216 bytes each) + datt (B,NH,T,T) 393,216 = 3,145,728,
  // more than the fc layer's bias-gradient partials (8 chunks x 3072 x 4 =
  // 98,304) or attention forward's 4 x 393,216.
  EXPECT_EQ(g.workspace, 3145728u);
  EXPECT_EQ(g.total_of(none, false), 2 * P + 2 * P + 4 * P + 8 * P +
                                         cuda_memory_model(2, 0).alloc_size(
                                             GPT::activation_bytes(
                                                 c, 4, 64, 2, Recompute(),
                                                 AttentionImpl::materialized)) +
                                         3145728u + 256u + (32u << 20));
  // Flash attention: backward's scratch is D (B,NH,T) FP32 = 12,288 bytes, so the
  // fc layer's bias-gradient partials (8 chunks x 3072 x 4 = 98,304) are the
  // largest op scratch. The lm head has no bias and asks for none (counting it
  // made this 8 x 50,304 x 4 = 1,609,728).
  MemoryPlan f = memory_per_rank(c, 4, 64, cuda_memory_model(2, kCublasLtWorkspaceBytes), 5);
  EXPECT_EQ(f.workspace, 98304u);
}

// The savings model/recompute.h states, by hand for d12 at B=4, T=64, FP32
// (BT = 256, C = 768, L = 12; every size here is a multiple of 64 bytes).
TEST(Plan, RecomputePoliciesDropWhatTheySay) {
  const GPTConfig c = d12();
  Recompute none, gelu, geluln, blocks;
  gelu.kind = Recompute::kGelu;
  geluln.kind = Recompute::kGeluLn;
  blocks.kind = Recompute::kBlocks;
  MemoryPlan m = memory_per_rank(c, 4, 64, cpu_memory_model(), 1);
  EXPECT_EQ(m.activations_of(none), GPT::activation_bytes(c, 4, 64, 4));
  // gelu: (L-1) · B·T·4C floats = 11 · 256 · 3072 · 4 = 34,603,008 bytes
  EXPECT_EQ(m.activations_of(none) - m.activations_of(gelu), 34603008u);
  // gelu+ln: also (2L-1) · B·T·C floats = 23 · 256 · 768 · 4 = 18,087,936 more
  EXPECT_EQ(m.activations_of(gelu) - m.activations_of(geluln), 18087936u);
  EXPECT_LT(m.activations_of(blocks), m.activations_of(geluln));
  EXPECT_EQ(m.activations_of(gelu), GPT::activation_bytes(c, 4, 64, 4, gelu));
  EXPECT_GT(recompute_flops_per_token(c, 64, blocks), 0.0);
  EXPECT_EQ(recompute_flops_per_token(c, 64, geluln), 0.0);
  // A GPU in BF16 recomputes GELU by the fc GEMM again: 2·C·4C per layer and
  // token, 12 · 2 · 768 · 3072 = 56,623,104 (exact in a double); blocks unchanged.
  EXPECT_EQ(recompute_flops_per_token(c, 64, gelu, true), 56623104.0);
  EXPECT_EQ(recompute_flops_per_token(c, 64, geluln, true), 56623104.0);
  EXPECT_EQ(recompute_flops_per_token(c, 64, blocks, true), recompute_flops_per_token(c, 64, blocks));
  // blocks:4 recomputes layers 0, 4, 8: a quarter of blocks' extra FLOPs
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(c, 64, parse_recompute("blocks:4")),
                   recompute_flops_per_token(c, 64, blocks) / 4);
  // the chosen policy's row
  const Recompute b4 = parse_recompute("blocks:4");
  MemoryPlan k = memory_per_rank(c, 4, 64, cpu_memory_model(), 1, b4);
  EXPECT_EQ(k.policies.size(), 5u);
  EXPECT_EQ(k.activations_of(b4), GPT::activation_bytes(c, 4, 64, 4, b4));
  EXPECT_EQ(k.total_of(b4, false),
            k.total_of(none, false) - k.activations_of(none) + k.activations_of(b4));
}

TEST(Plan, StepsFromTokensOrDefaultTwentyPerParameter) {
  PlanInputs in;
  in.cfg = d12();
  in.tokens = 1000;  // 256 tokens per step -> ceil(1000/256) = 4 steps
  Plan p = make_plan(in);
  EXPECT_EQ(p.steps, 4);
  EXPECT_EQ(p.tokens, 1024);
  in.tokens = 0;  // 20 · 124,475,904 = 2,489,518,080 tokens = 9,724,680 steps exactly
  p = make_plan(in);
  EXPECT_EQ(p.steps, 9724680);
  EXPECT_NEAR(p.tokens_per_param, 20.0, 1e-12);
}

TEST(Plan, BadInputsNameTheFlag) {
  PlanInputs in;
  in.cfg = d12();
  auto msg = [&](PlanInputs x) {
    try {
      make_plan(x);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  PlanInputs x = in;
  x.device = "tpu";
  EXPECT_NE(msg(x).find("--device"), std::string::npos);
  x = in;
  x.total_batch_tokens = 1000;
  EXPECT_NE(msg(x).find("--total-batch-tokens"), std::string::npos);
  x = in;
  x.budget_flops = 1e20;
  x.budget_money = 10;
  EXPECT_NE(msg(x).find("at most one"), std::string::npos);
  x = in;
  x.budget_flops = 1e20;
  x.steps = 3;
  EXPECT_NE(msg(x).find("budget"), std::string::npos);
  x = in;
  x.T = 2048;
  EXPECT_NE(msg(x).find("--max-seq-len"), std::string::npos);
}

}  // namespace

// Per attention implementation: materialized keeps (B,NH,T,T) BF16 per layer
// where flash and cudnn keep lse (B,NH,T) FP32 (64-byte rounded buffers), and
// the longest T that fits is the largest whose whole step fits the device.
TEST(Plan, AttentionMemoryPerImplementationAndLongestT) {
  PlanInputs in;
  in.cfg = d12();
  in.B = 8;
  in.T = 1024;
  in.device = "h100";
  in.steps = 1;
  const Plan p = make_plan(in);
  ASSERT_EQ(p.attention.size(), 3u);
  const auto& flash = p.attention[0];
  const auto& cudnn = p.attention[1];
  const auto& mat = p.attention[2];
  EXPECT_EQ(flash.impl, AttentionImpl::flash);
  EXPECT_EQ(mat.impl, AttentionImpl::materialized);
  auto r64 = [](size_t x) { return (x + 63) / 64 * 64; };
  const size_t B = 8, NH = 12, T = 1024, L = 12;
  EXPECT_EQ(mat.activations - flash.activations,
            L * (r64(B * NH * T * T * 2) - r64(B * NH * T * 4)));
  EXPECT_EQ(flash.activations, cudnn.activations);
  EXPECT_EQ(flash.activations, p.mem.activations_of(Recompute()));  // the table above: flash
  EXPECT_GT(flash.longest_T, mat.longest_T);
  for (const auto& a : {flash, mat}) {
    GPTConfig c = in.cfg;
    auto total = [&](long t) {
      c.max_seq_len = std::max<int>(1024, (int)t);
      BackendMemoryModel be = backend_memory_model(find_device("h100"));
      be.attention = a.impl;
      return (double)memory_per_rank(c, 8, (int)t, be, 1).total_of(Recompute(), false);
    };
    EXPECT_LE(total(a.longest_T), p.device_memory_bytes) << attention_name(a.impl);
    EXPECT_GT(total(a.longest_T + 1), p.device_memory_bytes) << attention_name(a.impl);
  }
}

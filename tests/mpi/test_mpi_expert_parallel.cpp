// Expert parallelism (--expert-parallel, distributed/expert_parallel.h) as N
// ranks under mpirun (CTest: N = 1, 2, 3, 4): the experts of each MoE layer
// sharded over the N ranks, rows exchanged all-to-all.
//   - The layer (moe::moe_forward / moe_backward with the exchange) on each
//     rank's tokens against one process computing every expert on all ranks'
//     tokens concatenated: the expert rows arrive in the one-process order,
//     so the outputs, dx and the experts' weight gradients are the same bits
//     (the router's GEMM is the same rows' too: see the note at the check).
//     Also with an expert that receives no tokens, and with a rank whose
//     experts receive none.
//   - The model (GPT with the exchange applied, ZeRO 0-3 as train builds
//     them; 6 experts on 3 ranks, else 4): N ranks x B rows with
//     --expert-parallel N (and 2 on 4 ranks) against 1 process x N·B rows
//     and against N ranks without it, 3 AdamW steps.
//   - The exchange with N = 1 equals no exchange bit for bit.
//   - A model holding only its rank's expert slice (model/expert_slice.h)
//     equals the model holding every expert, bit for bit, forward() too;
//     trained at ZeRO-0 (its experts reduced over the ranks holding the same
//     slice), the same parameters bit for bit.
//   - Recomputed blocks (blocks:2) equal kept ones bit for bit.
//   - Bad --expert-parallel values refused, naming the flag and num_experts.
//   - --moe-ep-capacity: buffers reserved for ceil(F·N·k) received rows;
//     routing that sends a rank more (every token to rank 0's experts, or F
//     = 1 with the model's own routing) grows them, logs it, and keeps the
//     bits of the worst-case reservation and of one process; the cpu state
//     holds the accounting's bytes (plus the growth, exactly).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/memory_model.h"
#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/expert_parallel.h"
#include "distributed/strategy.h"
#include "model/expert_slice.h"
#include "model/gpt.h"
#include "model/recompute.h"
#include "moe/moe_ops.h"
#include "optim/adamw.h"
#include "testing/moe_configs.h"
#include "testing/strategy_testing.h"
#include "mpi_gtest_main.h"
#include "zero_step_util.h"

using namespace ratchet;
using namespace ratchet::zero_testing;

namespace {

Communicator* g_comm = nullptr;

std::vector<float> randn(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

bool same_bits(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(a[i] == b[i])) return false;
  return true;
}

// One MoE layer: every rank's tokens (seeded by rank), the same weights.
// `dead` experts get no tokens: channel 0 of every token is 1 and their gate
// has -100 there (the other experts' 0), so they are never in the top k.
// F > 0: the expert-parallel call reserves its received rows for
// --moe-ep-capacity F (s.expert_parallel = W) and must grow them, with a
// logged line, whenever this rank receives more (checked here).
void check_layer(const std::vector<int>& dead, double F = 0) {
  const int W = g_comm->world(), me = g_comm->rank();
  moe::MoeShape s;
  s.N = 12;
  s.C = 16;
  s.E = 12;  // divisible by 1, 2, 3 and 4 ranks
  s.k = 2;
  s.I = 8;
  s.norm_topk_prob = true;
  const size_t NC = (size_t)s.N * s.C, w1n = (size_t)s.E * 2 * s.I * s.C,
               w2n = (size_t)s.E * s.C * s.I, gn = (size_t)s.E * s.C;
  std::vector<float> gate = randn(gn, 1, 0.5f), w1 = randn(w1n, 2, 0.2f), w2 = randn(w2n, 3, 0.2f);
  for (int e = 0; e < s.E; e++) gate[(size_t)e * s.C] = 0.0f;
  for (int e : dead) gate[(size_t)e * s.C] = -100.0f;
  auto tokens_of = [&](int r) {
    std::vector<float> x = randn(NC, 100 + r, 1.0f);
    for (int n = 0; n < s.N; n++) x[(size_t)n * s.C] = 1.0f;
    return x;
  };
  auto dout_of = [&](int r) { return randn(NC, 200 + r, 1.0f); };
  std::vector<float> aux(s.E);
  for (int e = 0; e < s.E; e++) aux[e] = 0.01f * (float)(e + 1);

  CpuBackend cpu(1);
  // One process: every rank's tokens, all experts.
  moe::MoeShape all = s;
  all.N = s.N * W;
  std::vector<float> xa, da;
  for (int r = 0; r < W; r++) {
    const std::vector<float> x = tokens_of(r), d = dout_of(r);
    xa.insert(xa.end(), x.begin(), x.end());
    da.insert(da.end(), d.begin(), d.end());
  }
  moe::MoeCache ca;
  std::vector<float> out_a(xa.size()), dx_a(xa.size()), dg_a(gn, 0.0f), dw1_a(w1n, 0.0f),
      dw2_a(w2n, 0.0f);
  moe::moe_forward(cpu, all, xa.data(), gate.data(), w1.data(), w2.data(), out_a.data(), ca);
  moe::moe_backward(cpu, all, xa.data(), gate.data(), w1.data(), w2.data(), da.data(), ca,
                    aux.data(), dx_a.data(), dg_a.data(), dw1_a.data(), dw2_a.data());
  for (int e : dead) ASSERT_EQ(ca.dispatch.counts[e], 0) << "expert " << e << " has tokens";

  // Expert parallel over the W ranks: this rank's tokens.
  ExpertParallel ep(*g_comm, W);
  const std::vector<float> x = tokens_of(me), d = dout_of(me);
  moe::MoeCache c;
  std::vector<float> out(NC), dx(NC), dg(gn, 0.0f), dw1(w1n, 0.0f), dw2(w2n, 0.0f);
  moe::MoeShape se = s;
  if (F > 0) se.expert_parallel = W, se.ep_capacity = F, se.layer = 7;
  ::testing::internal::CaptureStdout();
  moe::moe_forward(cpu, se, x.data(), gate.data(), w1.data(), w2.data(), out.data(), c, &ep);
  const std::string log = ::testing::internal::GetCapturedStdout();
  if (F > 0 && W > 1) {
    const size_t R = c.shard.perm.size(), cap = moe_ep_received_rows(s.N, s.k, W, F);
    if (R > cap) {
      EXPECT_EQ(c.shard.reserved, R) << "grown to exactly the rows received";
      EXPECT_EQ(c.shard.xe.capacity(), R * s.C);
      EXPECT_EQ(c.h.capacity(), R * 2 * s.I);
      for (const std::string& w : {"MoE layer 7 received " + std::to_string(R) + " rows",
                                  std::string("--moe-ep-capacity ") + (F == 1 ? "1" : "1.5"),
                                  "grow to " + std::to_string(R) + " rows"})
        EXPECT_NE(log.find(w), std::string::npos) << w << " not in: " << log;
    } else {
      EXPECT_EQ(c.shard.reserved, cap) << "the reservation, not grown";
      EXPECT_EQ(c.shard.xe.capacity(), cap * s.C);
      EXPECT_EQ(log.find("grow to"), std::string::npos) << log;
    }
  }
  moe::moe_backward(cpu, s, x.data(), gate.data(), w1.data(), w2.data(), d.data(), c, aux.data(),
                    dx.data(), dg.data(), dw1.data(), dw2.data(), nullptr, &ep);
  // OpenBLAS's sgemm adds each output element over the inner dimension in
  // the same order whatever the number of rows, so the router's N-row GEMM
  // gives this rank's rows of the W·N-row one bit for bit; the expert GEMMs
  // see the same rows in the same order as one process (the exchange's
  // order). Hence bitwise: out, dx and the owned experts' gradients.
  const size_t at = (size_t)me * NC;
  EXPECT_TRUE(same_bits(out.data(), out_a.data() + at, NC)) << "out of rank " << me;
  EXPECT_TRUE(same_bits(dx.data(), dx_a.data() + at, NC)) << "dx of rank " << me;
  const int El = s.E / W;
  const size_t w1e = (size_t)2 * s.I * s.C, w2e = (size_t)s.C * s.I;
  for (int e = 0; e < s.E; e++) {
    const bool mine = e / El == me;
    std::vector<float> zero1(w1e, 0.0f), zero2(w2e, 0.0f);
    EXPECT_TRUE(same_bits(dw1.data() + e * w1e, mine ? dw1_a.data() + e * w1e : zero1.data(), w1e))
        << "dw1 of expert " << e << (mine ? " (mine)" : " (not mine: stays zero)");
    EXPECT_TRUE(same_bits(dw2.data() + e * w2e, mine ? dw2_a.data() + e * w2e : zero2.data(), w2e))
        << "dw2 of expert " << e << (mine ? " (mine)" : " (not mine: stays zero)");
  }
  // The router's gradient: each rank's tokens' part, summed over the ranks
  // in another order than one process's W·N-row GEMM: 1e-5 relative to the
  // largest entry (a few FP32 roundings of sums of W·N terms).
  g_comm->all_reduce(dg.data(), gn, DType::F32, ReduceOp::Sum);
  double big = 0, diff = 0;
  for (size_t i = 0; i < gn; i++) {
    big = std::max(big, (double)std::fabs(dg_a[i]));
    diff = std::max(diff, (double)std::fabs(dg[i] - dg_a[i]));
  }
  EXPECT_LE(diff, 1e-5 * big) << "dgate summed over ranks vs one process";
  for (int e : dead) {
    for (size_t i = 0; i < w1e; i++) ASSERT_EQ(dw1[e * w1e + i], 0.0f) << "dead expert " << e;
    for (size_t i = 0; i < w2e; i++) ASSERT_EQ(dw2[e * w2e + i], 0.0f) << "dead expert " << e;
  }
}

TEST(MpiExpertParallel, LayerEqualsOneProcessBitwise) { check_layer({}); }

TEST(MpiExpertParallel, ExpertWithNoTokens) { check_layer({5}); }

// --moe-ep-capacity 1 (and 1.5) with every token routed to rank 0's
// experts: rank 0 receives W·N·k rows, W times its reservation, and grows;
// the outputs and gradients keep the one-process bits all the same.
TEST(MpiExpertParallel, CapacityOverflowGrowsAndKeepsTheBits) {
  const int W = g_comm->world();
  if (W == 1) GTEST_SKIP() << "one rank receives only its own rows";
  std::vector<int> dead;  // every expert but rank 0's
  for (int e = 12 / W; e < 12; e++) dead.push_back(e);
  for (double F : {1.0, 1.5}) {
    SCOPED_TRACE("--moe-ep-capacity " + std::to_string(F));
    check_layer(dead, F);
    check_layer({}, F);  // the random routing: grows where a rank gets more than F·N·k
  }
}

// The cpu backend's state (Backend::moe_state, moe_forward with an exchange
// over the W ranks) holds exactly BackendMemoryModel::moe_state_bytes at
// expert_parallel W and --moe-ep-capacity F after a forward whose rows fit
// the reservation (F = W: the worst case), and that plus the grown rows'
// xe, h, a and perm after one that does not (F = 1, every token to rank 0).
TEST(MpiExpertParallel, CpuStateHoldsTheAccountedReservation) {
  const int W = g_comm->world(), me = g_comm->rank();
  if (W == 1) GTEST_SKIP() << "no exchange buffers on one rank";
  const int N = 12, C = 16, E = 12, k = 2, I = 8;
  for (const bool skewed : {false, true}) {
    SCOPED_TRACE(skewed ? "every token to rank 0's experts, F = 1" : "F = W");
    const double F = skewed ? 1.0 : (double)W;
    std::vector<float> gate = randn((size_t)E * C, 1, 0.5f);
    std::vector<float> w1 = randn((size_t)E * 2 * I * C, 2, 0.2f), w2 = randn((size_t)E * C * I, 3, 0.2f);
    std::vector<float> x = randn((size_t)N * C, 100 + me, 1.0f), out((size_t)N * C);
    for (int e = 0; e < E; e++) gate[(size_t)e * C] = skewed && e >= E / W ? -100.0f : 0.0f;
    for (int n = 0; n < N; n++) x[(size_t)n * C] = 1.0f;
    CpuBackend cpu(1);
    ExpertParallel ep(*g_comm, W);
    MoeDims d;
    d.N = N, d.C = C, d.E = E, d.k = k, d.I = I;
    d.exchange = &ep;
    d.expert_parallel = W;
    d.ep_capacity = F;
    const size_t before = cpu.bytes_in_use();
    std::unique_ptr<MoeState> st = cpu.moe_state();
    ::testing::internal::CaptureStdout();
    cpu.moe_forward(d, x.data(), gate.data(), w1.data(), w2.data(), out.data(), *st);
    ::testing::internal::GetCapturedStdout();
    BackendMemoryModel m = cpu_memory_model();
    m.expert_parallel = W;
    m.ep_capacity = F;
    const size_t want = m.moe_state_bytes(N, C, E, k, I);
    const size_t cap = moe_ep_received_rows(N, k, W, F);
    const size_t R = skewed ? (me == 0 ? (size_t)W * N * k : 0) : cap;
    const size_t grown = R > cap ? (R - cap) * ((3 * (size_t)I + C) * sizeof(float) + sizeof(int)) : 0;
    EXPECT_EQ(cpu.bytes_in_use() - before, want + grown) << "rank " << me;
  }
}

TEST(MpiExpertParallel, RankWhoseExpertsGetNoTokens) {
  const int W = g_comm->world();
  if (W == 1) GTEST_SKIP() << "needs a second rank to route the tokens to";
  std::vector<int> dead;  // every expert of the last rank
  for (int e = 12 - 12 / W; e < 12; e++) dead.push_back(e);
  check_layer(dead);
}

// The tiny MoE config of family f with a number of experts the W ranks
// divide: its 4, or 6 on 3 ranks.
GPTConfig config_for(Family f, int W, bool shared = false) {
  GPTConfig c = shared ? ratchet::testing::tiny_shared_config(f, 0.5f)
                       : ratchet::testing::tiny_moe_config(f, 0.5f);
  if (c.num_experts % W != 0) {
    c.num_experts = 6;
    c.finalize();
  }
  return c;
}
// The three families, mixtral with shared experts and qwen2_moe with its gated
// one (not sharded: every rank runs them on its own tokens, beside the
// exchange, like attention).
std::vector<std::pair<std::string, GPTConfig>> ep_cases(int W) {
  std::vector<std::pair<std::string, GPTConfig>> v;
  for (const auto& [name, f] : ratchet::testing::moe_families()) v.push_back({name, config_for(f, W)});
  v.push_back({"mixtral shared experts", config_for(Family::mixtral, W, true)});
  // Qwen2-MoE's gated shared expert: shgate replicated like shw1 / shw2.
  GPTConfig g = ratchet::testing::tiny_gated_config(0.5f);
  if (g.num_experts % W != 0) g.num_experts = 6, g.finalize();
  v.push_back({"qwen2_moe gated shared expert", g});
  return v;
}

// A model built for `stage` as train builds it (test_mpi_moe's StageRun),
// with the statistics reducer and, when ep > 0, the expert exchange.
struct EpRun {
  EpRun(Backend& be, const GPTConfig& c, int stage, int ep, uint64_t seed,
        const Recompute& rp = Recompute())
      : owned(ratchet::testing::owned_ranges(c, g_comm->world(), g_comm->rank(), stage, true)),
        m(c, be, ratchet::testing::flat_grads(stage), ratchet::testing::flat_params(stage),
          ratchet::testing::master_sharded(stage, g_comm->world()) ? &owned : nullptr),
        dp(ratchet::testing::make_dp(*g_comm, be, m.layout(), AdamWConfig(), stage, nullptr,
                                     nullptr, true)) {
    m.set_recompute(rp);
    dp->attach(m, 1);
    m.set_moe_stats_reducer(
        [](double* b, size_t n) { g_comm->all_reduce(b, n, DType::F64, ReduceOp::Sum); },
        g_comm->world());
    if (ep > 0) {
      ex = std::make_unique<ExpertParallel>(*g_comm, ep);
      ex->apply(m);
    }
    m.init_random(seed);
  }
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
  std::unique_ptr<ExpertParallel> ex;
};

TEST(MpiExpertParallel, ModelEqualsOneProcessAndPlainDataParallel) {
  const int W = g_comm->world();
  const int B = 2, T = 8, steps = 3;
  for (const auto& [name, c] : ep_cases(W)) {
    SCOPED_TRACE(name);
    // Expert-parallel sizes dividing both the world and the experts: all
    // ranks in one group, and (4 ranks) 2 groups of 2, whose experts'
    // gradients are summed over the 2 replicas of each shard.
    std::vector<int> sizes;
    for (int n = 1; n <= W; n++)
      if (W % n == 0 && c.num_experts % n == 0 && (n > 1 || W == 1)) sizes.push_back(n);
    if (sizes.empty()) GTEST_SKIP() << c.num_experts << " experts over " << W << " ranks";
    auto be = make_cpu_backend(1);
    for (const int n : sizes) {
      for (int stage : {0, 1, 2, 3}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + ", --expert-parallel " + std::to_string(n));
      EpRun ep(*be, c, stage, n, 8), plain(*be, c, stage, 0, 8);
      GPT one(c, *be);  // every rank's rows in one micro-batch of W·B rows
      one.init_random(8);
      AdamW opt(*be, one.layout(), AdamWConfig());
      for (int s = 0; s < steps; s++) {
        const double aux_ep = ep.step(c, s, B, T), aux_plain = plain.step(c, s, B, T);
        Pair all;
        for (int q = 0; q < W; q++) {
          const Pair t = tokens(c, B, T, 1000 * s + q);
          all.x.insert(all.x.end(), t.x.begin(), t.x.end());
          all.y.insert(all.y.end(), t.y.begin(), t.y.end());
        }
        one.zero_grad();
        one.forward_backward(all.x.data(), all.y.data(), W * B, T, 1.0f);
        opt.step(one.params(), one.grads(), 1e-2f);
        // The statistics of the whole global batch in all three. Not
        // bitwise: an expert's GEMM over B rows (plain) and over W·B rows
        // (expert parallel, one process) may round differently, and that
        // reaches the next MoE layer's router: 1e-5 relative. OpenBLAS's
        // Haswell kernels (OPENBLAS_CORETYPE=Haswell, set on the AMD EPYC
        // machines this suite runs on) round a row otherwise in another
        // block of rows: 2.9e-6 measured at 3 ranks (mixtral), where the
        // AVX-512 kernels stay below 1e-6. A wrong statistic (a rank's
        // counts missing) is ~1e-1.
        const double aux_one = one.moe_stats().aux_loss;
        EXPECT_NEAR(aux_ep, aux_one, 1e-5 * aux_one) << "step " << s;
        EXPECT_NEAR(aux_plain, aux_one, 1e-5 * aux_one) << "step " << s;
        if (W == 1) {
          EXPECT_EQ(aux_ep, aux_one) << "step " << s;
        }
      }
      const std::vector<float> p1 = params_of(one), pe = ep.f32(), pp = plain.f32();
      if (g_comm->rank() == 0)
        std::printf("[ %s stage %d, --expert-parallel %d of %d ranks ] max parameter difference: "
                    "expert parallel vs one process %.2e, vs plain %.2e; plain vs one process "
                    "%.2e\n", name.c_str(), stage, n, W, max_diff(pe, p1), max_diff(pe, pp),
                    max_diff(pp, p1));
      if (W == 1) {
        // One rank: the exchange path (P = 1) is the plain one bit for bit.
        EXPECT_TRUE(pe == pp) << "max difference " << max_diff(pe, pp);
        EXPECT_TRUE(pe == p1) << "max difference " << max_diff(pe, p1);
      } else {
        // test_mpi_moe's bound (its RanksEqualOneProcessWithTheWholeBatch):
        // the CE mean of W·B rows vs the sum of W means scaled by 1/W, and
        // the gradient sums over ranks in another order (plain data
        // parallel: each rank's expert gradient over its own rows, then
        // a + b; expert parallel: one GEMM over every row), magnified by
        // AdamW where gradients are near zero: 1/100 of lr per step (the
        // Haswell kernels above: 1.47e-4 measured at 3 ranks, 1/200 of lr
        // per step; the AVX-512 kernels stay below 1/300). A wrong update
        // moves a parameter by ~lr per step.
        EXPECT_LT(max_diff(pe, p1), steps * 1e-2 / 100) << "expert parallel vs one process";
        EXPECT_LT(max_diff(pe, pp), steps * 1e-2 / 100) << "expert parallel vs plain";
      }
      }
    }
  }
}

// --moe-ep-capacity 1 on the model (its own routing, 3 AdamW steps): the
// received rows outgrow N·k on some rank and layer (asserted: a growth line
// is logged somewhere), and the run equals the one reserved for the worst
// case (F = W: never grows) bit for bit, and plain data parallelism within
// the bound above. The capacity changes where the rows are kept, not the math.
TEST(MpiExpertParallel, ModelWithCapacityOneEqualsWorstCaseBitwise) {
  const int W = g_comm->world();
  if (W == 1) GTEST_SKIP() << "one rank receives only its own rows";
  const int B = 2, T = 8, steps = 3;
  for (const auto& [name, c] : ep_cases(W)) {
    SCOPED_TRACE(name);
    if (c.num_experts % W != 0) continue;
    auto be = make_cpu_backend(1);
    for (int stage : {0, 1}) {
      SCOPED_TRACE("stage " + std::to_string(stage));
      EpRun tight(*be, c, stage, W, 8), worst(*be, c, stage, W, 8), plain(*be, c, stage, 0, 8);
      tight.ex->capacity = 1.0;
      worst.ex->capacity = (double)W;
      std::string log;
      for (int s = 0; s < steps; s++) {
        ::testing::internal::CaptureStdout();
        const double a1 = tight.step(c, s, B, T);
        log += ::testing::internal::GetCapturedStdout();
        ::testing::internal::CaptureStdout();
        const double aw = worst.step(c, s, B, T);
        const std::string wl = ::testing::internal::GetCapturedStdout();
        EXPECT_EQ(wl.find("grow to"), std::string::npos) << wl;
        EXPECT_EQ(a1, aw) << "aux loss, step " << s;
        plain.step(c, s, B, T);
      }
      double grew = log.find("grow to") != std::string::npos ? 1 : 0;
      g_comm->all_reduce(&grew, 1, DType::F64, ReduceOp::Sum);
      EXPECT_GT(grew, 0) << "no rank's buffers grew at --moe-ep-capacity 1: the test shows nothing";
      if (g_comm->rank() == 0 && !log.empty()) std::printf("%s", log.substr(0, log.find('\n') + 1).c_str());
      const std::vector<float> pt = tight.f32(), pw = worst.f32(), pp = plain.f32();
      EXPECT_TRUE(pt == pw) << "max difference " << max_diff(pt, pw);
      // The bound of ModelEqualsOneProcessAndPlainDataParallel (its reason there).
      EXPECT_LT(max_diff(pt, pp), steps * 1e-2 / 300) << "vs plain data parallel";
    }
  }
}

// Recomputed blocks (the layers share one MoE state, refilled by the
// backward's recompute, which exchanges again) give the kept blocks' bits,
// at stage 0 and stage 3.
TEST(MpiExpertParallel, RecomputedBlocksEqualKeptBlocksBitwise) {
  const int W = g_comm->world();
  const int B = 2, T = 8, steps = 2;
  for (const auto& [name, c] : ep_cases(W)) {
    SCOPED_TRACE(name);
    if (c.num_experts % W != 0) GTEST_SKIP() << c.num_experts << " experts over " << W << " ranks";
    auto be = make_cpu_backend(1);
    for (int stage : {0, 3}) {
      SCOPED_TRACE("stage " + std::to_string(stage));
      EpRun kept(*be, c, stage, W, 8), recomputed(*be, c, stage, W, 8, parse_recompute("blocks:2"));
      for (int s = 0; s < steps; s++) {
        kept.step(c, s, B, T);
        recomputed.step(c, s, B, T);
      }
      const std::vector<float> a = kept.f32(), b = recomputed.f32();
      EXPECT_TRUE(a == b) << "max difference " << max_diff(a, b);
    }
  }
}

// Expert slices (model/expert_slice.h): a model holding only its rank's E/n
// experts' weights and gradients (ParamLayout(c, n)) against the model
// holding all of them, both with the same exchange: two training passes give
// the same loss and aux loss bit for bit, and the slice's gradients are the
// whole model's at the slice's places (its experts' rows arrive in the same
// order, so the same GEMMs run). forward() (evaluation) exchanges too and
// gives the training pass's loss bit for bit. n = W, and 2 groups of 2 on
// 4 ranks.
TEST(MpiExpertParallel, ExpertSliceModelEqualsWholeModelBitwise) {
  const int W = g_comm->world(), me = g_comm->rank();
  if (W == 1) GTEST_SKIP() << "a slice needs a second rank to hold the other experts";
  const int B = 2, T = 8;
  auto reduce = [](double* b, size_t n) { g_comm->all_reduce(b, n, DType::F64, ReduceOp::Sum); };
  for (const auto& [name, c] : ep_cases(W)) {
    SCOPED_TRACE(name);
    auto be = make_cpu_backend(1);
    for (int n = 2; n <= W; n++) {
      if (W % n != 0 || c.num_experts % n != 0) continue;
      SCOPED_TRACE("--expert-parallel " + std::to_string(n));
      const ExpertSlice x{n, me % n};
      GPT whole(c, *be), part(c, *be, true, true, nullptr, x);
      ExpertParallel ew(*g_comm, n), ep(*g_comm, n);
      ew.apply(whole);
      ep.apply(part);
      whole.set_moe_stats_reducer(reduce, W);
      part.set_moe_stats_reducer(reduce, W);
      whole.init_random(8);
      part.init_random(8);
      ASSERT_LT(part.num_params(), whole.num_params());
      std::vector<float> pw(whole.num_params()), pp(part.num_params()), want(part.num_params());
      whole.get_params(pw.data());
      part.get_params(pp.data());
      slice_experts(c, x, pw.data(), want.data());
      EXPECT_TRUE(pp == want) << "init_random: the whole model's values";
      for (int s = 0; s < 2; s++) {  // accumulated: two passes into the gradients
        const Pair t = tokens(c, B, T, 1000 * s + me);
        const float lw = whole.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / W);
        const float lp = part.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / W);
        EXPECT_EQ(lw, lp) << "loss, pass " << s;
        EXPECT_EQ(whole.moe_stats().aux_loss, part.moe_stats().aux_loss) << "aux loss, pass " << s;
      }
      std::vector<float> gw(whole.num_params()), gp(part.num_params());
      whole.get_grads(gw.data());
      part.get_grads(gp.data());
      slice_experts(c, x, gw.data(), want.data());
      EXPECT_TRUE(gp == want) << "gradients: max difference " << max_diff(gp, want);
      // Evaluation: the slice's forward() is collective over the group.
      const Pair t = tokens(c, B, T, 77 + me);
      whole.zero_grad();
      const float lw = whole.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f);
      EXPECT_TRUE(part.collective_forward());
      EXPECT_EQ(part.forward(t.x.data(), t.y.data(), B, T), lw) << "forward()";
    }
  }
}

// A model holding its expert slice under strategy d (ZeRO 0-2), trained 3
// AdamW steps beside `whole` (every expert, the same
// exchange and rows). Checks the norms (the slices' sums of squares add in
// another order than the whole vector's: 1e-6 relative; a wrong domain: a
// factor), that the slice's backend then holds exactly what strategy_needs
// and strategy_step_memory count (what train's memory check and `ratchet
// plan` use), byte for byte, and that the ranks' owned ranges tile the whole
// model. Returns the slice's parameters gathered into the whole layout
// (params_f32); *describe: the strategy's log line.
std::vector<float> train_slice_beside(EpRun& whole, const GPTConfig& c, int n,
                                      DistributedConfig d, std::string* describe = nullptr) {
  const int W = g_comm->world(), me = g_comm->rank();
  const int B = 2, T = 8, steps = 3;
  auto bp = make_cpu_backend(1);  // the slice's own: its bytes are counted below
  ExpertParallel ex(*g_comm, n);
  ex.capacity = n;  // the worst case: the exchange's buffers never grow
  d.host = g_comm;
  d.experts = &ex.shards(c);
  EXPECT_EQ(d.expert_slice().shards, n);
  std::unique_ptr<DistributedStrategy> dp = make_strategy(d, *bp, ParamLayout(c, n));
  const OwnedRanges owned = dp->owned_ranges();
  const StrategyNeeds needs0 = strategy_needs(d, bp->memory_model(), c, W, me);
  GPT part(c, *bp, needs0.flat_grads, needs0.flat_params, needs0.master_sharded ? &owned : nullptr,
           d.expert_slice());
  dp->attach(part, 1);
  EXPECT_EQ(dp->optimizer().moment_elems(), ranges_elems(owned));
  if (describe) *describe = dp->describe();
  std::vector<double> mine(ParamLayout(c).total, 0.0);
  for (const auto& [lo, hi] : owned)
    for (size_t i = lo; i < hi; i++) mine[i] = 1;
  g_comm->all_reduce(mine.data(), mine.size(), DType::F64, ReduceOp::Sum);
  if (d.stage > 0) {  // ZeRO-0 owns every element on every rank of a group
    EXPECT_EQ((size_t)std::count(mine.begin(), mine.end(), 1.0), mine.size())
        << "the ranks' owned ranges tile the whole model";
  }
  part.set_moe_stats_reducer(
      [](double* b, size_t k) { g_comm->all_reduce(b, k, DType::F64, ReduceOp::Sum); }, W);
  ex.apply(part);
  part.init_random(8);
  for (int s = 0; s < steps; s++) {
    whole.m.zero_grad();
    part.zero_grad();
    const Pair t = tokens(c, B, T, 1000 * s + me);
    whole.m.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / W);
    part.forward_backward(t.x.data(), t.y.data(), B, T, 1.0f / W);
    const float nw = whole.dp->step(whole.m, 1e-2f), np = dp->step(part, 1e-2f);
    EXPECT_TRUE(std::isfinite(np));
    EXPECT_NEAR(np, nw, 1e-6 * nw) << "gradient norm, step " << s;
  }
  BackendMemoryModel mm = bp->memory_model();
  mm.expert_parallel = n;
  mm.ep_capacity = n;
  const StrategyNeeds needs = strategy_needs(d, mm, c, W, me);
  EXPECT_EQ(needs.expert_shards, n);
  EXPECT_EQ(needs.owned, owned);
  EXPECT_EQ(bp->bytes_in_use(), strategy_step_memory(needs, c, B, T, Recompute(), mm).total())
      << "rank " << me;
  std::vector<float> pp(ParamLayout(c).total);
  dp->params_f32(part, pp.data());
  // Each rank's download_params reads its owned ranges from its local layout.
  for (const auto& [lo, hi] : owned) {
    std::vector<float> got(hi - lo);
    dp->download_params(got.data(), part, lo, hi - lo);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), pp.begin() + (ptrdiff_t)lo)) << lo;
  }
  return pp;
}

// The ZeRO-0 strategy on expert slices (replicated.h): each rank keeps and
// updates only its slice's experts (their gradient all-reduced over the
// ranks holding the same slice, the rest over the world), and 3 AdamW steps
// give the parameters of the model holding every expert (gathered by
// params_f32 into the whole layout) bit for bit, with and without
// --overlap-comm. Its moments cover its slice alone, and its memory is the
// accounting's (train_slice_beside).
TEST(MpiExpertParallel, ExpertSliceTrainsAsTheWholeModelAtZero0) {
  const int W = g_comm->world();
  if (W == 1) GTEST_SKIP() << "a slice needs a second rank to hold the other experts";
  for (const auto& [name, c] : ep_cases(W)) {
    SCOPED_TRACE(name);
    auto be = make_cpu_backend(1);
    for (int n = 2; n <= W; n++) {
      if (W % n != 0 || c.num_experts % n != 0) continue;
      for (const bool overlap : {false, true}) {
        SCOPED_TRACE("--expert-parallel " + std::to_string(n) + (overlap ? ", overlap" : ""));
        EpRun whole(*be, c, 0, n, 8);
        DistributedConfig d;
        d.stage = 0;
        d.overlap = overlap;
        const std::vector<float> pp = train_slice_beside(whole, c, n, d), pw = whole.f32();
        if (overlap || (W & (W - 1)) == 0) {
          // The whole model's strategy overlaps (EpRun): the same per-layer
          // all-reduces, the slice's experts over fewer ranks whose other
          // terms were zeros (x + 0 == x). Without overlap the slice reduces
          // the buffer in three calls instead of per layer, which Open MPI's
          // recursive doubling (2 and 4 ranks) sums in the same order.
          EXPECT_TRUE(pp == pw) << "max difference " << max_diff(pp, pw);
        } else {
          // At 3 ranks its ring algorithm sums each element in an order that
          // depends on its chunk's place in the buffer, so another split
          // rounds otherwise: 6e-7 measured after 3 steps of lr 1e-2; a wrong
          // reduction domain moves a parameter by ~lr.
          EXPECT_LT(max_diff(pp, pw), 1e-5) << "without overlap";
        }
      }
    }
  }
}

// ZeRO 1-2 on expert slices: ZeRO-1 in its flat layout (flat_shards.h) and
// bucketed with --overlap-comm (bucket_domains.h), ZeRO-2 bucketed with and
// without overlap: each rank keeps only its slice's experts' weights and
// (ZeRO-1) gradients; their state (and at ZeRO-2 their summed gradient) is
// sharded over the world/N ranks holding the same slice, the rest over the
// world. 3 AdamW steps give the parameters of the model holding every
// expert (at the same stage with overlap: every expert's state sharded with
// the rest), the owned ranges tile the whole model, and the memory is the
// accounting's (train_slice_beside).
TEST(MpiExpertParallel, ExpertSliceTrainsAsTheWholeModelAtZero1And2) {
  const int W = g_comm->world();
  if (W == 1) GTEST_SKIP() << "a slice needs a second rank to hold the other experts";
  for (const auto& [name, c] : ep_cases(W)) {
    SCOPED_TRACE(name);
    auto be = make_cpu_backend(1);
    for (int n = 2; n <= W; n++) {
      if (W % n != 0 || c.num_experts % n != 0) continue;
      for (const int stage : {1, 2})
        for (const bool overlap : {false, true}) {
          SCOPED_TRACE("ZeRO-" + std::to_string(stage) + ", --expert-parallel " + std::to_string(n) +
                       (overlap ? ", overlap" : ""));
          EpRun whole(*be, c, stage, n, 8);
          DistributedConfig d;
          d.stage = stage;
          d.overlap = overlap;
          std::string line;
          const std::vector<float> pp = train_slice_beside(whole, c, n, d, &line), pw = whole.f32();
          EXPECT_NE(line.find("this rank holds 1/" + std::to_string(n) + " of the experts"),
                    std::string::npos)
              << line;
          if (stage == 1) {
            EXPECT_EQ(line.find("gradient buckets") != std::string::npos, overlap) << line;
          }
          // The reduce-scatters cut the sums otherwise than the whole
          // model's buckets (Open MPI's order can depend on an element's
          // place in the buffer at 3 ranks), and the norm adds in another
          // order: within 1e-5 after 3 steps of lr 1e-2; a wrong reduction
          // domain moves a parameter by ~lr (summing no replicas at 4 ranks:
          // 0.059).
          EXPECT_LT(max_diff(pp, pw), 1e-5) << "max difference " << max_diff(pp, pw);
        }
    }
  }
}

TEST(MpiExpertParallel, BadValuesRefusedNamingTheFlag) {
  const GPTConfig c = ratchet::testing::tiny_moe_config(Family::qwen3_moe);  // 4 experts
  auto refused = [&](int n, int world, const GPTConfig& cfg, const std::string& backend,
                     const std::string& words) {
    try {
      check_expert_parallel(n, world, cfg, backend);
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--expert-parallel"), std::string::npos) << m;
      EXPECT_NE(m.find(words), std::string::npos) << m;
      return;
    }
    ADD_FAILURE() << "--expert-parallel " << n << " on " << world << " ranks was accepted";
  };
  refused(3, 3, c, "cpu", "must divide num_experts 4");
  refused(2, 3, c, "cpu", "must divide the world size 3");
  refused(0, 2, c, "cpu", "at least 1");
  refused(2, 2, c, "metal", "runs on the cpu and cuda backends");
  refused(2, 2, ratchet::testing::tiny_llama_config(true, 2, 4, 2, 32, 40, 37, 16),
          "cpu", "needs a Mixture-of-Experts model");
  EXPECT_NO_THROW(check_expert_parallel(2, 4, c, "cpu"));
  EXPECT_NO_THROW(check_expert_parallel(1, 3, c, "cuda (bf16)"));  // 1: nothing to check
  EXPECT_NO_THROW(check_expert_parallel(2, 2, c, "cuda (f32)"));
  EXPECT_NO_THROW(check_expert_parallel(2, 2, c, "cuda (bf16)"));  // every ZeRO stage
  EXPECT_NO_THROW(check_expert_parallel(2, 2, c, "simt (bf16)"));
}

}  // namespace

int main(int argc, char** argv) { return ratchet::testing::run_mpi_gtests(argc, argv, &g_comm); }

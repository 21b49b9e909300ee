// Mixture-of-Experts layers in the model on the cpu backend (issue 39,
// docs/moe.md): finite-difference gradients of every tensor kind on the three
// MoE families' tiny configs (tests/testing/moe_configs.h: mixed dense/MoE
// layer patterns, OLMoE's clip_qkv), with the routing recorded in every
// forward and required to stay the same under each perturbation (no top-k
// flip); the aux loss's gradient by finite differences, and under gradient
// accumulation that of each micro-batch's own statistics; bitwise-equal
// gradients under every recompute policy; an expert that gets no token;
// E = 1, k = 1 equal to the dense SwiGLU model bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/gpt.h"
#include "model/moe_cost.h"
#include "testing/moe_configs.h"
#include "testing/recompute_cases.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

constexpr int kB = 2, kT = 9;

// The cpu backend, recording each MoE forward's top-k sets (from the logits
// x gate^T, computed here on the host: the cpu backend's memory is the
// host's) and the smallest gap between a token's k-th and (k+1)-th logit.
class RoutingBackend : public CpuBackend {
 public:
  RoutingBackend() : CpuBackend(1) {}
  void moe_forward(const MoeDims& d, cdptr x, cdptr gate, cdptr w1, cdptr w2, dptr out,
                   MoeState& st) override {
    const float* xs = static_cast<const float*>(x);
    const float* g = static_cast<const float*>(gate);
    std::vector<std::pair<float, int>> lg(d.E);
    for (int n = 0; n < d.N; n++) {
      for (int e = 0; e < d.E; e++) {
        double s = 0;
        for (int c = 0; c < d.C; c++) s += (double)xs[(size_t)n * d.C + c] * g[(size_t)e * d.C + c];
        lg[e] = {(float)s, e};
      }
      std::sort(lg.begin(), lg.end(), [](auto a, auto b) { return a.first > b.first; });
      std::vector<int> top;
      for (int j = 0; j < d.k; j++) top.push_back(lg[j].second);
      std::sort(top.begin(), top.end());
      routes.insert(routes.end(), top.begin(), top.end());
      if (d.k < d.E) margin = std::min(margin, lg[d.k - 1].first - lg[d.k].first);
    }
    CpuBackend::moe_forward(d, x, gate, w1, w2, out, st);
  }
  // clip_qkv: which inputs the clamp cuts (its kinks, as the top-k's choices).
  void clip_forward(dptr out, cdptr in, size_t n, float c) override {
    const float* v = static_cast<const float*>(in);
    for (size_t i = 0; i < n; i++) routes.push_back(v[i] < -c ? -1 : v[i] > c ? -2 : -3);
    CpuBackend::clip_forward(out, in, n, c);
  }
  std::vector<int> routes;
  float margin = INFINITY;
};

std::vector<float> params_of(GPT& m) {
  std::vector<float> p(m.num_params());
  m.get_params(p.data());
  return p;
}
std::vector<float> grads_of(GPT& m) {
  std::vector<float> g(m.num_params());
  m.get_grads(g.data());
  return g;
}

// A model with its router widened (margins) and its norm gains off their
// init, as the dense families' FD test does.
void prepare(GPT& m) {
  m.init_random(7);
  widen_router(m, 60.0f);
  std::vector<float> p = params_of(m);
  for (int i : {P_LN1W, P_LN2W, P_LNFW, P_QNORMW, P_KNORMW})
    for (size_t j = 0; j < m.layout().sizes[i]; j++)
      p[m.layout().offsets[i] + j] += 0.3f * std::sin(0.7f * (float)j + i);
  m.set_params(p.data());
}

// Central differences of the FP32 loss (CE + coef·aux: the objective the
// gradients are of) against the analytic gradient, on elements of every
// non-empty tensor. The routing (and clip_qkv's clamped set) of each
// perturbed forward must equal the unperturbed one: an element whose ±h
// flips a top-k choice is skipped (the loss has a kink there), and at least
// 3 of its tensor's first 40 candidates must be checked. Bound as test_model_families' (h = 1e-3, 5% + 3e-4): the
// loss carries ~4e-7 of FP32 rounding, ~2e-4 after dividing by 2h.
void expect_fd_gradients(const GPTConfig& cfg) {
  RoutingBackend be;
  GPT m(cfg, be);
  prepare(m);
  std::vector<float> p = params_of(m);
  const auto in = random_tokens(kB * kT, cfg.vocab_size, 1), tg = random_tokens(kB * kT, cfg.vocab_size, 2);
  m.zero_grad();
  be.routes.clear();
  m.forward_backward(in.data(), tg.data(), kB, kT, 1.0f);
  const std::vector<int> routes = be.routes;
  ASSERT_FALSE(routes.empty());
  EXPECT_GT(be.margin, 2e-3f) << "the unperturbed routing has a near tie";
  const std::vector<float> g = grads_of(m);
  const float coef = cfg.router_aux_loss_coef;
  bool same_routes = true;
  auto objective = [&]() {  // CE + coef·aux of one micro-batch
    be.routes.clear();
    m.zero_grad();
    const double ce = m.forward_backward(in.data(), tg.data(), kB, kT, 1.0f);
    same_routes = same_routes && be.routes == routes;
    return ce + coef * m.moe_stats().aux_loss;
  };
  for (int t = 0; t < kNumParamTensors; t++) {
    const size_t n = m.layout().sizes[t];
    if (n == 0) continue;
    const size_t per = m.layout().per_layer(t, cfg.num_layers);
    int checked = 0, candidates = 0;
    for (size_t k = 0; k < 40 && checked < 3; k++) {
      size_t i = m.layout().offsets[t] + (k * 7919 + 13) % n;
      if (t == P_WTE || t == P_LMHEAD)
        i = m.layout().offsets[t] + (size_t)in[k % in.size()] * cfg.channels + k % cfg.channels;
      // The expert tensors of a MoE layer (a dense layer's slice is zero and
      // unused: its gradient must be exactly 0, checked below).
      const int layer = is_block_tensor(t) ? (int)((i - m.layout().offsets[t]) / per) : -1;
      const bool moe_tensor =
          t == P_ROUTERW || t == P_EXPW1 || t == P_EXPW2 || t == P_SHW1 || t == P_SHW2 || t == P_SHGATE;
      const bool dense_tensor = t == P_FCW || t == P_FCPROJW;
      if ((moe_tensor && !cfg.layer_is_moe(layer)) || (dense_tensor && cfg.layer_is_moe(layer))) {
        EXPECT_EQ(g[i], 0.0f) << ParamLayout::name(t) << " of layer " << layer << " is unused";
        continue;
      }
      candidates++;
      same_routes = true;
      const float keep = p[i], h = 1e-3f;
      p[i] = keep + h;
      m.set_params(p.data());
      const double lp = objective();
      p[i] = keep - h;
      m.set_params(p.data());
      const double lm = objective();
      p[i] = keep;
      m.set_params(p.data());
      if (!same_routes) continue;  // a kink between the two points
      checked++;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(g[i], fd, 0.05 * std::fabs(fd) + 3e-4)
          << family_name(cfg.family) << " tensor " << ParamLayout::name(t) << " element "
          << i - m.layout().offsets[t] << " (layer " << layer << ")";
    }
    if (candidates > 0) {
      EXPECT_GE(checked, 3) << ParamLayout::name(t) << ": too many perturbations flip the routing";
    }
  }
}

TEST(MoeModel, GradientsMatchFiniteDifferences) {
  for (const auto& [name, f] : moe_families()) {
    SCOPED_TRACE(name);
    expect_fd_gradients(tiny_moe_config(f));
  }
}

// Shared experts (shw1, shw2 on the MoE layers; zero and unused on the dense
// ones), with sigmoid scores and a routed scale (qwen3_moe) and wider than
// the dense MLP (mixtral).
TEST(MoeModel, SharedExpertGradientsMatchFiniteDifferences) {
  for (Family f : {Family::qwen3_moe, Family::mixtral}) {
    SCOPED_TRACE(family_name(f));
    const GPTConfig cfg = tiny_shared_config(f);
    ASSERT_GT(ParamLayout(cfg).sizes[P_SHW1], 0u);
    expect_fd_gradients(cfg);
  }
}

// Qwen2-MoE's gated shared expert: shw1, shw2 and the gate row shgate on the
// MoE layers (zero and unused on the dense layer 2), with q/k/v biases.
TEST(MoeModel, GatedSharedExpertGradientsMatchFiniteDifferences) {
  const GPTConfig cfg = tiny_gated_config();
  ASSERT_EQ(ParamLayout(cfg).sizes[P_SHGATE], (size_t)cfg.num_layers * cfg.channels);
  expect_fd_gradients(cfg);
}

// The gate scales the shared expert's output by sigmoid(x · g) per token:
// with g = 0 (sigmoid exactly 1/2) the gated model of width 32 is the
// ungated one (n_shared_experts 2 of I = 16) with shw2 halved, bit for bit
// (halving is exact and commutes with every sum), forward and gradients;
// any nonzero g changes the loss.
TEST(MoeModel, GateAtZeroHalvesTheSharedExpert) {
  const GPTConfig gated = tiny_gated_config(0.05f, 32);
  GPTConfig plain = gated;
  plain.shared_expert_ffn = 0, plain.n_shared_experts = 2;
  plain.finalize();
  ASSERT_EQ(plain.shared_ffn(), 32);
  CpuBackend be(1);
  GPT m(gated, be), n(plain, be);
  m.init_random(5);
  widen_router(m, 20.f);
  std::vector<float> p = params_of(m), q(n.num_params());
  const ParamLayout &lm = m.layout(), &ln = n.layout();
  std::fill_n(p.begin() + lm.offsets[P_SHGATE], lm.sizes[P_SHGATE], 0.0f);
  for (int t = 0; t < kNumParamTensors; t++) {
    if (t == P_SHGATE) continue;
    ASSERT_EQ(lm.sizes[t], ln.sizes[t]) << ParamLayout::name(t);
    for (size_t j = 0; j < lm.sizes[t]; j++)
      q[ln.offsets[t] + j] = p[lm.offsets[t] + j] * (t == P_SHW2 ? 0.5f : 1.0f);
  }
  m.set_params(p.data());
  n.set_params(q.data());
  const auto in = random_tokens(kB * kT, gated.vocab_size, 1), tg = random_tokens(kB * kT, gated.vocab_size, 2);
  m.zero_grad();
  n.zero_grad();
  const float lg = m.forward_backward(in.data(), tg.data(), kB, kT, 1.0f);
  const float lp = n.forward_backward(in.data(), tg.data(), kB, kT, 1.0f);
  EXPECT_EQ(lg, lp);
  const std::vector<float> gg = grads_of(m), gp = grads_of(n);
  for (int t = 0; t < kNumParamTensors; t++) {
    if (t == P_SHGATE || t == P_SHW2) continue;  // shw2's: d(W/2) = 2·(1/2)·dW: checked by FD instead
    EXPECT_EQ(std::memcmp(gg.data() + lm.offsets[t], gp.data() + ln.offsets[t], lm.sizes[t] * 4), 0)
        << ParamLayout::name(t);
  }
  // The gate's gradient is not zero at g = 0 (sigmoid'(0) = 1/4).
  double gate_grad = 0;
  for (size_t j = 0; j < lm.sizes[P_SHGATE]; j++) gate_grad += std::fabs(gg[lm.offsets[P_SHGATE] + j]);
  EXPECT_GT(gate_grad, 0.0);
  p[lm.offsets[P_SHGATE] + lm.per_layer(P_SHGATE, gated.num_layers) + 3] = 0.5f;  // layer 1, channel 3
  m.set_params(p.data());
  EXPECT_NE(m.forward(in.data(), tg.data(), kB, kT), lg);
}

// The shared experts change the output: zeroing shw2 gives the model
// without them (a config with n_shared_experts 0 and the same other
// tensors) bit for bit, and any nonzero shw2 changes the loss.
TEST(MoeModel, SharedExpertAddsToTheRoutedOutput) {
  const GPTConfig cfg = tiny_shared_config(Family::mixtral);
  GPTConfig none = cfg;
  none.n_shared_experts = 0;
  none.finalize();
  CpuBackend be(1);
  GPT m(cfg, be), n(none, be);
  m.init_random(3);
  std::vector<float> p = params_of(m), q(n.num_params());
  const ParamLayout &lm = m.layout(), &ln = n.layout();
  for (int t = 0; t < kNumParamTensors; t++)
    if (t != P_SHW1 && t != P_SHW2) {
      ASSERT_EQ(lm.sizes[t], ln.sizes[t]) << ParamLayout::name(t);
      std::copy_n(p.begin() + lm.offsets[t], lm.sizes[t], q.begin() + ln.offsets[t]);
    }
  n.set_params(q.data());
  const auto in = random_tokens(kB * kT, cfg.vocab_size, 1), tg = random_tokens(kB * kT, cfg.vocab_size, 2);
  const float with = m.forward(in.data(), tg.data(), kB, kT);
  std::fill_n(p.begin() + lm.offsets[P_SHW2], lm.sizes[P_SHW2], 0.0f);
  m.set_params(p.data());
  const float zeroed = m.forward(in.data(), tg.data(), kB, kT);
  const float without = n.forward(in.data(), tg.data(), kB, kT);
  EXPECT_EQ(zeroed, without);  // + 0 exactly
  EXPECT_NE(with, without);
}

// Qwen2-MoE: the shared expert (3·C·Is) and its gate row (C) on each MoE
// layer, all of it active; the dense layer's slices count as unused FLOPs.
TEST(MoeModel, GatedSharedExpertCountsAsActiveParameters) {
  const GPTConfig cfg = tiny_gated_config();
  GPTConfig none = cfg;
  none.shared_expert_ffn = 0;
  none.finalize();
  const double C = cfg.channels, extra = cfg.moe_layer_count() * (3 * C * cfg.shared_ffn() + C);
  EXPECT_EQ(cfg.param_count() - none.param_count(), extra);
  EXPECT_EQ(active_param_count(cfg) - active_param_count(none), extra);
  // The flat buffer holds them for all 4 layers; layer 2 (dense) never multiplies its slice.
  EXPECT_EQ((double)(ParamLayout(cfg).total - ParamLayout(none).total), 4 * (3 * C * cfg.shared_ffn() + C));
  EXPECT_EQ(unused_matmul_params(cfg) - unused_matmul_params(none), 3 * C * cfg.shared_ffn() + C);
}

// Parameter counts: each MoE layer adds 3·C·Is, all of it active.
TEST(MoeModel, SharedExpertsCountAsActiveParameters) {
  const GPTConfig cfg = tiny_shared_config(Family::mixtral);
  GPTConfig none = cfg;
  none.n_shared_experts = 0;
  none.finalize();
  const double extra = (double)cfg.moe_layer_count() * 3 * cfg.channels * cfg.shared_ffn();
  EXPECT_EQ(cfg.param_count() - none.param_count(), extra);
  EXPECT_EQ(active_param_count(cfg) - active_param_count(none), extra);
}

// The gradient the aux loss adds (coef·d aux: the gradients with coef minus
// those without) against central differences of the aux loss alone, for one
// micro-batch, and for two accumulated with loss_scale 1/2: then the
// objective is the mean of each micro-batch's own aux loss (its own
// statistics), which differs from the aux loss of the two pooled.
TEST(MoeModel, AuxLossGradientMatchesFiniteDifferences) {
  const float coef = 2.0f;  // large, so that the aux gradient stands out of FP32 noise
  GPTConfig cfg = tiny_moe_config(Family::mixtral, coef), off = tiny_moe_config(Family::mixtral, 0);
  RoutingBackend be;
  GPT m(cfg, be), m0(off, be);
  prepare(m);
  m0.set_params(params_of(m).data());
  std::vector<float> p = params_of(m);
  std::vector<std::vector<int32_t>> in, tg;
  for (int mb = 0; mb < 2; mb++) {
    in.push_back(random_tokens(kB * kT, cfg.vocab_size, 1 + mb));
    tg.push_back(random_tokens(kB * kT, cfg.vocab_size, 5 + mb));
  }
  for (int micro : {1, 2}) {
    SCOPED_TRACE(std::to_string(micro) + " micro-batch(es)");
    const float scale = 1.0f / micro;
    auto grads = [&](GPT& g) {
      g.zero_grad();
      for (int mb = 0; mb < micro; mb++)
        g.forward_backward(in[mb].data(), tg[mb].data(), kB, kT, scale);
      return grads_of(g);
    };
    const std::vector<float> gc = grads(m), g0 = grads(m0);
    auto aux = [&]() {  // the mean of each micro-batch's aux loss
      double a = 0;
      for (int mb = 0; mb < micro; mb++) {
        m.zero_grad();
        m.forward_backward(in[mb].data(), tg[mb].data(), kB, kT, scale);
        a += scale * m.moe_stats().aux_loss;
      }
      return a;
    };
    auto pooled_aux = [&]() {  // the aux loss of both micro-batches as one
      std::vector<int32_t> x = in[0], y = tg[0];
      x.insert(x.end(), in[1].begin(), in[1].end());
      y.insert(y.end(), tg[1].begin(), tg[1].end());
      m.zero_grad();
      m.forward_backward(x.data(), y.data(), 2 * kB, kT, 1.0f);
      return m.moe_stats().aux_loss;
    };
    double worst_pooled = 0;
    int checked = 0;
    for (int t : {P_ROUTERW, P_LN2W, P_QKVW, P_WTE}) {
      const size_t n = m.layout().sizes[t], per = m.layout().per_layer(t, cfg.num_layers);
      for (size_t k = 0; k < 6; k++) {
        const size_t i = m.layout().offsets[t] + (k * 7919 + 13) % n;
        if (t == P_ROUTERW && !cfg.layer_is_moe((int)((i - m.layout().offsets[t]) / per))) continue;
        const float keep = p[i], h = 1e-3f;
        p[i] = keep + h;
        m.set_params(p.data());
        const double ap = aux(), pp = micro == 2 ? pooled_aux() : 0;
        p[i] = keep - h;
        m.set_params(p.data());
        const double am = aux(), pm = micro == 2 ? pooled_aux() : 0;
        p[i] = keep;
        m.set_params(p.data());
        const double fd = coef * (ap - am) / (2 * h), got = (double)gc[i] - g0[i];
        // The difference of two FP32 gradients of ~1e-2 carries ~1e-8 of
        // rounding; the FD ~1e-4 (FP32 losses over 2h): 5% + 2e-4.
        EXPECT_NEAR(got, fd, 0.05 * std::fabs(fd) + 2e-4)
            << ParamLayout::name(t) << " element " << i - m.layout().offsets[t];
        if (micro == 2) worst_pooled = std::max(worst_pooled, std::fabs(got - coef * (pp - pm) / (2 * h)));
        checked++;
      }
    }
    EXPECT_GT(checked, 10);
    // Pooled statistics would be another objective: the test can tell them apart.
    if (micro == 2) {
      EXPECT_GT(worst_pooled, 1e-3) << "the pooled aux loss gives the same gradient";
    }
  }
}

// The aux loss of a micro-batch is transformers' function of its pooled
// statistics, and the statistics count every MoE layer's k selections of each token.
TEST(MoeModel, StatisticsCountEveryMoeLayer) {
  const GPTConfig cfg = tiny_moe_config(Family::mixtral);
  auto be = make_cpu_backend(1);
  GPT m(cfg, *be);
  m.init_random(3);
  const auto in = random_tokens(kB * kT, cfg.vocab_size, 1), tg = random_tokens(kB * kT, cfg.vocab_size, 2);
  m.forward_backward(in.data(), tg.data(), kB, kT, 1.0f);
  const GPT::MoeStats& s = m.moe_stats();
  const int Lm = cfg.moe_layer_count(), E = cfg.num_experts;
  ASSERT_EQ(Lm, 3);
  ASSERT_EQ(s.counts.size(), (size_t)Lm * E);
  EXPECT_EQ(s.rows, (double)kB * kT * Lm);
  for (int l = 0; l < Lm; l++) {
    double sum = 0;
    for (int e = 0; e < E; e++) sum += s.counts[(size_t)l * E + e];
    EXPECT_EQ(sum, (double)kB * kT * cfg.experts_per_tok) << "MoE layer " << l;
  }
  double psum = 0, loss = 0;
  for (int e = 0; e < E; e++) psum += s.prob_sums[e];
  EXPECT_NEAR(psum, s.rows, 1e-4);  // every row's probabilities sum to 1 (FP32)
  for (int e = 0; e < E; e++) {
    double f = 0;
    for (int l = 0; l < Lm; l++) f += s.counts[(size_t)l * E + e];
    loss += (f / s.rows) * (s.prob_sums[e] / s.rows);
  }
  EXPECT_DOUBLE_EQ(s.aux_loss, E * loss);
  // Near-uniform routing at init: the loss is close to k (its value there).
  EXPECT_NEAR(s.aux_loss, cfg.experts_per_tok, 0.2);
}

// Losses, gradients and updated parameters keep their bits under every
// recompute policy, the aux loss included (a recomputed block refills its
// MoE state without counting its statistics again).
TEST(MoeModel, GradientsAreBitwiseTheSameUnderEveryPolicy) {
  auto be = make_cpu_backend(2);
  auto cases = moe_families();
  const size_t plain = cases.size();
  cases.push_back({"mixtral shared", Family::mixtral});  // with shared experts
  cases.push_back({"qwen2_moe gated", Family::qwen2_moe});  // with the gated shared expert
  for (size_t c = 0; c < cases.size(); c++) {
    const auto& [name, f] = cases[c];
    SCOPED_TRACE(name);
    const GPTConfig cfg = c < plain                 ? tiny_moe_config(f, 0.5f)
                          : f == Family::qwen2_moe ? tiny_gated_config(0.5f)
                                                   : tiny_shared_config(f, 0.5f);
    const PolicyStep ref = run_policy_step(*be, cfg, Recompute(), 2, 9);
    for (const std::string& pol : policies_to_test()) {
      const PolicyStep got = run_policy_step(*be, cfg, parse_recompute(pol), 2, 9);
      EXPECT_EQ(first_bit_difference(got.losses, ref.losses), "") << pol << " losses";
      EXPECT_EQ(first_bit_difference(got.grads, ref.grads), "") << pol << " gradients";
      EXPECT_EQ(first_bit_difference(got.params, ref.params), "") << pol << " params";
      EXPECT_LE(got.activation_bytes, ref.activation_bytes) << pol;
    }
  }
}

// An expert no token chooses: E = 5, k = 2, router rows w, -w, u, -u, 0, so
// for every token one of w·x, -w·x and one of u·x, -u·x is positive and the
// fifth expert's logit 0 never reaches the top 2. Its weights get exactly
// zero gradient, change nothing, and it counts zero tokens; the rest train.
TEST(MoeModel, ExpertWithNoTokens) {
  GPTConfig cfg = tiny_moe_config(Family::mixtral);
  cfg.num_experts = 5;
  cfg.finalize();
  auto be = make_cpu_backend(1);
  GPT m(cfg, *be);
  m.init_random(5);
  std::vector<float> p = params_of(m);
  const ParamLayout& lay = m.layout();
  const int L = cfg.num_layers, C = cfg.channels, E = 5, I = cfg.moe_ffn_hidden;
  for (int l = 0; l < L; l++) {
    if (!cfg.layer_is_moe(l)) continue;
    float* r = p.data() + lay.offsets[P_ROUTERW] + (size_t)l * E * C;
    for (int c = 0; c < C; c++) {
      const float w = std::sin(1.3f * c + l), u = std::cos(0.7f * c - l);
      r[0 * C + c] = w, r[1 * C + c] = -w, r[2 * C + c] = u, r[3 * C + c] = -u, r[4 * C + c] = 0;
    }
  }
  m.set_params(p.data());
  const auto in = random_tokens(kB * kT, cfg.vocab_size, 1), tg = random_tokens(kB * kT, cfg.vocab_size, 2);
  m.zero_grad();
  const float loss = m.forward_backward(in.data(), tg.data(), kB, kT, 1.0f);
  EXPECT_TRUE(std::isfinite(loss));
  const std::vector<float> g = grads_of(m);
  const GPT::MoeStats& s = m.moe_stats();
  for (int q = 0; q < cfg.moe_layer_count(); q++) EXPECT_EQ(s.counts[(size_t)q * E + 4], 0.0);
  for (int l = 0; l < L; l++) {
    if (!cfg.layer_is_moe(l)) continue;
    for (int t : {P_EXPW1, P_EXPW2}) {
      const size_t per = lay.per_layer(t, L) / E, base = lay.offsets[t] + (size_t)l * E * per;
      double empty = 0, used = 0;
      for (size_t j = 0; j < per; j++) empty += std::fabs(g[base + 4 * per + j]);
      for (size_t j = 0; j < 4 * per; j++) used += std::fabs(g[base + j]);
      EXPECT_EQ(empty, 0.0) << ParamLayout::name(t) << " of the empty expert, layer " << l;
      EXPECT_GT(used, 0.0) << ParamLayout::name(t) << " of the used experts, layer " << l;
    }
    // Its router row still gets the softmax's gradient (its probability is in
    // every token's normaliser).
    double row = 0;
    for (int c = 0; c < C; c++) row += std::fabs(g[lay.offsets[P_ROUTERW] + ((size_t)l * E + 4) * C + c]);
    EXPECT_GT(row, 0.0);
  }
  // Its weights do not change the loss.
  std::vector<float> q = p;
  for (int l = 0; l < L; l++)
    if (cfg.layer_is_moe(l))
      for (size_t j = 0; j < (size_t)2 * I * C; j++)
        q[lay.offsets[P_EXPW1] + ((size_t)l * E + 4) * 2 * I * C + j] += 0.5f;
  m.set_params(q.data());
  const float again = m.forward(in.data(), tg.data(), kB, kT);
  EXPECT_EQ(std::memcmp(&again, &loss, sizeof loss), 0);
}

// E = 1, k = 1 with I = H is the dense SwiGLU model: the router's softmax
// over one expert is 1, the combine multiplies by 1, the expert's GEMMs run
// on the tokens in order. Same loss, same gradients (expw1/expw2 = fcw/fcprojw,
// the router's exactly 0), bit for bit.
TEST(MoeModel, OneExpertEqualsTheDenseModelBitForBit) {
  GPTConfig dense = tiny_llama_config(true, 3, 4, 2, 32, 16, 37, 16);
  dense.rope_factor = 0;
  dense.finalize();
  GPTConfig moe = dense;
  moe.family = Family::mixtral;
  moe.num_experts = 1;
  moe.experts_per_tok = 1;
  moe.moe_ffn_hidden = 16;
  moe.norm_topk_prob = true;
  moe.finalize();
  auto be = make_cpu_backend(2);
  GPT d(dense, *be), e(moe, *be);
  d.init_random(9);
  const ParamLayout &ld = d.layout(), &le = e.layout();
  ASSERT_EQ(le.sizes[P_FCW], 0u);
  const std::vector<float> pd = params_of(d);
  std::vector<float> pe(e.num_params(), 0.0f);
  auto move = [&](int from, int to) {
    ASSERT_EQ(ld.sizes[from], le.sizes[to]);
    std::copy_n(pd.begin() + ld.offsets[from], ld.sizes[from], pe.begin() + le.offsets[to]);
  };
  for (int t = 0; t < kNumParamTensors; t++)
    if (t != P_FCW && t != P_FCPROJW && ld.sizes[t] > 0) move(t, t);
  move(P_FCW, P_EXPW1);
  move(P_FCPROJW, P_EXPW2);
  for (size_t j = 0; j < le.sizes[P_ROUTERW]; j++) pe[le.offsets[P_ROUTERW] + j] = 0.1f * std::sin((float)j);
  e.set_params(pe.data());
  const auto in = random_tokens(kB * kT, dense.vocab_size, 1), tg = random_tokens(kB * kT, dense.vocab_size, 2);
  d.zero_grad();
  e.zero_grad();
  const float a = d.forward_backward(in.data(), tg.data(), kB, kT, 1.0f);
  const float b = e.forward_backward(in.data(), tg.data(), kB, kT, 1.0f);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << a << " vs " << b;
  const std::vector<float> gd = grads_of(d), ge = grads_of(e);
  auto same = [&](int from, int to) {
    EXPECT_EQ(std::memcmp(gd.data() + ld.offsets[from], ge.data() + le.offsets[to], ld.sizes[from] * 4), 0)
        << ParamLayout::name(from) << " vs " << ParamLayout::name(to);
  };
  for (int t = 0; t < kNumParamTensors; t++)
    if (t != P_FCW && t != P_FCPROJW && ld.sizes[t] > 0) same(t, t);
  same(P_FCW, P_EXPW1);
  same(P_FCPROJW, P_EXPW2);
  for (size_t j = 0; j < le.sizes[P_ROUTERW]; j++) EXPECT_EQ(ge[le.offsets[P_ROUTERW] + j], 0.0f);
}

// clip_qkv clamps: a tiny bound changes the loss, one above every value does not.
TEST(MoeModel, ClipQkvIsWiredIn) {
  GPTConfig cfg = tiny_moe_config(Family::olmoe);
  auto loss_of = [&](float clip) {
    GPTConfig c = cfg;
    c.clip_qkv = clip;
    c.finalize();
    auto be = make_cpu_backend(1);
    GPT m(c, *be);
    m.init_random(3);
    const auto in = random_tokens(kB * kT, c.vocab_size, 1), tg = random_tokens(kB * kT, c.vocab_size, 2);
    return m.forward(in.data(), tg.data(), kB, kT);
  };
  const float none = loss_of(0);
  EXPECT_EQ(loss_of(1e6f), none);
  EXPECT_NE(loss_of(0.5f), none);
}

}  // namespace

// The DeepSeek-V3-style options of the MoE layer (src/moe/moe_ops.h):
// sigmoid scores, the selection bias (e_score_correction_bias), the
// renormalisation with + 1e-20, routed_scaling_factor and the shared expert,
// against a double-precision reference written here from transformers'
// DeepseekV3TopkRouter and DeepseekV3MoE, every gradient by central
// differences; and the bias's update rule.
//
// L = sum(out .* R), R fixed random; h = 1e-5 in double (truncation ~h^2,
// round-off ~1e-16 |L| / h, so the estimate is good to ~1e-9). The FP32
// backward's own error is a few roundings over at most ~100 terms; the
// tolerance, 1e-4 of the tensor's largest gradient plus 1e-3 relative, is
// ~100x above it, while a wrong formula is off by O(1). Every test asserts a
// margin of at least 1e-3 between the k-th and (k+1)-th BIASED score and that
// the routing is the same at every evaluation, so no top-k choice flips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet::moe {
namespace {

using VD = std::vector<double>;
using VF = std::vector<float>;

struct Params {
  VD x, gate, w1, w2, sw1, sw2, bias;  // (N,C) (E,C) (E,2I,C) (E,C,I) (2Is,C) (C,Is) (E)
};

VD randn(std::mt19937& g, size_t n, double scale) {
  std::normal_distribution<double> d(0.0, scale);
  VD v(n);
  for (auto& x : v) x = (float)d(g);  // representable in FP32: both sides see the same inputs
  return v;
}
VF to_f(const VD& v) { return VF(v.begin(), v.end()); }

Params make_params(const MoeShape& s, unsigned seed, double bias_scale) {
  std::mt19937 g(seed);
  Params p;
  p.x = randn(g, (size_t)s.N * s.C, 1.0);
  p.gate = randn(g, (size_t)s.E * s.C, 0.5);
  p.w1 = randn(g, (size_t)s.E * 2 * s.I * s.C, 0.3);
  p.w2 = randn(g, (size_t)s.E * s.C * s.I, 0.3);
  p.sw1 = randn(g, (size_t)2 * s.Is * s.C, 0.3);
  p.sw2 = randn(g, (size_t)s.C * s.Is, 0.3);
  p.bias = randn(g, (size_t)s.E, bias_scale);
  return p;
}

// y (C) = SwiGLU MLP w1 (2H,C) rows gate | up, w2 (C,H), on x (C), added.
void ref_mlp(const double* w1, const double* w2, const double* x, int C, int H, double wt,
             double* out) {
  VD a(H);
  for (int i = 0; i < H; i++) {
    double gg = 0, u = 0;
    for (int c = 0; c < C; c++) {
      gg += w1[(size_t)i * C + c] * x[c];
      u += w1[(size_t)(H + i) * C + c] * x[c];
    }
    a[i] = gg / (1 + std::exp(-gg)) * u;
  }
  for (int c = 0; c < C; c++) {
    double y = 0;
    for (int i = 0; i < H; i++) y += w2[(size_t)c * H + i] * a[i];
    out[c] += wt * y;
  }
}

struct RefOut {
  double L = 0;
  std::vector<int> idx;
  double margin = 1e9;
  VD w;  // (N,k) routing weights
};
// transformers: scores = sigmoid(logits) (or softmax); choice on scores +
// bias; weights = scores of the chosen; / (sum + 1e-20) with norm_topk_prob;
// * routed_scaling_factor; + shared_experts(x).
RefOut ref_loss(const MoeShape& s, const Params& p, const VD& R, bool use_bias) {
  const int N = s.N, C = s.C, E = s.E, k = s.k;
  RefOut o;
  for (int n = 0; n < N; n++) {
    const double* xn = p.x.data() + (size_t)n * C;
    VD sc(E);
    for (int e = 0; e < E; e++) {
      double l = 0;
      for (int c = 0; c < C; c++) l += xn[c] * p.gate[(size_t)e * C + c];
      sc[e] = l;
    }
    if (s.sigmoid) {
      for (int e = 0; e < E; e++) sc[e] = 1 / (1 + std::exp(-sc[e]));
    } else {
      double mx = *std::max_element(sc.begin(), sc.end()), sum = 0;
      for (int e = 0; e < E; e++) sum += (sc[e] = std::exp(sc[e] - mx));
      for (int e = 0; e < E; e++) sc[e] /= sum;
    }
    VD choice(E);
    for (int e = 0; e < E; e++) choice[e] = sc[e] + (use_bias ? p.bias[e] : 0.0);
    std::vector<int> order(E);
    for (int e = 0; e < E; e++) order[e] = e;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return choice[a] > choice[b]; });
    if (k < E) o.margin = std::min(o.margin, choice[order[k - 1]] - choice[order[k]]);
    double wsum = 0;
    for (int j = 0; j < k; j++) wsum += sc[order[j]];
    VD out(C, 0.0);
    for (int j = 0; j < k; j++) {
      const int e = order[j];
      o.idx.push_back(e);
      double w = s.norm_topk_prob ? sc[e] / (wsum + (s.sigmoid ? 1e-20 : 0.0)) : sc[e];
      w *= s.routed_scale;
      o.w.push_back(w);
      ref_mlp(p.w1.data() + (size_t)e * 2 * s.I * C, p.w2.data() + (size_t)e * C * s.I, xn, C,
              s.I, w, out.data());
    }
    if (s.Is > 0) ref_mlp(p.sw1.data(), p.sw2.data(), xn, C, s.Is, 1.0, out.data());
    for (int c = 0; c < C; c++) o.L += out[c] * R[(size_t)n * C + c];
  }
  return o;
}

struct Grads {
  VF out, dx, dgate, dw1, dw2, dsw1, dsw2, w, bias_after;
  std::vector<int> idx;
};

Grads run_layer(const MoeShape& s, const Params& p, const VD& R, bool use_bias) {
  CpuBackend be(1);
  VF x = to_f(p.x), gate = to_f(p.gate), w1 = to_f(p.w1), w2 = to_f(p.w2), sw1 = to_f(p.sw1),
     sw2 = to_f(p.sw2), bias = to_f(p.bias), dout = to_f(R);
  MoeExtra extra;
  extra.bias = use_bias ? bias.data() : nullptr;
  extra.sw1 = sw1.data();
  extra.sw2 = sw2.data();
  Grads g;
  g.out.assign((size_t)s.N * s.C, NAN);
  MoeCache cache;
  moe_forward(be, s, x.data(), gate.data(), w1.data(), w2.data(), g.out.data(), cache, nullptr,
              &extra);
  g.dx.assign(x.size(), NAN);
  g.dgate.assign(gate.size(), 0.0f);
  g.dw1.assign(w1.size(), 0.0f);
  g.dw2.assign(w2.size(), 0.0f);
  g.dsw1.assign(sw1.size(), 0.0f);
  g.dsw2.assign(sw2.size(), 0.0f);
  moe_backward(be, s, x.data(), gate.data(), w1.data(), w2.data(), dout.data(), cache, nullptr,
               g.dx.data(), g.dgate.data(), g.dw1.data(), g.dw2.data(), nullptr, nullptr, &extra,
               g.dsw1.data(), g.dsw2.data());
  g.idx = cache.idx;
  g.w = cache.w;
  g.bias_after = bias;
  return g;
}

void expect_grad(const char* name, const VF& got, VD& theta, const MoeShape& s, Params& p,
                 const VD& R, bool use_bias, const std::vector<int>& idx) {
  const double h = 1e-5;
  VD num(theta.size());
  for (size_t i = 0; i < theta.size(); i++) {
    const double t = theta[i];
    theta[i] = t + h;
    RefOut a = ref_loss(s, p, R, use_bias);
    theta[i] = t - h;
    RefOut b = ref_loss(s, p, R, use_bias);
    theta[i] = t;
    ASSERT_EQ(a.idx, idx) << name << "[" << i << "]: the step flipped a top-k choice";
    ASSERT_EQ(b.idx, idx) << name << "[" << i << "]: the step flipped a top-k choice";
    num[i] = (a.L - b.L) / (2 * h);
  }
  double scale = 0;
  for (double v : num) scale = std::max(scale, std::fabs(v));
  ASSERT_GT(scale, 0.0) << name << ": the test would check nothing";
  for (size_t i = 0; i < num.size(); i++)
    EXPECT_NEAR(got[i], num[i], 1e-4 * scale + 1e-3 * std::fabs(num[i])) << name << "[" << i << "]";
}

void check_all(const MoeShape& s, Params p, bool use_bias, unsigned seed) {
  std::mt19937 g(seed);
  const VD R = randn(g, (size_t)s.N * s.C, 1.0);
  const RefOut base = ref_loss(s, p, R, use_bias);
  ASSERT_GT(base.margin, 1e-3) << "pick another seed: a near-tie could flip under the step";
  Grads got = run_layer(s, p, R, use_bias);
  ASSERT_EQ(got.idx, base.idx) << "routing differs from the reference";
  for (size_t i = 0; i < base.w.size(); i++)
    EXPECT_NEAR(got.w[i], base.w[i], 1e-6 * (1 + std::fabs(base.w[i])));  // a few FP32 roundings
  double L = 0;
  for (size_t i = 0; i < R.size(); i++) L += got.out[i] * R[i];
  EXPECT_NEAR(L, base.L, 1e-5 * (1 + std::fabs(base.L)));  // FP32 sums of ~100 terms
  expect_grad("dx", got.dx, p.x, s, p, R, use_bias, base.idx);
  expect_grad("dgate", got.dgate, p.gate, s, p, R, use_bias, base.idx);
  expect_grad("dw1", got.dw1, p.w1, s, p, R, use_bias, base.idx);
  expect_grad("dw2", got.dw2, p.w2, s, p, R, use_bias, base.idx);
  if (s.Is > 0) {
    expect_grad("dsw1", got.dsw1, p.sw1, s, p, R, use_bias, base.idx);
    expect_grad("dsw2", got.dsw2, p.sw2, s, p, R, use_bias, base.idx);
  }
  // The bias is a buffer: the layer never writes it.
  EXPECT_EQ(got.bias_after, to_f(p.bias));
}

MoeShape shape(int N, int C, int E, int k, int I, bool norm, bool sigmoid, float scale, int Is) {
  MoeShape s{N, C, E, k, I, norm};
  s.sigmoid = sigmoid;
  s.routed_scale = scale;
  s.Is = Is;
  return s;
}

TEST(MoeDeepSeek, SigmoidBiasScaleSharedGradients) {
  const MoeShape s = shape(6, 8, 5, 2, 4, true, true, 2.5f, 6);
  check_all(s, make_params(s, 21, 0.2), true, 31);
}

TEST(MoeDeepSeek, SigmoidWithoutNormTopkProbOrShared) {
  const MoeShape s = shape(6, 8, 4, 2, 5, false, true, 1.5f, 0);
  check_all(s, make_params(s, 22, 0.2), true, 32);
}

TEST(MoeDeepSeek, SoftmaxWithSharedExpertAndScale) {
  const MoeShape s = shape(5, 8, 4, 2, 3, true, false, 0.75f, 3);
  check_all(s, make_params(s, 23, 0.0), false, 33);
}

// A bias large enough to decide the choice: expert 0 is chosen by every
// token and expert E-1 by none, whatever the scores say. The weights stay
// the unbiased sigmoid scores of the chosen experts (renormalised, scaled).
TEST(MoeDeepSeek, BiasSelectsButDoesNotWeigh) {
  MoeShape s = shape(6, 8, 4, 2, 3, true, true, 2.0f, 0);
  Params p = make_params(s, 24, 0.0);
  p.bias = {3.0, 0.0, 0.0, -3.0};  // sigmoid scores lie in (0,1): +-3 always wins/loses
  std::mt19937 g(34);
  const VD R = randn(g, (size_t)s.N * s.C, 1.0);
  Grads got = run_layer(s, p, R, true);
  for (int n = 0; n < s.N; n++) {
    EXPECT_EQ(got.idx[(size_t)n * 2], 0) << "token " << n;
    EXPECT_NE(got.idx[(size_t)n * 2 + 1], 3) << "token " << n;
    // The two weights sum to the scale: they are renormalised unbiased
    // scores, not biased ones (which would sum to 2 only by accident).
    EXPECT_NEAR(got.w[(size_t)n * 2] + got.w[(size_t)n * 2 + 1], 2.0f, 1e-6);  // FP32 rounding
  }
  check_all(s, p, true, 34);
}

// The default options (softmax, scale 1, no bias, no shared expert) give
// the same bits with and without an (empty) MoeExtra.
TEST(MoeDeepSeek, DefaultsChangeNoBit) {
  const MoeShape s = shape(16, 8, 4, 2, 5, true, false, 1.0f, 0);
  Params p = make_params(s, 25, 0.0);
  CpuBackend be(1);
  VF x = to_f(p.x), gate = to_f(p.gate), w1 = to_f(p.w1), w2 = to_f(p.w2), dout(x.size(), 0.25f);
  VF out1(x.size()), out2(x.size()), dx1(x.size()), dx2(x.size()), dg1(gate.size(), 0.0f),
      dg2(gate.size(), 0.0f), a1(w1.size(), 0.0f), a2(w1.size(), 0.0f), b1(w2.size(), 0.0f),
      b2(w2.size(), 0.0f);
  MoeCache c1, c2;
  MoeExtra none;
  moe_forward(be, s, x.data(), gate.data(), w1.data(), w2.data(), out1.data(), c1);
  moe_forward(be, s, x.data(), gate.data(), w1.data(), w2.data(), out2.data(), c2, nullptr, &none);
  moe_backward(be, s, x.data(), gate.data(), w1.data(), w2.data(), dout.data(), c1, nullptr,
               dx1.data(), dg1.data(), a1.data(), b1.data());
  moe_backward(be, s, x.data(), gate.data(), w1.data(), w2.data(), dout.data(), c2, nullptr,
               dx2.data(), dg2.data(), a2.data(), b2.data(), nullptr, nullptr, &none);
  EXPECT_EQ(out1, out2);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dg1, dg2);
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(b1, b2);
}

TEST(MoeDeepSeek, SharedExpertWithoutWeightsIsRefused) {
  const MoeShape s = shape(2, 8, 4, 2, 3, true, true, 1.0f, 3);
  CpuBackend be(1);
  VF x(16, 0.1f), gate(32, 0.1f), w1(4 * 6 * 8, 0.1f), w2(4 * 8 * 3, 0.1f), out(16);
  MoeCache c;
  try {
    moe_forward(be, s, x.data(), gate.data(), w1.data(), w2.data(), out.data(), c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_shared_experts"), std::string::npos) << e.what();
  }
}

// The update rule: delta_e = rate * sign(mean - load_e), minus its mean.
TEST(MoeDeepSeek, BiasUpdateRule) {
  // loads 10, 2, 6, 6: mean 6, signs -1, +1, 0, 0 (sum 0: the mean is 0)
  {
    const double load[] = {10, 2, 6, 6};
    float bias[] = {0.5f, 0.0f, -0.25f, 0.0f};
    bias_update(4, load, 0.125f, bias);
    EXPECT_EQ(bias[0], 0.375f);
    EXPECT_EQ(bias[1], 0.125f);
    EXPECT_EQ(bias[2], -0.25f);
    EXPECT_EQ(bias[3], 0.0f);
  }
  // loads 9, 1, 1: mean 11/3, signs -1, +1, +1; mean of delta r/3; delta
  // -4r/3, 2r/3, 2r/3 (sums to zero).
  {
    const double load[] = {9, 1, 1};
    float bias[] = {0.0f, 0.0f, 0.0f};
    bias_update(3, load, 0.75f, bias);
    EXPECT_EQ(bias[0], -1.0f);
    EXPECT_EQ(bias[1], 0.5f);
    EXPECT_EQ(bias[2], 0.5f);
  }
  // Balanced, or no tokens at all: unchanged.
  for (double v : {0.0, 5.0}) {
    const double load[] = {v, v, v};
    float bias[] = {0.1f, -0.2f, 0.3f};
    bias_update(3, load, 0.5f, bias);
    EXPECT_EQ(bias[0], 0.1f);
    EXPECT_EQ(bias[1], -0.2f);
    EXPECT_EQ(bias[2], 0.3f);
  }
  float b[] = {0.0f};
  const double l[] = {1.0};
  EXPECT_THROW(bias_update(1, l, -1.0f, b), Error);
  EXPECT_THROW(bias_update(1, l, NAN, b), Error);
}

// The loop the trainer runs: route, count the global load, update. An
// expert the gate favours loses bias until the load evens out; a starved
// one gains it.
TEST(MoeDeepSeek, BiasUpdateBalancesTheLoad) {
  MoeShape s = shape(64, 8, 4, 1, 3, true, true, 1.0f, 0);
  Params p = make_params(s, 26, 0.0);
  for (int n = 0; n < s.N; n++) p.x[(size_t)n * s.C] = 1.0;
  for (int e = 0; e < s.E; e++) p.gate[(size_t)e * s.C] = e == 0 ? 3.0 : 0.0;  // expert 0 favoured
  CpuBackend be(1);
  VF x = to_f(p.x), gate = to_f(p.gate), w1 = to_f(p.w1), w2 = to_f(p.w2), out(x.size());
  VF bias(s.E, 0.0f);
  MoeExtra extra;
  extra.bias = bias.data();
  auto load_of = [&] {
    MoeCache c;
    moe_forward(be, s, x.data(), gate.data(), w1.data(), w2.data(), out.data(), c, nullptr,
                &extra);
    std::vector<double> counts(s.E, 0.0), sums(s.E, 0.0);
    aux_stats(s, c.probs.data(), c.idx.data(), counts.data(), sums.data());
    return counts;
  };
  auto max_load = [](const std::vector<double>& l) { return *std::max_element(l.begin(), l.end()); };
  const std::vector<double> first = load_of();
  for (int step = 0; step < 200; step++) bias_update(s.E, load_of().data(), 0.01f, bias.data());
  const std::vector<double> last = load_of();
  EXPECT_GT(max_load(first), 0.6 * s.N) << "expert 0 should start overloaded";
  EXPECT_LT(max_load(last), 0.5 * s.N) << "the bias update should spread the load";
  EXPECT_LT(bias[0], 0.0f);
  double sum = 0;
  for (float v : bias) sum += v;
  EXPECT_NEAR(sum, 0.0, 1e-5);  // each delta sums to 0; FP32 rounding of 200 additions
}

}  // namespace
}  // namespace ratchet::moe

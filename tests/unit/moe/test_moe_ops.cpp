// The MoE layer ops (src/moe/moe_ops.h) against a double-precision reference
// written here from transformers' Qwen3MoeSparseMoeBlock and
// load_balancing_loss_func, and every gradient against central differences.
//
// Scalar L = sum(out .* R) + coef * aux_loss, R fixed random. dL/dtheta is
// estimated by (L(theta + h) - L(theta - h)) / 2h in double with h = 1e-5
// (truncation ~h^2, round-off ~1e-16 |L| / h: the estimate is good to ~1e-9),
// so what is measured is the FP32 backward's own error: a few roundings
// (6e-8) per term over at most ~100 terms. The tolerance, 1e-4 of the
// tensor's largest gradient plus 1e-3 relative, is ~100x above that, while a
// wrong formula or index is off by O(1).
// A top-k choice must not flip under the step: every test asserts a margin of
// at least 1e-3 between the k-th and (k+1)-th probability (the step moves a
// logit by ~1e-5) and that the reference's routing is the same at every
// evaluation.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet::moe {
namespace {

using VD = std::vector<double>;
using VF = std::vector<float>;

struct Params {
  VD x, gate, w1, w2;  // (N,C) (E,C) (E,2I,C) (E,C,I)
};

VD randn(std::mt19937& g, size_t n, double scale) {
  std::normal_distribution<double> d(0.0, scale);
  VD v(n);
  for (auto& x : v) x = (float)d(g);  // representable in FP32: both sides see the same inputs
  return v;
}
VF to_f(const VD& v) { return VF(v.begin(), v.end()); }

Params make_params(const MoeShape& s, unsigned seed) {
  std::mt19937 g(seed);
  Params p;
  p.x = randn(g, (size_t)s.N * s.C, 1.0);
  p.gate = randn(g, (size_t)s.E * s.C, 1.0);
  p.w1 = randn(g, (size_t)s.E * 2 * s.I * s.C, 0.3);
  p.w2 = randn(g, (size_t)s.E * s.C * s.I, 0.3);
  return p;
}

// The reference: returns L and the routing it chose (idx) and the smallest
// gap between the k-th and (k+1)-th probability of any token.
struct RefOut {
  double L = 0;
  std::vector<int> idx;
  double margin = 1e9;
};
RefOut ref_loss(const MoeShape& s, const Params& p, const VD& R, double coef, int pert_slot = -1,
                double pert = 0.0) {
  const int N = s.N, C = s.C, E = s.E, k = s.k, I = s.I;
  RefOut o;
  o.idx.assign((size_t)N * k, -1);
  VD counts(E, 0.0), psum(E, 0.0);
  for (int n = 0; n < N; n++) {
    VD prob(E);
    double mx = -1e300, sum = 0;
    for (int e = 0; e < E; e++) {
      double l = 0;
      for (int c = 0; c < C; c++) l += p.x[(size_t)n * C + c] * p.gate[(size_t)e * C + c];
      prob[e] = l;
      mx = std::max(mx, l);
    }
    for (int e = 0; e < E; e++) sum += (prob[e] = std::exp(prob[e] - mx));
    for (int e = 0; e < E; e++) prob[e] /= sum, psum[e] += prob[e];
    std::vector<int> order(E);
    for (int e = 0; e < E; e++) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
    if (k < E) o.margin = std::min(o.margin, prob[order[k - 1]] - prob[order[k]]);
    double wsum = 0;
    for (int j = 0; j < k; j++) wsum += prob[order[j]];
    VD out(C, 0.0);
    for (int j = 0; j < k; j++) {
      const int e = order[j];
      o.idx[(size_t)n * k + j] = e;
      counts[e] += 1;
      double w = s.norm_topk_prob ? prob[e] / wsum : prob[e];
      if (pert_slot == n * k + j) w += pert;
      const double* w1 = p.w1.data() + (size_t)e * 2 * I * C;
      const double* w2 = p.w2.data() + (size_t)e * C * I;
      VD a(I);
      for (int i = 0; i < I; i++) {
        double gg = 0, u = 0;
        for (int c = 0; c < C; c++) {
          gg += w1[(size_t)i * C + c] * p.x[(size_t)n * C + c];
          u += w1[(size_t)(I + i) * C + c] * p.x[(size_t)n * C + c];
        }
        a[i] = gg / (1 + std::exp(-gg)) * u;
      }
      for (int c = 0; c < C; c++) {
        double y = 0;
        for (int i = 0; i < I; i++) y += w2[(size_t)c * I + i] * a[i];
        out[c] += w * y;
      }
    }
    for (int c = 0; c < C; c++) o.L += out[c] * R[(size_t)n * C + c];
  }
  double aux = 0;
  for (int e = 0; e < E; e++) aux += (counts[e] / N) * (psum[e] / N);
  o.L += coef * E * aux;
  return o;
}

struct Grads {
  VF out, dx, dgate, dw1, dw2, dw_route;
  std::vector<int> idx;
  std::vector<int> counts;
};
constexpr float kPrefill = 0.5f;  // parameter gradients accumulate onto this

Grads run_layer(int threads, const MoeShape& s, const Params& p, const VD& R, float coef) {
  CpuBackend be(threads);
  VF x = to_f(p.x), gate = to_f(p.gate), w1 = to_f(p.w1), w2 = to_f(p.w2), dout = to_f(R);
  Grads g;
  g.out.assign((size_t)s.N * s.C, NAN);
  MoeCache cache;
  moe_forward(be, s, x.data(), gate.data(), w1.data(), w2.data(), g.out.data(), cache);
  std::vector<double> counts(s.E, 0.0), sums(s.E, 0.0);
  aux_stats(s, cache.probs.data(), cache.idx.data(), counts.data(), sums.data());
  VF dprob(s.E);
  aux_loss(s.E, counts.data(), sums.data(), s.N, coef, dprob.data());
  g.dx.assign(x.size(), NAN);
  g.dgate.assign(gate.size(), kPrefill);
  g.dw1.assign(w1.size(), kPrefill);
  g.dw2.assign(w2.size(), kPrefill);
  g.dw_route.assign((size_t)s.N * s.k, NAN);
  moe_backward(be, s, x.data(), gate.data(), w1.data(), w2.data(), dout.data(), cache,
               dprob.data(), g.dx.data(), g.dgate.data(), g.dw1.data(), g.dw2.data(),
               g.dw_route.data());
  for (auto* v : {&g.dgate, &g.dw1, &g.dw2})
    for (auto& d : *v) d -= kPrefill;
  g.idx = cache.idx;
  g.counts = cache.dispatch.counts;
  return g;
}

// Central differences of ref_loss over every element of one tensor.
void expect_grad(const char* name, const VF& got, VD& theta, const MoeShape& s, Params& p,
                 const VD& R, double coef, const std::vector<int>& idx) {
  const double h = 1e-5;
  VD num(theta.size());
  for (size_t i = 0; i < theta.size(); i++) {
    const double t = theta[i];
    theta[i] = t + h;
    RefOut a = ref_loss(s, p, R, coef);
    theta[i] = t - h;
    RefOut b = ref_loss(s, p, R, coef);
    theta[i] = t;
    ASSERT_EQ(a.idx, idx) << name << "[" << i << "]: the step flipped a top-k choice";
    ASSERT_EQ(b.idx, idx) << name << "[" << i << "]: the step flipped a top-k choice";
    num[i] = (a.L - b.L) / (2 * h);
  }
  double scale = 0;
  for (double v : num) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < num.size(); i++)
    EXPECT_NEAR(got[i], num[i], 1e-4 * scale + 1e-3 * std::fabs(num[i])) << name << "[" << i << "]";
}

void check_all_grads(const MoeShape& s, Params p, float coef, unsigned seed) {
  std::mt19937 g(seed);
  const VD R = randn(g, (size_t)s.N * s.C, 1.0);
  const RefOut base = ref_loss(s, p, R, coef);
  ASSERT_GT(base.margin, 1e-3) << "pick another seed: a near-tie could flip under the step";
  Grads got = run_layer(1, s, p, R, coef);
  ASSERT_EQ(got.idx, base.idx) << "routing differs from the reference";
  // Forward: L from the FP32 output (+ the aux term from the reference).
  const RefOut no_aux = ref_loss(s, p, R, 0.0);
  double L = 0;
  for (size_t i = 0; i < R.size(); i++) L += got.out[i] * R[i];
  EXPECT_NEAR(L, no_aux.L, 1e-5 * (1 + std::fabs(no_aux.L)));  // FP32 sums of ~100 terms
  expect_grad("dx", got.dx, p.x, s, p, R, coef, base.idx);
  expect_grad("dgate", got.dgate, p.gate, s, p, R, coef, base.idx);
  expect_grad("dw1", got.dw1, p.w1, s, p, R, coef, base.idx);
  expect_grad("dw2", got.dw2, p.w2, s, p, R, coef, base.idx);
  // The routing weights' own gradient: perturb w[n,j] after renormalisation.
  VD num(got.dw_route.size());
  for (size_t i = 0; i < num.size(); i++)
    num[i] = (ref_loss(s, p, R, coef, (int)i, 1e-5).L - ref_loss(s, p, R, coef, (int)i, -1e-5).L) /
             2e-5;
  double scale = 0;
  for (double v : num) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < num.size(); i++)
    EXPECT_NEAR(got.dw_route[i], num[i], 1e-4 * scale + 1e-3 * std::fabs(num[i])) << "dw[" << i << "]";
}

TEST(MoeOps, GradientsWithNormTopkProb) {
  MoeShape s{6, 8, 4, 2, 5, true};
  check_all_grads(s, make_params(s, 1), 0.3f, 11);
}

TEST(MoeOps, GradientsWithoutNormTopkProb) {
  MoeShape s{6, 8, 4, 2, 5, false};
  check_all_grads(s, make_params(s, 2), 0.3f, 12);
}

TEST(MoeOps, GradientsWithTopOneAndNoAuxLoss) {
  MoeShape s{7, 8, 3, 1, 4, false};
  check_all_grads(s, make_params(s, 3), 0.0f, 13);
}

// Channel 0 of x is 1 and gate[:,0] is -5 for expert 1, +5 for the others:
// with k = 2 of 4, expert 1 (between two experts with rows) never gets a
// token. Its gradients stay zero and the others' are still right.
TEST(MoeOps, ExpertWithNoTokens) {
  MoeShape s{6, 8, 4, 2, 5, true};
  Params p = make_params(s, 4);
  for (int n = 0; n < s.N; n++) p.x[(size_t)n * s.C] = 1.0;
  for (int e = 0; e < s.E; e++) p.gate[(size_t)e * s.C] = e == 1 ? -5.0 : 5.0;
  std::mt19937 g(14);
  const VD R = randn(g, (size_t)s.N * s.C, 1.0);
  Grads got = run_layer(1, s, p, R, 0.3f);
  ASSERT_EQ(got.counts[1], 0);
  const size_t w1n = (size_t)2 * s.I * s.C, w2n = (size_t)s.C * s.I;
  for (size_t i = w1n; i < 2 * w1n; i++) EXPECT_EQ(got.dw1[i], 0.0f);
  for (size_t i = w2n; i < 2 * w2n; i++) EXPECT_EQ(got.dw2[i], 0.0f);
  check_all_grads(s, p, 0.3f, 14);
}

// E = 1, k = 1: the weight is 1 (softmax of one logit, renormalised or not),
// so the layer is exactly the dense SwiGLU MLP built from the same backend
// ops, forward and backward, bit for bit; the router gets zero gradient.
TEST(MoeOps, OneExpertEqualsDenseSwiGLU) {
  for (bool norm : {true, false}) {
    MoeShape s{9, 16, 1, 1, 12, norm};
    Params p = make_params(s, 5);
    std::mt19937 g(15);
    const VD R = randn(g, (size_t)s.N * s.C, 1.0);
    Grads got = run_layer(1, s, p, R, 0.0f);
    CpuBackend be(1);
    VF x = to_f(p.x), w1 = to_f(p.w1), w2 = to_f(p.w2), dout = to_f(R);
    VF h((size_t)s.N * 2 * s.I), a((size_t)s.N * s.I), out((size_t)s.N * s.C);
    be.matmul_forward(h.data(), nullptr, x.data(), w1.data(), nullptr, s.N, s.C, 2 * s.I);
    be.swiglu_forward(a.data(), h.data(), s.N, s.I);
    be.matmul_forward(out.data(), nullptr, a.data(), w2.data(), nullptr, s.N, s.I, s.C);
    EXPECT_EQ(got.out, out);
    VF da(a.size()), dh(h.size()), dx(x.size()), dw1(w1.size(), 0.0f), dw2(w2.size(), 0.0f);
    be.matmul_backward(da.data(), dw2.data(), nullptr, dout.data(), a.data(), w2.data(), s.N, s.I,
                       s.C);
    be.swiglu_backward(dh.data(), h.data(), da.data(), s.N, s.I);
    be.matmul_backward(dx.data(), dw1.data(), nullptr, dh.data(), x.data(), w1.data(), s.N, s.C,
                       2 * s.I);
    EXPECT_EQ(got.dx, dx);
    // dgate/dw1/dw2 were pre-filled with 0.5 and had it subtracted: compare
    // against the dense gradients through the same two roundings.
    for (size_t i = 0; i < dw1.size(); i++) EXPECT_EQ(got.dw1[i], (kPrefill + dw1[i]) - kPrefill);
    for (size_t i = 0; i < dw2.size(); i++) EXPECT_EQ(got.dw2[i], (kPrefill + dw2[i]) - kPrefill);
    for (float v : got.dgate) EXPECT_EQ(v, 0.0f);
  }
}

// The experts shared out among 2 threads (nesting off, OpenMP's default)
// give the same bits as the experts in turn with each op split over the 2
// threads (nesting on): the same sgemm calls on the same blocks
// (src/moe/moe_experts.cpp), at sizes where the backend's gemm splits its
// work. (1 thread against 2 is not asserted: the gemm's blocks follow the
// thread count, and OpenBLAS's Haswell kernels round a block of a C row
// otherwise than the whole row: OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU.)
TEST(MoeOps, BitIdenticalWhetherExpertsOrTheirGemmsShareTheThreads) {
  MoeShape s{256, 64, 8, 2, 96, true};
  Params p = make_params(s, 6);
  std::mt19937 g(16);
  const VD R = randn(g, (size_t)s.N * s.C, 1.0);
  const int levels = omp_get_max_active_levels();
  omp_set_max_active_levels(1);
  Grads a = run_layer(2, s, p, R, 0.01f);
  omp_set_max_active_levels(2);
  Grads b = run_layer(2, s, p, R, 0.01f);
  omp_set_max_active_levels(levels);
  EXPECT_EQ(a.idx, b.idx);
  EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.dx.data(), b.dx.data(), a.dx.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.dgate.data(), b.dgate.data(), a.dgate.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.dw1.data(), b.dw1.data(), a.dw1.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.dw2.data(), b.dw2.data(), a.dw2.size() * 4));
}

// transformers' load_balancing_loss_func, transcribed: tokens_per_expert is
// the (k,E) mean of the one-hot top-k selections, router_prob_per_expert the
// (E) mean of the probabilities, loss = E * sum(tokens_per_expert * P).
double hf_aux_loss(const std::vector<VD>& probs, const std::vector<std::vector<int>>& idx, int E,
                   int k) {
  const double T = probs.size();
  std::vector<VD> tpe(k, VD(E, 0.0));
  VD P(E, 0.0);
  for (size_t n = 0; n < probs.size(); n++)
    for (int e = 0; e < E; e++) {
      P[e] += probs[n][e] / T;
      for (int j = 0; j < k; j++) tpe[j][e] += (idx[n][j] == e) / T;
    }
  double loss = 0;
  for (int j = 0; j < k; j++)
    for (int e = 0; e < E; e++) loss += tpe[j][e] * P[e];
  return loss * E;
}

TEST(MoeOps, AuxLossMatchesTransformersAndEqualsKWhenUniform) {
  const int N = 12, C = 8, E = 6, k = 2;
  MoeShape s{N, C, E, k, 4, true};
  CpuBackend be(1);
  for (int uniform = 0; uniform < 2; uniform++) {
    Params p = make_params(s, 7);
    if (uniform) std::fill(p.gate.begin(), p.gate.end(), 0.0);  // every prob fl(1/E)
    VF x = to_f(p.x), gate = to_f(p.gate);
    VF logits((size_t)N * E), probs((size_t)N * E), w((size_t)N * k);
    std::vector<int> idx((size_t)N * k);
    router_forward(be, s, x.data(), gate.data(), logits.data(), probs.data(), idx.data(), w.data());
    std::vector<double> counts(E, 0.0), sums(E, 0.0);
    aux_stats(s, probs.data(), idx.data(), counts.data(), sums.data());
    const double loss = aux_loss(E, counts.data(), sums.data(), N, 1.0f, nullptr);
    std::vector<VD> P(N);
    std::vector<std::vector<int>> I(N);
    for (int n = 0; n < N; n++) {
      P[n].assign(probs.begin() + (size_t)n * E, probs.begin() + (size_t)(n + 1) * E);
      I[n].assign(idx.begin() + (size_t)n * k, idx.begin() + (size_t)(n + 1) * k);
    }
    EXPECT_NEAR(loss, hf_aux_loss(P, I, E, k), 1e-12);  // the same double sums, reordered
    if (uniform) {
      EXPECT_EQ(idx[0], 0);  // ties go to the lower expert index
      EXPECT_EQ(idx[1], 1);
      // P_e = 1/E: E * sum_e f_e / E = sum_e f_e = k, up to 1/E's FP32 rounding (6e-8 relative)
      EXPECT_NEAR(loss, k, 1e-6);
    }
  }
  // Uniform selections with non-uniform probabilities: f_e = k/E, so the
  // loss is E * (k/E) * sum_e P_e = k (up to the FP32 rows' sums to 1).
  std::mt19937 g(8);
  VF probs((size_t)N * E);
  std::vector<int> idx((size_t)N * k);
  for (int n = 0; n < N; n++) {
    double sum = 0;
    for (int e = 0; e < E; e++) sum += (probs[(size_t)n * E + e] = 0.1f + (g() % 100) / 100.0f);
    for (int e = 0; e < E; e++) probs[(size_t)n * E + e] /= (float)sum;
    for (int j = 0; j < k; j++) idx[(size_t)n * k + j] = (n * k + j) % E;
  }
  std::vector<double> counts(E, 0.0), sums(E, 0.0);
  aux_stats(s, probs.data(), idx.data(), counts.data(), sums.data());
  EXPECT_NEAR(aux_loss(E, counts.data(), sums.data(), N, 1.0f, nullptr), k, 1e-6);  // FP32 rows
  // Statistics add: two halves accumulated equal the whole.
  std::vector<double> c2(E, 0.0), s2(E, 0.0);
  MoeShape half = s;
  half.N = N / 2;
  aux_stats(half, probs.data(), idx.data(), c2.data(), s2.data());
  aux_stats(half, probs.data() + (size_t)(N / 2) * E, idx.data() + (size_t)(N / 2) * k, c2.data(),
            s2.data());
  EXPECT_EQ(c2, counts);
  for (int e = 0; e < E; e++) EXPECT_NEAR(s2[e], sums[e], 1e-12);  // double sums, other grouping
}

// Dispatch keeps token order within an expert and inverts exactly.
TEST(MoeOps, DispatchIsAStablePermutation) {
  MoeShape s{5, 4, 3, 2, 4, true};
  const std::vector<int> idx = {2, 0, 0, 2, 1, 2, 2, 0, 0, 1};
  Dispatch d;
  build_dispatch(s, idx.data(), d);
  EXPECT_EQ(d.counts, (std::vector<int>{4, 2, 4}));
  EXPECT_EQ(d.offsets, (std::vector<int>{0, 4, 6, 10}));
  EXPECT_EQ(d.slot_of, (std::vector<int>{1, 2, 7, 8, 4, 9, 0, 3, 5, 6}));
  for (int i = 0; i < 10; i++) EXPECT_EQ(d.slot_of[d.row_of[i]], i);
}

TEST(MoeOps, BadTopKIsRefused) {
  CpuBackend be(1);
  for (int k : {0, 5, -1}) {
    MoeShape s{2, 4, 4, k, 4, true};
    try {
      check_shape(s);
      ADD_FAILURE() << "k = " << k << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("num_experts_per_tok (top-k) is " + std::to_string(k)),
                std::string::npos)
          << e.what();
    }
    VF x(8), gate(16), out(8), w1(4 * 8 * 4), w2(4 * 16);
    MoeCache cache;
    EXPECT_THROW(
        moe_forward(be, s, x.data(), gate.data(), w1.data(), w2.data(), out.data(), cache), Error);
  }
  MoeShape s{2, 4, 0, 1, 4, true};
  EXPECT_THROW(check_shape(s), Error);
}

}  // namespace
}  // namespace ratchet::moe

// CPU backend forward ops against naive double-precision references written
// here, on small odd shapes (B=2, T=5, C=12, NH=3, V=13, Vp=16) and on shapes
// large enough to take the multi-threaded paths. Every output buffer carries
// guard elements after its end that must come back untouched; GEMMs are also
// checked EXACTLY with integer-valued inputs; every op is run twice and must
// give the same bits. Gradients are in test_cpu_grad.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_math.h"
#include "core/rng.h"
#include "testing/backend_buffers.h"

namespace ratchet {
namespace {

using testing::IntBuf;
using testing::randn;

constexpr size_t kGuard = 16;                // sentinel floats after each buffer
constexpr uint32_t kSentinel = 0x7FA5A5A5u;  // a NaN payload no op produces

// n floats of backend memory followed by kGuard sentinel floats.
class Buf {
 public:
  Buf(Backend& be, size_t n) : be_(be), n_(n) {
    p_ = static_cast<float*>(be.alloc((n + kGuard) * sizeof(float)));
    std::vector<uint32_t> g(kGuard, kSentinel);
    be.upload_bytes(p_ + n, g.data(), kGuard * sizeof(float));
  }
  ~Buf() { be_.release(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float* get() const { return p_; }
  size_t size() const { return n_; }
  void set(const std::vector<float>& v) {
    ASSERT_EQ(v.size(), n_);
    be_.upload_f32(p_, v.data(), n_);
  }
  std::vector<float> get_host() const {
    std::vector<float> v(n_);
    be_.download_f32(v.data(), p_, n_);
    return v;
  }
  bool guard_ok() const {
    std::vector<uint32_t> g(kGuard);
    be_.download_bytes(g.data(), p_ + n_, kGuard * sizeof(float));
    for (uint32_t x : g)
      if (x != kSentinel) return false;
    return true;
  }

 private:
  Backend& be_;
  size_t n_;
  float* p_;
};


// Integers uniform in [-k, k], as floats.
std::vector<float> randint(Rng& rng, size_t n, int k) {
  std::vector<float> v(n);
  for (auto& x : v) x = (float)((int)rng.below(2 * k + 1) - k);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// |got - ref| <= atol + rtol |ref| everywhere; reports the first few misses.
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double atol,
                  double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double err = std::fabs((double)got[i] - ref[i]);
    if (!(err <= atol + rtol * std::fabs(ref[i]))) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i] << " (err "
                      << err << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off";
}

// ---- naive double references --------------------------------------------------

double gelu_ref(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

// out (N,OC) = inp (N,C) @ w (OC,C)^T + bias
std::vector<double> matmul_ref(const std::vector<float>& inp, const std::vector<float>& w,
                               const float* bias, int N, int C, int OC) {
  std::vector<double> out((size_t)N * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; c++) s += (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
      out[(size_t)n * OC + o] = s;
    }
  return out;
}

// out (B,T,C), att (B,NH,T,T) of causal attention over qkv (B,T,3C).
// out (B,T,C) and lse (B,NH,T) = log sum_{j<=i} exp(scale q_i.k_j), in double.
void attention_ref(const std::vector<float>& qkv, int B, int T, int C, int NH,
                   std::vector<double>& out, std::vector<double>& lse) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt((double)hs);
  out.assign((size_t)B * T * C, 0.0);
  lse.assign((size_t)B * NH * T, 0.0);
  std::vector<double> a;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const float* q = &qkv[((size_t)b * T + i) * 3 * C + h * hs];
        std::vector<double> s(i + 1);
        double mx = -1e300;
        for (int j = 0; j <= i; j++) {
          const float* k = &qkv[((size_t)b * T + j) * 3 * C + C + h * hs];
          double d = 0;
          for (int e = 0; e < hs; e++) d += (double)q[e] * k[e];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; j++) sum += (s[j] = std::exp(s[j] - mx));
        lse[((size_t)b * NH + h) * T + i] = mx + std::log(sum);
        a.assign(i + 1, 0.0);
        for (int j = 0; j <= i; j++) a[j] = s[j] / sum;
        double* o = &out[((size_t)b * T + i) * C + h * hs];
        for (int j = 0; j <= i; j++) {
          const float* v = &qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hs];
          for (int e = 0; e < hs; e++) o[e] += a[j] * v[e];
        }
      }
}

class CpuOps : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  Backend& b() { return *be; }
};

// ---- memory ----------------------------------------------------------------------

TEST_F(CpuOps, Memory) {
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_EQ(be->storage_bytes(), 4u);
  for (size_t bytes : {1ul, 63ul, 64ul, 1000ul, 1ul << 20}) {
    unsigned char* p = static_cast<unsigned char*>(be->alloc(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += p[i] != 0;
    EXPECT_EQ(nonzero, 0u) << "alloc(" << bytes << ") not zero-filled";
    be->release(p);
  }
  Rng rng(1);
  auto v = randn(rng, 100);
  Buf buf(b(), 100);
  buf.set(v);
  EXPECT_TRUE(same_bits(buf.get_host(), v));
  be->zero(buf.get(), 100 * sizeof(float));
  EXPECT_TRUE(same_bits(buf.get_host(), std::vector<float>(100, 0.0f)));
  EXPECT_TRUE(buf.guard_ok());
}

// ---- encoder ---------------------------------------------------------------------

TEST_F(CpuOps, EncoderForward) {
  const int B = 2, T = 5, C = 12, Vp = 16, maxT = 7;
  Rng rng(2);
  std::vector<int> tok(B * T);
  for (auto& t : tok) t = (int)rng.below(13);
  tok[3] = tok[7] = 15;  // a padded-vocab row is still a valid index
  auto wte = randn(rng, Vp * C), wpe = randn(rng, maxT * C);
  Buf d_out(b(), B * T * C), d_wte(b(), Vp * C), d_wpe(b(), maxT * C);
  d_wte.set(wte);
  d_wpe.set(wpe);
  IntBuf d_tok(b(), tok);
  be->encoder_forward(d_out.get(), d_tok.get(), d_wte.get(), d_wpe.get(), B, T, C);
  std::vector<double> ref(B * T * C);
  for (int bt = 0; bt < B * T; bt++)
    for (int c = 0; c < C; c++)
      ref[bt * C + c] = (double)wte[tok[bt] * C + c] + wpe[(bt % T) * C + c];
  // One float addition per element, correctly rounded: exact against a float sum.
  expect_close(d_out.get_host(), ref, 0.0, 0.6 * 1.2e-7, "encoder out");
  EXPECT_TRUE(d_out.guard_ok());
}

// ---- layernorm -------------------------------------------------------------------

void layernorm_case(Backend& be, int N, int C, float offset, double tol) {
  Rng rng(3 + N + C);
  auto x = randn(rng, (size_t)N * C, 1.0f, offset);
  auto w = randn(rng, C, 0.5f, 1.0f), bias = randn(rng, C, 0.5f);
  Buf d_out(be, (size_t)N * C), d_x(be, (size_t)N * C), d_w(be, C), d_b(be, C);
  Buf d_mean(be, N), d_rstd(be, N);
  d_x.set(x);
  d_w.set(w);
  d_b.set(bias);
  be.layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), N,
                       C);
  std::vector<double> out((size_t)N * C), mean(N), rstd(N);
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[(size_t)n * C + c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[(size_t)n * C + c] - m) * (x[(size_t)n * C + c] - m);
    v /= C;
    mean[n] = m;
    rstd[n] = 1.0 / std::sqrt(v + 1e-5);
    for (int c = 0; c < C; c++)
      out[(size_t)n * C + c] = (x[(size_t)n * C + c] - m) * rstd[n] * w[c] + bias[c];
  }
  const std::string shape =
      " N=" + std::to_string(N) + " C=" + std::to_string(C) + " offset=" + std::to_string(offset);
  // mean: a float sum of C terms of size |offset|+1, relative error ~1e-7.
  expect_close(d_mean.get_host(), mean, 1e-6, 1e-6, "layernorm mean" + shape);
  expect_close(d_rstd.get_host(), rstd, 0.0, tol, "layernorm rstd" + shape);
  // out = normalized (|.| <~ 4) * w + b: a few float roundings of O(1) values.
  expect_close(d_out.get_host(), out, tol * 4, tol, "layernorm out" + shape);
  EXPECT_TRUE(d_out.guard_ok() && d_mean.guard_ok() && d_rstd.guard_ok());
}

TEST_F(CpuOps, LayernormForward) {
  layernorm_case(b(), 10, 12, 0.0f, 2e-6);   // B*T=10, C=12
  layernorm_case(b(), 37, 768, 0.5f, 2e-6);  // GPT-2 width, odd row count
  // Mean 300 with unit spread: a one-pass E[x^2]-E[x]^2 in float would lose
  // every digit of the variance; two-pass keeps ~1e-5 (the float inputs' own
  // offset rounding is the limit: ulp(300) = 3e-5 against unit spread).
  layernorm_case(b(), 9, 100, 300.0f, 1e-5);
}

// ---- matmul ----------------------------------------------------------------------

// Integer inputs: every product and partial sum is an integer below 2^24, so
// FP32 sgemm must agree with the naive loop EXACTLY, forward and backward.
void matmul_exact_case(Backend& be, int N, int C, int OC) {
  SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC));
  Rng rng(N * 1000 + C * 10 + OC);
  auto inp = randint(rng, (size_t)N * C, 4), w = randint(rng, (size_t)OC * C, 4);
  auto bias = randint(rng, OC, 50), dout = randint(rng, (size_t)N * OC, 3);
  auto dw0 = randint(rng, (size_t)OC * C, 100), db0 = randint(rng, OC, 100);
  Buf d_inp(be, (size_t)N * C), d_w(be, (size_t)OC * C), d_b(be, OC), d_out(be, (size_t)N * OC);
  Buf d_dout(be, (size_t)N * OC), d_dinp(be, (size_t)N * C), d_dw(be, (size_t)OC * C), d_db(be, OC);
  d_inp.set(inp);
  d_w.set(w);
  d_b.set(bias);
  d_dout.set(dout);
  d_dw.set(dw0);
  d_db.set(db0);
  be.matmul_forward(d_out.get(), nullptr, d_inp.get(), d_w.get(), d_b.get(), N, C, OC);
  be.matmul_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(), N,
                     C, OC);
  std::vector<double> out = matmul_ref(inp, w, bias.data(), N, C, OC);
  std::vector<double> dinp((size_t)N * C, 0.0), dw(dw0.begin(), dw0.end()),
      db(db0.begin(), db0.end());
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      const double d = dout[(size_t)n * OC + o];
      db[o] += d;
      for (int c = 0; c < C; c++) {
        dinp[(size_t)n * C + c] += d * w[(size_t)o * C + c];
        dw[(size_t)o * C + c] += d * inp[(size_t)n * C + c];
      }
    }
  expect_close(d_out.get_host(), out, 0, 0, "out");
  expect_close(d_dinp.get_host(), dinp, 0, 0, "dinp");
  expect_close(d_dw.get_host(), dw, 0, 0, "dw (accumulated onto integers)");
  expect_close(d_db.get_host(), db, 0, 0, "dbias (accumulated onto integers)");
  EXPECT_TRUE(d_out.guard_ok() && d_dinp.guard_ok() && d_dw.guard_ok() && d_db.guard_ok());
}

TEST_F(CpuOps, MatmulExactIntegers) {
  matmul_exact_case(b(), 10, 12, 36);    // B*T=10, C=12 -> 3C (qkv)
  matmul_exact_case(b(), 7, 13, 19);     // all odd
  matmul_exact_case(b(), 37, 50, 150);   // OC split across threads, uneven blocks
  matmul_exact_case(b(), 200, 33, 40);   // N split across threads
  matmul_exact_case(b(), 256, 64, 256);  // both large; Trans x NoTrans dw split on OC
}

TEST_F(CpuOps, MatmulForwardFloatAndGelu) {
  const int N = 37, C = 50, OC = 150;
  Rng rng(5);
  auto inp = randn(rng, N * C), w = randn(rng, OC * C, 0.2f), bias = randn(rng, OC);
  Buf d_inp(b(), N * C), d_w(b(), OC * C), d_b(b(), OC);
  Buf d_plain(b(), N * OC), d_nobias(b(), N * OC), d_out(b(), N * OC), d_pre(b(), N * OC);
  d_inp.set(inp);
  d_w.set(w);
  d_b.set(bias);
  be->matmul_forward(d_plain.get(), nullptr, d_inp.get(), d_w.get(), d_b.get(), N, C, OC);
  be->matmul_forward(d_nobias.get(), nullptr, d_inp.get(), d_w.get(), nullptr, N, C, OC);
  be->matmul_forward(d_out.get(), d_pre.get(), d_inp.get(), d_w.get(), d_b.get(), N, C, OC);
  auto ref = matmul_ref(inp, w, bias.data(), N, C, OC);
  auto ref_nb = matmul_ref(inp, w, nullptr, N, C, OC);
  // Sums of C=50 products of size ~0.2: FP32 error ~ sqrt(C) * 1e-7 * scale.
  expect_close(d_plain.get_host(), ref, 1e-5, 1e-5, "matmul out");
  expect_close(d_nobias.get_host(), ref_nb, 1e-5, 1e-5, "matmul out (no bias)");
  // The GELU epilogue's pre-activation is the same computation, bit for bit.
  EXPECT_TRUE(same_bits(d_pre.get_host(), d_plain.get_host()));
  std::vector<double> g(ref.size());
  for (size_t i = 0; i < g.size(); i++) g[i] = gelu_ref(ref[i]);
  expect_close(d_out.get_host(), g, 2e-5, 2e-5, "matmul gelu out");
  EXPECT_TRUE(d_plain.guard_ok() && d_nobias.guard_ok() && d_out.guard_ok() && d_pre.guard_ok());
}

// ---- attention -------------------------------------------------------------------

// The blocked attention (online softmax over key tiles of 256, query tiles of
// 64; see cpu_attention.cpp) against the double reference: T below, at and
// across the tile sizes.
void attention_case(Backend& be, int B, int T, int C, int NH, float qk_scale) {
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
               " NH=" + std::to_string(NH));
  Rng rng(B + T + C + NH);
  auto qkv = randn(rng, (size_t)B * T * 3 * C, qk_scale);
  Buf d_qkv(be, qkv.size()), d_out(be, (size_t)B * T * C), d_lse(be, (size_t)B * NH * T);
  d_qkv.set(qkv);
  be.attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, NH);
  std::vector<double> out, lse;
  attention_ref(qkv, B, T, C, NH, out, lse);
  // lse: the max (exact in FP32 up to the score's own error, ~ eps32 * sqrt(hs)
  // * qk_scale^2) plus log of a sum of <= T terms in [0,1] (rescaled per key
  // tile): 1e-6 * sqrt(hs) * qk_scale^2 absolute, 1e-5 relative.
  const double hs = (double)C / NH;
  expect_close(d_lse.get_host(), lse, 1e-6 * std::sqrt(hs) * qk_scale * qk_scale, 1e-5, "lse");
  // out: convex combinations of v (|v| ~ qk_scale) whose weights inherit the
  // FP32 score error, ~ eps32 * sqrt(hs) * qk_scale^2 (a dot product of hs
  // terms, times 1/sqrt(hs)); 0.5e-6 * sqrt(hs) * qk_scale^3 leaves ~10x margin.
  expect_close(d_out.get_host(), out, 0.5e-6 * std::sqrt(hs) * std::pow(qk_scale, 3), 1e-5, "out");
  EXPECT_TRUE(d_out.guard_ok() && d_lse.guard_ok());
}

TEST_F(CpuOps, AttentionForward) {
  attention_case(b(), 2, 5, 12, 3, 1.0f);
  attention_case(b(), 1, 1, 8, 2, 1.0f);     // T = 1: out = v, lse = q.k / sqrt(hs)
  attention_case(b(), 3, 33, 64, 4, 1.0f);   // odd T, hs = 16
  attention_case(b(), 2, 64, 128, 2, 3.0f);  // hs = 64 (GPT-2), peaked softmax: one query tile
  attention_case(b(), 1, 65, 128, 2, 1.0f);  // a second query tile of one row
  attention_case(b(), 1, 300, 128, 1, 3.0f); // two key tiles: the online rescaling, peaked
}

// ---- element-wise ---------------------------------------------------------------------

// The vectorisable exp behind softmax, GELU and the classifier: measured at
// 1.4 ulp worst over its range; 2.5 ulp (1.5e-7) catches a damaged
// polynomial or range reduction that the op-level tolerances would not.
TEST(CpuMath, ExpAccuracy) {
  double worst = 0;
  float at = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.000731f) {
    const double want = std::exp((double)x);
    const double rel = std::fabs(cpu::exp_f(x) - want) / want;
    if (rel > worst) worst = rel, at = x;
  }
  EXPECT_LT(worst, 1.5e-7) << "at x = " << at;
  EXPECT_EQ(cpu::exp_f(0.0f), 1.0f);
  EXPECT_GT(cpu::exp_f(-1000.0f), 0.0f);  // clamped, finite, never NaN
  EXPECT_TRUE(std::isfinite(cpu::exp_f(1000.0f)));
}

TEST_F(CpuOps, GeluForward) {
  Rng rng(6);
  auto x = randn(rng, 70001, 3.0f);  // odd size above the threading threshold
  const float special[] = {0.0f,  -0.0f, 1e-30f, -1e-30f, 1e-3f,   -1e-3f, 8.0f,
                           -8.0f, 30.0f, -30.0f, 100.0f,  -100.0f, 1e4f,   -1e4f};
  for (size_t i = 0; i < sizeof special / sizeof *special; i++) x[i] = special[i];
  Buf d_x(b(), x.size()), d_out(b(), x.size());
  d_x.set(x);
  be->gelu_forward(d_out.get(), d_x.get(), x.size());
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); i++) ref[i] = gelu_ref(x[i]);
  // A few ulps of relative error from the exp polynomial and the division;
  // the absolute term covers the deep negative tail where gelu ~ 1e-30.
  expect_close(d_out.get_host(), ref, 1e-7, 1e-6, "gelu");
  EXPECT_TRUE(d_out.guard_ok());
  // In place (out == inp) gives the same bits.
  be->gelu_forward(d_x.get(), d_x.get(), x.size());
  EXPECT_TRUE(same_bits(d_x.get_host(), d_out.get_host()));
}

TEST_F(CpuOps, ResidualForward) {
  Rng rng(7);
  for (size_t n : {1ul, 13ul, 100003ul}) {
    auto a = randn(rng, n), c = randn(rng, n);
    Buf d_a(b(), n), d_c(b(), n), d_out(b(), n);
    d_a.set(a);
    d_c.set(c);
    be->residual_forward(d_out.get(), d_a.get(), d_c.get(), n);
    std::vector<float> want(n);
    for (size_t i = 0; i < n; i++) want[i] = a[i] + c[i];
    EXPECT_TRUE(same_bits(d_out.get_host(), want)) << "one float add per element, exact";
    be->residual_forward(d_a.get(), d_a.get(), d_c.get(), n);  // out aliases a
    EXPECT_TRUE(same_bits(d_a.get_host(), want));
    EXPECT_TRUE(d_out.guard_ok() && d_a.guard_ok());
  }
}

// ---- classifier --------------------------------------------------------------------

void classifier_case(Backend& be, int BT, int V, int Vp, float spread, float shift) {
  SCOPED_TRACE("BT=" + std::to_string(BT) + " V=" + std::to_string(V) +
               " Vp=" + std::to_string(Vp) + " spread=" + std::to_string(spread));
  Rng rng(BT + V + Vp);
  auto logits = randn(rng, (size_t)BT * Vp, spread, shift);
  for (int r = 0; r < BT; r++)
    for (int j = V; j < Vp; j++) logits[(size_t)r * Vp + j] = 1e3f;  // padded: must be ignored
  std::vector<int> tgt(BT);
  for (auto& t : tgt) t = (int)rng.below(V);
  tgt[0] = V - 1;
  IntBuf d_tgt(be, tgt);
  Buf d_logits(be, logits.size()), d_loss(be, BT);
  d_logits.set(logits);
  // Losses only (dloss = 0): logits must stay untouched.
  be.classifier(d_logits.get(), d_loss.get(), d_tgt.get(), BT, V, Vp, 0.0f);
  EXPECT_TRUE(same_bits(d_logits.get_host(), logits)) << "dloss=0 must not touch logits";
  auto loss0 = d_loss.get_host();
  const float dloss = 1.0f / BT;
  be.classifier(d_logits.get(), d_loss.get(), d_tgt.get(), BT, V, Vp, dloss);
  EXPECT_TRUE(same_bits(d_loss.get_host(), loss0)) << "losses must not depend on dloss";
  std::vector<double> loss(BT), grad((size_t)BT * Vp, 0.0);
  for (int r = 0; r < BT; r++) {
    const float* x = &logits[(size_t)r * Vp];
    double mx = -1e300, s = 0;
    for (int j = 0; j < V; j++) mx = std::max(mx, (double)x[j]);
    for (int j = 0; j < V; j++) s += std::exp(x[j] - mx);
    loss[r] = mx + std::log(s) - x[tgt[r]];
    for (int j = 0; j < V; j++)
      grad[(size_t)r * Vp + j] = dloss * (std::exp(x[j] - mx) / s - (j == tgt[r]));
  }
  // loss = (max - x_t) + log(sum): relative float error on each part; the
  // absolute term is the float rounding of logits of size |shift| + 5 spread.
  expect_close(loss0, loss, 2e-6 * (std::fabs(shift) + 5 * spread + 1), 1e-6, "losses");
  // Probabilities to a few ulps, times dloss.
  expect_close(d_logits.get_host(), grad, 1e-6 * dloss, 1e-5, "dlogits");
  auto h = d_logits.get_host();
  size_t pad_nonzero = 0;
  for (int r = 0; r < BT; r++)
    for (int j = V; j < Vp; j++) pad_nonzero += h[(size_t)r * Vp + j] != 0.0f;
  EXPECT_EQ(pad_nonzero, 0u) << "padded vocab columns of the gradient must be exactly 0";
  EXPECT_TRUE(d_logits.guard_ok() && d_loss.guard_ok());
}

TEST_F(CpuOps, Classifier) {
  classifier_case(b(), 10, 13, 16, 1.0f, 0.0f);
  classifier_case(b(), 10, 13, 16, 30.0f, 0.0f);      // near one-hot softmax
  classifier_case(b(), 7, 1000, 1024, 2.0f, 500.0f);  // exp(500) overflows without max-subtract
  classifier_case(b(), 33, 257, 384, 3.0f, -40.0f);   // byte vocab padded to 384
}

// ---- NaN propagation ------------------------------------------------------------------

// A NaN in an input must reach the outputs that depend on it (the trainer
// detects divergence from the loss and the gradient norm), and no further.
TEST_F(CpuOps, NanPropagates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int N = 3, C = 20, V = 13, Vp = 16;
  Rng rng(10);
  auto x = randn(rng, N * C), w = randn(rng, C), logits = randn(rng, N * Vp);
  x[C + 5] = nan;            // row 1
  logits[2 * Vp + 7] = nan;  // row 2, a non-target column
  Buf d_x(b(), N * C), d_w(b(), C), d_out(b(), N * C), d_mean(b(), N), d_rstd(b(), N),
      d_g(b(), N * C), d_lg(b(), N * Vp), d_loss(b(), N);
  d_x.set(x);
  d_w.set(w);
  d_lg.set(logits);
  be->layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_w.get(), N,
                        C);
  auto out = d_out.get_host();
  for (int c = 0; c < C; c++) {
    EXPECT_FALSE(std::isnan(out[c])) << "row 0 has no NaN";
    EXPECT_TRUE(std::isnan(out[C + c])) << "row 1 has a NaN";
  }
  be->gelu_forward(d_g.get(), d_x.get(), N * C);
  auto g = d_g.get_host();
  EXPECT_TRUE(std::isnan(g[C + 5]));
  EXPECT_FALSE(std::isnan(g[C + 4]));
  EXPECT_TRUE(std::isnan(be->sum_squares(d_x.get(), N * C)));
  IntBuf d_tgt(b(), std::vector<int>{1, 2, 3});
  be->classifier(d_lg.get(), d_loss.get(), d_tgt.get(), N, V, Vp, 0.0f);
  auto loss = d_loss.get_host();
  EXPECT_FALSE(std::isnan(loss[0]) || std::isnan(loss[1]));
  EXPECT_TRUE(std::isnan(loss[2]));
}

// ---- determinism ------------------------------------------------------------------

// Runs `op` twice on identical inputs; the outputs (host copies returned by
// `op`) must be bit-identical.
template <typename Op>
void expect_deterministic(const std::string& name, Op op) {
  auto a = op(), c = op();
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); i++) EXPECT_TRUE(same_bits(a[i], c[i])) << name << " #" << i;
}

TEST_F(CpuOps, Deterministic) {
  const int B = 4, T = 64, C = 128, NH = 4, V = 1000, Vp = 1024, N = B * T;
  Rng rng(8);
  const auto x = randn(rng, N * C), w = randn(rng, 4 * C * C, 0.1f), bias = randn(rng, 4 * C);
  const auto qkv = randn(rng, N * 3 * C), dout3 = randn(rng, N * 3 * C);
  const auto logits = randn(rng, N * Vp, 2.0f);
  std::vector<int> tok(N);
  for (auto& t : tok) t = (int)rng.below(50);  // many repeats: scatter-add order matters
  IntBuf d_tok(b(), tok);
  Buf d_x(b(), N * C), d_w(b(), 4 * C * C), d_b(b(), 4 * C), d_qkv(b(), N * 3 * C),
      d_d3(b(), N * 3 * C);
  d_x.set(x);
  d_w.set(w);
  d_b.set(bias);
  d_qkv.set(qkv);
  d_d3.set(dout3);

  expect_deterministic("encoder_backward", [&] {
    Buf dwte(b(), 64 * C), dwpe(b(), T * C);
    be->encoder_backward(dwte.get(), dwpe.get(), d_x.get(), d_tok.get(), B, T, C);
    return std::vector<std::vector<float>>{dwte.get_host(), dwpe.get_host()};
  });
  expect_deterministic("layernorm", [&] {
    Buf out(b(), N * C), mean(b(), N), rstd(b(), N), dx(b(), N * C), dw(b(), C), db(b(), C);
    be->layernorm_forward(out.get(), mean.get(), rstd.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
    be->layernorm_backward(dx.get(), dw.get(), db.get(), d_x.get(), d_x.get(), d_w.get(),
                           mean.get(), rstd.get(), N, C);
    return std::vector<std::vector<float>>{out.get_host(), dx.get_host(), dw.get_host(),
                                           db.get_host()};
  });
  expect_deterministic("matmul", [&] {
    Buf out(b(), N * 4 * C), pre(b(), N * 4 * C), dx(b(), N * C), dw(b(), 4 * C * C),
        db(b(), 4 * C);
    be->matmul_forward(out.get(), pre.get(), d_x.get(), d_w.get(), d_b.get(), N, C, 4 * C);
    be->matmul_backward(dx.get(), dw.get(), db.get(), out.get(), d_x.get(), d_w.get(), N, C, 4 * C);
    return std::vector<std::vector<float>>{out.get_host(), pre.get_host(), dx.get_host(),
                                           dw.get_host(), db.get_host()};
  });
  expect_deterministic("attention", [&] {
    Buf out(b(), N * C), lse(b(), B * NH * T), dqkv(b(), N * 3 * C);
    be->attention_forward(out.get(), lse.get(), d_qkv.get(), B, T, C, NH, NH);
    be->attention_backward(dqkv.get(), d_d3.get(), d_qkv.get(), out.get(), lse.get(), B, T, C,
                           NH, NH);
    return std::vector<std::vector<float>>{out.get_host(), lse.get_host(), dqkv.get_host()};
  });
  expect_deterministic("gelu", [&] {
    Buf out(b(), N * 3 * C), din(b(), N * 3 * C);
    be->gelu_forward(out.get(), d_qkv.get(), N * 3 * C);
    be->gelu_backward(din.get(), d_qkv.get(), d_d3.get(), N * 3 * C);
    return std::vector<std::vector<float>>{out.get_host(), din.get_host()};
  });
  expect_deterministic("classifier", [&] {
    std::vector<int> tgt(tok);
    IntBuf d_tgt(b(), tgt);
    Buf lg(b(), N * Vp), loss(b(), N);
    lg.set(logits);
    be->classifier(lg.get(), loss.get(), d_tgt.get(), N, V, Vp, 1.0f / N);
    return std::vector<std::vector<float>>{lg.get_host(), loss.get_host()};
  });
  expect_deterministic("sum_squares+adamw", [&] {
    Buf p(b(), N * 3 * C), m(b(), N * 3 * C), v(b(), N * 3 * C);
    p.set(qkv);
    AdamWArgs a;
    a.weight_decay = 0.1f;
    be->adamw(p.get(), nullptr, d_d3.get(), m.get(), v.get(), N * 3 * C, a);
    const double ss = be->sum_squares(p.get(), N * 3 * C);
    std::vector<float> ssv(2);
    std::memcpy(ssv.data(), &ss, sizeof ss);
    return std::vector<std::vector<float>>{p.get_host(), m.get_host(), v.get_host(), ssv};
  });
}

// Ops whose reductions are split by data size rather than by thread (the
// scatter-adds, layernorm's parameter gradients, the classifier, the sum of
// squares, element-wise ops) give the same bits on 1 and 2 threads.
TEST_F(CpuOps, ThreadCountIndependent) {
  auto be1 = make_cpu_backend(1);
  const int B = 3, T = 40, C = 96, N = B * T, V = 300, Vp = 384;
  Rng rng(9);
  const auto x = randn(rng, N * C), dy = randn(rng, N * C), w = randn(rng, C);
  const auto logits = randn(rng, N * Vp, 3.0f);
  std::vector<int> tok(N);
  for (auto& t : tok) t = (int)rng.below(20);
  auto run = [&](Backend& be) {
    IntBuf d_tok(be, tok);
    Buf d_x(be, N * C), d_dy(be, N * C), d_w(be, C), out(be, N * C), mean(be, N), rstd(be, N),
        dx(be, N * C), dw(be, C), db(be, C), dwte(be, 20 * C), dwpe(be, T * C), lg(be, N * Vp),
        loss(be, N), g(be, N * C);
    d_x.set(x);
    d_dy.set(dy);
    d_w.set(w);
    lg.set(logits);
    be.encoder_backward(dwte.get(), dwpe.get(), d_x.get(), d_tok.get(), B, T, C);
    be.layernorm_forward(out.get(), mean.get(), rstd.get(), d_x.get(), d_w.get(), d_w.get(), N, C);
    be.layernorm_backward(dx.get(), dw.get(), db.get(), d_dy.get(), d_x.get(), d_w.get(),
                          mean.get(), rstd.get(), N, C);
    be.classifier(lg.get(), loss.get(), d_tok.get(), N, V, Vp, 0.5f);
    be.gelu_backward(g.get(), d_x.get(), d_dy.get(), N * C);
    const double ss = be.sum_squares(d_x.get(), N * C);
    std::vector<float> ssv(2);
    std::memcpy(ssv.data(), &ss, sizeof ss);
    return std::vector<std::vector<float>>{
        dwte.get_host(), dwpe.get_host(), out.get_host(),  dx.get_host(), dw.get_host(),
        db.get_host(),   lg.get_host(),   loss.get_host(), g.get_host(),  ssv};
  };
  auto r1 = run(*be1), r2 = run(b());
  for (size_t i = 0; i < r1.size(); i++) EXPECT_TRUE(same_bits(r1[i], r2[i])) << "output #" << i;
}

// The Llama ops (RMSNorm, its fusion with the residual add, RoPE, SwiGLU,
// grouped-query attention) give the same bits run to run and on 1 and 2 threads.
TEST_F(CpuOps, LlamaOpsDeterministicAnyThreads) {
  auto be1 = make_cpu_backend(1);
  const int B = 2, T = 70, NH = 6, KV = 2, hs = 16, C = NH * hs, W = (NH + 2 * KV) * hs, H = 80;
  const int N = B * T, maxT = 80;
  Rng rng(10);
  const auto x = randn(rng, N * C), y = randn(rng, N * C), w = randn(rng, C, 0.5f, 1.0f);
  const auto qkv = randn(rng, N * W), dout = randn(rng, N * C), fc = randn(rng, N * 2 * H, 2.0f);
  const auto cs = randn(rng, 2 * maxT * hs / 2);  // any table: determinism only
  auto run = [&](Backend& be) {
    Buf d_x(be, N * C), d_y(be, N * C), d_w(be, C), out(be, N * C), rstd(be, N), dx(be, N * C),
        dw(be, C), res(be, N * C), out2(be, N * C), rstd2(be, N), d_qkv(be, N * W),
        d_cs(be, cs.size()), d_dout(be, N * C), att(be, N * C), lse(be, B * NH * T),
        dqkv(be, N * W), d_fc(be, N * 2 * H), sw(be, N * H), dfc(be, N * 2 * H);
    d_x.set(x);
    d_y.set(y);
    d_w.set(w);
    d_qkv.set(qkv);
    d_cs.set(cs);
    d_dout.set(dout);
    d_fc.set(fc);
    be.rmsnorm_forward(out.get(), rstd.get(), d_x.get(), d_w.get(), N, C, 1e-5f);
    be.rmsnorm_backward(dx.get(), dw.get(), d_y.get(), d_x.get(), d_w.get(), rstd.get(), N, C);
    be.residual_rmsnorm_forward(res.get(), out2.get(), rstd2.get(), d_x.get(), d_y.get(),
                                d_w.get(), N, C, 1e-5f);
    be.rope_forward(d_qkv.get(), d_cs.get(), B, T, NH, KV, hs, maxT);
    be.attention_forward(att.get(), lse.get(), d_qkv.get(), B, T, C, NH, KV);
    be.attention_backward(dqkv.get(), d_dout.get(), d_qkv.get(), att.get(), lse.get(), B, T, C,
                          NH, KV);
    be.rope_backward(dqkv.get(), d_cs.get(), B, T, NH, KV, hs, maxT);
    be.swiglu_forward(sw.get(), d_fc.get(), N, H);
    be.swiglu_backward(dfc.get(), d_fc.get(), sw.get(), N, H);
    return std::vector<std::vector<float>>{
        out.get_host(), rstd.get_host(),  dx.get_host(),  dw.get_host(),   res.get_host(),
        out2.get_host(), rstd2.get_host(), att.get_host(), lse.get_host(), dqkv.get_host(),
        sw.get_host(),  dfc.get_host()};
  };
  auto r1 = run(*be1), r2 = run(b()), r3 = run(b());
  for (size_t i = 0; i < r1.size(); i++) {
    EXPECT_TRUE(same_bits(r2[i], r3[i])) << "run to run, output #" << i;
    EXPECT_TRUE(same_bits(r1[i], r2[i])) << "1 vs 2 threads, output #" << i;
  }
}

}  // namespace
}  // namespace ratchet

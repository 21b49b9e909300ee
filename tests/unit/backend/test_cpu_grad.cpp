// CPU backend backward ops against central finite differences.
//
// For each op a scalar L = sum(out .* R) with fixed random R is evaluated by a
// naive DOUBLE-precision forward written here; dL/dx_i is estimated by
// (L(x_i + h) - L(x_i - h)) / 2h with h = 1e-5 (truncation error ~h^2 = 1e-10,
// round-off ~1e-16 |L| / h = 1e-10), so the reference is accurate to ~1e-9
// and what is measured is the FP32 backward's own error. That error is a few
// FP32 roundings (2^-24 = 6e-8) per term summed over at most a few hundred
// terms: 2e-5 of the tensor's gradient scale plus 1e-4 relative is ~100x
// above it, while a wrong formula or index is off by O(1).
// Parameter gradients are pre-filled to check they ACCUMULATE; overwritten
// outputs are pre-filled with NaN to check they are not read.
// The optimizer (AdamW, sum of squares) is checked against hand-written
// double implementations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "testing/backend_buffers.h"
#include "testing/rope_cos_sin.h"

namespace ratchet {
namespace {

using testing::IntBuf;
using testing::randn;

constexpr double kH = 1e-5;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// n floats of backend memory followed by guard floats that no op may touch
// (checked when the buffer dies).
class Buf {
 public:
  static constexpr size_t kGuard = 16;
  static constexpr uint32_t kSentinel = 0x7FA5A5A5u;  // a NaN payload no op produces
  Buf(Backend& be, size_t n) : be_(be), n_(n) {
    p_ = static_cast<float*>(be.alloc((n + kGuard) * sizeof(float)));
    std::vector<uint32_t> g(kGuard, kSentinel);
    be.upload_bytes(p_ + n, g.data(), kGuard * sizeof(float));
  }
  Buf(Backend& be, const std::vector<float>& v) : Buf(be, v.size()) { set(v); }
  ~Buf() {
    std::vector<uint32_t> g(kGuard);
    be_.download_bytes(g.data(), p_ + n_, kGuard * sizeof(float));
    for (uint32_t x : g)
      EXPECT_EQ(x, kSentinel) << "write past the end of a " << n_ << "-float buffer";
    be_.release(p_);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float* get() const { return p_; }
  void set(const std::vector<float>& v) { be_.upload_f32(p_, v.data(), v.size()); }
  void fill(float x) { set(std::vector<float>(n_, x)); }
  std::vector<float> host() const {
    std::vector<float> v(n_);
    be_.download_f32(v.data(), p_, n_);
    return v;
  }

 private:
  Backend& be_;
  size_t n_;
  float* p_;
};


std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// All indices of an n-element tensor if n <= k, else k random ones plus the
// first and last.
std::vector<size_t> pick(size_t n, size_t k, Rng& rng) {
  std::vector<size_t> idx;
  if (n <= k) {
    for (size_t i = 0; i < n; i++) idx.push_back(i);
  } else {
    idx.push_back(0);
    idx.push_back(n - 1);
    while (idx.size() < k) idx.push_back(rng.below(n));
  }
  return idx;
}

// Checks got[i] - base[i] (base: the pre-filled value, 0 if empty) against
// central differences of L with respect to x[i], over the picked indices.
template <typename L>
void check_grad(const std::string& what, const std::vector<float>& got,
                const std::vector<float>& base, std::vector<double>& x, L loss, Rng& rng,
                size_t k = 60) {
  ASSERT_EQ(got.size(), x.size()) << what;
  const auto idx = pick(x.size(), k, rng);
  std::vector<double> fd(idx.size());
  double scale = 0;
  for (size_t t = 0; t < idx.size(); t++) {
    const size_t i = idx[t];
    const double keep = x[i];
    x[i] = keep + kH;
    const double lp = loss();
    x[i] = keep - kH;
    const double lm = loss();
    x[i] = keep;
    fd[t] = (lp - lm) / (2 * kH);
    scale = std::max(scale, std::fabs(fd[t]));
  }
  int bad = 0;
  for (size_t t = 0; t < idx.size(); t++) {
    const size_t i = idx[t];
    const double g = (double)got[i] - (base.empty() ? 0.0 : (double)base[i]);
    const double err = std::fabs(g - fd[t]);
    if (!(err <= 2e-5 * scale + 1e-4 * std::fabs(fd[t]) + 1e-7)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: backward " << g << ", finite diff " << fd[t]
                      << " (err " << err << ", scale " << scale << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << idx.size() << " checked elements off";
  EXPECT_GT(scale, 0.0) << what << ": degenerate test, all gradients are 0";
}

double dot(const std::vector<double>& a, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * r[i];
  return s;
}

double gelu_d(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

// ---- naive double forwards ---------------------------------------------------------

std::vector<double> matmul_d(const std::vector<double>& inp, const std::vector<double>& w,
                             const std::vector<double>& bias, int N, int C, int OC) {
  std::vector<double> out((size_t)N * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int c = 0; c < C; c++) s += inp[(size_t)n * C + c] * w[(size_t)o * C + c];
      out[(size_t)n * OC + o] = s;
    }
  return out;
}

std::vector<double> layernorm_d(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& b, int N, int C) {
  std::vector<double> out((size_t)N * C);
  for (int n = 0; n < N; n++) {
    const double* r = &x[(size_t)n * C];
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += r[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (r[c] - m) * (r[c] - m);
    const double s = 1.0 / std::sqrt(v / C + 1e-5);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (r[c] - m) * s * w[c] + b[c];
  }
  return out;
}

// Causal grouped-query attention: qkv (B,T,(NH+2KV)*hs), query head h reads
// KV head h / (NH/KV); out (B,T,C), C = NH*hs. Options as transformers'
// eager attention: scores scale·q·k, soft-capped c·tanh(s/c), a sliding
// window keeping keys j > i - W (its sliding_window mask).
std::vector<double> attention_d(const std::vector<double>& qkv, int B, int T, int C, int NH,
                                int KV, const AttnOpts& opt = AttnOpts{}) {
  const int hs = C / NH, W = (NH + 2 * KV) * hs;
  const double scale = opt.scale > 0 ? (double)opt.scale : 1.0 / std::sqrt((double)hs);
  std::vector<double> out((size_t)B * T * C, 0.0), s(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const int g = h / (NH / KV);
        const int j0 = opt.window > 0 ? std::max(0, i - opt.window + 1) : 0;
        const double* q = &qkv[((size_t)b * T + i) * W + h * hs];
        double mx = -1e300;
        for (int j = j0; j <= i; j++) {
          const double* k = &qkv[((size_t)b * T + j) * W + C + g * hs];
          double d = 0;
          for (int e = 0; e < hs; e++) d += q[e] * k[e];
          s[j] = d * scale;
          if (opt.softcap > 0) s[j] = opt.softcap * std::tanh(s[j] / opt.softcap);
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = j0; j <= i; j++) sum += (s[j] = std::exp(s[j] - mx));
        double* o = &out[((size_t)b * T + i) * C + h * hs];
        for (int j = j0; j <= i; j++) {
          const double* v = &qkv[((size_t)b * T + j) * W + C + (KV + g) * hs];
          for (int e = 0; e < hs; e++) o[e] += s[j] / sum * v[e];
        }
      }
  return out;
}

// RMSNorm: out = x / sqrt(mean(x^2) + eps) * (w + off), per row (off 1: Gemma's (1+w)).
std::vector<double> rmsnorm_d(const std::vector<double>& x, const std::vector<double>& w, int N,
                              int C, double eps, double off = 0.0) {
  std::vector<double> out((size_t)N * C);
  for (int n = 0; n < N; n++) {
    const double* r = &x[(size_t)n * C];
    double ss = 0;
    for (int c = 0; c < C; c++) ss += r[c] * r[c];
    const double s = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = r[c] * s * (w[c] + off);
  }
  return out;
}

// q/k RMSNorm on qkv rows (N, (NH+2KV)*hs) written from the definition: per
// head, each q head's hs values times qw (hs) and each k head's times kw (hs);
// full width, q's NH*hs values with qw (NH*hs) and k's KV*hs with kw (KV*hs);
// v copied. Each segment: x / sqrt(mean(x^2) + eps) * (w + off).
std::vector<double> qk_norm_d(const std::vector<double>& x, const std::vector<double>& qw,
                              const std::vector<double>& kw, int N, int NH, int KV, int hs,
                              bool per_head, double eps, double off) {
  const int W = (NH + 2 * KV) * hs;
  std::vector<double> out = x;
  auto seg = [&](size_t o, int len, const std::vector<double>& w) {
    double ss = 0;
    for (int c = 0; c < len; c++) ss += x[o + c] * x[o + c];
    const double s = 1.0 / std::sqrt(ss / len + eps);
    for (int c = 0; c < len; c++) out[o + c] = x[o + c] * s * (w[c] + off);
  };
  for (int n = 0; n < N; n++) {
    const size_t o = (size_t)n * W;
    if (per_head) {
      for (int h = 0; h < NH; h++) seg(o + (size_t)h * hs, hs, qw);
      for (int h = 0; h < KV; h++) seg(o + (size_t)(NH + h) * hs, hs, kw);
    } else {
      seg(o, NH * hs, qw);
      seg(o + (size_t)NH * hs, KV * hs, kw);
    }
  }
  return out;
}

// RoPE written from Hugging Face's apply_rotary_pos_emb: q*cos + rotate_half(q)*sin
// with rotate_half(x) = cat(-x2, x1) and cos, sin repeated over both halves;
// the angles are recomputed here in double from theta, not from the table.
std::vector<double> rope_d(const std::vector<double>& qkv, int B, int T, int NH, int KV, int hs,
                           double theta) {
  std::vector<double> out = qkv;
  const int half = hs / 2, W = (NH + 2 * KV) * hs;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH + KV; h++) {  // q heads then k heads
        const size_t o = ((size_t)b * T + t) * W + (size_t)h * hs;
        for (int e = 0; e < hs; e++) {
          const int i = e % half;
          const double ang = t * std::pow(theta, -2.0 * i / hs);
          const double rot = e < half ? -qkv[o + e + half] : qkv[o + e - half];
          out[o + e] = qkv[o + e] * std::cos(ang) + rot * std::sin(ang);
        }
      }
  return out;
}

// SwiGLU: inp (N,2H) = gate | up, out (N,H) = gate sigmoid(gate) up.
std::vector<double> swiglu_d(const std::vector<double>& x, int N, int H) {
  std::vector<double> out((size_t)N * H);
  for (int n = 0; n < N; n++)
    for (int i = 0; i < H; i++) {
      const double g = x[(size_t)n * 2 * H + i], u = x[(size_t)n * 2 * H + H + i];
      out[(size_t)n * H + i] = g / (1.0 + std::exp(-g)) * u;
    }
  return out;
}

// GeGLU: inp (N,2H) = gate | up, out (N,H) = gelu_tanh(gate) up.
std::vector<double> geglu_d(const std::vector<double>& x, int N, int H) {
  std::vector<double> out((size_t)N * H);
  for (int n = 0; n < N; n++)
    for (int i = 0; i < H; i++)
      out[(size_t)n * H + i] = gelu_d(x[(size_t)n * 2 * H + i]) * x[(size_t)n * 2 * H + H + i];
  return out;
}

// |got - ref| <= atol + rtol |ref| everywhere (forward outputs against the double forwards).
void expect_near_all(const std::vector<float>& got, const std::vector<double>& ref, double atol,
                     double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); i++)
    if (!(std::fabs(got[i] - ref[i]) <= atol + rtol * std::fabs(ref[i])) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i];
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off";
}

class CpuGrad : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  Backend& b() { return *be; }
};

// ---- encoder -------------------------------------------------------------------------

TEST_F(CpuGrad, Encoder) {
  const int B = 2, T = 5, C = 12, Vp = 16, maxT = 7;
  Rng rng(11);
  // Repeated tokens within and across sequences; some vocab rows never used.
  const std::vector<int> tok = {3, 3, 7, 0, 3, 7, 12, 3, 15, 7};
  auto wte = randn(rng, Vp * C), wpe = randn(rng, maxT * C), R = randn(rng, B * T * C);
  auto dwte0 = randn(rng, Vp * C), dwpe0 = randn(rng, maxT * C);  // accumulated onto
  IntBuf d_tok(b(), tok);
  Buf d_R(b(), R), d_dwte(b(), dwte0), d_dwpe(b(), dwpe0);
  be->encoder_backward(d_dwte.get(), d_dwpe.get(), d_R.get(), d_tok.get(), B, T, C);
  auto xwte = to_double(wte), xwpe = to_double(wpe);
  auto loss = [&] {
    double s = 0;
    for (int bt = 0; bt < B * T; bt++)
      for (int c = 0; c < C; c++)
        s += (xwte[tok[bt] * C + c] + xwpe[(bt % T) * C + c]) * R[bt * C + c];
    return s;
  };
  check_grad("dwte", d_dwte.host(), dwte0, xwte, loss, rng, 1000);
  check_grad("dwpe", d_dwpe.host(), dwpe0, xwpe, loss, rng, 1000);
}

// ---- layernorm -----------------------------------------------------------------------

void layernorm_grad_case(Backend& be, int N, int C, size_t k) {
  SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
  Rng rng(12 + N + C);
  auto x = randn(rng, (size_t)N * C, 1.5f, 0.3f), w = randn(rng, C, 0.5f, 1.0f),
       bias = randn(rng, C, 0.5f), R = randn(rng, (size_t)N * C);
  auto dx0 = randn(rng, (size_t)N * C), dw0 = randn(rng, C), db0 = randn(rng, C);
  Buf d_x(be, x), d_w(be, w), d_b(be, bias), d_R(be, R), d_out(be, (size_t)N * C);
  Buf d_mean(be, N), d_rstd(be, N), d_dx(be, dx0), d_dw(be, dw0), d_db(be, db0);
  be.layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), N,
                       C);
  be.layernorm_backward(d_dx.get(), d_dw.get(), d_db.get(), d_R.get(), d_x.get(), d_w.get(),
                        d_mean.get(), d_rstd.get(), N, C);
  auto xx = to_double(x), xw = to_double(w), xb = to_double(bias);
  auto loss = [&] { return dot(layernorm_d(xx, xw, xb, N, C), R); };
  check_grad("dinp (accumulated)", d_dx.host(), dx0, xx, loss, rng, k);
  check_grad("dw (accumulated)", d_dw.host(), dw0, xw, loss, rng, k);
  check_grad("db (accumulated)", d_db.host(), db0, xb, loss, rng, k);
}

TEST_F(CpuGrad, Layernorm) {
  layernorm_grad_case(b(), 10, 12, 1000);  // every element
  layernorm_grad_case(b(), 37, 200, 60);   // several channel blocks, odd rows
}

// ---- matmul --------------------------------------------------------------------------

void matmul_grad_case(Backend& be, int N, int C, int OC, bool with_bias, size_t k) {
  SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) +
               (with_bias ? " bias" : " no bias"));
  Rng rng(13 + N + C + OC);
  auto inp = randn(rng, (size_t)N * C), w = randn(rng, (size_t)OC * C, 0.3f), bias = randn(rng, OC),
       R = randn(rng, (size_t)N * OC);
  auto dw0 = randn(rng, (size_t)OC * C), db0 = randn(rng, OC);
  Buf d_inp(be, inp), d_w(be, w), d_R(be, R), d_dinp(be, (size_t)N * C), d_dw(be, dw0),
      d_db(be, db0);
  d_dinp.fill(kNaN);  // overwritten: must not be read
  be.matmul_backward(d_dinp.get(), d_dw.get(), with_bias ? d_db.get() : nullptr, d_R.get(),
                     d_inp.get(), d_w.get(), N, C, OC);
  auto xi = to_double(inp), xw = to_double(w), xb = to_double(bias);
  if (!with_bias) xb.clear();
  auto loss = [&] { return dot(matmul_d(xi, xw, xb, N, C, OC), R); };
  check_grad("dinp", d_dinp.host(), {}, xi, loss, rng, k);
  check_grad("dw (accumulated)", d_dw.host(), dw0, xw, loss, rng, k);
  if (with_bias)
    check_grad("dbias (accumulated)", d_db.host(), db0, xb, loss, rng, k);
  else
    EXPECT_EQ(d_db.host(), db0) << "dbias = null: nothing written";
}

TEST_F(CpuGrad, Matmul) {
  matmul_grad_case(b(), 10, 12, 36, true, 1000);  // B*T=10, C=12 -> 3C, every element
  matmul_grad_case(b(), 7, 13, 19, false, 1000);
  matmul_grad_case(b(), 37, 50, 150, true, 60);  // threaded sgemm blocks, 3 bias blocks
  matmul_grad_case(b(), 150, 40, 20, true, 60);  // N split
}

// out = gelu(inp @ w^T + bias) through the fused epilogue; backward is
// gelu_backward on pre_gelu followed by matmul_backward.
TEST_F(CpuGrad, MatmulGelu) {
  const int N = 10, C = 12, OC = 48;
  Rng rng(14);
  auto inp = randn(rng, N * C), w = randn(rng, OC * C, 0.3f), bias = randn(rng, OC),
       R = randn(rng, N * OC);
  auto dw0 = randn(rng, OC * C), db0 = randn(rng, OC);
  Buf d_inp(b(), inp), d_w(b(), w), d_b(b(), bias), d_R(b(), R), d_out(b(), N * OC),
      d_pre(b(), N * OC), d_dpre(b(), N * OC), d_dinp(b(), N * C), d_dw(b(), dw0), d_db(b(), db0);
  d_dpre.fill(kNaN);
  d_dinp.fill(kNaN);
  be->matmul_forward(d_out.get(), d_pre.get(), d_inp.get(), d_w.get(), d_b.get(), N, C, OC);
  be->gelu_backward(d_dpre.get(), d_pre.get(), d_R.get(), N * OC);
  be->matmul_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dpre.get(), d_inp.get(), d_w.get(), N,
                      C, OC);
  auto xi = to_double(inp), xw = to_double(w), xb = to_double(bias);
  auto loss = [&] {
    auto a = matmul_d(xi, xw, xb, N, C, OC);
    for (auto& v : a) v = gelu_d(v);
    return dot(a, R);
  };
  check_grad("dinp", d_dinp.host(), {}, xi, loss, rng, 1000);
  check_grad("dw (accumulated)", d_dw.host(), dw0, xw, loss, rng, 1000);
  check_grad("dbias (accumulated)", d_db.host(), db0, xb, loss, rng, 1000);
}

// ---- attention -------------------------------------------------------------------------

void attention_grad_case(Backend& be, int B, int T, int C, int NH, int KV, size_t k,
                         const AttnOpts& opt = AttnOpts{}) {
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
               " NH=" + std::to_string(NH) + " KV=" + std::to_string(KV) + " window=" +
               std::to_string(opt.window) + " scale=" + std::to_string(opt.scale) +
               " softcap=" + std::to_string(opt.softcap));
  Rng rng(15 + B + T + C + NH + KV);
  const size_t W = (size_t)(NH + 2 * KV) * (C / NH);
  auto qkv = randn(rng, (size_t)B * T * W), R = randn(rng, (size_t)B * T * C);
  Buf d_qkv(be, qkv), d_R(be, R), d_out(be, (size_t)B * T * C), d_lse(be, (size_t)B * NH * T),
      d_dqkv(be, qkv.size());
  d_dqkv.fill(kNaN);  // fully overwritten
  be.attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, KV, opt);
  be.attention_backward(d_dqkv.get(), d_R.get(), d_qkv.get(), d_out.get(), d_lse.get(), B, T, C,
                        NH, KV, opt);
  auto x = to_double(qkv);
  // Forward: softmax-weighted sums of O(1) values over <= T terms, each a few
  // FP32 roundings: 1e-5 absolute is ~30x above that, a wrong head is O(1) off.
  expect_near_all(d_out.host(), attention_d(x, B, T, C, NH, KV, opt), 1e-5, 1e-5, "out");
  auto loss = [&] { return dot(attention_d(x, B, T, C, NH, KV, opt), R); };
  auto got = d_dqkv.host();
  size_t nan = 0;
  for (float g : got) nan += std::isnan(g);
  EXPECT_EQ(nan, 0u) << "every element of dqkv must be written";
  check_grad("dqkv", got, {}, x, loss, rng, k);
}

TEST_F(CpuGrad, Attention) {
  attention_grad_case(b(), 2, 5, 12, 3, 3, 1000);  // every element
  attention_grad_case(b(), 1, 1, 8, 2, 2, 1000);   // T = 1: dq = dk = 0, dv = dout
  attention_grad_case(b(), 2, 33, 64, 4, 4, 80);
  attention_grad_case(b(), 1, 131, 32, 2, 2, 60);  // across the 128-row backward tiles
}

// Issue 38's options: sliding windows (inside one tile, across the 64-row
// backward and 256-column forward tiles so whole tiles are skipped, W = 1,
// W >= T), a scale that is not 1/sqrt(hs), soft-capping, and all together
// with GQA.
TEST_F(CpuGrad, AttentionOptions) {
  auto opts = [](int w, float scale, float cap) {
    AttnOpts o;
    o.window = w, o.scale = scale, o.softcap = cap;
    return o;
  };
  attention_grad_case(b(), 2, 7, 12, 3, 3, 1000, opts(3, 0, 0));    // every element
  attention_grad_case(b(), 1, 9, 8, 2, 1, 1000, opts(1, 0, 0));     // each query sees itself
  attention_grad_case(b(), 1, 9, 8, 2, 2, 1000, opts(9, 0, 0));     // W = T: full causal
  attention_grad_case(b(), 2, 7, 12, 3, 3, 1000, opts(0, 0.9f, 0)); // scale
  attention_grad_case(b(), 2, 7, 12, 3, 3, 1000, opts(0, 0, 0.7f)); // soft-cap that bites
  attention_grad_case(b(), 1, 300, 16, 2, 1, 80, opts(70, 0.4f, 1.5f));   // tiles skipped
  attention_grad_case(b(), 1, 600, 16, 2, 2, 80, opts(257, 0, 0));   // forward key tiles skipped
}

// Grouped-query: dk, dv of a KV head sum over the query heads of its group.
TEST_F(CpuGrad, AttentionGrouped) {
  attention_grad_case(b(), 2, 5, 12, 6, 1, 1000);  // MQA, every element
  attention_grad_case(b(), 2, 7, 24, 6, 3, 1000);  // KV = NH/2, every element
  attention_grad_case(b(), 2, 6, 16, 4, 2, 1000);
  attention_grad_case(b(), 1, 131, 32, 4, 2, 80);  // across the backward tiles
}

// ---- Llama ops ---------------------------------------------------------------------------

void rmsnorm_grad_case(Backend& be, int N, int C, size_t k) {
  SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
  const float eps = 1e-5f;
  Rng rng(20 + N + C);
  auto x = randn(rng, (size_t)N * C, 1.5f, 0.3f), w = randn(rng, C, 0.5f, 1.0f),
       R = randn(rng, (size_t)N * C);
  auto dx0 = randn(rng, (size_t)N * C), dw0 = randn(rng, C);
  Buf d_x(be, x), d_w(be, w), d_R(be, R), d_out(be, (size_t)N * C), d_rstd(be, N),
      d_dx(be, dx0), d_dw(be, dw0);
  d_out.fill(kNaN);
  be.rmsnorm_forward(d_out.get(), d_rstd.get(), d_x.get(), d_w.get(), N, C, eps);
  be.rmsnorm_backward(d_dx.get(), d_dw.get(), d_R.get(), d_x.get(), d_w.get(), d_rstd.get(), N,
                      C);
  auto xx = to_double(x), xw = to_double(w);
  // Forward: a sum of C squares and three products, each rounded: 1e-5 relative
  // is ~10x above the FP32 error at C = 200.
  const auto want = rmsnorm_d(xx, xw, N, C, eps);
  expect_near_all(d_out.host(), want, 1e-6, 1e-5, "out");
  auto rstd = d_rstd.host();
  for (int n = 0; n < N; n++) {
    double ss = 0;
    for (int c = 0; c < C; c++) ss += xx[(size_t)n * C + c] * xx[(size_t)n * C + c];
    EXPECT_NEAR(rstd[n], 1.0 / std::sqrt(ss / C + eps), 1e-5 / std::sqrt(ss / C + eps)) << n;
  }
  auto loss = [&] { return dot(rmsnorm_d(xx, xw, N, C, eps), R); };
  check_grad("dinp (accumulated)", d_dx.host(), dx0, xx, loss, rng, k);
  check_grad("dw (accumulated)", d_dw.host(), dw0, xw, loss, rng, k);

  // The fused residual add: resid = a + b, then the same norm, bit for bit
  // (the same per-row code after the add; a + b is exact in the test's
  // reference only to one rounding, so compare with the unfused ops).
  auto a = randn(rng, (size_t)N * C), bb = randn(rng, (size_t)N * C);
  Buf d_a(be, a), d_b(be, bb), d_res(be, (size_t)N * C), d_out2(be, (size_t)N * C),
      d_rstd2(be, N), d_res_ref(be, (size_t)N * C);
  be.residual_rmsnorm_forward(d_res.get(), d_out2.get(), d_rstd2.get(), d_a.get(), d_b.get(),
                              d_w.get(), N, C, eps);
  be.residual_forward(d_res_ref.get(), d_a.get(), d_b.get(), (size_t)N * C);
  be.rmsnorm_forward(d_out.get(), d_rstd.get(), d_res_ref.get(), d_w.get(), N, C, eps);
  EXPECT_EQ(d_res.host(), d_res_ref.host()) << "fused: resid";
  EXPECT_EQ(d_out2.host(), d_out.host()) << "fused: out";
  EXPECT_EQ(d_rstd2.host(), d_rstd.host()) << "fused: rstd";
  // In place: resid aliases a (the model writes the residual stream over itself).
  be.residual_rmsnorm_forward(d_a.get(), d_out2.get(), d_rstd2.get(), d_a.get(), d_b.get(),
                              d_w.get(), N, C, eps);
  EXPECT_EQ(d_a.host(), d_res_ref.host()) << "fused in place: resid";
}

TEST_F(CpuGrad, Rmsnorm) {
  rmsnorm_grad_case(b(), 10, 12, 1000);  // every element
  rmsnorm_grad_case(b(), 37, 200, 60);   // several channel blocks, odd rows
}

void rope_grad_case(Backend& be, int B, int T, int NH, int KV, int hs, int maxT, size_t k) {
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" +
               std::to_string(NH) + " KV=" + std::to_string(KV) + " hs=" + std::to_string(hs));
  const double theta = 10000.0;
  Rng rng(21 + B + T + NH + KV + hs);
  const size_t n = (size_t)B * T * (NH + 2 * KV) * hs;
  auto x = randn(rng, n), R = randn(rng, n);
  Buf d_x(be, x), d_R(be, R), d_cs(be, testing::rope_table(NH, hs, maxT, (float)theta));
  be.rope_forward(d_x.get(), d_cs.get(), B, T, NH, KV, hs, maxT);
  auto xx = to_double(x);
  // Forward: two products and a sum per element, with the table's cos/sin
  // rounded to FP32 (angles up to ~T rad): 1e-6 + 1e-6 relative is ~5x above.
  const auto want = rope_d(xx, B, T, NH, KV, hs, theta);
  const auto got = d_x.host();
  expect_near_all(got, want, 1e-6, 1e-6, "rope out");
  for (size_t i = 0; i < n; i++) {  // v heads untouched, bit for bit
    const size_t col = i % ((size_t)(NH + 2 * KV) * hs);
    if (col >= (size_t)(NH + KV) * hs) {
      ASSERT_EQ(got[i], x[i]) << "v changed at " << i;
    }
  }
  be.rope_backward(d_R.get(), d_cs.get(), B, T, NH, KV, hs, maxT);
  auto loss = [&] { return dot(rope_d(xx, B, T, NH, KV, hs, theta), R); };
  check_grad("dqkv (in place)", d_R.host(), {}, xx, loss, rng, k);
}

TEST_F(CpuGrad, Rope) {
  rope_grad_case(b(), 2, 5, 3, 1, 8, 7, 1000);    // every element, MQA, T < maxT
  rope_grad_case(b(), 1, 9, 4, 2, 6, 9, 1000);    // hs/2 odd
  rope_grad_case(b(), 2, 33, 4, 4, 16, 40, 200);  // KV = NH
}

TEST_F(CpuGrad, Swiglu) {
  for (auto [N, H] : {std::pair{5, 7}, std::pair{33, 300}}) {
    SCOPED_TRACE("N=" + std::to_string(N) + " H=" + std::to_string(H));
    Rng rng(22 + N + H);
    auto x = randn(rng, (size_t)N * 2 * H, 3.0f), R = randn(rng, (size_t)N * H);
    x[0] = 0.0f;
    x[1] = -30.0f;  // silu ~ 0, derivative ~ 0
    x[2] = 40.0f;   // silu ~ x
    x[3] = -1.2784645f;  // silu' ~ 0 (the minimum of silu)
    Buf d_x(b(), x), d_R(b(), R), d_out(b(), (size_t)N * H), d_dx(b(), x.size());
    d_out.fill(kNaN);
    d_dx.fill(kNaN);
    be->swiglu_forward(d_out.get(), d_x.get(), N, H);
    be->swiglu_backward(d_dx.get(), d_x.get(), d_R.get(), N, H);
    auto xx = to_double(x);
    // Forward: exp_f is ~1 ulp, then a division and two products: 1e-6
    // relative is ~10x above that.
    expect_near_all(d_out.host(), swiglu_d(xx, N, H), 1e-7, 1e-6, "out");
    auto loss = [&] { return dot(swiglu_d(xx, N, H), R); };
    check_grad("dinp", d_dx.host(), {}, xx, loss, rng, 1000);
  }
}

// ---- gelu ---------------------------------------------------------------------------

TEST_F(CpuGrad, Gelu) {
  const size_t n = 2000;
  Rng rng(16);
  auto x = randn(rng, n, 3.0f), R = randn(rng, n);
  x[0] = 0.0f;
  x[1] = -0.7517916f;  // gelu' ~ 0 here (the minimum of gelu)
  x[2] = -9.0f;
  x[3] = 12.0f;
  Buf d_x(b(), x), d_R(b(), R), d_dx(b(), n);
  d_dx.fill(kNaN);
  be->gelu_backward(d_dx.get(), d_x.get(), d_R.get(), n);
  auto xx = to_double(x);
  auto loss = [&] {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += gelu_d(xx[i]) * R[i];
    return s;
  };
  const auto got = d_dx.host();
  check_grad("dinp", got, {}, xx, loss, rng, 400);
  // dinp may alias dout.
  be->gelu_backward(d_R.get(), d_x.get(), d_R.get(), n);
  EXPECT_EQ(d_R.host(), got) << "in-place gelu_backward differs";
}

// ---- classifier ------------------------------------------------------------------------

void classifier_grad_case(Backend& be, int BT, int V, int Vp, float spread, size_t k) {
  SCOPED_TRACE("BT=" + std::to_string(BT) + " V=" + std::to_string(V) +
               " Vp=" + std::to_string(Vp));
  Rng rng(17 + BT + V);
  auto logits = randn(rng, (size_t)BT * Vp, spread);
  std::vector<int> tgt(BT);
  for (auto& t : tgt) t = (int)rng.below(V);
  IntBuf d_tgt(be, tgt);
  Buf d_logits(be, logits), d_loss(be, BT);
  be.classifier(d_logits.get(), d_loss.get(), d_tgt.get(), BT, V, Vp, 1.0f / BT);
  auto x = to_double(logits);
  // L = mean over rows of -log softmax(first V logits)[target].
  auto loss = [&] {
    double total = 0;
    for (int r = 0; r < BT; r++) {
      const double* row = &x[(size_t)r * Vp];
      double mx = -1e300, s = 0;
      for (int j = 0; j < V; j++) mx = std::max(mx, row[j]);
      for (int j = 0; j < V; j++) s += std::exp(row[j] - mx);
      total += mx + std::log(s) - row[tgt[r]];
    }
    return total / BT;
  };
  auto got = d_logits.host();
  // Padded columns do not enter L: their finite difference is 0 and the op
  // must write exactly 0 there.
  check_grad("dlogits", got, {}, x, loss, rng, k);
  for (int r = 0; r < BT; r++)
    for (int j = V; j < Vp; j++) ASSERT_EQ(got[(size_t)r * Vp + j], 0.0f) << r << "," << j;
}

TEST_F(CpuGrad, Classifier) {
  classifier_grad_case(b(), 10, 13, 16, 1.0f, 1000);  // every element, padded columns too
  classifier_grad_case(b(), 6, 257, 384, 4.0f, 200);
}

// Issue 38: the (1+w) form. dw is w's gradient, the same formula whatever the offset.
TEST_F(CpuGrad, RmsnormOffset) {
  for (auto [N, C] : {std::pair{6, 10}, std::pair{37, 200}}) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const float eps = 1e-6f;
    Rng rng(40 + N + C);
    // w near 0, as Gemma's (1+w) weights start: the offset carries the scale.
    auto x = randn(rng, (size_t)N * C, 1.5f, 0.3f), w = randn(rng, C, 0.3f),
         R = randn(rng, (size_t)N * C);
    auto dx0 = randn(rng, (size_t)N * C), dw0 = randn(rng, C);
    Buf d_x(b(), x), d_w(b(), w), d_R(b(), R), d_out(b(), (size_t)N * C), d_rstd(b(), N),
        d_dx(b(), dx0), d_dw(b(), dw0);
    d_out.fill(kNaN);
    be->rmsnorm_forward(d_out.get(), d_rstd.get(), d_x.get(), d_w.get(), N, C, eps, 1.0f);
    be->rmsnorm_backward(d_dx.get(), d_dw.get(), d_R.get(), d_x.get(), d_w.get(), d_rstd.get(), N,
                         C, 1.0f);
    auto xx = to_double(x), xw = to_double(w);
    // Forward: as Rmsnorm's (a sum of C squares, three products): 1e-5 relative.
    expect_near_all(d_out.host(), rmsnorm_d(xx, xw, N, C, eps, 1.0), 1e-6, 1e-5, "out");
    auto loss = [&] { return dot(rmsnorm_d(xx, xw, N, C, eps, 1.0), R); };
    check_grad("dinp (accumulated)", d_dx.host(), dx0, xx, loss, rng, 1000);
    check_grad("dw (accumulated)", d_dw.host(), dw0, xw, loss, rng, 1000);
    // The fused residual form takes the offset too: bit for bit the unfused ops.
    auto a = randn(rng, (size_t)N * C), bb = randn(rng, (size_t)N * C);
    Buf d_a(b(), a), d_b(b(), bb), d_res(b(), (size_t)N * C), d_out2(b(), (size_t)N * C),
        d_rstd2(b(), N);
    be->residual_rmsnorm_forward(d_res.get(), d_out2.get(), d_rstd2.get(), d_a.get(), d_b.get(),
                                 d_w.get(), N, C, eps, 1.0f);
    be->rmsnorm_forward(d_out.get(), d_rstd.get(), d_res.get(), d_w.get(), N, C, eps, 1.0f);
    EXPECT_EQ(d_out2.host(), d_out.host()) << "fused (1+w): out";
  }
}

void qk_norm_grad_case(Backend& be, int N, int NH, int KV, int hs, bool per_head, float off) {
  SCOPED_TRACE(std::string(per_head ? "per head" : "full width") + " N=" + std::to_string(N) +
               " NH=" + std::to_string(NH) + " KV=" + std::to_string(KV) +
               " hs=" + std::to_string(hs) + " off=" + std::to_string(off));
  const float eps = 1e-6f;
  const int W = (NH + 2 * KV) * hs, R_ = per_head ? NH + KV : 2;
  const int lq = per_head ? hs : NH * hs, lk = per_head ? hs : KV * hs;
  const size_t n = (size_t)N * W;
  Rng rng(50 + N + NH + KV + hs + per_head);
  auto x = randn(rng, n, 1.5f, 0.2f), qw = randn(rng, lq, 0.5f, 1.0f - off),
       kw = randn(rng, lk, 0.5f, 1.0f - off), R = randn(rng, n);
  auto dqw0 = randn(rng, lq), dkw0 = randn(rng, lk);
  Buf d_x(be, x), d_qw(be, qw), d_kw(be, kw), d_R(be, R), d_out(be, n),
      d_rstd(be, (size_t)N * R_), d_dx(be, n), d_dqw(be, dqw0), d_dkw(be, dkw0);
  d_out.fill(kNaN);
  d_dx.fill(kNaN);  // overwritten: must not be read
  be.qk_norm_forward(d_out.get(), d_rstd.get(), d_x.get(), d_qw.get(), d_kw.get(), N, NH, KV, hs,
                     per_head, eps, off);
  be.qk_norm_backward(d_dx.get(), d_dqw.get(), d_dkw.get(), d_R.get(), d_x.get(), d_qw.get(),
                      d_kw.get(), d_rstd.get(), N, NH, KV, hs, per_head, off);
  auto xx = to_double(x), xq = to_double(qw), xk = to_double(kw);
  // Forward: Rmsnorm's error per segment (at most 4*16 = 64 squares): 1e-5 relative.
  const auto want = qk_norm_d(xx, xq, xk, N, NH, KV, hs, per_head, eps, off);
  const auto got = d_out.host();
  expect_near_all(got, want, 1e-6, 1e-5, "out");
  for (size_t i = 0; i < n; i++)  // v copied bit for bit
    if ((int)(i % W) >= (NH + KV) * hs) {
      ASSERT_EQ(got[i], x[i]) << "v changed at " << i;
    }
  // rstd layout: per head (N, NH+KV) q heads first; full width (N, 2).
  const auto rstd = d_rstd.host();
  for (int r = 0; r < N; r++)
    for (int j = 0; j < R_; j++) {
      const int start = per_head ? j * hs : (j == 0 ? 0 : NH * hs);
      const int len = per_head ? hs : (j == 0 ? NH * hs : KV * hs);
      double ss = 0;
      for (int c = 0; c < len; c++) ss += xx[(size_t)r * W + start + c] * xx[(size_t)r * W + start + c];
      const double want_r = 1.0 / std::sqrt(ss / len + eps);
      EXPECT_NEAR(rstd[(size_t)r * R_ + j], want_r, 1e-5 * want_r) << r << "," << j;
    }
  auto loss = [&] { return dot(qk_norm_d(xx, xq, xk, N, NH, KV, hs, per_head, eps, off), R); };
  check_grad("dinp (overwritten; v = dout)", d_dx.host(), {}, xx, loss, rng, 1000);
  check_grad("dqw (accumulated)", d_dqw.host(), dqw0, xq, loss, rng, 1000);
  check_grad("dkw (accumulated)", d_dkw.host(), dkw0, xk, loss, rng, 1000);
}

TEST_F(CpuGrad, QkNorm) {
  for (bool per_head : {true, false})
    for (float off : {0.0f, 1.0f}) {
      qk_norm_grad_case(b(), 3, 4, 2, 8, per_head, off);  // GQA, every element
      qk_norm_grad_case(b(), 5, 3, 1, 6, per_head, off);  // MQA, odd head count
    }
}

TEST_F(CpuGrad, Geglu) {
  for (auto [N, H] : {std::pair{5, 7}, std::pair{33, 300}}) {
    SCOPED_TRACE("N=" + std::to_string(N) + " H=" + std::to_string(H));
    Rng rng(60 + N + H);
    auto x = randn(rng, (size_t)N * 2 * H, 3.0f), R = randn(rng, (size_t)N * H);
    x[0] = 0.0f;
    x[1] = -0.7517916f;  // gelu' ~ 0 (the minimum of gelu)
    x[2] = -9.0f;        // gelu ~ 0
    x[3] = 12.0f;        // gelu ~ x
    Buf d_x(b(), x), d_R(b(), R), d_out(b(), (size_t)N * H), d_dx(b(), x.size());
    d_out.fill(kNaN);
    d_dx.fill(kNaN);
    be->geglu_forward(d_out.get(), d_x.get(), N, H);
    be->geglu_backward(d_dx.get(), d_x.get(), d_R.get(), N, H);
    auto xx = to_double(x);
    // Forward: the sigmoid form of gelu (exp ~1 ulp, a division) and two
    // products: 1e-6 relative is ~10x above; atol for gelu near its zero.
    expect_near_all(d_out.host(), geglu_d(xx, N, H), 1e-6, 1e-6, "out");
    auto loss = [&] { return dot(geglu_d(xx, N, H), R); };
    check_grad("dinp", d_dx.host(), {}, xx, loss, rng, 1000);
  }
}

// scale and softcap_forward against their definitions in double.
TEST_F(CpuGrad, ScaleAndSoftcap) {
  Rng rng(70);
  const size_t n = 3000;
  auto x = randn(rng, n, 20.0f);
  Buf d_s(b(), x), d_c(b(), x);
  be->scale(d_s.get(), n, 0.37f);
  be->softcap_forward(d_c.get(), n, 30.0f);
  std::vector<double> ws(n), wc(n);
  for (size_t i = 0; i < n; i++) {
    ws[i] = (double)x[i] * 0.37f;
    wc[i] = 30.0 * std::tanh(x[i] / 30.0);
  }
  // scale: one rounded product (2^-24 relative). softcap: a product, tanh
  // (~2 ulp) and a product: 1e-6 relative is ~4x above.
  expect_near_all(d_s.host(), ws, 0.0, 1e-7, "scale");
  expect_near_all(d_c.host(), wc, 1e-6, 1e-6, "softcap");
}

// The capped classifier: logits y = c tanh(x/c) (softcap_forward), then
// classifier(..., c) writes x's gradient. L = mean CE of softmax(c tanh(x/c)),
// differentiated in x by finite differences.
void classifier_softcap_case(Backend& be, int BT, int V, int Vp, float cap, size_t k) {
  SCOPED_TRACE("BT=" + std::to_string(BT) + " V=" + std::to_string(V) + " cap=" +
               std::to_string(cap));
  Rng rng(80 + BT + V);
  auto logits = randn(rng, (size_t)BT * Vp, 2.0f * cap);  // much of it in the bent part
  std::vector<int> tgt(BT);
  for (auto& t : tgt) t = (int)rng.below(V);
  IntBuf d_tgt(be, tgt);
  Buf d_logits(be, logits), d_loss(be, BT);
  be.softcap_forward(d_logits.get(), logits.size(), cap);
  be.classifier(d_logits.get(), d_loss.get(), d_tgt.get(), BT, V, Vp, 1.0f / BT, cap);
  auto x = to_double(logits);
  auto row_losses = [&] {
    std::vector<double> out(BT);
    for (int r = 0; r < BT; r++) {
      std::vector<double> y(V);
      double mx = -1e300, s = 0;
      for (int j = 0; j < V; j++) {
        y[j] = cap * std::tanh(x[(size_t)r * Vp + j] / cap);
        mx = std::max(mx, y[j]);
      }
      for (int j = 0; j < V; j++) s += std::exp(y[j] - mx);
      out[r] = mx + std::log(s) - y[tgt[r]];
    }
    return out;
  };
  auto loss = [&] {
    double total = 0;
    for (double l : row_losses()) total += l;
    return total / BT;
  };
  // Losses: FP32 log-sum-exp of capped logits (tanh ~2 ulp): 1e-5 relative.
  const auto want = row_losses();
  expect_near_all(d_loss.host(), want, 1e-6, 1e-5, "losses");
  auto got = d_logits.host();
  check_grad("dlogits (through the cap)", got, {}, x, loss, rng, k);
  for (int r = 0; r < BT; r++)
    for (int j = V; j < Vp; j++) ASSERT_EQ(got[(size_t)r * Vp + j], 0.0f) << r << "," << j;
}

TEST_F(CpuGrad, ClassifierSoftcap) {
  classifier_softcap_case(b(), 10, 13, 16, 3.0f, 1000);  // every element, padded columns too
  classifier_softcap_case(b(), 6, 257, 384, 30.0f, 200);  // Gemma 2's final cap
}

// ---- optimizer -------------------------------------------------------------------------

void adamw_case(Backend& be, size_t n, const AdamWArgs& a, bool with_master) {
  SCOPED_TRACE("n=" + std::to_string(n) + " wd=" + std::to_string(a.weight_decay) +
               " grad_scale=" + std::to_string(a.grad_scale) + " step=" + std::to_string(a.step) +
               (with_master ? " master" : ""));
  Rng rng(18 + n + a.step);
  auto p = randn(rng, n), g = randn(rng, n, 0.1f), m = randn(rng, n, 0.01f);
  std::vector<float> v(n);
  for (auto& x : v) x = 1e-3f * rng.uniform();
  // Some untouched moments (g = m = v = 0): the update is weight decay only.
  for (size_t i = 0; i < n; i += 97) g[i] = m[i] = v[i] = 0.0f;
  Buf d_p(be, p), d_g(be, g), d_m(be, m), d_v(be, v), d_master(be, p);
  if (with_master) d_p.fill(kNaN);  // params is output only when a master exists
  be.adamw(d_p.get(), with_master ? d_master.get() : nullptr, d_g.get(), d_m.get(), d_v.get(), n,
           a);
  std::vector<double> rp(n), rm(n), rv(n);
  const double b1 = a.beta1, b2 = a.beta2;
  const double bc1 = 1 - std::pow(b1, a.step), bc2 = 1 - std::pow(b2, a.step);
  for (size_t i = 0; i < n; i++) {
    const double gi = (double)a.grad_scale * g[i];
    rm[i] = b1 * m[i] + (1 - b1) * gi;
    rv[i] = b2 * v[i] + (1 - b2) * gi * gi;
    const double upd = rm[i] / bc1 / (std::sqrt(rv[i] / bc2) + a.eps) + a.weight_decay * p[i];
    rp[i] = p[i] - a.lr * upd;
  }
  const auto hp = d_p.host(), hm = d_m.host(), hv = d_v.host();
  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; i++) {
    // m and v are each two float products and a sum that may cancel: their
    // error is a few roundings (3e-7) of the TERMS' size, not of the result.
    const double gi = (double)a.grad_scale * g[i];
    const double tol_m = 3e-7 * (b1 * std::fabs(m[i]) + (1 - b1) * std::fabs(gi)) + 1e-30;
    const double tol_v = 3e-7 * (b2 * v[i] + (1 - b2) * gi * gi) + 1e-30;
    // p: its own rounding (2^-23 |p|), the m error carried through
    // lr * m/bc1 / sqrt(vhat), and 1e-5 relative on the whole update for the
    // remaining roundings (sqrt, divisions).
    const double sq = std::sqrt(rv[i] / bc2) + a.eps;
    const double tol_p = 1.2e-7 * std::fabs(rp[i]) + a.lr * tol_m / bc1 / sq +
                         1e-5 * std::fabs(rp[i] - p[i]) + 1e-30;
    const bool ok = std::fabs(hm[i] - rm[i]) <= tol_m && std::fabs(hv[i] - rv[i]) <= tol_v &&
                    std::fabs(hp[i] - rp[i]) <= tol_p;
    if (!ok) {
      bad++;
      ADD_FAILURE() << "[" << i << "] p " << hp[i] << " vs " << rp[i] << ", m " << hm[i] << " vs "
                    << rm[i] << ", v " << hv[i] << " vs " << rv[i];
    }
  }
  EXPECT_EQ(bad, 0);
  if (with_master) {
    EXPECT_EQ(d_master.host(), hp) << "params must equal the FP32 master";
  }
}

TEST_F(CpuGrad, AdamW) {
  AdamWArgs a;
  a.lr = 1e-2f;  // large enough that the update, not p's rounding, dominates
  a.beta1 = 0.9f;
  a.beta2 = 0.95f;
  a.eps = 1e-8f;
  a.weight_decay = 0.0f;
  a.step = 1;
  a.grad_scale = 1.0f;
  adamw_case(b(), 1000, a, false);
  a.weight_decay = 0.1f;
  a.grad_scale = 0.5f;
  a.step = 7;
  adamw_case(b(), 1000, a, false);
  adamw_case(b(), 100003, a, false);  // threaded, vector body + scalar tail
  adamw_case(b(), 1001, a, true);     // separate FP32 master
}

TEST_F(CpuGrad, SumSquares) {
  Rng rng(19);
  for (size_t n : {0ul, 1ul, 13ul, 1000ul, 1000003ul}) {
    auto x = randn(rng, n, 0.7f);
    Buf d_x(b(), x);
    long double want = 0;  // 64-bit mantissa: an exact-enough reference
    for (float f : x) want += (long double)f * f;
    // Each square is exact in double; only the double additions round: a few
    // 1e-16 relative per level of the (lanes, chunks) summation tree, growing
    // like sqrt(n / 1024) along each lane. 1e-12 is ~10x above that.
    EXPECT_NEAR(be->sum_squares(d_x.get(), n), (double)want, 1e-12 * (double)want) << "n=" << n;
  }
}

}  // namespace
}  // namespace ratchet

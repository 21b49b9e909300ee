// The whole cuda backend against the cpu backend on a tiny GPT-2: forward
// logits, loss, every parameter gradient (per tensor), and the parameters
// after 5 AdamW steps. Shared by tests/simt (backend on simt) and tests/gpu
// (a real device).
//
// Config: L=2, NH=2, C=32 (head size 16), V=61 (Vp=128), maxT=8, B=2, T=8.
// Every tensor is compared by its relative error rel = max|x - ref| / max|ref|
// (and NMSE, printed). The limits (Tolerances) are chosen per storage type and
// explained where they are set (test_cuda_backend.cpp, test_cuda_backend_gpu.cpp).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "optim/adamw.h"
#include "testing/tiny_model.h"

namespace ratchet::testing::bcases {

inline GPTConfig backend_test_config() {
  GPTConfig c;
  c.num_layers = 2;
  c.num_heads = 2;
  c.channels = 32;
  c.vocab_size = 61;
  c.padded_vocab = 0;
  c.max_seq_len = 8;
  c.finalize();
  return c;
}

struct Tolerances {
  double logits, loss, grads;  // max relative error (see the top comment)
  double params_max;           // max |param - ref| / max |ref change since init|
  double params_rms;           // rms (param - ref) / rms (ref change since init)
};

struct Measured {
  double logits = 0, loss = 0, grads = 0, params_max = 0, params_rms = 0;  // worst
  std::string worst_grad, report;
  bool nonfinite = false;
};

// n values ~ N(0, scale^2), deterministic in seed.
inline std::vector<float> random_floats(size_t n, float scale, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline double rel_err(const float* x, const float* ref, size_t n, bool* nonfinite) {
  double mx = 0, mr = 0;
  for (size_t i = 0; i < n; i++) {
    if (!std::isfinite(x[i])) *nonfinite = true;
    mx = std::max(mx, (double)std::fabs(x[i] - ref[i]));
    mr = std::max(mr, (double)std::fabs(ref[i]));
  }
  return mr > 0 ? mx / mr : mx;
}

// Runs the comparison; the cuda backend is `be` (any storage type).
inline Measured compare_with_cpu(Backend& be, int steps = 5) {
  const GPTConfig cfg = backend_test_config();
  const int B = 2, T = 8;
  auto cpu = make_cpu_backend(1);
  GPT ref(cfg, *cpu), dut(cfg, be);
  ref.init_random(42);
  std::vector<float> p0(ref.num_params());
  ref.get_params(p0.data());
  // The reference starts from the same values the device holds (BF16-rounded
  // for BF16 storage), so that only the computation differs.
  if (be.storage_bytes() == 2) {
    for (auto& x : p0) x = __bfloat162float(__float2bfloat16(x));
    ref.set_params(p0.data());
  }
  dut.set_params(p0.data());
  const ParamLayout& lay = ref.layout();

  Measured m;
  std::ostringstream rep;
  std::vector<int32_t> toks = random_tokens((size_t)B * T + 1, cfg.vocab_size, 7);
  std::vector<int32_t> in(toks.begin(), toks.end() - 1), tg(toks.begin() + 1, toks.end());

  // Forward: logits and loss.
  const float lr = ref.forward(in.data(), tg.data(), B, T);
  const float ld = dut.forward(in.data(), tg.data(), B, T);
  std::vector<float> gr((size_t)B * T * cfg.padded_vocab), gd(gr.size());
  ref.get_logits(gr.data());
  dut.get_logits(gd.data());
  m.logits = rel_err(gd.data(), gr.data(), gr.size(), &m.nonfinite);
  m.loss = std::fabs(ld - lr) / std::fabs(lr);
  rep << "loss cpu " << lr << " dut " << ld << " rel " << m.loss << "; logits rel " << m.logits
      << "\n";

  // Gradients, tensor by tensor.
  AdamWConfig oc;
  oc.weight_decay = 0.1f;
  oc.grad_clip = 1.0f;
  AdamW opt_r(*cpu, lay, oc), opt_d(be, lay, oc);
  std::vector<float> a(ref.num_params()), b(ref.num_params());
  for (int s = 0; s < steps; s++) {
    std::vector<int32_t> t2 = random_tokens((size_t)B * T + 1, cfg.vocab_size, 100 + s);
    std::vector<int32_t> i2(t2.begin(), t2.end() - 1), g2(t2.begin() + 1, t2.end());
    ref.zero_grad();
    dut.zero_grad();
    ref.forward_backward(i2.data(), g2.data(), B, T, 1.0f);
    dut.forward_backward(i2.data(), g2.data(), B, T, 1.0f);
    if (s == 0) {
      ref.get_grads(a.data());
      dut.get_grads(b.data());
      for (int i = 0; i < kNumParamTensors; i++) {
        double e = rel_err(b.data() + lay.offsets[i], a.data() + lay.offsets[i], lay.sizes[i],
                           &m.nonfinite);
        rep << "grad " << ParamLayout::name(i) << " rel " << e << "\n";
        if (e > m.grads) {
          m.grads = e;
          m.worst_grad = ParamLayout::name(i);
        }
      }
    }
    opt_r.step(ref.params(), ref.grads(), 1e-3f);
    opt_d.step(dut.params(), dut.grads(), 1e-3f);
    ref.get_params(a.data());
    dut.get_params(b.data());
    // Parameters move by about lr per step: the error is relative to the change.
    double mx = 0, mv = 0, sx = 0, sv = 0;
    for (size_t i = 0; i < a.size(); i++) {
      if (!std::isfinite(b[i])) m.nonfinite = true;
      const double d = b[i] - a[i], c = a[i] - p0[i];
      mx = std::max(mx, std::fabs(d));
      mv = std::max(mv, std::fabs(c));
      sx += d * d;
      sv += c * c;
    }
    const double e = mx / mv, r = std::sqrt(sx / sv);
    rep << "after AdamW step " << s + 1 << ": max |param - ref| " << mx << ", max change " << mv
        << ", rel max " << e << ", rel rms " << r << "\n";
    m.params_max = std::max(m.params_max, e);
    m.params_rms = std::max(m.params_rms, r);
  }
  m.report = rep.str();
  return m;
}

// matmul_backward_gelu (the DGELU epilogue) against matmul_backward followed
// by gelu_backward, on the model's fcproj shape: N=B*T rows, C=4*32 inputs,
// OC=32 outputs, dw and dbias accumulating into non-zero values.
struct GeluBackwardMeasured {
  // max over elements of |fused - unfused| / |v|, v = dout @ w (the GEMM result
  // before gelu'): relative to v, not to the result, because gelu' crosses 0
  // (x ~ -0.75) where any rounding difference is a large relative error.
  double dinp_rel = 0;
  size_t dinp_differ = 0;  // elements that are not bitwise equal
  bool dw_bitwise = false, dbias_bitwise = false, nonfinite = false;
};

inline GeluBackwardMeasured compare_matmul_backward_gelu(Backend& be, bool with_dbias) {
  const int N = 24, C = 128, OC = 32;
  const size_t sb = be.storage_bytes();
  std::vector<float> dout = random_floats((size_t)N * OC, 1.0f, 1),
                     inp = random_floats((size_t)N * C, 1.0f, 2),
                     w = random_floats((size_t)OC * C, 0.1f, 3),
                     // pre-GELU values spread over the curve's bend and both tails
                     pre = random_floats((size_t)N * C, 2.0f, 4),
                     dw0 = random_floats((size_t)OC * C, 0.5f, 5),
                     db0 = random_floats((size_t)OC, 0.5f, 6);
  auto up = [&](const std::vector<float>& h) {
    void* d = be.alloc(h.size() * sb);
    be.upload_f32(d, h.data(), h.size());
    return d;
  };
  void *ddout = up(dout), *dinp = up(inp), *dwt = up(w), *dpre = up(pre);
  void *dx1 = be.alloc((size_t)N * C * sb), *dx2 = be.alloc((size_t)N * C * sb);
  void *dw1 = up(dw0), *dw2 = up(dw0), *db1 = up(db0), *db2 = up(db0);
  be.matmul_backward(dx1, dw1, with_dbias ? db1 : nullptr, ddout, dinp, dwt, N, C, OC);
  std::vector<float> v((size_t)N * C);
  be.download_f32(v.data(), dx1, v.size());
  be.gelu_backward(dx1, dpre, dx1, (size_t)N * C);
  be.matmul_backward_gelu(dx2, dw2, with_dbias ? db2 : nullptr, ddout, dinp, dwt, dpre, N, C, OC);
  be.synchronize();

  GeluBackwardMeasured m;
  std::vector<float> a((size_t)N * C), b((size_t)N * C);
  be.download_f32(a.data(), dx1, a.size());
  be.download_f32(b.data(), dx2, b.size());
  for (size_t i = 0; i < a.size(); i++) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) m.nonfinite = true;
    if (a[i] != b[i]) {
      m.dinp_differ++;
      m.dinp_rel = std::max(m.dinp_rel, (double)std::fabs(b[i] - a[i]) / std::fabs(v[i]));
    }
  }
  auto same_bytes = [&](const void* x, const void* y, size_t bytes) {
    std::vector<unsigned char> hx(bytes), hy(bytes);
    be.download_bytes(hx.data(), x, bytes);
    be.download_bytes(hy.data(), y, bytes);
    return hx == hy;
  };
  m.dw_bitwise = same_bytes(dw1, dw2, (size_t)OC * C * sb);
  m.dbias_bitwise = same_bytes(db1, db2, (size_t)OC * sb);
  for (void* p : {ddout, dinp, dwt, dpre, dx1, dx2, dw1, dw2, db1, db2}) be.release(p);
  return m;
}

inline void expect_within(const Measured& m, const Tolerances& t) {
  std::printf("%s", m.report.c_str());
  EXPECT_FALSE(m.nonfinite) << "NaN/Inf in the backend's outputs";
  EXPECT_LE(m.logits, t.logits) << m.report;
  EXPECT_LE(m.loss, t.loss) << m.report;
  EXPECT_LE(m.grads, t.grads) << "worst: " << m.worst_grad << "\n" << m.report;
  EXPECT_LE(m.params_max, t.params_max) << m.report;
  EXPECT_LE(m.params_rms, t.params_rms) << m.report;
}

}  // namespace ratchet::testing::bcases

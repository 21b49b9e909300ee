// The cuda backend's Llama ops (on simt) against the cpu backend, through the
// Backend interface: what the kernel tests (kernel_cases.h) do not cover is the
// wiring (scratch for rmsnorm_backward, the cos/sin table pointer, KV passed to
// both attention implementations). Each op chain runs on both backends from
// the same inputs (rounded to the storage type first) and every output is
// compared by rel = max|x - ref| / max|ref|.
//   grouped-query attention  rope_forward -> attention_forward (NH, KV) and back:
//                            attention_backward -> rope_backward, for KV = 1, NH/2, NH,
//                            flash and materialized
//   rmsnorm                  forward (out, rstd), backward (dinp, dw accumulated)
//   residual_rmsnorm         resid, out, rstd
//   swiglu                   forward, backward
// and issue 38's (FamilyOpsMatchCpuBackend): RMSNorm with w_offset 1 (forward,
// fused residual, backward), qk_norm per head and full width (NH != KV, w_offset
// 0 and 1; forward and backward), GeGLU, scale, softcap_forward, and the
// classifier with a soft-cap (losses and the gradient through the cap).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "test_cuda_backend_cases.h"
#include "testing/rope_cos_sin.h"

namespace {

using ratchet::AttentionImpl;
using ratchet::Backend;
using ratchet::testing::bcases::random_floats;
using ratchet::testing::bcases::rel_err;

// FP32 storage: the same math, different summation orders (warp trees, the
// GEMM stand-in, expf vs the cpu backend's exp): a few ulp; 1e-5 is ~30x above.
constexpr double kF32Rel = 1e-5;
// BF16 storage: every stored tensor rounded to 8 mantissa bits (2^-8 = 0.4%)
// between ops, compounding over the 4-5 ops of the attention chain. Measured
// under simt: at most 5.5e-3 (dqkv, KV = 2); 1.5e-2 is ~3x above.
constexpr double kBf16Rel = 1.5e-2;
// BF16 storage, one op from identical stored inputs: FP32 math, each output
// rounded once to BF16, at most 2^-8 = 3.9e-3 of its magnitude (a bound;
// measured under simt: at most 3.5e-3, qk_norm full-width dinp); 6e-3 leaves
// room for the FP32 summation-order differences on top.
constexpr double kBf16OneOpRel = 6e-3;

// Host values rounded to what `be` stores, so both backends start equal.
std::vector<float> stored(Backend& be, std::vector<float> x) {
  if (be.storage_bytes() == 2)
    for (auto& v : x) v = __bfloat162float(__float2bfloat16(v));
  return x;
}

// A buffer on one backend; storage-typed (f32 false) or raw FP32.
struct Buf {
  Backend& be;
  void* p;
  size_t n;
  bool f32;
  Buf(Backend& b, const std::vector<float>& x, bool raw_f32 = false)
      : be(b), n(x.size()), f32(raw_f32) {
    p = be.alloc(n * (f32 ? 4 : be.storage_bytes()));
    if (f32)
      be.upload_bytes(p, x.data(), n * 4);
    else
      be.upload_f32(p, x.data(), n);
  }
  ~Buf() { be.release(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  std::vector<float> host() const {
    std::vector<float> h(n);
    be.synchronize();
    if (f32)
      be.download_bytes(h.data(), p, n * 4);
    else
      be.download_f32(h.data(), p, n);
    return h;
  }
  float* fp() const { return static_cast<float*>(p); }
};

struct Checker {
  double limit;
  void operator()(const std::string& what, const Buf& got, const Buf& ref) const {
    bool nonfinite = false;
    auto g = got.host(), r = ref.host();
    const double e = rel_err(g.data(), r.data(), g.size(), &nonfinite);
    std::printf("  %-28s rel %.3g\n", what.c_str(), e);
    EXPECT_FALSE(nonfinite) << what;
    EXPECT_LE(e, limit) << what;
  }
};

void attention_chain(Backend& dut, int KV) {
  SCOPED_TRACE("KV=" + std::to_string(KV));
  auto cpu = ratchet::make_cpu_backend(1);
  const int B = 2, T = 16, NH = 4, hs = 16, C = NH * hs, maxT = 20;
  const size_t nqkv = (size_t)B * T * (NH + 2 * KV) * hs, nout = (size_t)B * T * C;
  const std::vector<float> cs = ratchet::testing::rope_table(NH, hs, maxT);
  const auto qkv = stored(dut, random_floats(nqkv, 1.0f, 11 + KV));
  const auto dout = stored(dut, random_floats(nout, 1.0f, 12 + KV));
  const size_t saved_n =
      ratchet::attention_saved_bytes(dut.attention_impl(), B, NH, T, dut.storage_bytes()) / 4 + 1;
  Checker check{dut.storage_bytes() == 2 ? kBf16Rel : kF32Rel};
  struct Side {
    Buf qkv, cs, out, saved, dout, dqkv;
  };
  auto run = [&](Backend& be, size_t saved_floats) {
    std::unique_ptr<Side> sp(new Side{Buf(be, qkv), Buf(be, cs, true), Buf(be, std::vector<float>(nout)),
           Buf(be, std::vector<float>(saved_floats), true), Buf(be, dout),
           Buf(be, std::vector<float>(nqkv, NAN))});
    Side& s = *sp;
    be.reserve_workspace(be.workspace_bytes({B, T, C, NH, 64, KV, 0}));
    be.rope_forward(s.qkv.p, s.cs.fp(), B, T, NH, KV, hs, maxT);
    be.attention_forward(s.out.p, s.saved.p, s.qkv.p, B, T, C, NH, KV);
    be.attention_backward(s.dqkv.p, s.dout.p, s.qkv.p, s.out.p, s.saved.p, B, T, C, NH, KV);
    be.rope_backward(s.dqkv.p, s.cs.fp(), B, T, NH, KV, hs, maxT);
    return sp;
  };
  auto rp = run(*cpu, (size_t)B * NH * T), dp = run(dut, saved_n);
  const Side &r = *rp, &d = *dp;
  check("qkv after rope", d.qkv, r.qkv);
  check("attention out", d.out, r.out);
  check("dqkv (through rope)", d.dqkv, r.dqkv);
}

void norm_and_mlp(Backend& dut) {
  auto cpu = ratchet::make_cpu_backend(1);
  const int N = 37, C = 96, H = 80;
  const float eps = 1e-5f;
  const size_t n = (size_t)N * C;
  const auto x = stored(dut, random_floats(n, 2.0f, 1)), y = stored(dut, random_floats(n, 1.0f, 2));
  const auto w = stored(dut, random_floats(C, 1.0f, 3)), dy = stored(dut, random_floats(n, 1.0f, 4));
  const auto dx0 = stored(dut, random_floats(n, 1.0f, 5)), dw0 = stored(dut, random_floats(C, 1.0f, 6));
  const auto fc = stored(dut, random_floats((size_t)N * 2 * H, 3.0f, 7));
  const auto dsw = stored(dut, random_floats((size_t)N * H, 1.0f, 8));
  Checker check{dut.storage_bytes() == 2 ? kBf16Rel : kF32Rel};
  struct Side {
    Buf x, y, w, dy, out, rstd, dx, dw, res, out2, rstd2, fc, sw, dsw, dfc;
  };
  auto run = [&](Backend& be) {
    std::unique_ptr<Side> sp(new Side{Buf(be, x), Buf(be, y), Buf(be, w), Buf(be, dy), Buf(be, std::vector<float>(n)),
           Buf(be, std::vector<float>(N), true), Buf(be, dx0), Buf(be, dw0),
           Buf(be, std::vector<float>(n)), Buf(be, std::vector<float>(n)),
           Buf(be, std::vector<float>(N), true), Buf(be, fc),
           Buf(be, std::vector<float>((size_t)N * H)), Buf(be, dsw),
           Buf(be, std::vector<float>((size_t)N * 2 * H, NAN))});
    Side& s = *sp;
    be.reserve_workspace(be.workspace_bytes({1, N, C, 1, 64, 1, H}));
    be.rmsnorm_forward(s.out.p, s.rstd.fp(), s.x.p, s.w.p, N, C, eps);
    be.rmsnorm_backward(s.dx.p, s.dw.p, s.dy.p, s.x.p, s.w.p, s.rstd.fp(), N, C);
    be.residual_rmsnorm_forward(s.res.p, s.out2.p, s.rstd2.fp(), s.x.p, s.y.p, s.w.p, N, C, eps);
    be.swiglu_forward(s.sw.p, s.fc.p, N, H);
    be.swiglu_backward(s.dfc.p, s.fc.p, s.dsw.p, N, H);
    return sp;
  };
  auto rp = run(*cpu), dp = run(dut);
  const Side &r = *rp, &d = *dp;
  check("rmsnorm out", d.out, r.out);
  check("rmsnorm rstd", d.rstd, r.rstd);
  check("rmsnorm dinp (accumulated)", d.dx, r.dx);
  check("rmsnorm dw (accumulated)", d.dw, r.dw);
  check("residual_rmsnorm resid", d.res, r.res);
  check("residual_rmsnorm out", d.out2, r.out2);
  check("residual_rmsnorm rstd", d.rstd2, r.rstd2);
  check("swiglu out", d.sw, r.sw);
  check("swiglu dinp", d.dfc, r.dfc);
}

// Issue 38's ops, one call each from the same stored inputs on both backends.
void family_ops(Backend& dut) {
  auto cpu = ratchet::make_cpu_backend(1);
  const int N = 13, C = 48, H = 40, NH = 4, KV = 2, hs = 16, V = 37, Vp = 40;
  const int W = (NH + 2 * KV) * hs;
  const float eps = 1e-6f, cap = 4.0f;
  const size_t n = (size_t)N * C, nq = (size_t)N * W;
  auto st = [&](size_t len, float scale, uint64_t seed) {
    return stored(dut, random_floats(len, scale, seed));
  };
  const auto x = st(n, 2.0f, 21), y = st(n, 1.0f, 22), w = st(C, 1.0f, 23), dy = st(n, 1.0f, 24);
  const auto dx0 = st(n, 1.0f, 25), dw0 = st(C, 1.0f, 26);
  const auto qkv = st(nq, 2.0f, 27), dqkv_out = st(nq, 1.0f, 28);
  const auto qw_h = st(hs, 1.0f, 29), kw_h = st(hs, 1.0f, 30);
  const auto qw_f = st((size_t)NH * hs, 1.0f, 31), kw_f = st((size_t)KV * hs, 1.0f, 32);
  const auto dqw_h0 = st(hs, 1.0f, 37), dkw_h0 = st(hs, 1.0f, 38);
  const auto dqw_f0 = st((size_t)NH * hs, 1.0f, 39), dkw_f0 = st((size_t)KV * hs, 1.0f, 40);
  const auto fc = st((size_t)N * 2 * H, 3.0f, 33), dg = st((size_t)N * H, 1.0f, 34);
  const auto v = st(n, 8.0f, 35);
  std::vector<float> logits = random_floats((size_t)N * Vp, 3.0f, 36);
  for (auto& l : logits) l = cap * std::tanh(l / cap);  // already capped, as the model runs it
  logits = stored(dut, logits);
  std::vector<int> targets(N);
  for (int i = 0; i < N; i++) targets[i] = (i * 7) % V;
  Checker check{dut.storage_bytes() == 2 ? kBf16OneOpRel : kF32Rel};

  struct Side {
    std::vector<std::unique_ptr<Buf>> bufs;
    Buf& add(Backend& be, const std::vector<float>& h, bool f32 = false) {
      bufs.emplace_back(new Buf(be, h, f32));
      return *bufs.back();
    }
  };
  struct Out {
    std::vector<std::pair<std::string, const Buf*>> outs;
  };
  auto run = [&](Backend& be, Side& sd) {
    Out o;
    auto put = [&](const std::string& name, const Buf& b) { o.outs.push_back({name, &b}); };
    be.reserve_workspace(be.workspace_bytes({1, N, C, 1, 64, 1, H}));
    Buf &bx = sd.add(be, x), &by = sd.add(be, y), &bw = sd.add(be, w), &bdy = sd.add(be, dy);
    // RMSNorm, (1+w) form.
    Buf &out = sd.add(be, std::vector<float>(n)), &rstd = sd.add(be, std::vector<float>(N), true);
    Buf &dx = sd.add(be, dx0), &dw = sd.add(be, dw0);
    be.rmsnorm_forward(out.p, rstd.fp(), bx.p, bw.p, N, C, eps, 1.0f);
    be.rmsnorm_backward(dx.p, dw.p, bdy.p, bx.p, bw.p, rstd.fp(), N, C, 1.0f);
    put("rmsnorm(1+w) out", out), put("rmsnorm(1+w) rstd", rstd);
    put("rmsnorm(1+w) dinp (accumulated)", dx), put("rmsnorm(1+w) dw (accumulated)", dw);
    Buf &res = sd.add(be, std::vector<float>(n)), &out2 = sd.add(be, std::vector<float>(n));
    Buf& rstd2 = sd.add(be, std::vector<float>(N), true);
    be.residual_rmsnorm_forward(res.p, out2.p, rstd2.fp(), bx.p, by.p, bw.p, N, C, eps, 1.0f);
    put("residual_rmsnorm(1+w) resid", res), put("residual_rmsnorm(1+w) out", out2);
    put("residual_rmsnorm(1+w) rstd", rstd2);
    // q/k norms: per head ([hs] weights shared by the heads) and full width.
    Buf &bq = sd.add(be, qkv), &bdq = sd.add(be, dqkv_out);
    for (bool per_head : {true, false})
      for (float off : {0.0f, 1.0f}) {
        const std::string tag = std::string(per_head ? "qk_norm head" : "qk_norm full") +
                                (off != 0 ? " (1+w) " : " ");
        const int R = per_head ? NH + KV : 2;
        Buf& qw = sd.add(be, per_head ? qw_h : qw_f);
        Buf& kw = sd.add(be, per_head ? kw_h : kw_f);
        Buf &qo = sd.add(be, std::vector<float>(nq, NAN)), &qr = sd.add(be, std::vector<float>((size_t)N * R), true);
        Buf& qdi = sd.add(be, std::vector<float>(nq, NAN));
        Buf& dqw = sd.add(be, per_head ? dqw_h0 : dqw_f0);
        Buf& dkw = sd.add(be, per_head ? dkw_h0 : dkw_f0);
        be.qk_norm_forward(qo.p, qr.fp(), bq.p, qw.p, kw.p, N, NH, KV, hs, per_head, eps, off);
        be.qk_norm_backward(qdi.p, dqw.p, dkw.p, bdq.p, bq.p, qw.p, kw.p, qr.fp(), N, NH, KV, hs,
                            per_head, off);
        put(tag + "out", qo), put(tag + "rstd", qr), put(tag + "dinp", qdi);
        put(tag + "dqw (accumulated)", dqw), put(tag + "dkw (accumulated)", dkw);
      }
    // GeGLU.
    Buf &bfc = sd.add(be, fc), &bdg = sd.add(be, dg);
    Buf &gout = sd.add(be, std::vector<float>((size_t)N * H, NAN));
    Buf &gdi = sd.add(be, std::vector<float>((size_t)N * 2 * H, NAN));
    be.geglu_forward(gout.p, bfc.p, N, H);
    be.geglu_backward(gdi.p, bfc.p, bdg.p, N, H);
    put("geglu out", gout), put("geglu dinp", gdi);
    // scale, soft-cap (in place).
    Buf &sc = sd.add(be, v), &cp = sd.add(be, v);
    be.scale(sc.p, n, 0.37f);
    be.softcap_forward(cp.p, n, cap);
    put("scale", sc), put("softcap_forward", cp);
    // The capped classifier: losses and the gradient through the cap.
    Buf& lg = sd.add(be, logits);
    Buf& losses = sd.add(be, std::vector<float>(N), true);
    int* tg = static_cast<int*>(be.alloc(N * sizeof(int)));
    be.upload_bytes(tg, targets.data(), N * sizeof(int));
    be.classifier(lg.p, losses.fp(), tg, N, V, Vp, 1.0f / N, cap);
    be.synchronize();
    be.release(tg);
    put("classifier(softcap) losses", losses), put("classifier(softcap) dlogits", lg);
    return o;
  };
  Side rs, ds;
  const Out r = run(*cpu, rs), d = run(dut, ds);
  for (size_t i = 0; i < r.outs.size(); i++) check(r.outs[i].first, *d.outs[i].second, *r.outs[i].second);
}

TEST(CudaBackendSimtLlamaOps, GroupedQueryAttentionMatchesCpuBackend) {
  for (const char* storage : {"f32", "bf16"})
    for (AttentionImpl a : {AttentionImpl::flash, AttentionImpl::materialized}) {
      SCOPED_TRACE(std::string(storage) + " " + ratchet::attention_name(a));
      std::printf("%s %s\n", storage, ratchet::attention_name(a));
      auto be = ratchet::make_cuda_backend(storage, a);
      for (int KV : {1, 2, 4}) attention_chain(*be, KV);
    }
}

TEST(CudaBackendSimtLlamaOps, NormsAndSwigluMatchCpuBackend) {
  for (const char* storage : {"f32", "bf16"}) {
    SCOPED_TRACE(storage);
    std::printf("%s\n", storage);
    auto be = ratchet::make_cuda_backend(storage);
    norm_and_mlp(*be);
  }
}

TEST(CudaBackendSimtLlamaOps, FamilyOpsMatchCpuBackend) {
  for (const char* storage : {"f32", "bf16"}) {
    SCOPED_TRACE(storage);
    std::printf("%s\n", storage);
    auto be = ratchet::make_cuda_backend(storage);
    family_ops(*be);
  }
}

}  // namespace

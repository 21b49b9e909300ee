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

}  // namespace

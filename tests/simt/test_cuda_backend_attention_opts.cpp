// Issue 38's attention options (AttnOpts: sliding window, score scale,
// soft-cap) in the cuda backend (on simt) against the cpu backend, through the
// Backend interface, for flash and materialized attention, FP32 and BF16
// storage: forward out, the flash lse, and all of dqkv (q, k and v columns).
// The cases put the window boundary row i-W+1 inside a tile with whole tiles
// skipped on both sides (T = 104 is four 32-row flash tiles at head size 16),
// window 1 (only the diagonal), a window >= T (plain causal), a scale that is
// not 1/sqrt(hs), a soft-cap that bends the scores (inputs of scale 1.5 give
// |s| up to ~4 > c), grouped-query heads, and head sizes 32 and 128 (16-row
// tiles). The head count times head size differs from the model channels the
// workspace was reserved for (Qwen3, Gemma 3): reserve_workspace gets OpShapes
// with HS, and the ops must then allocate no further scratch.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "test_cuda_backend_cases.h"

namespace {

using ratchet::AttentionImpl;
using ratchet::AttnOpts;
using ratchet::Backend;
using ratchet::testing::bcases::random_floats;
using ratchet::testing::bcases::rel_err;

// FP32 storage: the same math in other summation orders (tile vs GEMM blocks),
// expf/tanhf vs the cpu backend's exp/tanh: a few ulp; 1e-5 is ~30x above.
constexpr double kF32Rel = 1e-5;
// BF16 storage: out and dqkv rounded to 8 mantissa bits (2^-8 = 0.4%), the
// materialized path also its scores and probabilities between the GEMMs, and
// dqkv sums tens of such terms: 1.5e-2 as the Llama ops' attention chain
// (test_cuda_backend_llama_ops.cpp), whose measured worst was 5.5e-3.
constexpr double kBf16Rel = 1.5e-2;

struct Case {
  const char* name;
  int B, T, NH, KV, hs, C_model;  // C_model: the model channels the workspace is sized for
  AttnOpts o;
};

AttnOpts opts(int window, float scale, float softcap) {
  AttnOpts o;
  o.window = window;
  o.scale = scale;
  o.softcap = softcap;
  return o;
}

const Case kCases[] = {
    {"window 40, T 104 (4 tiles)", 2, 104, 4, 2, 16, 64, opts(40, 0, 0)},
    {"window 1", 1, 72, 2, 1, 16, 32, opts(1, 0, 0)},
    {"window >= T", 1, 48, 2, 2, 16, 32, opts(64, 0, 0)},
    {"scale 0.3", 1, 40, 2, 1, 16, 32, opts(0, 0.3f, 0)},
    {"soft-cap 1.5", 2, 72, 4, 2, 16, 64, opts(0, 0, 1.5f)},
    {"window 20 + scale 0.2 + soft-cap 2, hs 32 > C/NH", 1, 88, 4, 1, 32, 48, opts(20, 0.2f, 2)},
    {"window 24, hs 128 (16-row tiles) < C/NH", 1, 64, 2, 1, 128, 320, opts(24, 0, 0)},
};

std::vector<float> stored(Backend& be, std::vector<float> x) {
  if (be.storage_bytes() == 2)
    for (auto& v : x) v = __bfloat162float(__float2bfloat16(v));
  return x;
}

// A device buffer of n storage elements (or raw FP32), uploaded from host.
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
};

void expect_close(const char* what, const std::vector<float>& got, const std::vector<float>& ref,
                  double limit) {
  bool nonfinite = false;
  const double e = rel_err(got.data(), ref.data(), got.size(), &nonfinite);
  std::printf("  %-10s rel %.3g\n", what, e);
  EXPECT_FALSE(nonfinite) << what;
  EXPECT_LE(e, limit) << what;
}

void run_case(Backend& dut, const Case& c) {
  SCOPED_TRACE(c.name);
  std::printf(" %s\n", c.name);
  auto cpu = ratchet::make_cpu_backend(1);
  const int B = c.B, T = c.T, NH = c.NH, KV = c.KV, C = NH * c.hs;
  const size_t nqkv = (size_t)B * T * (NH + 2 * KV) * c.hs, nout = (size_t)B * T * C;
  const auto qkv = stored(dut, random_floats(nqkv, 1.5f, 31 + T));
  const auto dout = stored(dut, random_floats(nout, 1.0f, 32 + T));
  struct Side {
    std::vector<float> out, saved, dqkv;
  };
  auto run = [&](Backend& be, bool check_workspace) {
    const size_t saved_n =
        ratchet::attention_saved_bytes(be.attention_impl(), B, NH, T, be.storage_bytes()) / 4 + 1;
    Buf bq(be, qkv), bo(be, std::vector<float>(nout)), bs(be, std::vector<float>(saved_n), true),
        bd(be, dout), bdq(be, std::vector<float>(nqkv, NAN));
    Backend::OpShapes s{B, T, c.C_model, NH, 64, KV, 0};
    s.HS = c.hs;
    be.reserve_workspace(be.workspace_bytes(s));
    const size_t held = be.bytes_in_use();
    be.attention_forward(bo.p, bs.p, bq.p, B, T, C, NH, KV, c.o);
    be.attention_backward(bdq.p, bd.p, bq.p, bo.p, bs.p, B, T, C, NH, KV, c.o);
    // The reserved workspace covered the ops (no scratch grown on the way).
    if (check_workspace) {
      EXPECT_EQ(be.bytes_in_use(), held) << "attention scratch beyond the reserved workspace";
    }
    return Side{bo.host(), bs.host(), bdq.host()};
  };
  const Side r = run(*cpu, false), d = run(dut, true);
  const double lim = dut.storage_bytes() == 2 ? kBf16Rel : kF32Rel;
  expect_close("out", d.out, r.out, lim);
  if (dut.attention_impl() == AttentionImpl::flash) {
    // lse (B,NH,T) FP32 from FP32 arithmetic on the stored inputs in both precisions.
    std::vector<float> dl(d.saved.begin(), d.saved.begin() + (size_t)B * NH * T),
        rl(r.saved.begin(), r.saved.begin() + (size_t)B * NH * T);
    expect_close("lse", dl, rl, kF32Rel);
  }
  expect_close("dqkv", d.dqkv, r.dqkv, lim);
}

TEST(CudaBackendSimtAttentionOpts, WindowScaleSoftcapMatchCpuBackend) {
  for (const char* storage : {"f32", "bf16"})
    for (AttentionImpl a : {AttentionImpl::flash, AttentionImpl::materialized}) {
      SCOPED_TRACE(std::string(storage) + " " + ratchet::attention_name(a));
      std::printf("%s %s\n", storage, ratchet::attention_name(a));
      // A fresh backend per case: its scratch only grows, so one reserved for
      // an earlier case could hide a short reservation.
      for (const Case& c : kCases) run_case(*ratchet::make_cuda_backend(storage, a), c);
    }
}

// A bad option is refused by name, not run.
TEST(CudaBackendSimtAttentionOpts, NegativeWindowOrSoftcapIsRefused) {
  auto be = ratchet::make_cuda_backend("f32");
  const int B = 1, T = 8, NH = 1, hs = 16;
  Buf q(*be, std::vector<float>((size_t)B * T * 3 * hs)), o(*be, std::vector<float>(B * T * hs)),
      s(*be, std::vector<float>(B * NH * T), true);
  EXPECT_THROW(be->attention_forward(o.p, s.p, q.p, B, T, hs, NH, NH, opts(-1, 0, 0)),
               ratchet::Error);
  EXPECT_THROW(be->attention_forward(o.p, s.p, q.p, B, T, hs, NH, NH, opts(0, 0, -2)),
               ratchet::Error);
}

}  // namespace

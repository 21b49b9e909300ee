// The whole MoE layer on the cuda backend (src/backend/cuda/cuda_moe.h)
// against the cpu backend's moe_forward / moe_backward: the inputs, both
// runs and the comparison, shared by tests/simt/test_cuda_backend_moe.cpp
// (simt: kernels on the CPU, expert GEMMs on the matmul wrapper's CPU
// stand-in) and tests/gpu/test_cuda_backend_moe_gpu.cpp (a device, cuBLASLt).
//
// Compared: out, dx, dgate, dw1, dw2 and the routing weights' gradient, the
// routing itself, and an expert with no tokens (its gradients stay at their
// prefill, bit for bit).
//
// The router must choose the same experts on both sides, and in BF16 the
// logits are rounded to storage before the softmax: x is drawn from
// {-1, -1/2, 0, 1/2, 1} and gate from {-1, 0, 1}, so every logit is a
// multiple of 1/2 below 128 in magnitude (C <= 128): at most 8 significant
// bits, exact in BF16 and FP32 alike, and
// distinct logits are far apart (equal ones are exact ties, which both sides
// break to the lower index).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_moe.h"
#include "core/rng.h"
#include "test_cuda_backend_cases.h"

namespace ratchet::testing::moecases {

using ratchet::Backend;
using ratchet::CpuBackend;
using ratchet::kernels::bf16;
using ratchet::moe::MoeShape;
using ratchet::testing::bcases::random_floats;
using ratchet::testing::bcases::rel_err;

// FP32: the same math in other summation orders (softmax and combine sums,
// the dw dot products by warp): a few ulp of the largest value; 1e-5 is far above.
constexpr double kF32Rel = 1e-5;
// BF16: h, a, y, dy, dxp, dlogits and out are each rounded to 8 bits
// (2^-9 relative) between the GEMMs, and gradients sum tens of such terms:
// 2e-2 of the largest value, as the Llama ops' chains (1.5e-2) plus margin.
constexpr double kBf16Rel = 2e-2;

struct Inputs {
  std::vector<float> x, gate, w1, w2, dout, dgate, dw1, dw2, aux;
};

inline std::vector<float> stored(size_t sb, std::vector<float> v) {
  if (sb == 2)
    for (auto& x : v) x = __bfloat162float(__float2bfloat16(x));
  return v;
}

inline Inputs make_inputs(const MoeShape& s, size_t sb, uint64_t seed, int empty_expert) {
  // The logits' exactness above.
  EXPECT_LE(s.C, 128) << "logits would not be exact in BF16";
  ratchet::Rng rng(seed);
  Inputs in;
  in.x.resize((size_t)s.N * s.C);
  for (auto& v : in.x) v = 0.5f * ((int)rng.below(5) - 2);
  in.gate.resize((size_t)s.E * s.C);
  for (auto& v : in.gate) v = (float)((int)rng.below(3) - 1);
  if (empty_expert >= 0) {
    // Channel 0 is 1 for every token, and the gate's channel 0 is -2C for the
    // empty expert and 0 for the others: its logit is at most -C - 1, every
    // other one at least -(C - 1) (the other channels give |x_c gate_c| <= 1
    // each). The others' logits stay exact; the empty one's may round in
    // BF16, but it stays far below them and its probability underflows.
    // Zero on the other experts' channel 0 keeps dx's channel 0 free of a
    // cancelling sum (+-C there made it sum_e dlogits_e C ~ 0 with C times
    // dlogits' rounding).
    for (int n = 0; n < s.N; n++) in.x[(size_t)n * s.C] = 1.0f;
    for (int e = 0; e < s.E; e++) in.gate[(size_t)e * s.C] = e == empty_expert ? -2.0f * s.C : 0.0f;
  }
  in.w1 = stored(sb, random_floats((size_t)s.E * 2 * s.I * s.C, 0.3f, seed + 1));
  in.w2 = stored(sb, random_floats((size_t)s.E * s.C * s.I, 0.3f, seed + 2));
  in.dout = stored(sb, random_floats((size_t)s.N * s.C, 1.0f, seed + 3));
  in.dgate = stored(sb, random_floats(in.gate.size(), 0.5f, seed + 4));
  in.dw1 = stored(sb, random_floats(in.w1.size(), 0.5f, seed + 5));
  in.dw2 = stored(sb, random_floats(in.w2.size(), 0.5f, seed + 6));
  in.aux = random_floats(s.E, 0.05f, seed + 7);
  return in;
}

struct Outputs {
  std::vector<float> out, dx, dgate, dw1, dw2, dw_route;
  std::vector<int> idx, counts;
  // aux_stats onto a prefill of 1 per expert: selection counts, probability sums.
  std::vector<double> aux_counts, aux_sums;
};

inline Outputs run_cpu(const MoeShape& s, const Inputs& in) {
  CpuBackend be(1);
  Outputs o;
  o.out.resize((size_t)s.N * s.C);
  o.dx.resize(o.out.size());
  o.dgate = in.dgate;
  o.dw1 = in.dw1;
  o.dw2 = in.dw2;
  o.dw_route.resize((size_t)s.N * s.k);
  ratchet::moe::MoeCache cache;
  ratchet::moe::moe_forward(be, s, in.x.data(), in.gate.data(), in.w1.data(), in.w2.data(),
                            o.out.data(), cache);
  ratchet::moe::moe_backward(be, s, in.x.data(), in.gate.data(), in.w1.data(), in.w2.data(),
                             in.dout.data(), cache, in.aux.data(), o.dx.data(), o.dgate.data(),
                             o.dw1.data(), o.dw2.data(), o.dw_route.data());
  o.idx = cache.idx;
  o.counts = cache.dispatch.counts;
  o.aux_counts.assign(s.E, 1.0);
  o.aux_sums.assign(s.E, 1.0);
  ratchet::moe::aux_stats(s, cache.probs.data(), cache.idx.data(), o.aux_counts.data(),
                          o.aux_sums.data());
  return o;
}

// A device buffer of storage elements (or raw bytes of FP32/int), freed with the backend.
struct Dev {
  Backend& be;
  void* p;
  Dev(Backend& b, const std::vector<float>& v, bool raw = false) : be(b) {
    p = be.alloc(std::max<size_t>(1, v.size()) * (raw ? 4 : be.storage_bytes()));
    if (v.empty()) return;
    if (raw)
      be.upload_bytes(p, v.data(), v.size() * 4);
    else
      be.upload_f32(p, v.data(), v.size());
  }
  ~Dev() { be.release(p); }
  std::vector<float> get(size_t n) {
    std::vector<float> h(n);
    be.synchronize();
    be.download_f32(h.data(), p, n);
    return h;
  }
  std::vector<float> get_raw(size_t n) {
    std::vector<float> h(n);
    be.synchronize();
    be.download_bytes(h.data(), p, n * 4);
    return h;
  }
};

// An expert exchange over one rank: what the layer sends comes back to it
// (device rows copied by the backend). It runs the cuda layer's
// expert-parallel path (cuda_moe.h: the shared bookkeeping, the uploaded
// permutations, the gathers, the experts' slices, device_rows) in one
// process, which has no peer; with one rank that path must give the local
// path's bits.
class SelfExchange final : public ratchet::MoeExchange {
 public:
  explicit SelfExchange(Backend& be) : be_(be) {}
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void counts(const int* send, int* recv, int n) override { std::copy(send, send + n, recv); }
  void rows(const float* send, const size_t* sc, float* recv, const size_t*) override {
    std::copy(send, send + sc[0], recv);
  }
  void device_rows(const void* send, const size_t* sc, void* recv, const size_t* rc,
                   int elem_bytes) override {
    EXPECT_EQ(sc[0], rc[0]);
    EXPECT_EQ((size_t)elem_bytes, be_.storage_bytes());
    if (sc[0] > 0) be_.copy(recv, send, sc[0] * elem_bytes);
    calls++;
  }
  int calls = 0;  // device_rows calls: 2 forward, 2 backward

 private:
  Backend& be_;
};

// self_exchange: through SelfExchange (the expert-parallel path, one rank).
template <class T>
Outputs run_cuda(const MoeShape& s, const Inputs& in, bool self_exchange = false) {
  auto owner = ratchet::make_cuda_backend(sizeof(T) == 2 ? "bf16" : "f32");
  auto& be = dynamic_cast<ratchet::cuda::CudaBackend<T>&>(*owner);
  SelfExchange self(be);
  ratchet::MoeExchange* ex = self_exchange ? &self : nullptr;
  Outputs o;
  {
    Dev x(be, in.x), gate(be, in.gate), w1(be, in.w1), w2(be, in.w2), dout(be, in.dout),
        dgate(be, in.dgate), dw1(be, in.dw1), dw2(be, in.dw2), aux(be, in.aux, true),
        out(be, std::vector<float>((size_t)s.N * s.C, NAN)),
        dx(be, std::vector<float>((size_t)s.N * s.C, NAN)),
        dw_route(be, std::vector<float>((size_t)s.N * s.k, NAN), true);
    ratchet::moe::CudaMoeCache cache;
    ratchet::moe::moe_forward<T>(be, s, x.p, gate.p, w1.p, w2.p, out.p, cache, nullptr, ex);
    ratchet::moe::moe_backward<T>(be, s, x.p, gate.p, w1.p, w2.p, dout.p, cache,
                                  static_cast<float*>(aux.p), dx.p, dgate.p, dw1.p, dw2.p,
                                  static_cast<float*>(dw_route.p), ex);
    if (ex) {
      EXPECT_EQ(self.calls, 4) << "rows to the experts and back, forward and backward";
    }
    o.out = out.get((size_t)s.N * s.C);
    o.dx = dx.get((size_t)s.N * s.C);
    o.dgate = dgate.get(in.dgate.size());
    o.dw1 = dw1.get(in.dw1.size());
    o.dw2 = dw2.get(in.dw2.size());
    o.dw_route = dw_route.get_raw((size_t)s.N * s.k);
    o.idx.resize((size_t)s.N * s.k);
    if (s.N) be.download_bytes(o.idx.data(), cache.idx.p, o.idx.size() * 4);
    o.counts = cache.counts;
    o.aux_counts.assign(s.E, 1.0);
    o.aux_sums.assign(s.E, 1.0);
    void* dc = be.alloc(s.E * 8);
    void* ds = be.alloc(s.E * 8);
    be.upload_bytes(dc, o.aux_counts.data(), s.E * 8);
    be.upload_bytes(ds, o.aux_sums.data(), s.E * 8);
    ratchet::moe::aux_stats<T>(be, s, static_cast<const float*>(cache.probs.p),
                               static_cast<const int*>(cache.idx.p), static_cast<double*>(dc),
                               static_cast<double*>(ds));
    be.download_bytes(o.aux_counts.data(), dc, s.E * 8);
    be.download_bytes(o.aux_sums.data(), ds, s.E * 8);
    be.release(dc);
    be.release(ds);
  }
  return o;
}

inline void expect_close(const char* what, const std::vector<float>& got, const std::vector<float>& ref,
                  double limit) {
  bool nonfinite = false;
  const double e = rel_err(got.data(), ref.data(), got.size(), &nonfinite);
  std::printf("    %-9s rel %.3g\n", what, e);
  EXPECT_FALSE(nonfinite) << what;
  EXPECT_LE(e, limit) << what;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

struct Case {
  const char* name;
  MoeShape s;
  int empty_expert;  // -1: none forced
};

// Two runs of the same layer gave the same bits in every output (the
// determinism both the simt and the GPU tests assert).
inline void expect_same_bits(const Outputs& a, const Outputs& b) {
  EXPECT_EQ(a.idx, b.idx);
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.dx, b.dx));
  EXPECT_TRUE(same_bits(a.dgate, b.dgate));
  EXPECT_TRUE(same_bits(a.dw1, b.dw1));
  EXPECT_TRUE(same_bits(a.dw2, b.dw2));
  EXPECT_TRUE(same_bits(a.dw_route, b.dw_route));
  EXPECT_EQ(a.aux_counts, b.aux_counts);
  EXPECT_EQ(0, std::memcmp(a.aux_sums.data(), b.aux_sums.data(), a.aux_sums.size() * 8));
}

inline const Case kCases[] = {
    {"E 4, k 2, norm", {40, 16, 4, 2, 8, true}, -1},
    {"E 4, k 2, expert 1 gets no token", {24, 16, 4, 2, 8, true}, 1},
    {"E 3, k 1, no norm", {37, 8, 3, 1, 16, false}, -1},
    {"k = E = 4", {20, 16, 4, 4, 8, true}, -1},
    {"E 8, k 2, 600 slots (3 dispatch chunks), expert 5 empty", {300, 32, 8, 2, 16, false}, 5},
    {"E 1, k 1", {9, 8, 1, 1, 8, true}, -1},
    // DeepSeek-V3 routing: sigmoid scores, routed_scaling_factor (norm on and off).
    {"sigmoid, scale 2.5, norm", {40, 16, 4, 2, 8, true, true, 2.5f}, -1},
    {"sigmoid, scale 0.5, no norm, expert 2 empty", {24, 16, 4, 2, 8, false, true, 0.5f}, 2},
    {"softmax, scale 3, norm", {20, 16, 4, 2, 8, true, false, 3.0f}, -1},
};

// The expert-parallel path over one rank gives the local path's bits.
template <class T>
void expect_self_exchange_same_bits(const Case& c) {
  SCOPED_TRACE(std::string(c.name) + (sizeof(T) == 2 ? ", bf16" : ", f32"));
  const Inputs in = make_inputs(c.s, sizeof(T), 13, c.empty_expert);
  expect_same_bits(run_cuda<T>(c.s, in), run_cuda<T>(c.s, in, true));
}

template <class T>
void compare_case(const Case& c) {
  SCOPED_TRACE(c.name);
  std::printf("  %s\n", c.name);
  const MoeShape& s = c.s;
  const Inputs in = make_inputs(s, sizeof(T), 100 + s.N, c.empty_expert);
  const Outputs r = run_cpu(s, in), d = run_cuda<T>(s, in);
  ASSERT_EQ(d.idx, r.idx) << "routing differs from the cpu backend";
  EXPECT_EQ(d.counts, r.counts);
  const double lim = sizeof(T) == 2 ? kBf16Rel : kF32Rel;
  expect_close("out", d.out, r.out, lim);
  expect_close("dx", d.dx, r.dx, lim);
  expect_close("dgate", d.dgate, r.dgate, lim);
  expect_close("dw1", d.dw1, r.dw1, lim);
  expect_close("dw2", d.dw2, r.dw2, lim);
  // FP32 dot products of stored dout and y: y carries the storage's rounding.
  expect_close("dw_route", d.dw_route, r.dw_route, lim);
  // Counts exactly; FP64 sums of FP32 probabilities (the same on both sides:
  // exact logits, FP32 softmax) to 1e-6: the two softmaxes sum in other
  // orders, a few FP32 ulp per probability.
  EXPECT_EQ(d.aux_counts, r.aux_counts);
  for (int e = 0; e < s.E; e++) EXPECT_NEAR(d.aux_sums[e], r.aux_sums[e], 1e-6 * r.aux_sums[e]);
  if (c.empty_expert >= 0) {
    ASSERT_EQ(d.counts[c.empty_expert], 0);
    // No call for it: its weight gradients keep their prefill bit for bit.
    const size_t n1 = (size_t)2 * s.I * s.C, n2 = (size_t)s.C * s.I, e = c.empty_expert;
    EXPECT_TRUE(std::equal(d.dw1.begin() + e * n1, d.dw1.begin() + (e + 1) * n1,
                           in.dw1.begin() + e * n1));
    EXPECT_TRUE(std::equal(d.dw2.begin() + e * n2, d.dw2.begin() + (e + 1) * n2,
                           in.dw2.begin() + e * n2));
  }
}

}  // namespace ratchet::testing::moecases

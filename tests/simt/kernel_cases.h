// Every kernel of kernels/ against the CPU backend's op, for one memory world:
// simt (host memory, kernels run by kernels/simt) or a real device (tests/gpu).
//
// A case = (op, shape, storage type). Inputs are random, quantised to the
// storage type first, so the CPU reference sees exactly the kernel's inputs;
// accumulated (+=) outputs start from random values in both. Each output is
// compared by NMSE = sum (k - r)^2 / sum r^2 against a per-op limit; NaN/Inf
// in the kernel's output are counted separately; every kernel buffer has guard
// regions that must be untouched afterwards.
//
// Mem (the world) provides:
//   template <class T> T* alloc(size_t n)                  guarded, zero-filled
//   void upload(void* dst, const void* src, size_t bytes)
//   void download(void* dst, const void* src, size_t bytes)
//   std::string check_guards()                             "" if all intact
//   void sync()
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/adamw.cuh"
#include "kernels/attention.cuh"
#include "backend/backend.h"
#include "kernels/bias_grad.cuh"
#include "kernels/cast.cuh"
#include "kernels/classifier.cuh"
#include "core/rng.h"
#include "testing/rope_cos_sin.h"
#include "kernels/encoder.cuh"
#include "kernels/flash_attention.cuh"
#include "kernels/geglu.cuh"
#include "kernels/gelu.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"
#include "kernels/softcap.cuh"
#include "kernels/swiglu.cuh"

namespace ratchet::testing::kcases {

using kernels::bf16;

enum class DType { f32, bf16 };
inline const char* dtype_name(DType d) { return d == DType::f32 ? "f32" : "bf16"; }

struct Case {
  std::string op;
  std::vector<int> shape;
  DType dtype;
};

inline std::string case_name(const Case& c) {
  std::ostringstream os;
  os << c.op << "_" << dtype_name(c.dtype);
  for (int s : c.shape) os << "_" << s;
  return os.str();
}

inline void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }
// The test name of a case in INSTANTIATE_TEST_SUITE_P (simt and GPU suites alike).
inline std::string case_test_name(const ::testing::TestParamInfo<Case>& info) {
  return case_name(info.param);
}

// ---- host conversion helpers -------------------------------------------------------------------
template <class T>
std::vector<T> to_storage(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    if constexpr (std::is_same<T, float>::value)
      out[i] = x[i];
    else
      out[i] = __float2bfloat16(x[i]);
  }
  return out;
}
template <class T>
std::vector<float> to_f32(const std::vector<T>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    if constexpr (std::is_same<T, float>::value)
      out[i] = x[i];
    else
      out[i] = __bfloat162float(x[i]);
  }
  return out;
}
// Values representable in T (what the kernel will see).
template <class T>
std::vector<float> quantize(std::vector<float> x) {
  return to_f32(to_storage<T>(x));
}

inline std::vector<float> randn(Rng& rng, size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

// ---- the CPU reference's memory -----------------------------------------------------------------
struct Cpu {
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  std::vector<void*> owned;
  ~Cpu() {
    for (void* p : owned) be->release(p);
  }
  float* f32(const std::vector<float>& x) {
    auto* p = static_cast<float*>(be->alloc(std::max<size_t>(1, x.size()) * sizeof(float)));
    owned.push_back(p);
    if (!x.empty()) be->upload_bytes(p, x.data(), x.size() * sizeof(float));
    return p;
  }
  int* i32(const std::vector<int>& x) {
    auto* p = static_cast<int*>(be->alloc(std::max<size_t>(1, x.size()) * sizeof(int)));
    owned.push_back(p);
    be->upload_bytes(p, x.data(), x.size() * sizeof(int));
    return p;
  }
  std::vector<float> get(const float* p, size_t n) {
    std::vector<float> out(n);
    be->download_bytes(out.data(), p, n * sizeof(float));
    return out;
  }
};

// ---- comparison ---------------------------------------------------------------------------------
struct Report {
  std::vector<std::string> lines;
  bool ok = true;
  void compare(const std::string& what, const std::vector<float>& got,
               const std::vector<float>& ref, double limit) {
    double num = 0, den = 0;
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < ref.size(); i++) {
      if (!std::isfinite(got[i]) && std::isfinite(ref[i])) {
        if (!bad++) first_bad = i;
        continue;
      }
      double d = (double)got[i] - ref[i];
      num += d * d;
      den += (double)ref[i] * ref[i];
    }
    double nmse = den > 0 ? num / den : num;
    std::ostringstream os;
    os << what << ": nmse " << nmse << " (limit " << limit << ")";
    if (bad) os << ", " << bad << " NaN/Inf (first at " << first_bad << ")";
    if (nmse > limit || bad) {
      ok = false;
      os << "  <-- FAIL";
    }
    lines.push_back(os.str());
  }
  void fail(const std::string& what) {
    ok = false;
    lines.push_back(what + "  <-- FAIL");
  }
  std::string text() const {
    std::string s;
    for (auto& l : lines) s += "  " + l + "\n";
    return s;
  }
};

// ---- per-op NMSE limits (one line of reason each) ----------------------------------------------
// FP32: the kernel and the reference differ only in summation order.
constexpr double kF32 = 1e-10;
// BF16, one rounding of an FP32 result to BF16 (relative error <= 2^-9).
constexpr double kBf16 = 2e-5;
// BF16 accumulate: dst + sum rounded once, sums of up to B*T terms in FP32.
constexpr double kBf16Acc = 2e-5;
// BF16 attention: q k^T, att and y are each rounded to BF16 between the GEMMs
// (as with cuBLAS BF16 outputs), so errors compound over 3-4 roundings.
constexpr double kBf16Attn = 5e-5;
// BF16 classifier gradient: one rounding of dloss * (p - onehot).
constexpr double kBf16Cls = 2e-5;
// BF16 AdamW params: stochastic rounding moves each value by up to 1 ulp (2^-8).
constexpr double kBf16Sr = 1e-4;

// RMSNorm epsilon in the cases (Llama's 1e-5).
constexpr float kRmsEps = 1e-5f;

inline double limit_for(DType d, double bf16_limit) { return d == DType::f32 ? kF32 : bf16_limit; }

// The Mixture-of-Experts cases: moe_kernel_cases.h (included at the end).
template <class R>
void moe_case(R& r, const Case& c);
inline std::vector<Case> moe_cases();

// ---- the cases ------------------------------------------------------------------------------------
template <class Mem, class T>
struct Runner {
  using Storage = T;
  Mem& mem;
  Cpu cpu;
  Rng rng{12345};
  Report rep;
  DType dt = std::is_same<T, float>::value ? DType::f32 : DType::bf16;

  explicit Runner(Mem& m) : mem(m) {}

  // Kernel-side buffer of T holding x (already quantised by the caller or not).
  T* dev(const std::vector<float>& x) {
    T* p = mem.template alloc<T>(x.size());
    auto s = to_storage<T>(x);
    if (!x.empty()) mem.upload(p, s.data(), s.size() * sizeof(T));
    return p;
  }
  template <class U>
  U* dev_raw(const std::vector<U>& x) {
    U* p = mem.template alloc<U>(x.size());
    if (!x.empty()) mem.upload(p, x.data(), x.size() * sizeof(U));
    return p;
  }
  std::vector<float> get(const T* p, size_t n) {
    mem.sync();
    std::vector<T> s(n);
    mem.download(s.data(), p, n * sizeof(T));
    return to_f32(s);
  }
  template <class U>
  std::vector<U> get_raw(const U* p, size_t n) {
    mem.sync();
    std::vector<U> s(n);
    mem.download(s.data(), p, n * sizeof(U));
    return s;
  }
  std::vector<float> q(std::vector<float> x) { return quantize<T>(std::move(x)); }
  double lim(double bf16_limit) const { return limit_for(dt, bf16_limit); }

  // ---- encoder ----
  void encoder_forward(int B, int Tn, int C, int V) {
    std::vector<int> inp(B * Tn);
    for (auto& t : inp) t = (int)rng.below(V);
    auto wte = q(randn(rng, (size_t)V * C)), wpe = q(randn(rng, (size_t)Tn * C));
    float* r_out = cpu.f32(std::vector<float>((size_t)B * Tn * C));
    cpu.be->encoder_forward(r_out, cpu.i32(inp), cpu.f32(wte), cpu.f32(wpe), B, Tn, C);
    T* k_out = mem.template alloc<T>((size_t)B * Tn * C);
    kernels::encoder_forward(k_out, dev_raw(inp), dev(wte), dev(wpe), B, Tn, C, nullptr);
    rep.compare("out", get(k_out, (size_t)B * Tn * C), cpu.get(r_out, (size_t)B * Tn * C),
                lim(kBf16));
  }
  void encoder_backward(int B, int Tn, int C, int V) {
    std::vector<int> inp(B * Tn);
    for (auto& t : inp) t = (int)rng.below(V);
    auto dout = q(randn(rng, (size_t)B * Tn * C));
    auto dwte = q(randn(rng, (size_t)V * C)), dwpe = q(randn(rng, (size_t)Tn * C));
    float* r_dwte = cpu.f32(dwte);
    float* r_dwpe = cpu.f32(dwpe);
    cpu.be->encoder_backward(r_dwte, r_dwpe, cpu.f32(dout), cpu.i32(inp), B, Tn, C);
    T* k_dwte = dev(dwte);
    T* k_dwpe = dev(dwpe);
    void* scratch = mem.template alloc<unsigned char>(kernels::encoder_backward_scratch_bytes(B, Tn));
    kernels::encoder_backward(k_dwte, k_dwpe, scratch, dev(dout), dev_raw(inp), B, Tn, C, nullptr);
    rep.compare("dwte", get(k_dwte, dwte.size()), cpu.get(r_dwte, dwte.size()), lim(kBf16Acc));
    rep.compare("dwpe", get(k_dwpe, dwpe.size()), cpu.get(r_dwpe, dwpe.size()), lim(kBf16Acc));
  }

  // ---- layernorm ----
  void layernorm_forward(int N, int C) {
    auto inp = q(randn(rng, (size_t)N * C, 2.0f));
    for (size_t i = 0; i < inp.size(); i++) inp[i] = q({inp[i] + 0.5f})[0];  // non-zero mean
    auto w = q(randn(rng, C)), b = q(randn(rng, C));
    float* r_out = cpu.f32(std::vector<float>((size_t)N * C));
    float* r_mean = cpu.f32(std::vector<float>(N));
    float* r_rstd = cpu.f32(std::vector<float>(N));
    cpu.be->layernorm_forward(r_out, r_mean, r_rstd, cpu.f32(inp), cpu.f32(w), cpu.f32(b), N, C);
    T* k_out = mem.template alloc<T>((size_t)N * C);
    float* k_mean = mem.template alloc<float>(N);
    float* k_rstd = mem.template alloc<float>(N);
    kernels::layernorm_forward(k_out, k_mean, k_rstd, dev(inp), dev(w), dev(b), N, C, nullptr);
    rep.compare("out", get(k_out, (size_t)N * C), cpu.get(r_out, (size_t)N * C), lim(kBf16));
    rep.compare("mean", get_raw(k_mean, N), cpu.get(r_mean, N), kF32);
    rep.compare("rstd", get_raw(k_rstd, N), cpu.get(r_rstd, N), kF32);
  }
  void residual_layernorm_forward(int N, int C) {
    size_t n = (size_t)N * C;
    auto a = q(randn(rng, n)), b = q(randn(rng, n));
    auto w = q(randn(rng, C)), bias = q(randn(rng, C));
    float* r_res = cpu.f32(std::vector<float>(n));
    float* r_out = cpu.f32(std::vector<float>(n));
    float* r_mean = cpu.f32(std::vector<float>(N));
    float* r_rstd = cpu.f32(std::vector<float>(N));
    cpu.be->residual_forward(r_res, cpu.f32(a), cpu.f32(b), n);
    // The kernel normalises the residual as stored (in T): so does the reference.
    auto res_q = q(cpu.get(r_res, n));
    cpu.be->layernorm_forward(r_out, r_mean, r_rstd, cpu.f32(res_q), cpu.f32(w), cpu.f32(bias), N,
                              C);
    T* k_res = mem.template alloc<T>(n);
    T* k_out = mem.template alloc<T>(n);
    float* k_mean = mem.template alloc<float>(N);
    float* k_rstd = mem.template alloc<float>(N);
    kernels::residual_layernorm_forward(k_res, k_out, k_mean, k_rstd, dev(a), dev(b), dev(w),
                                        dev(bias), N, C, nullptr);
    rep.compare("residual", get(k_res, n), cpu.get(r_res, n), lim(kBf16));
    rep.compare("out", get(k_out, n), cpu.get(r_out, n), lim(kBf16));
    rep.compare("mean", get_raw(k_mean, N), cpu.get(r_mean, N), kF32);
    rep.compare("rstd", get_raw(k_rstd, N), cpu.get(r_rstd, N), kF32);
  }
  void residual_forward(int n) {
    auto a = q(randn(rng, n)), b = q(randn(rng, n));
    float* r_out = cpu.f32(std::vector<float>(n));
    cpu.be->residual_forward(r_out, cpu.f32(a), cpu.f32(b), n);
    T* k_out = mem.template alloc<T>(n);
    kernels::residual_forward(k_out, dev(a), dev(b), n, nullptr);
    rep.compare("out", get(k_out, n), cpu.get(r_out, n), lim(kBf16));
  }
  // One warp per row where C is whole packs and at most 768 (BF16) or 512
  // (FP32) columns, else a team of warps (kernels/norm_backward.cuh): the
  // shapes take both (test_simt_kernels.cpp's SimtLayernormBackward says which).
  void layernorm_backward(int N, int C) {
    size_t n = (size_t)N * C;
    auto inp = q(randn(rng, n, 2.0f)), w = q(randn(rng, C)), b = q(randn(rng, C));
    auto dout = q(randn(rng, n));
    auto dinp = q(randn(rng, n)), dw = q(randn(rng, C)), db = q(randn(rng, C));
    // Statistics from the reference forward (FP32 in both worlds).
    float* r_out = cpu.f32(std::vector<float>(n));
    float* r_mean = cpu.f32(std::vector<float>(N));
    float* r_rstd = cpu.f32(std::vector<float>(N));
    float* r_inp = cpu.f32(inp);
    float* r_w = cpu.f32(w);
    cpu.be->layernorm_forward(r_out, r_mean, r_rstd, r_inp, r_w, cpu.f32(b), N, C);
    auto mean = cpu.get(r_mean, N), rstd = cpu.get(r_rstd, N);
    float* r_dinp = cpu.f32(dinp);
    float* r_dw = cpu.f32(dw);
    float* r_db = cpu.f32(db);
    cpu.be->layernorm_backward(r_dinp, r_dw, r_db, cpu.f32(dout), r_inp, r_w, r_mean, r_rstd, N,
                               C);
    T* k_dinp = dev(dinp);
    T* k_dw = dev(dw);
    T* k_db = dev(db);
    void* scratch =
        mem.template alloc<unsigned char>(kernels::layernorm_backward_scratch_bytes(N, C));
    kernels::layernorm_backward(k_dinp, k_dw, k_db, scratch, dev(dout), dev(inp), dev(w),
                                dev_raw(mean), dev_raw(rstd), N, C, nullptr);
    rep.compare("dinp", get(k_dinp, n), cpu.get(r_dinp, n), lim(kBf16Acc));
    rep.compare("dw", get(k_dw, C), cpu.get(r_dw, C), lim(kBf16Acc));
    rep.compare("db", get(k_db, C), cpu.get(r_db, C), lim(kBf16Acc));
  }

  // ---- bias gradient (reference: the dbias of the CPU matmul_backward) ----
  void bias_grad(int N, int OC) {
    const int C = 3;
    auto dout = q(randn(rng, (size_t)N * OC)), dbias = q(randn(rng, OC));
    float* r_dbias = cpu.f32(dbias);
    cpu.be->matmul_backward(cpu.f32(std::vector<float>((size_t)N * C)),
                            cpu.f32(std::vector<float>((size_t)OC * C)), r_dbias, cpu.f32(dout),
                            cpu.f32(randn(rng, (size_t)N * C)), cpu.f32(randn(rng, (size_t)OC * C)),
                            N, C, OC);
    T* k_dbias = dev(dbias);
    void* scratch = mem.template alloc<unsigned char>(kernels::bias_grad_scratch_bytes(N, OC));
    kernels::bias_grad(k_dbias, scratch, dev(dout), N, OC, nullptr);
    rep.compare("dbias", get(k_dbias, OC), cpu.get(r_dbias, OC), lim(kBf16Acc));
  }

  // ---- GELU ----
  void gelu_forward(int n) {
    auto inp = q(randn(rng, n, 2.0f));
    float* r_out = cpu.f32(std::vector<float>(n));
    cpu.be->gelu_forward(r_out, cpu.f32(inp), n);
    T* k_out = mem.template alloc<T>(n);
    kernels::gelu_forward(k_out, dev(inp), n, nullptr);
    rep.compare("out", get(k_out, n), cpu.get(r_out, n), lim(kBf16));
  }
  void gelu_backward(int n) {
    auto inp = q(randn(rng, n, 2.0f)), dout = q(randn(rng, n));
    float* r_dinp = cpu.f32(std::vector<float>(n));
    cpu.be->gelu_backward(r_dinp, cpu.f32(inp), cpu.f32(dout), n);
    T* k_dinp = mem.template alloc<T>(n);
    kernels::gelu_backward(k_dinp, dev(inp), dev(dout), n, nullptr);
    rep.compare("dinp", get(k_dinp, n), cpu.get(r_dinp, n), lim(kBf16));
  }

  // ---- attention: the kernels around host GEMMs (standing in for cuBLAS) ----
  // C (batch, M, N) = A (batch, M, K) op B; transB: B is (batch, N, K) else (batch, K, N);
  // transA: A is (batch, K, M).
  static std::vector<float> bgemm(const std::vector<float>& A, const std::vector<float>& Bm,
                                  int batch, int M, int N, int K, bool transA, bool transB) {
    std::vector<float> Cm((size_t)batch * M * N);
    for (int z = 0; z < batch; z++)
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double acc = 0;
          for (int k = 0; k < K; k++) {
            float a = transA ? A[((size_t)z * K + k) * M + i] : A[((size_t)z * M + i) * K + k];
            float b = transB ? Bm[((size_t)z * N + j) * K + k] : Bm[((size_t)z * K + k) * N + j];
            acc += (double)a * b;
          }
          Cm[((size_t)z * M + i) * N + j] = (float)acc;
        }
    return Cm;
  }
  // The materialized path (permutes, softmax kernels around GEMMs); the CPU
  // backend's blocked attention gives out and lse, from which the reference
  // probabilities are att[i,j] = exp(scale q_i.k_j - lse_i), j <= i.
  // KV: key/value heads (grouped-query; KV == NH is multi-head); qkv (B,T,(NH+2KV)*HS).
  void attention_forward(int B, int Tn, int NH, int HS, int KV) {
    int C = NH * HS, BH = B * NH;
    size_t nqkv = (size_t)B * Tn * (NH + 2 * KV) * HS, nh = (size_t)BH * Tn * HS,
           natt = (size_t)BH * Tn * Tn;
    auto qkv = q(randn(rng, nqkv));
    float* r_out = cpu.f32(std::vector<float>((size_t)B * Tn * C));
    float* r_lse = cpu.f32(std::vector<float>((size_t)BH * Tn));
    cpu.be->attention_forward(r_out, r_lse, cpu.f32(qkv), B, Tn, C, NH, KV);

    T* kq = mem.template alloc<T>(nh);
    T* kk = mem.template alloc<T>(nh);
    T* kv = mem.template alloc<T>(nh);
    kernels::attention_permute(kq, kk, kv, dev(qkv), B, Tn, NH, KV, HS, nullptr);
    auto hq = get(kq, nh), hk = get(kk, nh), hv = get(kv, nh);
    auto pre = bgemm(hq, hk, BH, Tn, Tn, HS, false, true);
    T* k_pre = dev(pre);
    T* k_att = mem.template alloc<T>(natt);
    const float scale = 1.0f / std::sqrt((float)HS);
    kernels::attention_softmax_forward(k_att, k_pre, BH, Tn, scale, nullptr);
    auto att = get(k_att, natt);
    auto lse = cpu.get(r_lse, (size_t)BH * Tn);
    std::vector<float> r_att(natt, 0.0f);
    for (int bh = 0; bh < BH; bh++)
      for (int i = 0; i < Tn; i++)
        for (int j = 0; j <= i; j++) {
          const size_t e = ((size_t)bh * Tn + i) * Tn + j;
          r_att[e] = std::exp(scale * q(std::vector<float>{pre[e]})[0] - lse[(size_t)bh * Tn + i]);
        }
    T* k_y = dev(bgemm(att, hv, BH, Tn, HS, Tn, false, false));
    T* k_out = mem.template alloc<T>((size_t)B * Tn * C);
    kernels::attention_unpermute(k_out, k_y, B, Tn, NH, HS, nullptr);
    rep.compare("att", att, r_att, lim(kBf16Attn));
    rep.compare("out", get(k_out, (size_t)B * Tn * C), cpu.get(r_out, (size_t)B * Tn * C),
                lim(kBf16Attn));
  }
  void attention_backward(int B, int Tn, int NH, int HS, int KV) {
    int C = NH * HS, BH = B * NH;
    size_t nqkv = (size_t)B * Tn * (NH + 2 * KV) * HS, nh = (size_t)BH * Tn * HS,
           natt = (size_t)BH * Tn * Tn;
    auto qkv = q(randn(rng, nqkv)), dout = q(randn(rng, (size_t)B * Tn * C));
    float* r_qkv = cpu.f32(qkv);
    float* r_out = cpu.f32(std::vector<float>((size_t)B * Tn * C));
    float* r_lse = cpu.f32(std::vector<float>((size_t)BH * Tn));
    cpu.be->attention_forward(r_out, r_lse, r_qkv, B, Tn, C, NH, KV);
    float* r_dqkv = cpu.f32(std::vector<float>(nqkv));
    cpu.be->attention_backward(r_dqkv, cpu.f32(dout), r_qkv, r_out, r_lse, B, Tn, C, NH, KV);
    // The kernel path keeps att in T: the materialized forward's probabilities.
    T* k_att = mem.template alloc<T>(natt);
    {
      T* kq0 = mem.template alloc<T>(nh);
      T* kk0 = mem.template alloc<T>(nh);
      T* kv0 = mem.template alloc<T>(nh);
      kernels::attention_permute(kq0, kk0, kv0, dev(qkv), B, Tn, NH, KV, HS, nullptr);
      T* k_pre = dev(bgemm(get(kq0, nh), get(kk0, nh), BH, Tn, Tn, HS, false, true));
      kernels::attention_softmax_forward(k_att, k_pre, BH, Tn, 1.0f / std::sqrt((float)HS),
                                         nullptr);
    }
    auto att = get(k_att, natt);

    T* kq = mem.template alloc<T>(nh);
    T* kk = mem.template alloc<T>(nh);
    T* kv = mem.template alloc<T>(nh);
    kernels::attention_permute(kq, kk, kv, dev(qkv), B, Tn, NH, KV, HS, nullptr);
    auto hq = get(kq, nh), hk = get(kk, nh), hv = get(kv, nh);
    T* k_dy = mem.template alloc<T>(nh);
    kernels::attention_unpermute_backward(k_dy, dev(dout), B, Tn, NH, HS, nullptr);
    auto dy = get(k_dy, nh);
    auto datt = q(bgemm(dy, hv, BH, Tn, Tn, HS, false, true));    // dy v^T
    auto dv = q(bgemm(att, dy, BH, Tn, HS, Tn, true, false));     // att^T dy
    T* k_datt = dev(datt);
    kernels::attention_softmax_backward(k_datt, k_datt, dev(att), BH, Tn,
                                        1.0f / std::sqrt((float)HS), nullptr);  // in place
    auto dpre = get(k_datt, natt);
    auto dq = q(bgemm(dpre, hk, BH, Tn, HS, Tn, false, false));   // dpre k
    auto dk = q(bgemm(dpre, hq, BH, Tn, HS, Tn, true, false));    // dpre^T q
    T* k_dqkv = dev(std::vector<float>(nqkv, NAN));  // every element must be written
    kernels::attention_permute_backward(k_dqkv, dev(dq), dev(dk), dev(dv), B, Tn, NH, KV, HS,
                                        nullptr);
    rep.compare("dqkv", get(k_dqkv, nqkv), cpu.get(r_dqkv, nqkv), lim(kBf16Attn));
  }

  // ---- flash attention (kernels/flash_attention.cuh) against the CPU backend's
  // blocked attention: out and lse forward; dqkv backward from the same dout,
  // out (quantised to T, as the kernel keeps it) and lse. lse is FP32 from the
  // same quantised inputs in both: the FP32 limit in both modes.
  void flash_forward(int B, int Tn, int NH, int HS, int KV) {
    const int C = NH * HS;
    const size_t nqkv = (size_t)B * Tn * (NH + 2 * KV) * HS, nout = (size_t)B * Tn * C,
                 nl = (size_t)B * NH * Tn;
    auto qkv = q(randn(rng, nqkv));
    float* r_out = cpu.f32(std::vector<float>(nout));
    float* r_lse = cpu.f32(std::vector<float>(nl));
    cpu.be->attention_forward(r_out, r_lse, cpu.f32(qkv), B, Tn, C, NH, KV);
    T* k_out = mem.template alloc<T>(nout);
    float* k_lse = mem.template alloc<float>(nl);
    kernels::flash_attention_forward(k_out, k_lse, dev(qkv), B, Tn, NH, KV, HS, nullptr);
    rep.compare("out", get(k_out, nout), cpu.get(r_out, nout), lim(kBf16Attn));
    rep.compare("lse", get_raw(k_lse, nl), cpu.get(r_lse, nl), kF32);
  }
  void flash_backward(int B, int Tn, int NH, int HS, int KV) {
    const int C = NH * HS;
    const size_t nqkv = (size_t)B * Tn * (NH + 2 * KV) * HS, nout = (size_t)B * Tn * C,
                 nl = (size_t)B * NH * Tn;
    auto qkv = q(randn(rng, nqkv)), dout = q(randn(rng, nout));
    float* r_qkv = cpu.f32(qkv);
    float* r_out = cpu.f32(std::vector<float>(nout));
    float* r_lse = cpu.f32(std::vector<float>(nl));
    cpu.be->attention_forward(r_out, r_lse, r_qkv, B, Tn, C, NH, KV);
    auto out = q(cpu.get(r_out, nout));
    auto lse = cpu.get(r_lse, nl);
    float* r_dqkv = cpu.f32(std::vector<float>(nqkv, NAN));
    cpu.be->attention_backward(r_dqkv, cpu.f32(dout), r_qkv, cpu.f32(out), cpu.f32(lse), B, Tn,
                               C, NH, KV);
    T* k_dqkv = dev(std::vector<float>(nqkv, NAN));  // every element must be written
    float* k_D = mem.template alloc<float>(nl);
    kernels::flash_attention_backward(k_dqkv, k_D, dev(dout), dev(qkv), dev(out), dev_raw(lse), B,
                                      Tn, NH, KV, HS, nullptr);
    rep.compare("dqkv", get(k_dqkv, nqkv), cpu.get(r_dqkv, nqkv), lim(kBf16Attn));
  }

  // ---- Llama: RMSNorm (and fused with the residual add), RoPE, SwiGLU ----
  // off: w_offset (1: Gemma's (1+w) form).
  void rmsnorm_forward(int N, int C, float off = 0.0f) {
    auto inp = q(randn(rng, (size_t)N * C, 2.0f)), w = q(randn(rng, C));
    float* r_out = cpu.f32(std::vector<float>((size_t)N * C));
    float* r_rstd = cpu.f32(std::vector<float>(N));
    cpu.be->rmsnorm_forward(r_out, r_rstd, cpu.f32(inp), cpu.f32(w), N, C, kRmsEps, off);
    T* k_out = mem.template alloc<T>((size_t)N * C);
    float* k_rstd = mem.template alloc<float>(N);
    kernels::rmsnorm_forward(k_out, k_rstd, dev(inp), dev(w), N, C, kRmsEps, nullptr, off);
    rep.compare("out", get(k_out, (size_t)N * C), cpu.get(r_out, (size_t)N * C), lim(kBf16));
    rep.compare("rstd", get_raw(k_rstd, N), cpu.get(r_rstd, N), kF32);
  }
  void residual_rmsnorm_forward(int N, int C, float off = 0.0f) {
    size_t n = (size_t)N * C;
    auto a = q(randn(rng, n)), b = q(randn(rng, n)), w = q(randn(rng, C));
    float* r_res = cpu.f32(std::vector<float>(n));
    float* r_out = cpu.f32(std::vector<float>(n));
    float* r_rstd = cpu.f32(std::vector<float>(N));
    cpu.be->residual_forward(r_res, cpu.f32(a), cpu.f32(b), n);
    // The kernel normalises the residual as stored (in T): so does the reference.
    auto res_q = q(cpu.get(r_res, n));
    cpu.be->rmsnorm_forward(r_out, r_rstd, cpu.f32(res_q), cpu.f32(w), N, C, kRmsEps, off);
    T* k_res = mem.template alloc<T>(n);
    T* k_out = mem.template alloc<T>(n);
    float* k_rstd = mem.template alloc<float>(N);
    kernels::residual_rmsnorm_forward(k_res, k_out, k_rstd, dev(a), dev(b), dev(w), N, C, kRmsEps,
                                      nullptr, off);
    rep.compare("residual", get(k_res, n), cpu.get(r_res, n), lim(kBf16));
    rep.compare("out", get(k_out, n), cpu.get(r_out, n), lim(kBf16));
    rep.compare("rstd", get_raw(k_rstd, N), cpu.get(r_rstd, N), kF32);
    // In place (residual over a), as the model runs it: the same values.
    T* k_a = dev(a);
    kernels::residual_rmsnorm_forward(k_a, k_out, k_rstd, k_a, dev(b), dev(w), N, C, kRmsEps,
                                      nullptr, off);
    rep.compare("residual (in place)", get(k_a, n), get(k_res, n), 0.0);
  }
  void rmsnorm_backward(int N, int C, float off = 0.0f) {
    size_t n = (size_t)N * C;
    auto inp = q(randn(rng, n, 2.0f)), w = q(randn(rng, C)), dout = q(randn(rng, n));
    auto dinp = q(randn(rng, n)), dw = q(randn(rng, C));
    // rstd from the reference forward (FP32 in both worlds).
    float* r_inp = cpu.f32(inp);
    float* r_w = cpu.f32(w);
    float* r_rstd = cpu.f32(std::vector<float>(N));
    cpu.be->rmsnorm_forward(cpu.f32(std::vector<float>(n)), r_rstd, r_inp, r_w, N, C, kRmsEps, off);
    auto rstd = cpu.get(r_rstd, N);
    float* r_dinp = cpu.f32(dinp);
    float* r_dw = cpu.f32(dw);
    cpu.be->rmsnorm_backward(r_dinp, r_dw, cpu.f32(dout), r_inp, r_w, r_rstd, N, C, off);
    T* k_dinp = dev(dinp);
    T* k_dw = dev(dw);
    void* scratch = mem.template alloc<unsigned char>(kernels::rmsnorm_backward_scratch_bytes(N, C));
    kernels::rmsnorm_backward(k_dinp, k_dw, scratch, dev(dout), dev(inp), dev(w), dev_raw(rstd), N,
                              C, nullptr, off);
    rep.compare("dinp", get(k_dinp, n), cpu.get(r_dinp, n), lim(kBf16Acc));
    rep.compare("dw", get(k_dw, C), cpu.get(r_dw, C), lim(kBf16Acc));
  }
  // (B, T, NH, KV, hs); the table holds maxT = T + 3 positions (T < maxT is allowed).
  void rope(int B, int Tn, int NH, int KV, int hs, bool backward) {
    const int maxT = Tn + 3;
    const std::vector<float> cs = rope_table(NH, hs, maxT);
    const size_t n = (size_t)B * Tn * (NH + 2 * KV) * hs;
    auto x = q(randn(rng, n));
    float* r_x = cpu.f32(x);
    T* k_x = dev(x);
    if (backward) {
      cpu.be->rope_backward(r_x, cpu.f32(cs), B, Tn, NH, KV, hs, maxT);
      kernels::rope_backward(k_x, dev_raw(cs), B, Tn, NH, KV, hs, maxT, nullptr);
    } else {
      cpu.be->rope_forward(r_x, cpu.f32(cs), B, Tn, NH, KV, hs, maxT);
      kernels::rope_forward(k_x, dev_raw(cs), B, Tn, NH, KV, hs, maxT, nullptr);
    }
    rep.compare(backward ? "dqkv" : "qkv", get(k_x, n), cpu.get(r_x, n), lim(kBf16));
  }
  void swiglu_forward(int N, int H) {
    auto inp = q(randn(rng, (size_t)N * 2 * H, 3.0f));
    float* r_out = cpu.f32(std::vector<float>((size_t)N * H));
    cpu.be->swiglu_forward(r_out, cpu.f32(inp), N, H);
    T* k_out = mem.template alloc<T>((size_t)N * H);
    kernels::swiglu_forward(k_out, dev(inp), N, H, nullptr);
    rep.compare("out", get(k_out, (size_t)N * H), cpu.get(r_out, (size_t)N * H), lim(kBf16));
  }
  void swiglu_backward(int N, int H) {
    auto inp = q(randn(rng, (size_t)N * 2 * H, 3.0f)), dout = q(randn(rng, (size_t)N * H));
    float* r_dinp = cpu.f32(std::vector<float>((size_t)N * 2 * H));
    cpu.be->swiglu_backward(r_dinp, cpu.f32(inp), cpu.f32(dout), N, H);
    T* k_dinp = dev(std::vector<float>((size_t)N * 2 * H, NAN));  // every element must be written
    kernels::swiglu_backward(k_dinp, dev(inp), dev(dout), N, H, nullptr);
    rep.compare("dinp", get(k_dinp, (size_t)N * 2 * H), cpu.get(r_dinp, (size_t)N * 2 * H),
                lim(kBf16));
  }

  // ---- issue 38: q/k norms, GeGLU, scale, soft-cap ----
  // (N, NH, KV, hs, per_head, w_offset): qkv rows (NH+2KV)*hs.
  void qk_norm(int N, int NH, int KV, int hs, bool per_head, float off, bool backward) {
    const int W = (NH + 2 * KV) * hs, R = per_head ? NH + KV : 2;
    const size_t n = (size_t)N * W;
    const int lq = per_head ? hs : NH * hs, lk = per_head ? hs : KV * hs;
    auto inp = q(randn(rng, n, 2.0f)), qw = q(randn(rng, lq)), kw = q(randn(rng, lk));
    float* r_inp = cpu.f32(inp);
    float* r_qw = cpu.f32(qw);
    float* r_kw = cpu.f32(kw);
    float* r_out = cpu.f32(std::vector<float>(n));
    float* r_rstd = cpu.f32(std::vector<float>((size_t)N * R));
    cpu.be->qk_norm_forward(r_out, r_rstd, r_inp, r_qw, r_kw, N, NH, KV, hs, per_head, kRmsEps,
                            off);
    if (!backward) {
      T* k_out = dev(std::vector<float>(n, NAN));  // every element must be written
      float* k_rstd = mem.template alloc<float>((size_t)N * R);
      kernels::qk_norm_forward(k_out, k_rstd, dev(inp), dev(qw), dev(kw), N, NH, KV, hs, per_head,
                               kRmsEps, off, nullptr);
      rep.compare("out", get(k_out, n), cpu.get(r_out, n), lim(kBf16));
      rep.compare("rstd", get_raw(k_rstd, (size_t)N * R), cpu.get(r_rstd, (size_t)N * R), kF32);
      return;
    }
    auto rstd = cpu.get(r_rstd, (size_t)N * R);
    auto dout = q(randn(rng, n)), dqw = q(randn(rng, lq)), dkw = q(randn(rng, lk));
    float* r_dinp = cpu.f32(std::vector<float>(n));
    float* r_dqw = cpu.f32(dqw);
    float* r_dkw = cpu.f32(dkw);
    cpu.be->qk_norm_backward(r_dinp, r_dqw, r_dkw, cpu.f32(dout), r_inp, r_qw, r_kw, r_rstd, N, NH,
                             KV, hs, per_head, off);
    T* k_dinp = dev(std::vector<float>(n, NAN));  // overwritten: every element must be written
    T* k_dqw = dev(dqw);
    T* k_dkw = dev(dkw);
    void* scratch =
        mem.template alloc<unsigned char>(kernels::qk_norm_backward_scratch_bytes(N, lq, lk));
    kernels::qk_norm_backward(k_dinp, k_dqw, k_dkw, scratch, dev(dout), dev(inp), dev(qw), dev(kw),
                              dev_raw(rstd), N, NH, KV, hs, per_head, off, nullptr);
    rep.compare("dinp", get(k_dinp, n), cpu.get(r_dinp, n), lim(kBf16));
    rep.compare("dqw", get(k_dqw, lq), cpu.get(r_dqw, lq), lim(kBf16Acc));
    rep.compare("dkw", get(k_dkw, lk), cpu.get(r_dkw, lk), lim(kBf16Acc));
  }
  void geglu_forward(int N, int H) {
    auto inp = q(randn(rng, (size_t)N * 2 * H, 3.0f));
    float* r_out = cpu.f32(std::vector<float>((size_t)N * H));
    cpu.be->geglu_forward(r_out, cpu.f32(inp), N, H);
    T* k_out = dev(std::vector<float>((size_t)N * H, NAN));
    kernels::geglu_forward(k_out, dev(inp), N, H, nullptr);
    rep.compare("out", get(k_out, (size_t)N * H), cpu.get(r_out, (size_t)N * H), lim(kBf16));
  }
  void geglu_backward(int N, int H) {
    auto inp = q(randn(rng, (size_t)N * 2 * H, 3.0f)), dout = q(randn(rng, (size_t)N * H));
    float* r_dinp = cpu.f32(std::vector<float>((size_t)N * 2 * H));
    cpu.be->geglu_backward(r_dinp, cpu.f32(inp), cpu.f32(dout), N, H);
    T* k_dinp = dev(std::vector<float>((size_t)N * 2 * H, NAN));  // every element must be written
    kernels::geglu_backward(k_dinp, dev(inp), dev(dout), N, H, nullptr);
    rep.compare("dinp", get(k_dinp, (size_t)N * 2 * H), cpu.get(r_dinp, (size_t)N * 2 * H),
                lim(kBf16));
  }
  // In place: x *= 0.37 (scale) or x = 5 tanh(x / 5) (softcap), x ~ N(0, 8^2) so
  // that the cap bends a good share of the values.
  void pointwise(const std::string& op, int n) {
    auto x = q(randn(rng, n, 8.0f));
    float* r_x = cpu.f32(x);
    T* k_x = dev(x);
    if (op == "scale") {
      cpu.be->scale(r_x, n, 0.37f);
      kernels::scale(k_x, n, 0.37f, nullptr);
    } else {
      cpu.be->softcap_forward(r_x, n, 5.0f);
      kernels::softcap_forward(k_x, n, 5.0f, nullptr);
    }
    rep.compare("x", get(k_x, n), cpu.get(r_x, n), lim(kBf16));
  }
  // clip_qkv: x ~ N(0, 2^2) against c = 1.5 (about half clamped), out of
  // place; its backward zeroes dout ~ N(0, 1) where x lies outside [-c, c].
  // Both are exact selections (min/max, a mask): equal to the cpu's.
  void clip(const std::string& op, int n) {
    auto x = q(randn(rng, n, 2.0f)), d = q(randn(rng, n, 1.0f));
    float* r_out = cpu.f32(op == "clip_forward" ? std::vector<float>(n) : d);
    T* k_out = dev(op == "clip_forward" ? std::vector<float>(n, NAN) : d);
    if (op == "clip_forward") {
      cpu.be->clip_forward(r_out, cpu.f32(x), n, 1.5f);
      kernels::clip_forward(k_out, dev(x), n, 1.5f, nullptr);
    } else {
      cpu.be->clip_backward(r_out, cpu.f32(x), n, 1.5f);
      kernels::clip_backward(k_out, dev(x), n, 1.5f, nullptr);
    }
    rep.compare(op == "clip_forward" ? "out" : "dx", get(k_out, n), cpu.get(r_out, n), lim(0.0));
  }

  // ---- classifier ----
  // softcap c > 0: the logits are already capped, y = c tanh(x/c) (x ~ N(0, 3^2)
  // against c = 4: many values in the bent part), and the gradient is x's.
  void classifier(int BT, int V, int Vp, bool with_grad, float softcap = 0.0f) {
    auto logits = randn(rng, (size_t)BT * Vp, 3.0f);
    if (softcap > 0)
      for (auto& x : logits) x = softcap * std::tanh(x / softcap);
    logits = q(std::move(logits));
    std::vector<int> targets(BT);
    for (auto& t : targets) t = (int)rng.below(V);
    float dloss = with_grad ? 1.0f / BT : 0.0f;
    float* r_logits = cpu.f32(logits);
    float* r_losses = cpu.f32(std::vector<float>(BT));
    cpu.be->classifier(r_logits, r_losses, cpu.i32(targets), BT, V, Vp, dloss, softcap);
    T* k_logits = dev(logits);
    float* k_losses = mem.template alloc<float>(BT);
    kernels::fused_classifier(k_logits, k_losses, dev_raw(targets), BT, V, Vp, dloss, nullptr,
                              softcap);
    // Losses are FP32 from the same (quantised) logits: FP32 limit in both modes.
    rep.compare("losses", get_raw(k_losses, BT), cpu.get(r_losses, BT), kF32);
    rep.compare(with_grad ? "dlogits" : "logits (unchanged)", get(k_logits, (size_t)BT * Vp),
                cpu.get(r_logits, (size_t)BT * Vp), lim(kBf16Cls));
  }

  // ---- AdamW ----
  void adamw(int n, int step) {
    auto params = q(randn(rng, n)), grads = q(randn(rng, n, 0.1f));
    auto m = randn(rng, n, 0.01f), v = randn(rng, n, 0.001f);
    for (auto& x : v) x = x * x;
    AdamWArgs a;
    a.lr = 1e-2f;
    a.weight_decay = 0.1f;
    a.step = step;
    a.grad_scale = 0.5f;
    float* r_p = cpu.f32(params);
    float* r_m = cpu.f32(m);
    float* r_v = cpu.f32(v);
    cpu.be->adamw(r_p, nullptr, cpu.f32(grads), r_m, r_v, n, a);
    kernels::AdamWHyper h;
    h.lr = a.lr, h.beta1 = a.beta1, h.beta2 = a.beta2, h.eps = a.eps;
    h.weight_decay = a.weight_decay, h.step = a.step, h.grad_scale = a.grad_scale;
    T* k_p = dev(params);
    float* k_master = std::is_same<T, float>::value ? nullptr : dev_raw(params);
    float* k_m = dev_raw(m);
    float* k_v = dev_raw(v);
    kernels::adamw_update(k_p, k_master, dev(grads), k_m, k_v, n, h, 1234u, nullptr);
    auto ref_p = cpu.get(r_p, n);
    rep.compare("params", get(k_p, n), ref_p, lim(kBf16Sr));
    if (k_master) rep.compare("master", get_raw(k_master, n), ref_p, kF32);
    rep.compare("m", get_raw(k_m, n), cpu.get(r_m, n), kF32);
    rep.compare("v", get_raw(k_v, n), cpu.get(r_v, n), kF32);
  }

  // ---- global norm ----
  void global_norm(int n) {
    // Gradient-like magnitudes: a spread of 2^-20..2^4 over N(0,1).
    auto x = randn(rng, n);
    for (int i = 0; i < n; i++) x[i] *= std::ldexp(1.0f, (int)rng.below(25) - 20);
    x = q(x);
    double ref = cpu.be->sum_squares(cpu.f32(x), n);
    double* k_out = mem.template alloc<double>(1);
    void* scratch = mem.template alloc<unsigned char>(kernels::global_norm_scratch_bytes());
    kernels::global_norm_squared(k_out, scratch, dev(x), n, nullptr);
    const double got = get_raw(k_out, 1)[0];
    // Exact squares summed in FP64 both sides, in other orders: relative 1e-12
    // (FP32 partial sums, as the kernel once had, miss it by 1e-8 and more).
    if (!(std::fabs(got - ref) <= 1e-12 * ref))
      rep.fail("sum_squares " + std::to_string(got) + " vs the cpu's " + std::to_string(ref));
    // The same values in another order (reversed: ZeRO-2's buckets hold the
    // gradients in another order than the flat layout) give the same FP32
    // norm, the value the clip scale is made from.
    std::reverse(x.begin(), x.end());
    kernels::global_norm_squared(k_out, scratch, dev(x), n, nullptr);
    const double rev = get_raw(k_out, 1)[0];
    if ((float)std::sqrt(rev) != (float)std::sqrt(got) || !(std::fabs(rev - got) <= 1e-13 * got))
      rep.fail("the norm depends on the order of the values: " + std::to_string(std::sqrt(got)) +
               " forward, " + std::to_string(std::sqrt(rev)) + " reversed");
    // One element off a 16-byte boundary the kernel takes its element loads
    // instead of 16-byte packs, in the same order: the same bits.
    std::vector<float> shifted(x.size() + 1, 0.0f);
    std::copy(x.begin(), x.end(), shifted.begin() + 1);
    kernels::global_norm_squared(k_out, scratch, dev(shifted) + 1, n, nullptr);
    const double off = get_raw(k_out, 1)[0];
    if (off != rev)
      rep.fail("the norm at an unaligned address differs: " + std::to_string(off) + " vs " +
               std::to_string(rev));
  }

  // ---- casts (reference: CUDA's host conversions) ----
  void cast(int n) {
    auto x = randn(rng, n, 10.0f);
    float* k_x = dev_raw(x);
    bf16* k_b = mem.template alloc<bf16>(n);
    kernels::cast(k_b, (const float*)k_x, n, nullptr);
    std::vector<bf16> hb(n);
    mem.sync();
    mem.download(hb.data(), k_b, n * sizeof(bf16));
    auto ref_b = quantize<bf16>(x);
    auto got_b = to_f32(hb);
    size_t mism = 0;
    for (int i = 0; i < n; i++) mism += std::memcmp(&got_b[i], &ref_b[i], 4) != 0;
    if (mism) rep.fail("f32->bf16: " + std::to_string(mism) + " values differ from __float2bfloat16");
    float* k_back = mem.template alloc<float>(n);
    kernels::cast(k_back, (const bf16*)k_b, n, nullptr);
    auto back = get_raw(k_back, n);
    rep.compare("bf16->f32 (exact)", back, ref_b, 0.0);
  }

  // Attention shapes are (B, T, NH, HS[, KV]); without KV, multi-head (KV = NH).
  static int kv_heads(const std::vector<int>& s) { return s.size() > 4 ? s[4] : s[2]; }

  void run(const Case& c) {
    const auto& s = c.shape;
    if (c.op == "encoder_forward") encoder_forward(s[0], s[1], s[2], s[3]);
    else if (c.op == "encoder_backward") encoder_backward(s[0], s[1], s[2], s[3]);
    else if (c.op == "layernorm_forward") layernorm_forward(s[0], s[1]);
    else if (c.op == "residual_layernorm_forward") residual_layernorm_forward(s[0], s[1]);
    else if (c.op == "residual_forward") residual_forward(s[0]);
    else if (c.op == "layernorm_backward") layernorm_backward(s[0], s[1]);
    else if (c.op == "bias_grad") bias_grad(s[0], s[1]);
    else if (c.op == "gelu_forward") gelu_forward(s[0]);
    else if (c.op == "gelu_backward") gelu_backward(s[0]);
    else if (c.op == "attention_forward") attention_forward(s[0], s[1], s[2], s[3], kv_heads(s));
    else if (c.op == "attention_backward") attention_backward(s[0], s[1], s[2], s[3], kv_heads(s));
    else if (c.op == "flash_forward") flash_forward(s[0], s[1], s[2], s[3], kv_heads(s));
    else if (c.op == "flash_backward") flash_backward(s[0], s[1], s[2], s[3], kv_heads(s));
    else if (c.op == "rmsnorm_forward") rmsnorm_forward(s[0], s[1]);
    else if (c.op == "residual_rmsnorm_forward") residual_rmsnorm_forward(s[0], s[1]);
    else if (c.op == "rmsnorm_backward") rmsnorm_backward(s[0], s[1]);
    else if (c.op == "rmsnorm_forward_offset") rmsnorm_forward(s[0], s[1], 1.0f);
    else if (c.op == "residual_rmsnorm_forward_offset") residual_rmsnorm_forward(s[0], s[1], 1.0f);
    else if (c.op == "rmsnorm_backward_offset") rmsnorm_backward(s[0], s[1], 1.0f);
    else if (c.op == "qk_norm_forward" || c.op == "qk_norm_backward")
      qk_norm(s[0], s[1], s[2], s[3], s[4] != 0, (float)s[5], c.op == "qk_norm_backward");
    else if (c.op == "geglu_forward") geglu_forward(s[0], s[1]);
    else if (c.op == "geglu_backward") geglu_backward(s[0], s[1]);
    else if (c.op == "scale" || c.op == "softcap_forward") pointwise(c.op, s[0]);
    else if (c.op == "clip_forward" || c.op == "clip_backward") clip(c.op, s[0]);
    else if (c.op == "classifier_softcap") classifier(s[0], s[1], s[2], true, 4.0f);
    else if (c.op == "rope_forward") rope(s[0], s[1], s[2], s[3], s[4], false);
    else if (c.op == "rope_backward") rope(s[0], s[1], s[2], s[3], s[4], true);
    else if (c.op == "swiglu_forward") swiglu_forward(s[0], s[1]);
    else if (c.op == "swiglu_backward") swiglu_backward(s[0], s[1]);
    else if (c.op == "classifier") classifier(s[0], s[1], s[2], true);
    else if (c.op == "classifier_loss_only") classifier(s[0], s[1], s[2], false);
    else if (c.op == "adamw") adamw(s[0], s[1]);
    else if (c.op == "global_norm") global_norm(s[0]);
    else if (c.op == "cast") cast(s[0]);
    else if (c.op.rfind("moe_", 0) == 0) moe_case(*this, c);
    else rep.fail("unknown op " + c.op);
    std::string g = mem.check_guards();
    if (!g.empty()) rep.fail("out-of-bounds write: " + g);
  }
};

// The grid of shapes, with odd sizes, for every op and both storage types.
inline std::vector<Case> all_cases() {
  std::vector<std::pair<std::string, std::vector<std::vector<int>>>> ops = {
      {"encoder_forward", {{1, 1, 1, 1}, {2, 5, 7, 11}, {3, 17, 64, 50}, {2, 64, 96, 300}, {4, 256, 64, 50257}}},
      // B*T > 2048 (the shared-memory sort chunk): 3300 and 4096 positions take a merge.
      {"encoder_backward", {{1, 1, 1, 1}, {2, 5, 7, 3}, {3, 17, 64, 20}, {4, 64, 48, 8}, {4, 256, 64, 50},
                            {3, 1100, 8, 5}, {4, 1024, 16, 30}}},
      {"layernorm_forward", {{1, 1}, {3, 7}, {17, 96}, {64, 257}, {8, 768}}},
      {"residual_layernorm_forward", {{1, 3}, {5, 33}, {19, 100}, {32, 768}}},
      // 1000 and 4096 take the 128-bit path (n a multiple of the pack), 4099 the scalar one.
      {"residual_forward", {{1}, {7}, {1000}, {4096}, {4099}}},
      // One warp per row (W packs a lane) at 96, 256, 384, 512, 768 in BF16 (W = 1, 1, 2,
      // 2, 3) and 96, 256, 384, 512 in FP32 (W = 1..4); the team kernel at 2, 7 and 257
      // (not whole packs), 768 in FP32 (W = 6), 2500 and 4096 (too wide; K = 2 in FP32;
      // 4096 in BF16: one team per block). N = 70: rows in 3 blocks.
      {"layernorm_backward", {{1, 2}, {3, 7}, {17, 96}, {70, 257}, {70, 256}, {17, 384},
                              {256, 768}, {33, 512}, {9, 2500}, {9, 4096}}},
      // 3072: two column tiles of 128-bit packs.
      {"bias_grad", {{1, 1}, {5, 7}, {33, 100}, {100, 300}, {70, 3072}}},
      {"gelu_forward", {{1}, {7}, {1000}, {4096}, {4099}}},
      {"gelu_backward", {{1}, {7}, {1000}, {4096}, {4099}}},
      // (B, T, NH, HS[, KV]): grouped-query with KV = 1 (MQA), NH/2, NH (the default).
      {"attention_forward", {{1, 1, 1, 4}, {2, 7, 3, 5}, {2, 33, 2, 16}, {2, 128, 4, 16},
                             {2, 7, 4, 8, 1}, {2, 33, 4, 16, 2}, {1, 9, 6, 4, 3}}},
      {"attention_backward", {{1, 1, 1, 4}, {2, 7, 3, 5}, {2, 33, 2, 16}, {2, 128, 4, 16},
                              {2, 7, 4, 8, 1}, {2, 33, 4, 16, 2}, {1, 9, 6, 4, 3}}},
      // (B, T, NH, HS): T = 1, 7, 65, 129, 1000 across the 32-row (16 at HS 128) tiles;
      // T = 1000 with one head keeps simt (a fiber per thread) at seconds.
      // GQA: KV = 1 (MQA) and NH/2 across several tiles, small so simt stays fast.
      {"flash_forward", {{1, 1, 1, 64}, {2, 7, 3, 64}, {1, 65, 2, 128}, {2, 129, 1, 64},
                         {1, 1000, 1, 64}, {1, 1000, 1, 128}, {2, 33, 2, 32}, {1, 17, 3, 16}, {2, 9, 2, 8},
                         {2, 33, 4, 16, 1}, {1, 70, 4, 32, 2}, {1, 40, 6, 64, 3}}},
      {"flash_backward", {{1, 1, 1, 64}, {2, 7, 3, 64}, {1, 65, 2, 128}, {2, 129, 1, 64},
                          {1, 1000, 1, 64}, {1, 1000, 1, 128}, {2, 33, 2, 32}, {1, 17, 3, 16}, {2, 9, 2, 8},
                          {2, 33, 4, 16, 1}, {1, 70, 4, 32, 2}, {1, 40, 6, 64, 3}}},
      {"rmsnorm_forward", {{1, 1}, {3, 7}, {17, 96}, {64, 257}, {8, 768}}},
      {"residual_rmsnorm_forward", {{1, 3}, {5, 33}, {19, 100}, {32, 576}}},
      {"rmsnorm_backward", {{1, 2}, {3, 7}, {17, 96}, {70, 257}, {256, 576}, {9, 2500}, {9, 4096}}},
      // (B, T, NH, KV, hs): MQA, KV = NH/2, KV = NH; hs/2 odd (6) and 64.
      {"rope_forward", {{1, 1, 1, 1, 2}, {2, 7, 4, 1, 6}, {2, 33, 4, 2, 16}, {1, 17, 3, 3, 64}}},
      {"rope_backward", {{1, 1, 1, 1, 2}, {2, 7, 4, 1, 6}, {2, 33, 4, 2, 16}, {1, 17, 3, 3, 64}}},
      {"swiglu_forward", {{1, 1}, {3, 7}, {17, 96}, {33, 1536}}},
      {"swiglu_backward", {{1, 1}, {3, 7}, {17, 96}, {33, 1536}}},
      // 41: rows that are not whole 128-bit packs (element-wise path).
      {"classifier", {{1, 1, 1}, {3, 5, 8}, {3, 37, 41}, {7, 100, 128}, {16, 1000, 1024}, {2, 4099, 4224}, {4, 50257, 50304}}},
      {"classifier_loss_only", {{3, 5, 8}, {5, 1000, 1024}}},
      // Issue 38. The offset forms: (N, C) as the plain ones (2500: K = 2 in backward).
      {"rmsnorm_forward_offset", {{1, 1}, {3, 7}, {17, 96}, {8, 768}}},
      {"residual_rmsnorm_forward_offset", {{1, 3}, {19, 100}, {32, 576}}},
      {"rmsnorm_backward_offset", {{1, 2}, {3, 7}, {17, 96}, {70, 257}, {9, 2500}}},
      // (N, NH, KV, hs, per_head, w_offset): NH != KV (GQA) and MQA; hs 16, 128 (packs)
      // and 6 (element-wise: not a whole BF16 pack); per head and full width, offset 0 and 1;
      // N = 40, 70: the weight gradients' partials over 2 and 3 blocks of rows.
      {"qk_norm_forward", {{1, 1, 1, 2, 1, 0}, {5, 4, 2, 16, 1, 0}, {5, 4, 2, 16, 1, 1}, {7, 4, 1, 6, 1, 1},
                           {3, 2, 1, 128, 1, 0}, {5, 4, 2, 16, 0, 0}, {5, 4, 2, 16, 0, 1}, {7, 3, 1, 6, 0, 0},
                           {2, 8, 2, 128, 0, 1}}},
      {"qk_norm_backward", {{1, 1, 1, 2, 1, 0}, {5, 4, 2, 16, 1, 0}, {5, 4, 2, 16, 1, 1}, {7, 4, 1, 6, 1, 1},
                            {40, 2, 1, 128, 1, 0}, {70, 3, 1, 8, 1, 1}, {5, 4, 2, 16, 0, 0}, {5, 4, 2, 16, 0, 1}, {7, 3, 1, 6, 0, 0},
                            {2, 8, 2, 128, 0, 1}, {70, 2, 2, 24, 0, 0}}},
      {"geglu_forward", {{1, 1}, {3, 7}, {17, 96}, {33, 1536}}},
      {"geglu_backward", {{1, 1}, {3, 7}, {17, 96}, {33, 1536}}},
      {"scale", {{1}, {7}, {4099}}},
      {"softcap_forward", {{1}, {7}, {4099}}},
      {"clip_forward", {{1}, {7}, {4099}}},
      {"clip_backward", {{1}, {7}, {4099}}},
      // (BT, V, Vp): the capped classifier, packs and element-wise (41).
      {"classifier_softcap", {{1, 1, 1}, {3, 37, 41}, {7, 100, 128}, {4, 4099, 4224}}},
      {"adamw", {{1, 1}, {7, 1}, {1000, 3}, {5001, 10}}},
      {"global_norm", {{1}, {7}, {1000}, {300001}, {4194304}, {4194319}}},
  };
  std::vector<Case> cases;
  for (DType d : {DType::f32, DType::bf16})
    for (auto& [op, shapes] : ops)
      for (auto& s : shapes) cases.push_back({op, s, d});
  for (int n : {1, 7, 1000, 4099}) cases.push_back({"cast", {n}, DType::bf16});
  for (auto& c : moe_cases()) cases.push_back(c);
  return cases;
}

template <class Mem>
Report run_case(Mem& mem, const Case& c) {
  if (c.dtype == DType::f32) {
    Runner<Mem, float> r(mem);
    r.run(c);
    return r.rep;
  }
  Runner<Mem, bf16> r(mem);
  r.run(c);
  return r.rep;
}

}  // namespace ratchet::testing::kcases

#include "moe_kernel_cases.h"

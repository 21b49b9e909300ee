// RMSNorm over the last axis (Llama's norm: no mean, no bias), the fused
// residual add + RMSNorm, and the q/k norms on a qkv projection (issue 38).
//
// forward (per row n of N, C channels; out overwritten, rstd written):
//   rstd = 1 / sqrt(sum_c x^2 / C + eps)
//   out  = x * rstd * (w + off)       (off = w_offset: 1 for Gemma's (1+w), else 0)
// residual_rmsnorm_forward: resid = a + b first (one pass over the row, which
// then stays in cache for the norm), then the above on resid.
// backward (norm = x * rstd, g = (w + off) * dout):
//   dinp += rstd * (g - norm * mean_c(g * norm))    (ACCUMULATED)
//   dw   += sum_n dout * norm                         (accumulated)
// dinp is parallel over rows; dw is parallel over channel blocks, each summing
// its rows in order (cpu_norm_grads.h, shared with layernorm).
// qk_norm: the same per segment of a qkv row (a head of hs values, or the
// whole q / k part); dinp is overwritten there (the v part copied from dout),
// and the weight gradients sum every segment of every row in a fixed order.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_norm_grads.h"

namespace ratchet {

namespace {
// Normalises one row x (C) into o (C); returns rstd.
inline float rms_row(float* o, const float* x, const float* w, int C, float eps, float off) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; c++) ss += x[c] * x[c];
  const float s = 1.0f / std::sqrt(ss / C + eps);
  if (off == 0.0f) {  // Llama's form, exactly as before the offset existed
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
  } else {
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = x[c] * s * (w[c] + off);
  }
  return s;
}

// di = rstd * (g - norm * mean(g * norm)), g = (w + off) * d, norm = x * rstd;
// accumulated into di when `add`, else overwritten.
inline void rms_row_backward(float* di, const float* d, const float* x, const float* w, float s,
                             int C, float off, bool add) {
  float gn_sum = 0.0f;
#pragma omp simd reduction(+ : gn_sum)
  for (int c = 0; c < C; c++) gn_sum += (w[c] + off) * d[c] * (x[c] * s);
  const float gn_mean = gn_sum / C;
  if (add) {
#pragma omp simd
    for (int c = 0; c < C; c++) di[c] += s * ((w[c] + off) * d[c] - x[c] * s * gn_mean);
  } else {
#pragma omp simd
    for (int c = 0; c < C; c++) di[c] = s * ((w[c] + off) * d[c] - x[c] * s * gn_mean);
  }
}

// dw[c] += sum_n sum_{g < G} d[n, base + g*len + c] * x[...] * rstd[n*R + r0 + g]:
// one weight shared by G segments of `len` values in each row of width W.
// Parallel over channel blocks, rows and segments summed in order.
void shared_weight_grads(float* dw, const float* d, const float* x, const float* rstd, int N,
                         int W, int base, int G, int len, int R, int r0, int threads) {
  constexpr int kBlock = 64;
  const int nblocks = (len + kBlock - 1) / kBlock;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, c1 = std::min(len, c0 + kBlock);
    float acc[kBlock] = {};
    for (int n = 0; n < N; n++)
      for (int g = 0; g < G; g++) {
        const size_t o = (size_t)n * W + base + (size_t)g * len;
        const float s = rstd[(size_t)n * R + r0 + g];
        for (int c = c0; c < c1; c++) acc[c - c0] += d[o + c] * (x[o + c] * s);
      }
    for (int c = c0; c < c1; c++) dw[c] += acc[c - c0];
  }
}
}  // namespace

void CpuBackend::rmsnorm_forward(dptr out_, float* rstd, cdptr inp_, cdptr w_, int N, int C,
                                 float eps, float w_offset) {
  float* out = static_cast<float*>(out_);
  const float* inp = static_cast<const float*>(inp_);
  const float* w = static_cast<const float*>(w_);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int n = 0; n < N; n++)
    rstd[n] = rms_row(out + (size_t)n * C, inp + (size_t)n * C, w, C, eps, w_offset);
}

void CpuBackend::residual_rmsnorm_forward(dptr resid_, dptr out_, float* rstd, cdptr a_,
                                          cdptr b_, cdptr w_, int N, int C, float eps,
                                          float w_offset) {
  float* resid = static_cast<float*>(resid_);
  float* out = static_cast<float*>(out_);
  const float* a = static_cast<const float*>(a_);
  const float* b = static_cast<const float*>(b_);
  const float* w = static_cast<const float*>(w_);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int n = 0; n < N; n++) {
    const size_t o = (size_t)n * C;
    float* r = resid + o;  // may alias a or b: elementwise, read before written
#pragma omp simd
    for (int c = 0; c < C; c++) r[c] = a[o + c] + b[o + c];
    rstd[n] = rms_row(out + o, r, w, C, eps, w_offset);
  }
}

void CpuBackend::rmsnorm_backward(dptr dinp_, dptr dw_, cdptr dout_, cdptr inp_, cdptr w_,
                                  const float* rstd, int N, int C, float w_offset) {
  float* dinp = static_cast<float*>(dinp_);
  float* dw = static_cast<float*>(dw_);
  const float* dout = static_cast<const float*>(dout_);
  const float* inp = static_cast<const float*>(inp_);
  const float* w = static_cast<const float*>(w_);

#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + (size_t)n * C;
    const float* d = dout + (size_t)n * C;
    const float s = rstd[n];
    float* di = dinp + (size_t)n * C;
    if (w_offset != 0.0f) {
      rms_row_backward(di, d, x, w, s, C, w_offset, true);
      continue;
    }
    float gn_sum = 0.0f;  // Llama's form, exactly as before the offset existed
#pragma omp simd reduction(+ : gn_sum)
    for (int c = 0; c < C; c++) gn_sum += w[c] * d[c] * (x[c] * s);
    const float gn_mean = gn_sum / C;
#pragma omp simd
    for (int c = 0; c < C; c++) di[c] += s * (w[c] * d[c] - x[c] * s * gn_mean);
  }

  cpu::norm_param_grads<false>(dw, nullptr, dout, inp, nullptr, rstd, N, C, threads_);
}

void CpuBackend::qk_norm_forward(dptr out_, float* rstd, cdptr inp_, cdptr qw_, cdptr kw_, int N,
                                 int NH, int KV, int hs, bool per_head, float eps, float off) {
  float* out = static_cast<float*>(out_);
  const float* inp = static_cast<const float*>(inp_);
  const float* qw = static_cast<const float*>(qw_);
  const float* kw = static_cast<const float*>(kw_);
  const int W = (NH + 2 * KV) * hs, R = per_head ? NH + KV : 2;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + (size_t)n * W;
    float* o = out + (size_t)n * W;
    float* r = rstd + (size_t)n * R;
    if (per_head) {
      for (int h = 0; h < NH + KV; h++)
        r[h] = rms_row(o + h * hs, x + h * hs, h < NH ? qw : kw, hs, eps, off);
    } else {
      r[0] = rms_row(o, x, qw, NH * hs, eps, off);
      r[1] = rms_row(o + NH * hs, x + NH * hs, kw, KV * hs, eps, off);
    }
    for (int c = (NH + KV) * hs; c < W; c++) o[c] = x[c];  // v
  }
}

void CpuBackend::qk_norm_backward(dptr dinp_, dptr dqw_, dptr dkw_, cdptr dout_, cdptr inp_,
                                  cdptr qw_, cdptr kw_, const float* rstd, int N, int NH, int KV,
                                  int hs, bool per_head, float off) {
  float* dinp = static_cast<float*>(dinp_);
  const float* dout = static_cast<const float*>(dout_);
  const float* inp = static_cast<const float*>(inp_);
  const float* qw = static_cast<const float*>(qw_);
  const float* kw = static_cast<const float*>(kw_);
  const int W = (NH + 2 * KV) * hs, R = per_head ? NH + KV : 2;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int n = 0; n < N; n++) {
    const size_t o = (size_t)n * W;
    const float* r = rstd + (size_t)n * R;
    if (per_head) {
      for (int h = 0; h < NH + KV; h++)
        rms_row_backward(dinp + o + h * hs, dout + o + h * hs, inp + o + h * hs, h < NH ? qw : kw,
                         r[h], hs, off, false);
    } else {
      rms_row_backward(dinp + o, dout + o, inp + o, qw, r[0], NH * hs, off, false);
      rms_row_backward(dinp + o + NH * hs, dout + o + NH * hs, inp + o + NH * hs, kw, r[1],
                       KV * hs, off, false);
    }
    for (int c = (NH + KV) * hs; c < W; c++) dinp[o + c] = dout[o + c];  // v
  }
  float* dqw = static_cast<float*>(dqw_);
  float* dkw = static_cast<float*>(dkw_);
  if (per_head) {
    shared_weight_grads(dqw, dout, inp, rstd, N, W, 0, NH, hs, R, 0, threads_);
    shared_weight_grads(dkw, dout, inp, rstd, N, W, NH * hs, KV, hs, R, NH, threads_);
  } else {
    shared_weight_grads(dqw, dout, inp, rstd, N, W, 0, 1, NH * hs, R, 0, threads_);
    shared_weight_grads(dkw, dout, inp, rstd, N, W, NH * hs, 1, KV * hs, R, 1, threads_);
  }
}

}  // namespace ratchet

// RMSNorm over the last axis (Llama's norm: no mean, no bias), and the fused
// residual add + RMSNorm.
//
// forward (per row n of N, C channels; out overwritten, rstd written):
//   rstd = 1 / sqrt(sum_c x^2 / C + eps)
//   out  = x * rstd * w
// residual_rmsnorm_forward: resid = a + b first (one pass over the row, which
// then stays in cache for the norm), then the above on resid.
// backward (norm = x * rstd, g = w * dout):
//   dinp += rstd * (g - norm * mean_c(g * norm))    (ACCUMULATED)
//   dw   += sum_n dout * norm                         (accumulated)
// dinp is parallel over rows; dw is parallel over channel blocks, each summing
// its rows in order (cpu_norm_grads.h, shared with layernorm).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_norm_grads.h"

namespace ratchet {

namespace {
// Normalises one row x (C) into o (C); returns rstd.
inline float rms_row(float* o, const float* x, const float* w, int C, float eps) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; c++) ss += x[c] * x[c];
  const float s = 1.0f / std::sqrt(ss / C + eps);
#pragma omp simd
  for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
  return s;
}
}  // namespace

void CpuBackend::rmsnorm_forward(dptr out_, float* rstd, cdptr inp_, cdptr w_, int N, int C,
                                 float eps) {
  float* out = static_cast<float*>(out_);
  const float* inp = static_cast<const float*>(inp_);
  const float* w = static_cast<const float*>(w_);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int n = 0; n < N; n++)
    rstd[n] = rms_row(out + (size_t)n * C, inp + (size_t)n * C, w, C, eps);
}

void CpuBackend::residual_rmsnorm_forward(dptr resid_, dptr out_, float* rstd, cdptr a_,
                                          cdptr b_, cdptr w_, int N, int C, float eps) {
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
    rstd[n] = rms_row(out + o, r, w, C, eps);
  }
}

void CpuBackend::rmsnorm_backward(dptr dinp_, dptr dw_, cdptr dout_, cdptr inp_, cdptr w_,
                                  const float* rstd, int N, int C) {
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
    float gn_sum = 0.0f;
#pragma omp simd reduction(+ : gn_sum)
    for (int c = 0; c < C; c++) gn_sum += w[c] * d[c] * (x[c] * s);
    const float gn_mean = gn_sum / C;
    float* di = dinp + (size_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++) di[c] += s * (w[c] * d[c] - x[c] * s * gn_mean);
  }

  cpu::norm_param_grads<false>(dw, nullptr, dout, inp, nullptr, rstd, N, C, threads_);
}

}  // namespace ratchet

// LayerNorm over the last axis, eps = 1e-5.
//
// forward (per row n of N, C channels; out overwritten, mean/rstd written):
//   m0   = sum_c x / C                      (pass 1)
//   d    = x - m0                           (pass 2, corrected two-pass:
//   mean = m0 + sum_c d / C                  the float rounding of pass 1 is
//   var  = sum_c d^2 / C - (sum_c d / C)^2   removed, and no cancellation)
//   rstd = 1 / sqrt(var + eps)
//   out  = (x - mean) * rstd * w + b
// backward (norm = (x - mean) * rstd, g = w * dout):
//   dinp += rstd * (g - mean_c(g) - norm * mean_c(g * norm))   (ACCUMULATED)
//   dw   += sum_n dout * norm                                   (accumulated)
//   db   += sum_n dout                                          (accumulated)
// dinp is parallel over rows; dw/db are parallel over channel blocks, each
// summing its rows in order (cpu_norm_grads.h, shared with RMSNorm).
// Row reductions are `omp simd` reductions: vectorised, in a fixed order.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_norm_grads.h"

namespace ratchet {

void CpuBackend::layernorm_forward(dptr out_, float* mean, float* rstd, cdptr inp_, cdptr w_,
                                   cdptr b_, int N, int C) {
  float* out = static_cast<float*>(out_);
  const float* inp = static_cast<const float*>(inp_);
  const float* w = static_cast<const float*>(w_);
  const float* b = static_cast<const float*>(b_);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + (size_t)n * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; c++) sum += x[c];
    const float m0 = sum / C;
    float dsum = 0.0f, d2sum = 0.0f;
#pragma omp simd reduction(+ : dsum, d2sum)
    for (int c = 0; c < C; c++) {
      float d = x[c] - m0;
      dsum += d;
      d2sum += d * d;
    }
    const float dm = dsum / C;  // corrects the rounding of the first-pass sum
    const float m = m0 + dm;
    const float var = std::max(0.0f, d2sum / C - dm * dm);
    const float s = 1.0f / std::sqrt(var + 1e-5f);
    float* o = out + (size_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void CpuBackend::layernorm_backward(dptr dinp_, dptr dw_, dptr db_, cdptr dout_, cdptr inp_,
                                    cdptr w_, const float* mean, const float* rstd, int N, int C) {
  float* dinp = static_cast<float*>(dinp_);
  float* dw = static_cast<float*>(dw_);
  float* db = static_cast<float*>(db_);
  const float* dout = static_cast<const float*>(dout_);
  const float* inp = static_cast<const float*>(inp_);
  const float* w = static_cast<const float*>(w_);

#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + (size_t)n * C;
    const float* d = dout + (size_t)n * C;
    const float m = mean[n], s = rstd[n];
    float g_sum = 0.0f, gn_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, gn_sum)
    for (int c = 0; c < C; c++) {
      float g = w[c] * d[c];
      g_sum += g;
      gn_sum += g * ((x[c] - m) * s);
    }
    const float g_mean = g_sum / C, gn_mean = gn_sum / C;
    float* di = dinp + (size_t)n * C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float norm = (x[c] - m) * s;
      di[c] += s * (w[c] * d[c] - g_mean - norm * gn_mean);
    }
  }

  cpu::norm_param_grads<true>(dw, db, dout, inp, mean, rstd, N, C, threads_);
}

}  // namespace ratchet

// Causal multi-head self-attention, one (b, h) pair per work item.
//
// Layout: qkv (B,T,3C) = q | k | v on the last axis, head h at columns
// [h*hs, (h+1)*hs) of each third; hs = C/NH, scale = 1/sqrt(hs). Per (b,h) the
// q, k, v heads are (T,hs) matrices read in place with leading dimension 3C,
// and the output head is a (T,hs) block of out (B,T,C) with leading dim C.
//
// forward (out, att overwritten):
//   S   (T,T) = scale * q @ k^T                  sgemm N,T straight into att
//   att (T,T) = softmax over j <= i of S[i,j], 0 for j > i   (rows sum to 1)
//   out (T,hs) = att @ v                         sgemm N,N, ldb 3C, ldc C
// backward (dqkv fully overwritten; every column belongs to one head):
//   datt (T,T) = dout @ v^T                      (per-thread scratch)
//   dv   = att^T @ dout
//   dS   = att * (datt - rowsum(att * datt)) * scale     (0 above the diagonal)
//   dq   = dS @ k ;  dk = dS^T @ q
// The (b,h) loop is OpenMP-parallel (static); each sgemm inside runs on its
// calling thread (OpenBLAS is single-threaded, see cpu_backend.cpp).
#include <cblas.h>
#include <omp.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "core/error.h"

namespace ratchet {

void CpuBackend::attention_forward(dptr out_, dptr att_, cdptr qkv_, int B, int T, int C, int NH) {
  float* out = static_cast<float*>(out_);
  float* att = static_cast<float*>(att_);
  const float* qkv = static_cast<const float*>(qkv_);
  RATCHET_ASSERT(NH > 0 && C % NH == 0);
  blas_single_thread();
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hs);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const float* q = qkv + (size_t)b * T * C3 + h * hs;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* a = att + (size_t)bh * T * T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, a, T);
    for (int i = 0; i < T; i++) {
      float* row = a + (size_t)i * T;
      float mx = row[0];
      for (int j = 1; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j <= i; j++) {
        float e = cpu::exp_f(row[j] - mx);
        row[j] = e;
        sum += e;
      }
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int j = 0; j <= i; j++) row[j] *= inv;
      for (int j = i + 1; j < T; j++) row[j] = 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, C3, 0.0f,
                out + (size_t)b * T * C + h * hs, C);
  }
}

void CpuBackend::attention_backward(dptr dqkv_, cdptr dout_, cdptr qkv_, cdptr att_, int B, int T,
                                    int C, int NH) {
  float* dqkv = static_cast<float*>(dqkv_);
  const float* dout = static_cast<const float*>(dout_);
  const float* qkv = static_cast<const float*>(qkv_);
  const float* att = static_cast<const float*>(att_);
  RATCHET_ASSERT(NH > 0 && C % NH == 0);
  blas_single_thread();
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hs);
  float* scr = scratch((size_t)T * T);
  const size_t stride = scratch_stride();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const size_t qoff = (size_t)b * T * C3 + h * hs;
    const float* q = qkv + qoff;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* dq = dqkv + qoff;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* a = att + (size_t)bh * T * T;
    const float* d = dout + (size_t)b * T * C + h * hs;
    float* ds = scr + stride * omp_get_thread_num();  // (T,T): datt, then dS in place
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, d, C, v, C3, 0.0f, ds, T);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, d, C, 0.0f, dv, C3);
    for (int i = 0; i < T; i++) {
      const float* ar = a + (size_t)i * T;
      float* r = ds + (size_t)i * T;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j <= i; j++) dot += ar[j] * r[j];
#pragma omp simd
      for (int j = 0; j <= i; j++) r[j] = ar[j] * (r[j] - dot) * scale;
      for (int j = i + 1; j < T; j++) r[j] = 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, ds, T, k, C3, 0.0f, dq,
                C3);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, ds, T, q, C3, 0.0f, dk,
                C3);
  }
}

}  // namespace ratchet

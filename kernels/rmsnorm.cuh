// RMSNorm (Llama's norm) forward/backward and the fused residual-add + RMSNorm.
#pragma once
#include "common.cuh"
#include "scratch_bytes.h"

namespace ratchet::kernels {

// rstd (N) FP32 = 1/sqrt(mean_c(inp^2) + eps); out (N,C) = inp * rstd * w      (overwritten)
template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, int N, int C, float eps,
                     cudaStream_t stream);

// residual (N,C) = a + b (stored in T), then rmsnorm_forward of the stored residual.
// residual, out, rstd overwritten. residual may alias a or b, not out.
template <class T>
void residual_rmsnorm_forward(T* residual, T* out, float* rstd, const T* a, const T* b,
                              const T* w, int N, int C, float eps, cudaStream_t stream);

// dinp (N,C) +=, dw (C) += (accumulated). Deterministic. Scratch:
// rmsnorm_backward_scratch_bytes(N, C) (kernels/scratch_bytes.h).
template <class T>
void rmsnorm_backward(T* dinp, T* dw, void* scratch, const T* dout, const T* inp, const T* w,
                      const float* rstd, int N, int C, cudaStream_t stream);

// ---- bytes per call ----
// Bytes a call must move at least (s = sizeof(T)): inputs read once, outputs
// written once, scratch not counted. bench/kernels reports GB/s against them.
inline double rmsnorm_forward_bytes(int N, int C, size_t s) {  // inp, out, w, rstd
  return 2.0 * N * C * s + C * s + 4.0 * N;
}
inline double residual_rmsnorm_forward_bytes(int N, int C, size_t s) {  // a, b, residual, out
  return 4.0 * N * C * s + C * s + 4.0 * N;
}
inline double rmsnorm_backward_bytes(int N, int C, size_t s) {  // dout, inp, dinp (r+w), w, rstd, dw (r+w)
  return 4.0 * N * C * s + 4.0 * N + 3.0 * C * s;
}

}  // namespace ratchet::kernels

// LayerNorm forward/backward, the fused residual-add + LayerNorm, the residual add.
#pragma once
#include "common.cuh"
#include "scratch_bytes.h"

namespace ratchet::kernels {

// out (N,C) = (inp - mean) * rstd * w + b, eps 1e-5                  (overwritten)
// mean (N), rstd (N) in FP32 (overwritten; either may be null).
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b,
                       int N, int C, cudaStream_t stream);

// residual (N,C) = a + b, then layernorm_forward of the stored residual.
// residual, out, mean, rstd overwritten. residual may alias a or b.
template <class T>
void residual_layernorm_forward(T* residual, T* out, float* mean, float* rstd, const T* a,
                                const T* b, const T* w, const T* bias, int N, int C,
                                cudaStream_t stream);

// out (n) = a + b (overwritten; out may alias a or b).
template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream);

// Its scratch: kernels/scratch_bytes.h.

// dinp (N,C) +=, dw (C) +=, db (C) += (all accumulated). Deterministic: the
// bits depend on N and C only. One warp per row where C is whole 16-byte
// packs and at most 768 (BF16) or 512 (FP32) columns, else a team of warps per
// row (kernels/norm_backward.cuh); the same arithmetic in the same order.
template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, void* scratch, const T* dout, const T* inp,
                        const T* w, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream);

// ---- bytes per call ----
// Bytes a call must move at least (s = sizeof(T)): inputs read once, outputs
// written once, scratch not counted. bench/kernels reports GB/s against them.
//   forward: inp read, out written, w and b, mean and rstd written.
inline double layernorm_forward_bytes(int N, int C, size_t s) {
  return 2.0 * N * C * s + 2.0 * C * s + 8.0 * N;
}
//   fused: a and b read, residual and out written.
inline double residual_layernorm_forward_bytes(int N, int C, size_t s) {
  return 4.0 * N * C * s + 2.0 * C * s + 8.0 * N;
}
inline double residual_forward_bytes(size_t n, size_t s) { return 3.0 * n * s; }
//   backward: dout, inp and dinp read, dinp written; w, mean, rstd; dw, db read and written.
inline double layernorm_backward_bytes(int N, int C, size_t s) {
  return 4.0 * N * C * s + 8.0 * N + 5.0 * C * s;
}

}  // namespace ratchet::kernels

// RMSNorm (Llama's norm) forward/backward, the fused residual-add + RMSNorm, and
// the q/k norms on a qkv projection (Qwen3, Gemma 3, OLMo 2).
// w_offset: the weight is (w + w_offset): 1 for Gemma's (1+w) form, else 0.
#pragma once
#include "common.cuh"
#include "scratch_bytes.h"

namespace ratchet::kernels {

// rstd (N) FP32 = 1/sqrt(mean_c(inp^2) + eps); out (N,C) = inp * rstd * (w + w_offset)
// (overwritten)
template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, int N, int C, float eps,
                     cudaStream_t stream, float w_offset = 0.0f);

// residual (N,C) = a + b (stored in T), then rmsnorm_forward of the stored residual.
// residual, out, rstd overwritten. residual may alias a or b, not out.
template <class T>
void residual_rmsnorm_forward(T* residual, T* out, float* rstd, const T* a, const T* b,
                              const T* w, int N, int C, float eps, cudaStream_t stream,
                              float w_offset = 0.0f);

// dinp (N,C) +=, dw (C) += (accumulated; dw is w's gradient whatever w_offset).
// Deterministic. Scratch: rmsnorm_backward_scratch_bytes(N, C) (kernels/scratch_bytes.h).
template <class T>
void rmsnorm_backward(T* dinp, T* dw, void* scratch, const T* dout, const T* inp, const T* w,
                      const float* rstd, int N, int C, cudaStream_t stream,
                      float w_offset = 0.0f);

// q/k RMSNorm on inp (N, (NH+2KV)*hs) rows q (NH*hs) | k (KV*hs) | v (KV*hs):
//   per_head:  each q head's hs values with qw (hs), each k head's with kw (hs);
//              rstd (N, NH+KV) FP32, q heads first
//   otherwise: q's NH*hs values with qw (NH*hs), k's KV*hs with kw (KV*hs); rstd (N, 2)
// out (N, (NH+2KV)*hs) overwritten: q, k normalised as rmsnorm_forward, v copied.
// out must not alias inp.
template <class T>
void qk_norm_forward(T* out, float* rstd, const T* inp, const T* qw, const T* kw, int N, int NH,
                     int KV, int hs, bool per_head, float eps, float w_offset,
                     cudaStream_t stream);

// dinp (N, (NH+2KV)*hs) OVERWRITTEN (v part = dout's); dqw, dkw += (accumulated,
// deterministic: partial sums per block of rows in a fixed order, then column sums).
// Scratch: qk_norm_backward_scratch_bytes(N, lq, lk) (kernels/scratch_bytes.h), lq/lk
// the lengths of qw/kw.
template <class T>
void qk_norm_backward(T* dinp, T* dqw, T* dkw, void* scratch, const T* dout, const T* inp,
                      const T* qw, const T* kw, const float* rstd, int N, int NH, int KV, int hs,
                      bool per_head, float w_offset, cudaStream_t stream);

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

// Token + position embedding, forward and backward (deterministic).
#pragma once
#include "common.cuh"
#include "scratch_bytes.h"

namespace ratchet::kernels {

// out (B,T,C) = wte[inp[b,t], :] + wpe[t, :]                      (overwritten)
template <class T>
void encoder_forward(T* out, const int* inp, const T* wte, const T* wpe, int B, int Tn, int C,
                     cudaStream_t stream);

// Its scratch: kernels/scratch_bytes.h.

// dwte (Vp,C) += dout summed over the positions holding each token;
// dwpe (maxT,C) rows < T += dout summed over b.                     (accumulated)
// Deterministic: no atomics; each dwte row is summed in position order.
template <class T>
void encoder_backward(T* dwte, T* dwpe, void* scratch, const T* dout, const int* inp, int B,
                      int Tn, int C, cudaStream_t stream);

// ---- bytes per call ----
// Bytes a call must move at least (s = sizeof(T)): inputs read once, outputs
// written once, scratch not counted. bench/kernels reports GB/s against them.
//   forward: one wte row per position read, wpe (T,C) read, out written, token ids.
inline double encoder_forward_bytes(int B, int Tn, int C, size_t s) {
  return 2.0 * B * Tn * C * s + (double)Tn * C * s + 4.0 * B * Tn;
}
//   backward: dout read; the rows of the `distinct` tokens present and dwpe (T,C)
//   read and written; token ids.
inline double encoder_backward_bytes(int B, int Tn, int C, int distinct, size_t s) {
  return (double)B * Tn * C * s + 2.0 * distinct * C * s + 2.0 * Tn * C * s + 4.0 * B * Tn;
}

}  // namespace ratchet::kernels

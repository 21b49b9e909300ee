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

}  // namespace ratchet::kernels

// SwiGLU (Llama's MLP gate), forward and backward.
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// inp (N,2H) rows gate | up; out (N,H) = silu(gate) * up                  (overwritten)
template <class T>
void swiglu_forward(T* out, const T* inp, int N, int H, cudaStream_t stream);

// dinp (N,2H) from dout (N,H) and inp                                    (overwritten)
template <class T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int H, cudaStream_t stream);

}  // namespace ratchet::kernels

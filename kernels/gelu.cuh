// GELU (tanh approximation), forward and backward.
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// out (n) = gelu(inp)                                     (overwritten; may alias inp)
template <class T>
void gelu_forward(T* out, const T* inp, size_t n, cudaStream_t stream);

// dinp (n) = gelu'(inp) * dout                            (overwritten; may alias dout)
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n, cudaStream_t stream);

}  // namespace ratchet::kernels

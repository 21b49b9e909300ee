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

// Bytes a call must move at least (bench/kernels): forward inp read, out
// written; backward inp and dout read, dinp written.
inline double gelu_forward_bytes(size_t n, size_t s) { return 2.0 * n * s; }
inline double gelu_backward_bytes(size_t n, size_t s) { return 3.0 * n * s; }

}  // namespace ratchet::kernels

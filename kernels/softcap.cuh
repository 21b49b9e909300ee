// In-place scalings of a vector: x *= s (Gemma's embedding scale, forward and
// backward) and the soft-cap x = c tanh(x / c) (Gemma 2's final logits).
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// x (n) *= s                                                  (in place)
template <class T>
void scale(T* x, size_t n, float s, cudaStream_t stream);

// x (n) = c tanh(x / c), c > 0                                (in place)
template <class T>
void softcap_forward(T* x, size_t n, float c, cudaStream_t stream);

}  // namespace ratchet::kernels

// In-place scalings of a vector: x *= s (Gemma's embedding scale, forward and
// backward) and the soft-cap x = c tanh(x / c) (Gemma 2's final logits); and
// OLMoE's clip_qkv clamp with its gradient mask.
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// x (n) *= s                                                  (in place)
template <class T>
void scale(T* x, size_t n, float s, cudaStream_t stream);

// x (n) = c tanh(x / c), c > 0                                (in place)
template <class T>
void softcap_forward(T* x, size_t n, float c, cudaStream_t stream);

// out (n) = min(max(in, -c), c), c > 0                        (out may alias in)
template <class T>
void clip_forward(T* out, const T* in, size_t n, float c, cudaStream_t stream);

// dx (n) = 0 where the clamp's input x lies outside [-c, c]   (in place)
template <class T>
void clip_backward(T* dx, const T* x, size_t n, float c, cudaStream_t stream);

}  // namespace ratchet::kernels

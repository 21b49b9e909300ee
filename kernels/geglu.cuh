// GeGLU (Gemma's MLP gate), forward and backward.
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// inp (N,2H) rows gate | up; out (N,H) = gelu(gate) * up                  (overwritten)
// gelu: the tanh approximation, gelu_forward's (kernels/gelu_math.cuh).
template <class T>
void geglu_forward(T* out, const T* inp, int N, int H, cudaStream_t stream);

// dinp (N,2H) from dout (N,H) and inp                                    (overwritten)
template <class T>
void geglu_backward(T* dinp, const T* inp, const T* dout, int N, int H, cudaStream_t stream);

}  // namespace ratchet::kernels

// The GELU tanh approximation and its derivative, one device definition for
// every kernel that applies it (kernels/gelu.cu, kernels/geglu.cu): GPT-2's
// MLP and Gemma's GeGLU gate must be the same function. Device code only:
// include it from .cu files, not from host-compiled headers.
//   u = sqrt(2/pi) * (x + 0.044715 x^3)
//   gelu(x)  = 0.5 x (1 + tanh u)
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

__device__ __forceinline__ float gelu_f(float x) {
  float u = kGeluScale * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
  float u = kGeluScale * (x + 0.044715f * x * x * x);
  float t = tanhf(u);
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

}  // namespace ratchet::kernels

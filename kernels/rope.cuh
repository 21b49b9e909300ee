// Rotary position embedding (RoPE) on the q and k heads of qkv, forward and backward.
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// In place on qkv (B,T,(NH+2KV)*hs): the NH q heads and KV k heads of each row
// rotated (Hugging Face's rotate_half convention), the v heads untouched.
// cos_sin FP32: (maxT, hs/2) cos then (maxT, hs/2) sin. hs even, T <= maxT.
template <class T>
void rope_forward(T* qkv, const float* cos_sin, int B, int Tn, int NH, int KV, int hs, int maxT,
                  cudaStream_t stream);

// In place on dqkv (same layout): the transposed rotation (sin -> -sin).
template <class T>
void rope_backward(T* dqkv, const float* cos_sin, int B, int Tn, int NH, int KV, int hs,
                   int maxT, cudaStream_t stream);

}  // namespace ratchet::kernels

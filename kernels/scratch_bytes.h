// The scratch each kernel family's launcher needs, as plain C++ (no CUDA, no
// simt): the launchers, the cuda backend's op scratch and the memory accounting
// that `ratchet plan` runs without a device (backend/memory_model.h) all size
// it from these functions, so the figures cannot drift apart.
#pragma once
#include <cstddef>

namespace ratchet::kernels {

// layernorm_backward and bias_grad sum columns over fixed chunks of rows.
constexpr int kLayernormRowsPerChunk = 32;
// rmsnorm_backward sums dw over fixed chunks of rows, as layernorm.
constexpr int kRmsnormRowsPerChunk = 32;
constexpr int kBiasGradRowsPerChunk = 32;
// global_norm_squared's fixed grid (the partition of the sum never changes).
constexpr int kGlobalNormBlocks = 256;

inline size_t ceil_div_size(size_t a, size_t b) { return (a + b - 1) / b; }

inline size_t next_pow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// encoder_backward: one 64-bit sort key per token, padded to a power of two
// for the bitonic network.
inline size_t encoder_backward_scratch_bytes(int B, int Tn) {
  return next_pow2((size_t)B * Tn) * sizeof(unsigned long long);
}

// layernorm_backward: partial dw and db per chunk of rows, (2, chunks, C) FP32.
inline size_t layernorm_backward_scratch_bytes(int N, int C) {
  return 2 * ceil_div_size(N, kLayernormRowsPerChunk) * C * sizeof(float);
}

// rmsnorm_backward: partial dw per chunk of rows, (chunks, C) FP32.
inline size_t rmsnorm_backward_scratch_bytes(int N, int C) {
  return ceil_div_size(N, kRmsnormRowsPerChunk) * C * sizeof(float);
}

// bias_grad: partial sums per chunk of rows, (chunks, OC) FP32.
inline size_t bias_grad_scratch_bytes(int N, int OC) {
  return ceil_div_size(N, kBiasGradRowsPerChunk) * OC * sizeof(float);
}

// global_norm_squared: one FP64 partial per block.
inline size_t global_norm_scratch_bytes() { return kGlobalNormBlocks * sizeof(double); }

// flash_attention_backward: D (B,NH,T) FP32, rowsum(dout * out).
inline size_t flash_attention_backward_scratch_bytes(int B, int Tn, int NH) {
  return (size_t)B * NH * Tn * sizeof(float);
}

}  // namespace ratchet::kernels

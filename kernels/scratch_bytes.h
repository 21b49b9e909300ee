// The scratch each kernel family's launcher needs, as plain C++ (no CUDA, no
// simt): the launchers, the cuda backend's op scratch and the memory accounting
// that `ratchet plan` runs without a device (backend/memory_model.h) all size
// it from these functions, so the figures cannot drift apart.
#pragma once
#include <cstddef>

namespace ratchet::kernels {

// layernorm_backward, rmsnorm_backward and bias_grad sum columns of (N, C)
// over blocks of rows, one FP32 partial row per block (kernels/common.cuh,
// "column sums"). Rows per block: a function of N only (never of the device),
// so that the sums' partition, hence their bits, is the same on every GPU and
// under simt. About kColumnSumBlocks blocks (enough to fill an H100's 132 SMs
// several times over) of at least kColumnSumMinRows rows (the partials are at
// most 1/32 of what the rows hold; up to N = 16384 the blocks are the 32-row
// chunks of the kernels before issue 23, so the scratch is never larger).
constexpr int kColumnSumBlocks = 512;
constexpr int kColumnSumMinRows = 32;
// global_norm_squared's fixed grid (the partition of the sum never changes).
constexpr int kGlobalNormBlocks = 256;

inline size_t ceil_div_size(size_t a, size_t b) { return (a + b - 1) / b; }

inline size_t next_pow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

inline int column_sum_rows_per_block(int N) {
  const int r = (int)ceil_div_size((size_t)N, kColumnSumBlocks);
  return r < kColumnSumMinRows ? kColumnSumMinRows : r;
}
inline int column_sum_blocks(int N) {
  return (int)ceil_div_size((size_t)N, (size_t)column_sum_rows_per_block(N));
}

// encoder_backward: 64-bit sort keys, one per position padded to a power of
// two (at least 2), twice (the merges read one copy and write the other).
// Chunks of kEncoderSortChunk keys are sorted in shared memory by one block.
constexpr int kEncoderSortChunk = 2048;
inline size_t encoder_sort_keys(int B, int Tn) {
  const size_t n = next_pow2((size_t)B * Tn);
  return n < 2 ? 2 : n;
}
inline size_t encoder_backward_scratch_bytes(int B, int Tn) {
  return 2 * encoder_sort_keys(B, Tn) * sizeof(unsigned long long);
}

// layernorm_backward: partial dw | db per block of rows, (blocks, 2C) FP32.
inline size_t layernorm_backward_scratch_bytes(int N, int C) {
  return (size_t)column_sum_blocks(N) * 2 * C * sizeof(float);
}

// rmsnorm_backward: partial dw per block of rows, (blocks, C) FP32.
inline size_t rmsnorm_backward_scratch_bytes(int N, int C) {
  return (size_t)column_sum_blocks(N) * C * sizeof(float);
}

// moe_shared_gate_backward (Qwen2-MoE's gate): partial dg per block of rows,
// (blocks, C) FP32: rmsnorm_backward's at the same N and C (the MoE layer's
// rmsnorm_backward has the same (BT, C), so the op scratch already holds it).
inline size_t moe_shared_gate_backward_scratch_bytes(int N, int C) {
  return rmsnorm_backward_scratch_bytes(N, C);
}

// qk_norm_backward: partial dqw | dkw per block of rows, (blocks, lq + lk) FP32,
// lq, lk the weights' lengths (hs each per head; NH*hs and KV*hs full width).
// At most layernorm_backward's (blocks, 2C) whenever lq + lk <= 2C, as in every
// family (per head 2*hs; full width (NH+KV)*hs with NH*hs = C).
inline size_t qk_norm_backward_scratch_bytes(int N, int lq, int lk) {
  return (size_t)column_sum_blocks(N) * (size_t)(lq + lk) * sizeof(float);
}

// bias_grad: partial sums per block of rows, (blocks, OC) FP32.
inline size_t bias_grad_scratch_bytes(int N, int OC) {
  return (size_t)column_sum_blocks(N) * OC * sizeof(float);
}

// global_norm_squared: one FP64 partial per block.
inline size_t global_norm_scratch_bytes() { return kGlobalNormBlocks * sizeof(double); }

// flash_attention_backward: D (B,NH,T) FP32, rowsum(dout * out).
inline size_t flash_attention_backward_scratch_bytes(int B, int Tn, int NH) {
  return (size_t)B * NH * Tn * sizeof(float);
}

}  // namespace ratchet::kernels

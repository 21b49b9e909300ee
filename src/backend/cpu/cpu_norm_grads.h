// The weight (and bias) gradients of layernorm and RMSNorm, one loop for both
// (cpu_layernorm.cpp, cpu_rmsnorm.cpp):
//   xhat  = (x - mean) * rstd   (layernorm, kCentered)   or   x * rstd   (RMSNorm)
//   dw[c] += sum_n dout[n,c] * xhat[n,c]                  (accumulated)
//   db[c] += sum_n dout[n,c]                              (accumulated; layernorm only)
// Parallel over blocks of kBlock channels, each summing its rows in order:
// thread-count independent, no atomics. The template keeps the RMSNorm loop
// free of the mean and the bias (no extra work in the hot loop).
#pragma once
#include <algorithm>
#include <cstddef>

namespace ratchet::cpu {

// dout, inp (N,C); mean (N) (kCentered only, else unused), rstd (N); dw, db (C).
template <bool kCentered>
void norm_param_grads(float* dw, float* db, const float* dout, const float* inp,
                      const float* mean, const float* rstd, int N, int C, int threads) {
  constexpr int kBlock = 64;  // channels per work item
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    float acc_w[kBlock] = {}, acc_b[kBlock] = {};
    for (int n = 0; n < N; n++) {
      const float* x = inp + (size_t)n * C;
      const float* d = dout + (size_t)n * C;
      const float s = rstd[n];
      if constexpr (kCentered) {
        const float m = mean[n];
#pragma omp simd
        for (int c = c0; c < c1; c++) {
          acc_w[c - c0] += d[c] * ((x[c] - m) * s);
          acc_b[c - c0] += d[c];
        }
      } else {
#pragma omp simd
        for (int c = c0; c < c1; c++) acc_w[c - c0] += d[c] * (x[c] * s);
      }
    }
    for (int c = c0; c < c1; c++) {
      dw[c] += acc_w[c - c0];
      if constexpr (kCentered) db[c] += acc_b[c - c0];
    }
  }
}

}  // namespace ratchet::cpu

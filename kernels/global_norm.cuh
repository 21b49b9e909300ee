// Deterministic sum of squares (the global gradient norm is its square root).
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

size_t global_norm_scratch_bytes();

// out[0] (FP64) = sum_i x[i]^2 over n elements                     (overwritten)
// Same bits for the same input on any device: the partition of the sum is fixed.
template <class T>
void global_norm_squared(double* out, void* scratch, const T* x, size_t n, cudaStream_t stream);

}  // namespace ratchet::kernels

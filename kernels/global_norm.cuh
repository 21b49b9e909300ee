// Deterministic sum of squares (the global gradient norm is its square root).
#pragma once
#include "common.cuh"
#include "scratch_bytes.h"

namespace ratchet::kernels {

// Its scratch: kernels/scratch_bytes.h.

// out[0] (FP64) = sum_i x[i]^2 over n elements                     (overwritten)
// Same bits for the same input on any device: the partition of the sum is fixed.
template <class T>
void global_norm_squared(double* out, void* scratch, const T* x, size_t n, cudaStream_t stream);

// Bytes a call must move at least (bench/kernels): x read once.
inline double global_norm_squared_bytes(size_t n, size_t s) { return (double)n * s; }

}  // namespace ratchet::kernels

// Bias gradient: column sums of (N, OC), deterministic.
#pragma once
#include "common.cuh"
#include "scratch_bytes.h"

namespace ratchet::kernels {

// Its scratch: kernels/scratch_bytes.h.

// dbias (OC) += sum over n of dout (N,OC)                          (accumulated)
template <class T>
void bias_grad(T* dbias, void* scratch, const T* dout, int N, int OC, cudaStream_t stream);

// Bytes a call must move at least: dout read once, dbias read and written
// (scratch not counted); bench/kernels reports GB/s against it.
inline double bias_grad_bytes(int N, int OC, size_t s) { return (double)N * OC * s + 2.0 * OC * s; }

}  // namespace ratchet::kernels

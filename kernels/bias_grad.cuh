// Bias gradient: column sums of (N, OC), deterministic.
#pragma once
#include "common.cuh"
#include "scratch_bytes.h"

namespace ratchet::kernels {

// Its scratch: kernels/scratch_bytes.h.

// dbias (OC) += sum over n of dout (N,OC)                          (accumulated)
template <class T>
void bias_grad(T* dbias, void* scratch, const T* dout, int N, int OC, cudaStream_t stream);

}  // namespace ratchet::kernels

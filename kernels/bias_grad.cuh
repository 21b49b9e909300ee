// Bias gradient: column sums of (N, OC), deterministic.
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

size_t bias_grad_scratch_bytes(int N, int OC);

// dbias (OC) += sum over n of dout (N,OC)                          (accumulated)
template <class T>
void bias_grad(T* dbias, void* scratch, const T* dout, int N, int OC, cudaStream_t stream);

}  // namespace ratchet::kernels

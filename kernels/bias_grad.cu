// Bias gradient of an affine layer:  dbias[o] += sum_n dout[n, o]
//   dout (N, OC) row-major; dbias (OC) accumulated (+=), FP32 sums.
// Two passes, deterministic: partial column sums over fixed chunks of
// kRowsPerChunk rows into scratch (chunks, OC), then each column sums its
// chunks in order (column_chunks, common.cuh).
#include "bias_grad.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kRowsPerChunk = kBiasGradRowsPerChunk;  // scratch_bytes.h
}

// ==== kernels ====================================================================================

template <class T>
__global__ void bias_grad_partial_kernel(float* partial, const T* dout, int N, int OC) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  const int r0 = blockIdx.y * kRowsPerChunk, r1 = min(N, r0 + kRowsPerChunk);
  float acc = 0.0f;
  for (int r = r0; r < r1; r++) acc += to_f32(dout[(size_t)r * OC + o]);
  partial[(size_t)blockIdx.y * OC + o] = acc;
}

template <class T>
__global__ void bias_grad_final_kernel(T* dbias, const float* partial, int chunks, int OC) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  const float acc = sum_chunks(partial, chunks, OC, o);
  dbias[o] = from_f32<T>(to_f32(dbias[o]) + acc);
}

// ==== launchers ==================================================================================

template <class T>
void bias_grad(T* dbias, void* scratch, const T* dout, int N, int OC, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("bias_grad");
  RATCHET_REQUIRE(N > 0 && OC > 0, "bias_grad: N, OC must be positive");
  RATCHET_REQUIRE(scratch != nullptr, "bias_grad: needs bias_grad_scratch_bytes");
  const ColumnChunks g = column_chunks(N, OC, kRowsPerChunk);
  RATCHET_REQUIRE(g.chunks <= 65535, "bias_grad: N too large for one grid column");
  auto* partial = static_cast<float*>(scratch);
  RATCHET_LAUNCH((bias_grad_partial_kernel<T>), g.partial_grid, g.block, 0, stream, partial, dout,
                 N, OC);
  RATCHET_CHECK_LAUNCH();
  RATCHET_LAUNCH((bias_grad_final_kernel<T>), g.final_grid, g.block, 0, stream, dbias, partial,
                 g.chunks, OC);
  RATCHET_CHECK_LAUNCH();
}

template void bias_grad<float>(float*, void*, const float*, int, int, cudaStream_t);
template void bias_grad<bf16>(bf16*, void*, const bf16*, int, int, cudaStream_t);

}  // namespace ratchet::kernels

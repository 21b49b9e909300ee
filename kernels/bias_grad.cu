// Bias gradient of an affine layer:  dbias[o] += sum_n dout[n, o]
//   dout (N, OC) row-major; dbias (OC) accumulated (+=), FP32 sums.
// Two passes, deterministic (the column sums of common.cuh): grid (column
// tiles, row blocks); each thread owns one 128-bit pack of columns and sums
// its block's rows in order into scratch (blocks, OC); then column_sums adds
// the blocks' rows in a fixed order.
#include "bias_grad.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kBlock = 256;
}

// ==== kernels ====================================================================================

// partial (blocks, OC): row block blockIdx.y's column sums; thread = one pack of columns.
template <class T, bool kVec>
__global__ void bias_grad_partial_kernel(float* __restrict__ partial, const T* __restrict__ dout,
                                         int N, int OC, int rows_per_block) {
  constexpr int P = Packed128<T>::size;
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * P;
  if (c0 >= OC) return;
  const int r0 = blockIdx.y * rows_per_block, r1 = min(N, r0 + rows_per_block);
  float acc[P];
  for (int i = 0; i < P; i++) acc[i] = 0.0f;
  for (int r = r0; r < r1; r++) {
    const Packed128<T> d = load_pack<kVec, true>(dout + (size_t)r * OC + c0, OC - c0);
    for (int i = 0; i < P; i++) acc[i] += to_f32(d[i]);
  }
  float* out = partial + (size_t)blockIdx.y * OC + c0;
  for (int i = 0; i < P; i++)
    if (c0 + i < OC) out[i] = acc[i];
}

// ==== launchers ==================================================================================

template <class T>
void bias_grad(T* dbias, void* scratch, const T* dout, int N, int OC, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("bias_grad");
  RATCHET_REQUIRE(N > 0 && OC > 0, "bias_grad: N, OC must be positive");
  RATCHET_REQUIRE(scratch != nullptr, "bias_grad: needs bias_grad_scratch_bytes");
  constexpr int P = Packed128<T>::size;
  const int blocks = column_sum_blocks(N), packs = ceil_div(OC, P);
  const int block = std::min(kBlock, ceil_div(packs, 32) * 32);
  const dim3 grid((unsigned)ceil_div(packs, block), (unsigned)blocks);
  auto* partial = static_cast<float*>(scratch);
  if (packs_fit<T>(OC, {dout}))
    RATCHET_LAUNCH((bias_grad_partial_kernel<T, true>), grid, block, 0, stream, partial, dout, N,
                   OC, column_sum_rows_per_block(N));
  else
    RATCHET_LAUNCH((bias_grad_partial_kernel<T, false>), grid, block, 0, stream, partial, dout, N,
                   OC, column_sum_rows_per_block(N));
  RATCHET_CHECK_LAUNCH();
  column_sums<T>(dbias, nullptr, partial, blocks, OC, OC, stream);
}

template void bias_grad<float>(float*, void*, const float*, int, int, cudaStream_t);
template void bias_grad<bf16>(bf16*, void*, const bf16*, int, int, cudaStream_t);

}  // namespace ratchet::kernels

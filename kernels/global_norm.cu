// Sum of squares, deterministic:
//   out = sum_i x_i^2       (out[0], FP64, overwritten)
// Pass 1: a FIXED grid of G = kBlocks x kThreads threads (independent of the
// device); x is cut into packs of P = 16/sizeof(T) consecutive elements (the
// last one completed with zeros), and thread j sums the squares of packs
// j, j + G, j + 2G, ... in that order, each pack's elements in order, in
// FP64; each block reduces its threads in FP64 (butterfly, fixed order)
// into scratch. 16-byte loads when x is aligned and n a multiple of P
// (kVec), element loads otherwise: the same order, so the same bits. Four
// packs are loaded before they are summed (more bytes in flight per
// thread; the order of the sum is unchanged). The kernel until 2026-11 took
// one element per thread per step with 2-byte loads in BF16: 683 GB/s on an
// H200 (bench/gpu/results/2026-11-30-h200).
// Pass 2: one block sums the kBlocks partials in FP64 in a fixed order.
// Why FP64 from the first product: the same gradients held in another order
// (ZeRO-2/3 keep them bucket by bucket, ZeRO-0 in the flat layout) must give
// the same norm, since the clip scale multiplies every update. Each square is
// exact in FP64 (24-bit mantissas squared fit in 53), and the sums round at
// 1e-16, far under the FP32 the clip scale is used in. Per-thread FP32 sums
// (the kernel until 2026-11) rounded at 6e-8 each: on an H200, d12 under
// --zero 2 had a grad norm 2 ulps off --zero 0's, and every weight moved.
#include "global_norm.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kBlocks = kGlobalNormBlocks;  // scratch_bytes.h
constexpr int kThreads = 512;
}

// ==== kernels ====================================================================================

template <bool kVec, class T>
__global__ void norm_partial_kernel(double* partial, const T* x, size_t n) {
  constexpr int P = Packed128<T>::size, U = 4;
  __shared__ double scratch[32];
  double acc = 0.0;
  const size_t packs = (n + P - 1) / P, G = (size_t)gridDim.x * blockDim.x;
  auto left = [n](size_t pack) { return (int)(n - pack * P < (size_t)P ? n - pack * P : P); };
  size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; p + (U - 1) * G < packs; p += U * G) {
    Packed128<T> v[U];
    for (int u = 0; u < U; u++) v[u] = load_pack<kVec, true>(x + (p + u * G) * P, left(p + u * G));
    for (int u = 0; u < U; u++)
      for (int k = 0; k < P; k++) {
        const double e = (double)pack_f32(v[u], k);
        acc += e * e;
      }
  }
  for (; p < packs; p += G) {
    const Packed128<T> v = load_pack<kVec, true>(x + p * P, left(p));
    for (int k = 0; k < P; k++) {
      const double e = (double)pack_f32(v, k);
      acc += e * e;
    }
  }
  double s = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void norm_final_kernel(double* out, const double* partial) {
  __shared__ double scratch[32];
  double s = block_sum(partial[threadIdx.x], scratch);
  if (threadIdx.x == 0) out[0] = s;
}

// ==== launchers ==================================================================================

template <class T>
void global_norm_squared(double* out, void* scratch, const T* x, size_t n, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("global_norm_squared");
  RATCHET_REQUIRE(scratch != nullptr, "global_norm_squared: needs global_norm_scratch_bytes");
  auto* partial = static_cast<double*>(scratch);
  if (n % Packed128<T>::size == 0 && aligned16(x))
    RATCHET_LAUNCH((norm_partial_kernel<true, T>), kBlocks, kThreads, 0, stream, partial, x, n);
  else
    RATCHET_LAUNCH((norm_partial_kernel<false, T>), kBlocks, kThreads, 0, stream, partial, x, n);
  RATCHET_CHECK_LAUNCH();
  RATCHET_LAUNCH(norm_final_kernel, 1, kBlocks, 0, stream, out, (const double*)partial);
  RATCHET_CHECK_LAUNCH();
}

template void global_norm_squared<float>(double*, void*, const float*, size_t, cudaStream_t);
template void global_norm_squared<bf16>(double*, void*, const bf16*, size_t, cudaStream_t);

}  // namespace ratchet::kernels

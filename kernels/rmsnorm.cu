// RMSNorm over the last axis of (N, C), statistics in FP32 (Llama; no mean, no bias).
//   forward:  rstd = 1/sqrt(sum_c x^2 / C + eps);  out = x * rstd * w
//             out (N,C), rstd (N) overwritten
//   fused:    residual = a + b (stored in T), then the forward above on the stored residual
//   backward: xhat = x * rstd,  g = w * dout
//             dinp += rstd * (g - xhat * mean_c(g * xhat))       dinp (N,C) accumulated
//             dw   += sum_n dout * xhat                          dw (C) accumulated
// Forward: one warp per row, lanes striding it in 128-bit packs (butterfly sums).
// Backward: kernels/norm_backward.cuh (one pass over the rows, dw partials per
// block of rows into scratch (blocks, C), then a fixed-order sum).
#include "rmsnorm.cuh"
#include "norm_backward.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kWarpsPerBlock = 4;
}  // namespace

// ==== kernels ====================================================================================

// Normalises row x (C) held in T; writes the out row and rstd[row]. Shared by
// the plain and the fused kernel (the same bits for the same stored row).
template <bool kVec, class T>
__device__ __forceinline__ void rmsnorm_row(T* out, float* rstd, const T* x, const T* w, int row,
                                            int C, float eps) {
  constexpr int P = Packed128<T>::size;
  const int lane = threadIdx.x % 32;
  float sq = 0.0f;
  for (int c0 = lane * P; c0 < C; c0 += 32 * P) {
    const Packed128<T> v = load_pack<kVec>(x + c0, C - c0);
    for (int k = 0; k < P; k++) sq += pack_f32(v, k) * pack_f32(v, k);  // zeros past C add nothing
  }
  const float s = rsqrtf(warp_sum(sq) / C + eps);
  for (int c0 = lane * P; c0 < C; c0 += 32 * P) {
    const Packed128<T> v = load_pack<kVec, true>(x + c0, C - c0), wv = load_pack<kVec>(w + c0, C - c0);
    Packed128<T> o;
    for (int k = 0; k < P; k++) o[k] = from_f32<T>(pack_f32(v, k) * s * pack_f32(wv, k));
    store_pack<kVec>(out + c0, o, C - c0);
  }
  if (lane == 0) rstd[row] = s;
}

template <class T, bool kVec>
__global__ void rmsnorm_forward_kernel(T* __restrict__ out, float* __restrict__ rstd,
                                       const T* __restrict__ inp, const T* __restrict__ w, int N,
                                       int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // whole warp; this kernel has no block barrier
  rmsnorm_row<kVec>(out + (size_t)row * C, rstd, inp + (size_t)row * C, w, row, C, eps);
}

// residual may alias a or b (no __restrict__ on those three).
template <class T, bool kVec>
__global__ void residual_rmsnorm_forward_kernel(T* residual, T* __restrict__ out,
                                                float* __restrict__ rstd, const T* a, const T* b,
                                                const T* __restrict__ w, int N, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const size_t off = (size_t)row * C;
  residual_add_row<kVec>(residual + off, a + off, b + off, C);
  rmsnorm_row<kVec>(out + off, rstd, residual + off, w, row, C, eps);
}

// ==== launchers ==================================================================================

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, int N, int C, float eps,
                     cudaStream_t stream) {
  RATCHET_NVTX_RANGE("rmsnorm_forward");
  RATCHET_REQUIRE(N > 0 && C > 0, "rmsnorm_forward: N, C must be positive");
  const unsigned grid = (unsigned)ceil_div(N, kWarpsPerBlock);
  if (packs_fit<T>(C, {out, inp, w}))
    RATCHET_LAUNCH((rmsnorm_forward_kernel<T, true>), grid, 32 * kWarpsPerBlock, 0, stream, out,
                   rstd, inp, w, N, C, eps);
  else
    RATCHET_LAUNCH((rmsnorm_forward_kernel<T, false>), grid, 32 * kWarpsPerBlock, 0, stream, out,
                   rstd, inp, w, N, C, eps);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void residual_rmsnorm_forward(T* residual, T* out, float* rstd, const T* a, const T* b,
                              const T* w, int N, int C, float eps, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("residual_rmsnorm_forward");
  RATCHET_REQUIRE(N > 0 && C > 0, "residual_rmsnorm_forward: N, C must be positive");
  RATCHET_REQUIRE(out != residual, "residual_rmsnorm_forward: out must not alias residual");
  const unsigned grid = (unsigned)ceil_div(N, kWarpsPerBlock);
  if (packs_fit<T>(C, {residual, out, a, b, w}))
    RATCHET_LAUNCH((residual_rmsnorm_forward_kernel<T, true>), grid, 32 * kWarpsPerBlock, 0,
                   stream, residual, out, rstd, a, b, w, N, C, eps);
  else
    RATCHET_LAUNCH((residual_rmsnorm_forward_kernel<T, false>), grid, 32 * kWarpsPerBlock, 0,
                   stream, residual, out, rstd, a, b, w, N, C, eps);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void rmsnorm_backward(T* dinp, T* dw, void* scratch, const T* dout, const T* inp, const T* w,
                      const float* rstd, int N, int C, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("rmsnorm_backward");
  norm_backward<T, /*kRms=*/true>(dinp, dw, nullptr, scratch, dout, inp, w, nullptr, rstd, N, C,
                                  stream, "rmsnorm_backward");
}

#define RATCHET_INSTANTIATE(T)                                                                  \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int, int, float,             \
                                   cudaStream_t);                                               \
  template void residual_rmsnorm_forward<T>(T*, T*, float*, const T*, const T*, const T*, int,  \
                                            int, float, cudaStream_t);                          \
  template void rmsnorm_backward<T>(T*, T*, void*, const T*, const T*, const T*, const float*,  \
                                    int, int, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

// LayerNorm over the last axis of (N, C), eps = 1e-5, statistics in FP32.
//   forward:  mean = sum_c x / C;  var = sum_c (x - mean)^2 / C;  rstd = 1/sqrt(var + eps)
//             out = (x - mean) * rstd * w + b          out (N,C), mean (N), rstd (N) overwritten
//   fused:    residual = a + b (stored in T), then the forward above on the stored residual
//   backward: xhat = (x - mean) * rstd,  g = w * dout
//             dinp += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))     dinp (N,C) accumulated
//             dw += sum_n dout * xhat,  db += sum_n dout                  dw, db (C) accumulated
// Forward: one warp per row, lanes striding it in 128-bit packs (butterfly sums).
// Backward: kernels/norm_backward.cuh (one pass over the rows, one warp per
// row where C allows it, else a team of warps; dw/db partials per block of rows
// into scratch (blocks, 2C), then a fixed-order sum).
#include "layernorm.cuh"
#include "norm_backward.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kWarpsPerBlock = 4;
}  // namespace

// ==== kernels ====================================================================================

// Normalises row x (C) held in T; writes out row and the statistics. The
// plain and the fused kernel share it: the same bits for the same stored row
// (recompute policies re-run the plain one on what the fused one stored).
// x is read three times (sum, squares, output): from L1 after the first.
template <bool kVec, class T>
__device__ __forceinline__ void layernorm_row(T* out, float* mean, float* rstd, const T* x,
                                              const T* w, const T* b, int row, int C) {
  constexpr int P = Packed128<T>::size;
  const int lane = threadIdx.x % 32;
  float sum = 0.0f;
  for (int c0 = lane * P; c0 < C; c0 += 32 * P) {
    const Packed128<T> v = load_pack<kVec>(x + c0, C - c0);
    for (int k = 0; k < P; k++) sum += pack_f32(v, k);  // zeros past C add nothing
  }
  const float m = warp_sum(sum) / C;
  float sq = 0.0f;
  for (int c0 = lane * P; c0 < C; c0 += 32 * P) {
    const Packed128<T> v = load_pack<kVec>(x + c0, C - c0);
    for (int k = 0; k < P; k++) {
      const float d = c0 + k < C ? pack_f32(v, k) - m : 0.0f;
      sq += d * d;
    }
  }
  const float s = rsqrtf(warp_sum(sq) / C + 1e-5f);
  for (int c0 = lane * P; c0 < C; c0 += 32 * P) {
    const Packed128<T> v = load_pack<kVec, true>(x + c0, C - c0), wv = load_pack<kVec>(w + c0, C - c0),
                       bv = load_pack<kVec>(b + c0, C - c0);
    Packed128<T> o;
    for (int k = 0; k < P; k++)
      o[k] = from_f32<T>((pack_f32(v, k) - m) * s * pack_f32(wv, k) + pack_f32(bv, k));
    store_pack<kVec>(out + c0, o, C - c0);
  }
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

template <class T, bool kVec>
__global__ void layernorm_forward_kernel(T* __restrict__ out, float* __restrict__ mean,
                                         float* __restrict__ rstd, const T* __restrict__ inp,
                                         const T* __restrict__ w, const T* __restrict__ b, int N,
                                         int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // whole warp; this kernel has no block barrier
  layernorm_row<kVec>(out + (size_t)row * C, mean, rstd, inp + (size_t)row * C, w, b, row, C);
}

// residual may alias a or b (no __restrict__ on those three).
template <class T, bool kVec>
__global__ void residual_layernorm_forward_kernel(T* residual, T* __restrict__ out,
                                                  float* __restrict__ mean,
                                                  float* __restrict__ rstd, const T* a, const T* b,
                                                  const T* __restrict__ w,
                                                  const T* __restrict__ bias, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const size_t off = (size_t)row * C;
  residual_add_row<kVec>(residual + off, a + off, b + off, C);
  layernorm_row<kVec>(out + off, mean, rstd, residual + off, w, bias, row, C);
}

template <class T>
__global__ void residual_forward_packed_kernel(T* out, const T* a, const T* b, size_t n_packs) {
  constexpr int P = Packed128<T>::size;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_packs; i += stride) {
    Packed128<T> x = load128(a + i * P), y = load128(b + i * P), r;
    for (int k = 0; k < P; k++) r[k] = from_f32<T>(to_f32(x[k]) + to_f32(y[k]));
    store128(out + i * P, r);
  }
}

template <class T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

// ==== launchers ==================================================================================

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b,
                       int N, int C, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("layernorm_forward");
  RATCHET_REQUIRE(N > 0 && C > 0, "layernorm_forward: N, C must be positive");
  unsigned grid = (unsigned)ceil_div(N, kWarpsPerBlock);
  if (packs_fit<T>(C, {out, inp, w, b}))
    RATCHET_LAUNCH((layernorm_forward_kernel<T, true>), grid, 32 * kWarpsPerBlock, 0, stream, out,
                   mean, rstd, inp, w, b, N, C);
  else
    RATCHET_LAUNCH((layernorm_forward_kernel<T, false>), grid, 32 * kWarpsPerBlock, 0, stream, out,
                   mean, rstd, inp, w, b, N, C);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void residual_layernorm_forward(T* residual, T* out, float* mean, float* rstd, const T* a,
                                const T* b, const T* w, const T* bias, int N, int C,
                                cudaStream_t stream) {
  RATCHET_NVTX_RANGE("residual_layernorm_forward");
  RATCHET_REQUIRE(N > 0 && C > 0, "residual_layernorm_forward: N, C must be positive");
  RATCHET_REQUIRE(out != residual, "residual_layernorm_forward: out must not alias residual");
  unsigned grid = (unsigned)ceil_div(N, kWarpsPerBlock);
  if (packs_fit<T>(C, {residual, out, a, b, w, bias}))
    RATCHET_LAUNCH((residual_layernorm_forward_kernel<T, true>), grid, 32 * kWarpsPerBlock, 0,
                   stream, residual, out, mean, rstd, a, b, w, bias, N, C);
  else
    RATCHET_LAUNCH((residual_layernorm_forward_kernel<T, false>), grid, 32 * kWarpsPerBlock, 0,
                   stream, residual, out, mean, rstd, a, b, w, bias, N, C);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("residual_forward");
  if (n == 0) return;
  const int block = 256;
  constexpr int P = Packed128<T>::size;
  if (n % P == 0 && aligned16(out) && aligned16(a) && aligned16(b)) {  // 128-bit accesses
    unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(n / P, block), 65536);
    RATCHET_LAUNCH((residual_forward_packed_kernel<T>), grid, block, 0, stream, out, a, b, n / P);
  } else {
    unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(n, block), 65536);
    RATCHET_LAUNCH((residual_forward_kernel<T>), grid, block, 0, stream, out, a, b, n);
  }
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, void* scratch, const T* dout, const T* inp,
                        const T* w, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream) {
  RATCHET_NVTX_RANGE("layernorm_backward");
  // One warp per row where the row allows it (norm_backward.cuh: C whole packs,
  // at most 768 columns in BF16, 512 in FP32), else the team kernel: the same bits.
  if (layernorm_backward_warp_applies<T>(N, C, dinp, dout, inp, w))
    layernorm_backward_warp<T>(dinp, dw, db, scratch, dout, inp, w, mean, rstd, N, C, stream);
  else
    norm_backward<T, /*kRms=*/false>(dinp, dw, db, scratch, dout, inp, w, mean, rstd, N, C,
                                     stream, "layernorm_backward");
}

#define RATCHET_INSTANTIATE(T)                                                                  \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int, \
                                     cudaStream_t);                                             \
  template void residual_layernorm_forward<T>(T*, T*, float*, float*, const T*, const T*,       \
                                              const T*, const T*, int, int, cudaStream_t);      \
  template void residual_forward<T>(T*, const T*, const T*, size_t, cudaStream_t);             \
  template void layernorm_backward<T>(T*, T*, T*, void*, const T*, const T*, const T*,         \
                                      const float*, const float*, int, int, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

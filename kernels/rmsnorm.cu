// RMSNorm over the last axis of (N, C), statistics in FP32 (Llama; no mean, no bias).
//   forward:  rstd = 1/sqrt(sum_c x^2 / C + eps);  out = x * rstd * (w + off)
//             out (N,C), rstd (N) overwritten   (off = w_offset: 1 for Gemma's (1+w), else 0;
//             off 0 runs the very expression it ran before the offset existed: same bits)
//   fused:    residual = a + b (stored in T), then the forward above on the stored residual
//   backward: xhat = x * rstd,  g = (w + off) * dout
//             dinp += rstd * (g - xhat * mean_c(g * xhat))       dinp (N,C) accumulated
//             dw   += sum_n dout * xhat                          dw (C) accumulated
//   qk_norm:  the forward/backward above on segments of a qkv row (N, (NH+2KV)*hs): each
//             head's hs values (per head, one [hs] weight per q/k shared by the heads) or
//             the whole q part (NH*hs) and k part (KV*hs); the v part copied. Backward
//             OVERWRITES dinp; dqw, dkw accumulate (partials per block of rows in
//             scratch, then column_sums: rmsnorm_backward's scheme, no atomics).
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
                                            int C, float eps, float off) {
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
    for (int k = 0; k < P; k++) {
      const float wk = off == 0.0f ? pack_f32(wv, k) : pack_f32(wv, k) + off;
      o[k] = from_f32<T>(pack_f32(v, k) * s * wk);
    }
    store_pack<kVec>(out + c0, o, C - c0);
  }
  if (lane == 0) rstd[row] = s;
}

template <class T, bool kVec>
__global__ void rmsnorm_forward_kernel(T* __restrict__ out, float* __restrict__ rstd,
                                       const T* __restrict__ inp, const T* __restrict__ w, int N,
                                       int C, float eps, float off) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // whole warp; this kernel has no block barrier
  rmsnorm_row<kVec>(out + (size_t)row * C, rstd, inp + (size_t)row * C, w, row, C, eps, off);
}

// residual may alias a or b (no __restrict__ on those three).
template <class T, bool kVec>
__global__ void residual_rmsnorm_forward_kernel(T* residual, T* __restrict__ out,
                                                float* __restrict__ rstd, const T* a, const T* b,
                                                const T* __restrict__ w, int N, int C, float eps,
                                                float w_off) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const size_t off = (size_t)row * C;
  residual_add_row<kVec>(residual + off, a + off, b + off, C);
  rmsnorm_row<kVec>(out + off, rstd, residual + off, w, row, C, eps, w_off);
}

// ---- q/k norms on a qkv row (N, W = (NH+2KV)*hs) ----
// A row has S = NH+KV (per head) or 2 (full width) normalised segments; a warp
// handles one (row, part): parts 0..S-1 the segments, part S copies v.
struct QkSegment {
  int start, len;  // columns of the segment in the row
  bool q;          // uses qw (else kw)
};
__device__ __forceinline__ QkSegment qk_segment(bool per_head, int NH, int KV, int hs, int part) {
  if (per_head) return {part * hs, hs, part < NH};
  return part == 0 ? QkSegment{0, NH * hs, true} : QkSegment{NH * hs, KV * hs, false};
}

template <bool kVec, class T>
__device__ __forceinline__ void copy_row(T* o, const T* x, int n) {
  constexpr int P = Packed128<T>::size;
  for (int c0 = (threadIdx.x % 32) * P; c0 < n; c0 += 32 * P)
    store_pack<kVec>(o + c0, load_pack<kVec, true>(x + c0, n - c0), n - c0);
}

// di (C) = rstd * (g - xhat * mean_c(g * xhat)), g = (w + off) * d, xhat = x * rstd: one
// warp, OVERWRITTEN (the cpu backend's rms_row_backward, the same order of operations).
template <bool kVec, class T>
__device__ __forceinline__ void rmsnorm_row_backward(T* di, const T* d, const T* x, const T* w,
                                                     float s, int C, float off) {
  constexpr int P = Packed128<T>::size;
  const int lane = threadIdx.x % 32;
  float gn = 0.0f;
  for (int c0 = lane * P; c0 < C; c0 += 32 * P) {
    const Packed128<T> dv = load_pack<kVec>(d + c0, C - c0), xv = load_pack<kVec>(x + c0, C - c0),
                       wv = load_pack<kVec>(w + c0, C - c0);
    for (int k = 0; k < P; k++)  // zeros past C add nothing
      gn += (pack_f32(wv, k) + off) * pack_f32(dv, k) * (pack_f32(xv, k) * s);
  }
  const float gn_mean = warp_sum(gn) / C;
  for (int c0 = lane * P; c0 < C; c0 += 32 * P) {
    const Packed128<T> dv = load_pack<kVec>(d + c0, C - c0), xv = load_pack<kVec>(x + c0, C - c0),
                       wv = load_pack<kVec>(w + c0, C - c0);
    Packed128<T> o;
    for (int k = 0; k < P; k++)
      o[k] = from_f32<T>(s * ((pack_f32(wv, k) + off) * pack_f32(dv, k) -
                              pack_f32(xv, k) * s * gn_mean));
    store_pack<kVec>(di + c0, o, C - c0);
  }
}

// out (N, W), rstd (N, S): one warp per (row, part).
template <class T, bool kVec>
__global__ void qk_norm_forward_kernel(T* __restrict__ out, float* __restrict__ rstd,
                                       const T* __restrict__ inp, const T* __restrict__ qw,
                                       const T* __restrict__ kw, int N, int NH, int KV, int hs,
                                       bool per_head, float eps, float off) {
  const int S = per_head ? NH + KV : 2;
  const long gw = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (gw >= (long)N * (S + 1)) return;  // whole warp; no block barrier here
  const int row = (int)(gw / (S + 1)), part = (int)(gw % (S + 1));
  const size_t ro = (size_t)row * (NH + 2 * KV) * hs;
  if (part == S) {
    copy_row<kVec>(out + ro + (NH + KV) * hs, inp + ro + (NH + KV) * hs, KV * hs);
    return;
  }
  const QkSegment g = qk_segment(per_head, NH, KV, hs, part);
  rmsnorm_row<kVec>(out + ro + g.start, rstd, inp + ro + g.start, g.q ? qw : kw, row * S + part,
                    g.len, eps, off);
}

// dinp (N, W) overwritten: one warp per (row, part).
template <class T, bool kVec>
__global__ void qk_norm_backward_kernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                        const T* __restrict__ inp, const T* __restrict__ qw,
                                        const T* __restrict__ kw, const float* __restrict__ rstd,
                                        int N, int NH, int KV, int hs, bool per_head, float off) {
  const int S = per_head ? NH + KV : 2;
  const long gw = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (gw >= (long)N * (S + 1)) return;
  const int row = (int)(gw / (S + 1)), part = (int)(gw % (S + 1));
  const size_t ro = (size_t)row * (NH + 2 * KV) * hs;
  if (part == S) {
    copy_row<kVec>(dinp + ro + (NH + KV) * hs, dout + ro + (NH + KV) * hs, KV * hs);
    return;
  }
  const QkSegment g = qk_segment(per_head, NH, KV, hs, part);
  rmsnorm_row_backward<kVec>(dinp + ro + g.start, dout + ro + g.start, inp + ro + g.start,
                             g.q ? qw : kw, rstd[(size_t)row * S + part], g.len, off);
}

// Pass 1 of the weight gradients: partial (blocks, lq + lk), the sums over one
// block of rows (rows_per_block, column_sum_rows_per_block(N)) of
//   q column c < lq:  sum_n sum_{j<Gq} d[o] x[o] rstd[n*S + j],       o = n*W + j*lq + c
//   k column lq + c:  sum_n sum_{j<Gk} d[o] x[o] rstd[n*S + r0 + j],  o = n*W + NH*hs + j*lk + c
// (one weight shared by the G segments of a row: Gq = NH, Gk = KV per head, 1 and 1
// full width). Block: 32 columns x kQkGradWarps warps; warp w takes the items
// (row, segment) i = w, w + kQkGradWarps, ... of the block's rows in order, then
// warp 0 adds the warps' sums in warp order. Pass 2 is column_sums (common.cuh).
constexpr int kQkGradWarps = 16;
template <class T>
__global__ void qk_norm_weight_partials_kernel(float* __restrict__ partial,
                                               const T* __restrict__ d, const T* __restrict__ x,
                                               const float* __restrict__ rstd, int N, int NH,
                                               int KV, int hs, bool per_head, int rows_per_block) {
  __shared__ float sums[kQkGradWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int W = (NH + 2 * KV) * hs, S = per_head ? NH + KV : 2;
  const int lq = per_head ? hs : NH * hs, lk = per_head ? hs : KV * hs, ncols = lq + lk;
  const int col = blockIdx.y * 32 + lane;
  const bool is_q = col < lq;
  const int c = is_q ? col : col - lq, len = is_q ? lq : lk;
  const int G = per_head ? (is_q ? NH : KV) : 1;
  const int base = is_q ? 0 : NH * hs, r0 = is_q ? 0 : (per_head ? NH : 1);
  const int n0 = blockIdx.x * rows_per_block, n1 = min(N, n0 + rows_per_block);
  float acc = 0.0f;
  if (col < ncols)
    for (long i = warp; i < (long)(n1 - n0) * G; i += kQkGradWarps) {
      const int n = n0 + (int)(i / G), j = (int)(i % G);
      const size_t o = (size_t)n * W + base + (size_t)j * len + c;
      acc += to_f32(d[o]) * (to_f32(x[o]) * rstd[(size_t)n * S + r0 + j]);
    }
  sums[warp][lane] = acc;
  __syncthreads();
  if (warp != 0 || col >= ncols) return;
  float t = 0.0f;
  for (int w = 0; w < kQkGradWarps; w++) t += sums[w][lane];
  partial[(size_t)blockIdx.x * ncols + col] = t;
}

// ==== launchers ==================================================================================

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, int N, int C, float eps,
                     cudaStream_t stream, float w_offset) {
  RATCHET_NVTX_RANGE("rmsnorm_forward");
  RATCHET_REQUIRE(N > 0 && C > 0, "rmsnorm_forward: N, C must be positive");
  const unsigned grid = (unsigned)ceil_div(N, kWarpsPerBlock);
  if (packs_fit<T>(C, {out, inp, w}))
    RATCHET_LAUNCH((rmsnorm_forward_kernel<T, true>), grid, 32 * kWarpsPerBlock, 0, stream, out,
                   rstd, inp, w, N, C, eps, w_offset);
  else
    RATCHET_LAUNCH((rmsnorm_forward_kernel<T, false>), grid, 32 * kWarpsPerBlock, 0, stream, out,
                   rstd, inp, w, N, C, eps, w_offset);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void residual_rmsnorm_forward(T* residual, T* out, float* rstd, const T* a, const T* b,
                              const T* w, int N, int C, float eps, cudaStream_t stream,
                              float w_offset) {
  RATCHET_NVTX_RANGE("residual_rmsnorm_forward");
  RATCHET_REQUIRE(N > 0 && C > 0, "residual_rmsnorm_forward: N, C must be positive");
  RATCHET_REQUIRE(out != residual, "residual_rmsnorm_forward: out must not alias residual");
  const unsigned grid = (unsigned)ceil_div(N, kWarpsPerBlock);
  if (packs_fit<T>(C, {residual, out, a, b, w}))
    RATCHET_LAUNCH((residual_rmsnorm_forward_kernel<T, true>), grid, 32 * kWarpsPerBlock, 0,
                   stream, residual, out, rstd, a, b, w, N, C, eps, w_offset);
  else
    RATCHET_LAUNCH((residual_rmsnorm_forward_kernel<T, false>), grid, 32 * kWarpsPerBlock, 0,
                   stream, residual, out, rstd, a, b, w, N, C, eps, w_offset);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void rmsnorm_backward(T* dinp, T* dw, void* scratch, const T* dout, const T* inp, const T* w,
                      const float* rstd, int N, int C, cudaStream_t stream, float w_offset) {
  RATCHET_NVTX_RANGE("rmsnorm_backward");
  norm_backward<T, /*kRms=*/true>(dinp, dw, nullptr, scratch, dout, inp, w, nullptr, rstd, N, C,
                                  stream, "rmsnorm_backward", w_offset);
}

template <class T>
void qk_norm_forward(T* out, float* rstd, const T* inp, const T* qw, const T* kw, int N, int NH,
                     int KV, int hs, bool per_head, float eps, float w_offset,
                     cudaStream_t stream) {
  RATCHET_NVTX_RANGE("qk_norm_forward");
  RATCHET_REQUIRE(N > 0 && NH > 0 && KV > 0 && hs > 0,
                  "qk_norm_forward: N, NH, KV, hs must be positive");
  RATCHET_REQUIRE(out != inp, "qk_norm_forward: out must not alias inp");
  const long warps = (long)N * ((per_head ? NH + KV : 2) + 1);
  const unsigned grid = (unsigned)ceil_div<long>(warps, kWarpsPerBlock);
  // hs whole packs: every segment start, length and the row width are too.
  if (packs_fit<T>(hs, {out, inp, qw, kw}))
    RATCHET_LAUNCH((qk_norm_forward_kernel<T, true>), grid, 32 * kWarpsPerBlock, 0, stream, out,
                   rstd, inp, qw, kw, N, NH, KV, hs, per_head, eps, w_offset);
  else
    RATCHET_LAUNCH((qk_norm_forward_kernel<T, false>), grid, 32 * kWarpsPerBlock, 0, stream, out,
                   rstd, inp, qw, kw, N, NH, KV, hs, per_head, eps, w_offset);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void qk_norm_backward(T* dinp, T* dqw, T* dkw, void* scratch, const T* dout, const T* inp,
                      const T* qw, const T* kw, const float* rstd, int N, int NH, int KV, int hs,
                      bool per_head, float w_offset, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("qk_norm_backward");
  RATCHET_REQUIRE(N > 0 && NH > 0 && KV > 0 && hs > 0,
                  "qk_norm_backward: N, NH, KV, hs must be positive");
  RATCHET_REQUIRE(dinp != dout && dinp != inp, "qk_norm_backward: dinp must not alias dout or inp");
  RATCHET_REQUIRE(scratch != nullptr, "qk_norm_backward: scratch must not be null");
  const int S = per_head ? NH + KV : 2;
  const unsigned grid = (unsigned)ceil_div<long>((long)N * (S + 1), kWarpsPerBlock);
  if (packs_fit<T>(hs, {dinp, dout, inp, qw, kw}))
    RATCHET_LAUNCH((qk_norm_backward_kernel<T, true>), grid, 32 * kWarpsPerBlock, 0, stream, dinp,
                   dout, inp, qw, kw, rstd, N, NH, KV, hs, per_head, w_offset);
  else
    RATCHET_LAUNCH((qk_norm_backward_kernel<T, false>), grid, 32 * kWarpsPerBlock, 0, stream,
                   dinp, dout, inp, qw, kw, rstd, N, NH, KV, hs, per_head, w_offset);
  RATCHET_CHECK_LAUNCH();
  // dqw | dkw: partials per block of rows, then the fixed-order column sums.
  const int lq = per_head ? hs : NH * hs, lk = per_head ? hs : KV * hs;
  const int rows = column_sum_rows_per_block(N), blocks = column_sum_blocks(N);
  auto* partial = static_cast<float*>(scratch);
  const dim3 pgrid((unsigned)blocks, (unsigned)ceil_div(lq + lk, 32));
  RATCHET_LAUNCH((qk_norm_weight_partials_kernel<T>), pgrid, 32 * kQkGradWarps, 0, stream, partial,
                 dout, inp, rstd, N, NH, KV, hs, per_head, rows);
  RATCHET_CHECK_LAUNCH();
  column_sums<T>(dqw, dkw, partial, blocks, lq, lq + lk, stream);
}

#define RATCHET_INSTANTIATE(T)                                                                  \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int, int, float,             \
                                   cudaStream_t, float);                                        \
  template void residual_rmsnorm_forward<T>(T*, T*, float*, const T*, const T*, const T*, int,  \
                                            int, float, cudaStream_t, float);                   \
  template void rmsnorm_backward<T>(T*, T*, void*, const T*, const T*, const T*, const float*,  \
                                    int, int, cudaStream_t, float);                             \
  template void qk_norm_forward<T>(T*, float*, const T*, const T*, const T*, int, int, int, int, \
                                   bool, float, float, cudaStream_t);                           \
  template void qk_norm_backward<T>(T*, T*, T*, void*, const T*, const T*, const T*, const T*,  \
                                    const float*, int, int, int, int, bool, float, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

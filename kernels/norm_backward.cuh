// The backward pass shared by LayerNorm and RMSNorm (kernels/layernorm.cu,
// kernels/rmsnorm.cu include it; not a public header). One kernel reads each
// row of dout and inp once (128-bit packs kept in registers), accumulates into
// dinp, and writes one partial row of the weight (and bias) gradients per
// block of rows; column_sums (common.cuh) then adds the partials in a fixed
// order. Math (xhat = (x - mean) * rstd, LayerNorm; x * rstd, RMSNorm;
// g = (w + w_off) * dout, w_off = RMSNorm's w_offset, 0 for LayerNorm):
//   dinp += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))   (RMSNorm: no mean_c(g) term)
//   dw   += sum_n dout * xhat;   db += sum_n dout                (RMSNorm: no db)
//
// Geometry: a "team" of tpr threads (a multiple of 32) covers one row, thread
// t owning packs t, t + tpr, ... (K of them); a block runs `teams` rows at a
// time and walks the rows of its row block (column_sum_rows_per_block(N),
// kernels/scratch_bytes.h) in order. Each thread keeps its columns' dw/db in
// registers; at the end the teams' sums are added in team order through
// shared memory. Every sum has a fixed order: the bits depend on N and C only.
// LayerNorm's backward runs a one-warp-per-row kernel (at the end of this
// file) where the row allows it, with the same bits; this kernel elsewhere.
#pragma once
#include "common.cuh"
#include "scratch_bytes.h"

namespace ratchet::kernels {

constexpr int kNormBwdMaxThreads = 512;

struct NormBwdGeometry {
  int K;        // packs per thread: 1 or 2
  int tpr;      // threads per row (team), a multiple of 32
  int teams;    // rows in flight per block
  int cpad;     // tpr * K * P: the columns a team covers (>= C)
  int rows;     // rows per block
  int blocks;   // blocks of rows (the partial rows in scratch)
  size_t smem;  // teams * cpad floats: the teams' sums, one quantity at a time
};

template <class T>
inline NormBwdGeometry norm_backward_geometry(int N, int C, const char* who) {
  constexpr int P = Packed128<T>::size;
  const int packs = ceil_div(C, P);
  NormBwdGeometry g;
  g.K = packs <= kNormBwdMaxThreads ? 1 : 2;
  // C <= 1024 * P: 8192 columns in BF16, 4096 in FP32 (more would spill registers).
  RATCHET_REQUIRE(packs <= 2 * kNormBwdMaxThreads, who);
  g.tpr = ceil_div(ceil_div(packs, g.K), 32) * 32;
  g.teams = std::max(1, kNormBwdMaxThreads / g.tpr);
  g.cpad = g.tpr * g.K * P;
  g.rows = column_sum_rows_per_block(N);
  g.blocks = column_sum_blocks(N);
  g.smem = (size_t)g.teams * g.cpad * sizeof(float);
  return g;
}

// partial (blocks, kRms ? C : 2C): this block's dw (and db) column sums.
// K = 1 with packs: at most 64 registers, two blocks of up to 512 threads per
// SM. (The element-wise path, for odd C, is not worth a spill.)
template <class T, int K, bool kVec, bool kRms>
__global__ void __launch_bounds__(kNormBwdMaxThreads, K == 1 && kVec ? 2 : 1)
    norm_backward_kernel(T* __restrict__ dinp, float* __restrict__ partial,
                         const T* __restrict__ dout, const T* __restrict__ inp,
                         const T* __restrict__ w, const float* __restrict__ mean,
                         const float* __restrict__ rstd, int N, int C, int rows_per_block,
                         int tpr, float w_off) {
  constexpr int P = Packed128<T>::size;
  __shared__ float red[2][kNormBwdMaxThreads / 32][2];  // per warp: sum g, sum g*xhat
  const int teams = blockDim.x / tpr, team = threadIdx.x / tpr, t = threadIdx.x % tpr;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wpt = tpr / 32;
  const int r0 = blockIdx.x * rows_per_block, r1 = min(N, r0 + rows_per_block);

  float dw[K][P], db[K][P];
  for (int k = 0; k < K; k++)
    for (int i = 0; i < P; i++) dw[k][i] = db[k][i] = 0.0f;
  // Every team runs the same number of iterations: the barrier below is uniform.
  const int iters = ceil_div(r1 - r0, teams);
  for (int it = 0; it < iters; it++) {
    const int row = r0 + it * teams + team;
    const bool active = row < r1;
    const size_t off = (size_t)(active ? row : 0) * C;
    const float m = kRms || !active ? 0.0f : mean[row], s = active ? rstd[row] : 0.0f;
    // w is re-read per row (from L1: C elements shared by the block), which
    // keeps the kernel within 64 registers.
    Packed128<T> dk[K], xk[K];
    float gsum = 0.0f, gxsum = 0.0f;
    for (int k = 0; k < K; k++) {
      const int c0 = (t + k * tpr) * P, n = active ? C - c0 : 0;
      dk[k] = load_pack<kVec, true>(dout + off + c0, n);
      xk[k] = load_pack<kVec, true>(inp + off + c0, n);
      const Packed128<T> wk = load_pack<kVec>(w + c0, n);
      for (int i = 0; i < P; i++) {
        // w_off 0: the expression as it was before the offset existed (same bits).
        const float wv = w_off == 0.0f ? pack_f32(wk, i) : pack_f32(wk, i) + w_off;
        const float g = wv * pack_f32(dk[k], i);
        const float xhat = (pack_f32(xk[k], i) - m) * s;
        gsum += g;
        gxsum += g * xhat;
      }
    }
    // The team's sums: warps in order, through a buffer that alternates per
    // iteration (a thread still reading the last one is not overwritten).
    gsum = warp_sum(gsum);
    gxsum = warp_sum(gxsum);
    const int buf = it & 1;
    if (lane == 0) {
      red[buf][warp][0] = gsum;
      red[buf][warp][1] = gxsum;
    }
    __syncthreads();
    if (!active) continue;
    gsum = gxsum = 0.0f;
    for (int j = 0; j < wpt; j++) {
      gsum += red[buf][team * wpt + j][0];
      gxsum += red[buf][team * wpt + j][1];
    }
    const float gmean = kRms ? 0.0f : gsum / C, gxmean = gxsum / C;
    for (int k = 0; k < K; k++) {
      const int c0 = (t + k * tpr) * P, n = C - c0;
      Packed128<T> d = load_pack<kVec>(dinp + off + c0, n);
      const Packed128<T> wk = load_pack<kVec>(w + c0, n);
      for (int i = 0; i < P; i++) {
        const float dv = pack_f32(dk[k], i);
        const float wv = w_off == 0.0f ? pack_f32(wk, i) : pack_f32(wk, i) + w_off;
        const float g = wv * dv;
        const float xhat = (pack_f32(xk[k], i) - m) * s;
        d[i] = from_f32<T>(to_f32(d[i]) + s * (g - gmean - xhat * gxmean));
        dw[k][i] += dv * xhat;
        db[k][i] += dv;
      }
      store_pack<kVec>(dinp + off + c0, d, n);
    }
  }
  // The block's partial row: the teams' sums added in team order.
  float* sums = dynamic_smem<float>();  // (teams, cpad)
  const int cpad = tpr * K * P, ncols = kRms ? C : 2 * C;
  for (int q = 0; q < (kRms ? 1 : 2); q++) {
    for (int k = 0; k < K; k++)
      for (int i = 0; i < P; i++)
        sums[(size_t)team * cpad + (t + k * tpr) * P + i] = q == 0 ? dw[k][i] : db[k][i];
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
      for (int g = 0; g < teams; g++) acc += sums[(size_t)g * cpad + c];
      partial[(size_t)blockIdx.x * ncols + q * C + c] = acc;
    }
    __syncthreads();
  }
}

// dinp (N,C) +=; dw (C) += and (LayerNorm) db (C) +=, through scratch (blocks, ncols).
template <class T, bool kRms>
inline void norm_backward(T* dinp, T* dw, T* db, void* scratch, const T* dout, const T* inp,
                          const T* w, const float* mean, const float* rstd, int N, int C,
                          cudaStream_t stream, const char* who, float w_offset = 0.0f) {
  RATCHET_REQUIRE(N > 0 && C > 0, who);
  RATCHET_REQUIRE(scratch != nullptr, who);
  // dinp is read and written by the thread that reads dout and inp at the same
  // place, but the kernel declares them __restrict__: no aliasing.
  RATCHET_REQUIRE(dinp != dout && dinp != inp, who);
  const NormBwdGeometry g = norm_backward_geometry<T>(N, C, who);
  const bool vec = packs_fit<T>(C, {dinp, dout, inp, w});
  auto* partial = static_cast<float*>(scratch);
  const unsigned block = (unsigned)(g.teams * g.tpr);
  auto launch = [&](auto kernel, const char* name) {
    ::ratchet::kernels::launch_kernel(name, kernel, (unsigned)g.blocks, block, g.smem, stream,
                                      dinp, partial, dout, inp, w, mean, rstd, N, C, g.rows,
                                      g.tpr, w_offset);
    RATCHET_CHECK_LAUNCH();
  };
#define RATCHET_NORM_BWD(K, V) \
  launch(norm_backward_kernel<T, K, V, kRms>, "norm_backward_kernel<T, " #K ", " #V ">")
  if (vec) {
    if (g.K == 1) RATCHET_NORM_BWD(1, true);
    else RATCHET_NORM_BWD(2, true);
  } else {
    if (g.K == 1) RATCHET_NORM_BWD(1, false);
    else RATCHET_NORM_BWD(2, false);
  }
#undef RATCHET_NORM_BWD
  column_sums<T>(dw, db, partial, g.blocks, C, kRms ? C : 2 * C, stream);
}


// ---- LayerNorm: one warp per row (issue 41) ----------------------------------------------------
// layernorm_backward (kernels/layernorm.cu) runs this kernel where it applies
// (layernorm_backward_warp_applies) and the kernel above elsewhere; RMSNorm
// always runs the above. On the H200 at d12 B=16 T=1024 (BF16, C = 768) it took
// the op from 55.3 to 51.0 us/call in training, and bench_kernels (B=8 T=1024)
// from 2239 to 2546 GB/s, with the same bits (bench/gpu/README.md).
//
// What it changes: above, a team of tpr threads (3 warps at C = 768 in BF16)
// covers a row, so every row costs a block-wide barrier between the row sums
// and dinp, and dinp is loaded only after it: per row two memory latencies
// back to back, with 5 rows in flight per 480-thread block. Here a team is one
// warp: lane l owns the packs l, l + 32, ... (W of them, W = the above's warps
// per team), loads dout, inp AND dinp for all of them before any arithmetic,
// reduces the row with shuffles (no barrier), writes dinp, and walks its rows
// without waiting for the other warps. Up to 3x the bytes in flight per
// thread, no barrier per row.
// Bytes per row: the same as the kernel above, 4*C*s + 8 (dout, inp, dinp
// read, dinp written; mean, rstd; w from L1): dinp is accumulated (+=), so
// reading it is the interface's minimum. Scratch: the same (blocks, 2C).
//
// The arithmetic is the above's, in its order, so the outputs are bit for bit
// those of the kernel above (tests/simt/kernel_cases.h checks both against the
// CPU backend): the same rows per block,
// `teams` warps per block (the above's team count) taking rows r0 + team,
// r0 + team + teams, ... in order; the row sums as the above forms them (each
// pack's P terms from 0, one warp_sum per pack slot, the slots added from 0 in
// order, as the above adds its warps); the same partial row per block.
// Where it does not apply (rows not whole packs, or W above
// kLayernormBwdWarpMaxW: C > 768 in BF16, > 512 in FP32) layernorm_backward
// runs the kernel above.
// Registers (nvcc 13.0 -Xptxas -v, sm_90, at the launch bound's 128): BF16
// W = 3 uses 128 without spilling, W = 4 spills; FP32 W = 4 uses 120, W = 5 spills.
template <class T>
constexpr int kLayernormBwdWarpMaxW = sizeof(T) == 2 ? 3 : 4;

template <class T, int W>
__global__ void __launch_bounds__(kNormBwdMaxThreads)
    layernorm_backward_warp_kernel(T* __restrict__ dinp, float* __restrict__ partial,
                                   const T* __restrict__ dout, const T* __restrict__ inp,
                                   const T* __restrict__ w, const float* __restrict__ mean,
                                   const float* __restrict__ rstd, int N, int C,
                                   int rows_per_block) {
  constexpr int P = Packed128<T>::size;
  const int teams = blockDim.x / 32, team = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = blockIdx.x * rows_per_block, r1 = min(N, r0 + rows_per_block);

  float dw[W][P], db[W][P];
  for (int j = 0; j < W; j++)
    for (int i = 0; i < P; i++) dw[j][i] = db[j][i] = 0.0f;
  for (int row = r0 + team; row < r1; row += teams) {
    const size_t off = (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    // Every load of the row first: dinp does not depend on the row sums.
    Packed128<T> dk[W], xk[W], pk[W];
    for (int j = 0; j < W; j++) {
      const int c0 = (lane + j * 32) * P, n = C - c0;
      dk[j] = load_pack<true, true>(dout + off + c0, n);
      xk[j] = load_pack<true, true>(inp + off + c0, n);
      pk[j] = load_pack<true>(dinp + off + c0, n);
    }
    float gsum = 0.0f, gxsum = 0.0f;
    for (int j = 0; j < W; j++) {
      const int c0 = (lane + j * 32) * P, n = C - c0;
      const Packed128<T> wk = load_pack<true>(w + c0, n);
      float gs = 0.0f, gxs = 0.0f;
      for (int i = 0; i < P; i++) {
        const float g = pack_f32(wk, i) * pack_f32(dk[j], i);
        const float xhat = (pack_f32(xk[j], i) - m) * s;
        gs += g;
        gxs += g * xhat;
      }
      gsum += warp_sum(gs);
      gxsum += warp_sum(gxs);
    }
    const float gmean = gsum / C, gxmean = gxsum / C;
    for (int j = 0; j < W; j++) {
      const int c0 = (lane + j * 32) * P, n = C - c0;
      Packed128<T> d = pk[j];
      const Packed128<T> wk = load_pack<true>(w + c0, n);
      for (int i = 0; i < P; i++) {
        const float dv = pack_f32(dk[j], i);
        const float g = pack_f32(wk, i) * dv;
        const float xhat = (pack_f32(xk[j], i) - m) * s;
        d[i] = from_f32<T>(to_f32(d[i]) + s * (g - gmean - xhat * gxmean));
        dw[j][i] += dv * xhat;
        db[j][i] += dv;
      }
      store_pack<true>(dinp + off + c0, d, n);
    }
  }
  // The block's partial row: the warps' sums added in warp order (the above's
  // teams), through (teams, cpad) floats of shared memory.
  float* sums = dynamic_smem<float>();
  const int cpad = 32 * W * P;
  for (int q = 0; q < 2; q++) {
    for (int j = 0; j < W; j++)
      for (int i = 0; i < P; i++)
        sums[(size_t)team * cpad + (lane + j * 32) * P + i] = q == 0 ? dw[j][i] : db[j][i];
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
      for (int g = 0; g < teams; g++) acc += sums[(size_t)g * cpad + c];
      partial[(size_t)blockIdx.x * 2 * C + q * C + c] = acc;
    }
    __syncthreads();
  }
}

// Whether layernorm_backward runs the warp kernel (else the kernel above).
template <class T>
inline bool layernorm_backward_warp_applies(int N, int C, const void* dinp, const void* dout,
                                            const void* inp, const void* w) {
  if (N <= 0 || C <= 0 || !packs_fit<T>(C, {dinp, dout, inp, w})) return false;
  constexpr int P = Packed128<T>::size;
  if (ceil_div(C, P) > 2 * kNormBwdMaxThreads) return false;  // the above refuses it
  const NormBwdGeometry g = norm_backward_geometry<T>(N, C, "layernorm_backward");
  return g.K == 1 && g.tpr / 32 <= kLayernormBwdWarpMaxW<T>;
}

// dinp (N,C) +=; dw, db (C) += through scratch (blocks, 2C), as norm_backward.
// Only where layernorm_backward_warp_applies (the caller checks).
template <class T>
inline void layernorm_backward_warp(T* dinp, T* dw, T* db, void* scratch, const T* dout,
                                    const T* inp, const T* w, const float* mean,
                                    const float* rstd, int N, int C, cudaStream_t stream) {
  RATCHET_REQUIRE(scratch != nullptr, "layernorm_backward: needs scratch");
  RATCHET_REQUIRE(dinp != dout && dinp != inp, "layernorm_backward: dinp aliases an input");
  const NormBwdGeometry g = norm_backward_geometry<T>(N, C, "layernorm_backward");
  const int W = g.tpr / 32;
  auto* partial = static_cast<float*>(scratch);
  const unsigned block = (unsigned)(g.teams * 32);
  const size_t smem = (size_t)g.teams * g.cpad * sizeof(float);  // the same as the above's
  auto launch = [&](auto kernel, const char* name) {
    ::ratchet::kernels::launch_kernel(name, kernel, (unsigned)g.blocks, block, smem, stream, dinp,
                                      partial, dout, inp, w, mean, rstd, N, C, g.rows);
    RATCHET_CHECK_LAUNCH();
  };
#define RATCHET_LN_BWD_WARP(k)                                                                 \
  case k:                                                                                      \
    launch(layernorm_backward_warp_kernel<T, k>, "layernorm_backward_warp_kernel<T, " #k ">"); \
    break;
  switch (W) {
    RATCHET_LN_BWD_WARP(1)
    RATCHET_LN_BWD_WARP(2)
    RATCHET_LN_BWD_WARP(3)
  }
  if constexpr (kLayernormBwdWarpMaxW<T> >= 4)  // FP32 only: BF16 W = 4 would spill
    if (W == 4) launch(layernorm_backward_warp_kernel<T, 4>, "layernorm_backward_warp_kernel<T, 4>");
#undef RATCHET_LN_BWD_WARP
  column_sums<T>(dw, db, partial, g.blocks, C, 2 * C, stream);
}

}  // namespace ratchet::kernels

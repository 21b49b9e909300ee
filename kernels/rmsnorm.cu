// RMSNorm over the last axis of (N, C), statistics in FP32 (Llama; no mean, no bias).
//   forward:  rstd = 1/sqrt(sum_c x^2 / C + eps);  out = x * rstd * w
//             out (N,C), rstd (N) overwritten
//   fused:    residual = a + b (stored in T), then the forward above on the stored residual
//   backward: xhat = x * rstd,  g = w * dout
//             dinp += rstd * (g - xhat * mean_c(g * xhat))       dinp (N,C) accumulated
//             dw   += sum_n dout * xhat                          dw (C) accumulated
// Forward and dinp: one warp per row (lanes stride the row, butterfly sums).
// dw: column partial sums over fixed chunks of kRowsPerChunk rows into
// scratch (chunks, C), then an in-order sum over chunks: deterministic.
#include "rmsnorm.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kRowsPerChunk = kRmsnormRowsPerChunk;  // scratch_bytes.h
constexpr int kWarpsPerBlock = 4;
}  // namespace

// ==== kernels ====================================================================================

// Normalises row x (C) held in T; writes the out row and rstd[row].
template <class T>
__device__ __forceinline__ void rmsnorm_row(T* out, float* rstd, const T* x, const T* w, int row,
                                            int C, float eps) {
  const int lane = threadIdx.x % 32;
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float v = to_f32(x[c]);
    sq += v * v;
  }
  const float s = rsqrtf(warp_sum(sq) / C + eps);
  for (int c = lane; c < C; c += 32) out[c] = from_f32<T>(to_f32(x[c]) * s * to_f32(w[c]));
  if (lane == 0) rstd[row] = s;
}

template <class T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* w, int N, int C,
                                       float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // whole warp; this kernel has no block barrier
  rmsnorm_row(out + (size_t)row * C, rstd, inp + (size_t)row * C, w, row, C, eps);
}

template <class T>
__global__ void residual_rmsnorm_forward_kernel(T* residual, T* out, float* rstd, const T* a,
                                                const T* b, const T* w, int N, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const size_t off = (size_t)row * C;
  residual_add_row(residual + off, a + off, b + off, C);
  rmsnorm_row(out + off, rstd, residual + off, w, row, C, eps);
}

// dinp += ..., one warp per row.
template <class T>
__global__ void rmsnorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w,
                                             const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const int lane = threadIdx.x % 32;
  const size_t off = (size_t)row * C;
  const float s = rstd[row];
  float gxsum = 0.0f;
  for (int c = lane; c < C; c += 32)
    gxsum += to_f32(w[c]) * to_f32(dout[off + c]) * (to_f32(inp[off + c]) * s);
  const float gxmean = warp_sum(gxsum) / C;
  for (int c = lane; c < C; c += 32) {
    float g = to_f32(w[c]) * to_f32(dout[off + c]);
    float xhat = to_f32(inp[off + c]) * s;
    dinp[off + c] = from_f32<T>(to_f32(dinp[off + c]) + s * (g - xhat * gxmean));
  }
}

// grid (ceil(C / blockDim.x), chunks): partial dw of one chunk of rows into partial (chunks, C).
template <class T>
__global__ void rmsnorm_backward_partial_kernel(float* partial, const T* dout, const T* inp,
                                                const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int chunk = blockIdx.y;
  const int r0 = chunk * kRowsPerChunk, r1 = min(N, r0 + kRowsPerChunk);
  float dw = 0.0f;
  for (int r = r0; r < r1; r++)
    dw += to_f32(dout[(size_t)r * C + c]) * to_f32(inp[(size_t)r * C + c]) * rstd[r];
  partial[(size_t)chunk * C + c] = dw;
}

// dw (C) += sum over chunks of partial, in chunk order.
template <class T>
__global__ void rmsnorm_backward_final_kernel(T* dw, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const float sw = sum_chunks(partial, chunks, C, c);
  dw[c] = from_f32<T>(to_f32(dw[c]) + sw);
}

// ==== launchers ==================================================================================

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, int N, int C, float eps,
                     cudaStream_t stream) {
  RATCHET_NVTX_RANGE("rmsnorm_forward");
  RATCHET_REQUIRE(N > 0 && C > 0, "rmsnorm_forward: N, C must be positive");
  RATCHET_LAUNCH((rmsnorm_forward_kernel<T>), (unsigned)ceil_div(N, kWarpsPerBlock),
                 32 * kWarpsPerBlock, 0, stream, out, rstd, inp, w, N, C, eps);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void residual_rmsnorm_forward(T* residual, T* out, float* rstd, const T* a, const T* b,
                              const T* w, int N, int C, float eps, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("residual_rmsnorm_forward");
  RATCHET_REQUIRE(N > 0 && C > 0, "residual_rmsnorm_forward: N, C must be positive");
  RATCHET_REQUIRE(out != residual, "residual_rmsnorm_forward: out must not alias residual");
  RATCHET_LAUNCH((residual_rmsnorm_forward_kernel<T>), (unsigned)ceil_div(N, kWarpsPerBlock),
                 32 * kWarpsPerBlock, 0, stream, residual, out, rstd, a, b, w, N, C, eps);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void rmsnorm_backward(T* dinp, T* dw, void* scratch, const T* dout, const T* inp, const T* w,
                      const float* rstd, int N, int C, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("rmsnorm_backward");
  RATCHET_REQUIRE(N > 0 && C > 0, "rmsnorm_backward: N, C must be positive");
  RATCHET_REQUIRE(scratch != nullptr, "rmsnorm_backward: needs rmsnorm_backward_scratch_bytes");
  RATCHET_LAUNCH((rmsnorm_backward_dinp_kernel<T>), (unsigned)ceil_div(N, kWarpsPerBlock),
                 32 * kWarpsPerBlock, 0, stream, dinp, dout, inp, w, rstd, N, C);
  RATCHET_CHECK_LAUNCH();
  const ColumnChunks g = column_chunks(N, C, kRowsPerChunk);
  RATCHET_REQUIRE(g.chunks <= 65535, "rmsnorm_backward: N too large for one grid column");
  auto* partial = static_cast<float*>(scratch);
  RATCHET_LAUNCH((rmsnorm_backward_partial_kernel<T>), g.partial_grid, g.block, 0, stream, partial,
                 dout, inp, rstd, N, C);
  RATCHET_CHECK_LAUNCH();
  RATCHET_LAUNCH((rmsnorm_backward_final_kernel<T>), g.final_grid, g.block, 0, stream, dw, partial,
                 g.chunks, C);
  RATCHET_CHECK_LAUNCH();
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

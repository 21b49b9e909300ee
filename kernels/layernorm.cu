// LayerNorm over the last axis of (N, C), eps = 1e-5, statistics in FP32.
//   forward:  mean = sum_c x / C;  var = sum_c (x - mean)^2 / C;  rstd = 1/sqrt(var + eps)
//             out = (x - mean) * rstd * w + b          out (N,C), mean (N), rstd (N) overwritten
//   fused:    residual = a + b (stored in T), then the forward above on the stored residual
//   backward: xhat = (x - mean) * rstd,  g = w * dout
//             dinp += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))     dinp (N,C) accumulated
//             dw += sum_n dout * xhat,  db += sum_n dout                  dw, db (C) accumulated
// Forward and dinp: one warp per row (lanes stride the row, butterfly sums).
// dw/db: column partial sums over fixed chunks of kRowsPerChunk rows into
// scratch (2, chunks, C), then an in-order sum over chunks: deterministic.
#include "layernorm.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kRowsPerChunk = kLayernormRowsPerChunk;  // scratch_bytes.h
constexpr int kWarpsPerBlock = 4;
}  // namespace

// ==== kernels ====================================================================================

// Normalises row x (C) held in T; writes out row and the statistics.
template <class T>
__device__ __forceinline__ void layernorm_row(T* out, float* mean, float* rstd, const T* x,
                                              const T* w, const T* b, int row, int C) {
  const int lane = threadIdx.x % 32;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += to_f32(x[c]);
  const float m = warp_sum(sum) / C;
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = to_f32(x[c]) - m;
    sq += d * d;
  }
  const float s = rsqrtf(warp_sum(sq) / C + 1e-5f);
  for (int c = lane; c < C; c += 32)
    out[c] = from_f32<T>((to_f32(x[c]) - m) * s * to_f32(w[c]) + to_f32(b[c]));
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

template <class T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const T* w, const T* b, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // whole warp; this kernel has no block barrier
  layernorm_row(out + (size_t)row * C, mean, rstd, inp + (size_t)row * C, w, b, row, C);
}

template <class T>
__global__ void residual_layernorm_forward_kernel(T* residual, T* out, float* mean, float* rstd,
                                                  const T* a, const T* b, const T* w,
                                                  const T* bias, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const size_t off = (size_t)row * C;
  residual_add_row(residual + off, a + off, b + off, C);
  layernorm_row(out + off, mean, rstd, residual + off, w, bias, row, C);
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

// dinp += ..., one warp per row.
template <class T>
__global__ void layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w,
                                               const float* mean, const float* rstd, int N,
                                               int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const int lane = threadIdx.x % 32;
  const size_t off = (size_t)row * C;
  const float m = mean[row], s = rstd[row];
  float gsum = 0.0f, gxsum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float g = to_f32(w[c]) * to_f32(dout[off + c]);
    float xhat = (to_f32(inp[off + c]) - m) * s;
    gsum += g;
    gxsum += g * xhat;
  }
  const float gmean = warp_sum(gsum) / C;
  const float gxmean = warp_sum(gxsum) / C;
  for (int c = lane; c < C; c += 32) {
    float g = to_f32(w[c]) * to_f32(dout[off + c]);
    float xhat = (to_f32(inp[off + c]) - m) * s;
    float d = s * (g - gmean - xhat * gxmean);
    dinp[off + c] = from_f32<T>(to_f32(dinp[off + c]) + d);
  }
}

// grid (ceil(C / blockDim.x), chunks): partial dw, db of one chunk of rows.
// partial (2, chunks, C): [0] dw, [1] db.
template <class T>
__global__ void layernorm_backward_partial_kernel(float* partial, const T* dout, const T* inp,
                                                  const float* mean, const float* rstd, int N,
                                                  int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int r0 = chunk * kRowsPerChunk, r1 = min(N, r0 + kRowsPerChunk);
  float dw = 0.0f, db = 0.0f;
  for (int r = r0; r < r1; r++) {
    float d = to_f32(dout[(size_t)r * C + c]);
    dw += d * (to_f32(inp[(size_t)r * C + c]) - mean[r]) * rstd[r];
    db += d;
  }
  partial[(size_t)chunk * C + c] = dw;
  partial[((size_t)chunks + chunk) * C + c] = db;
}

// dw, db (C) += sum over chunks of partial, in chunk order.
template <class T>
__global__ void layernorm_backward_final_kernel(T* dw, T* db, const float* partial, int chunks,
                                                int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  // Both sums in one loop (two independent chains), not two sum_chunks passes.
  float sw = 0.0f, sb = 0.0f;
  for (int k = 0; k < chunks; k++) {
    sw += partial[(size_t)k * C + c];
    sb += partial[((size_t)chunks + k) * C + c];
  }
  dw[c] = from_f32<T>(to_f32(dw[c]) + sw);
  db[c] = from_f32<T>(to_f32(db[c]) + sb);
}

// ==== launchers ==================================================================================

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b,
                       int N, int C, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("layernorm_forward");
  RATCHET_REQUIRE(N > 0 && C > 0, "layernorm_forward: N, C must be positive");
  unsigned grid = (unsigned)ceil_div(N, kWarpsPerBlock);
  RATCHET_LAUNCH((layernorm_forward_kernel<T>), grid, 32 * kWarpsPerBlock, 0, stream, out, mean,
                 rstd, inp, w, b, N, C);
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
  RATCHET_LAUNCH((residual_layernorm_forward_kernel<T>), grid, 32 * kWarpsPerBlock, 0, stream,
                 residual, out, mean, rstd, a, b, w, bias, N, C);
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
  RATCHET_REQUIRE(N > 0 && C > 0, "layernorm_backward: N, C must be positive");
  RATCHET_REQUIRE(scratch != nullptr, "layernorm_backward: needs layernorm_backward_scratch_bytes");
  RATCHET_LAUNCH((layernorm_backward_dinp_kernel<T>), (unsigned)ceil_div(N, kWarpsPerBlock),
                 32 * kWarpsPerBlock, 0, stream, dinp, dout, inp, w, mean, rstd, N, C);
  RATCHET_CHECK_LAUNCH();
  const ColumnChunks g = column_chunks(N, C, kRowsPerChunk);
  RATCHET_REQUIRE(g.chunks <= 65535, "layernorm_backward: N too large for one grid column");
  auto* partial = static_cast<float*>(scratch);
  RATCHET_LAUNCH((layernorm_backward_partial_kernel<T>), g.partial_grid, g.block, 0, stream,
                 partial, dout, inp, mean, rstd, N, C);
  RATCHET_CHECK_LAUNCH();
  RATCHET_LAUNCH((layernorm_backward_final_kernel<T>), g.final_grid, g.block, 0, stream, dw, db,
                 partial, g.chunks, C);
  RATCHET_CHECK_LAUNCH();
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

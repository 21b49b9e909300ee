// SwiGLU, element-wise in FP32 on T storage:
//   inp (N,2H) rows g (gate, columns [0,H)) | u (up, columns [H,2H)); sig = 1/(1 + e^-g)
//   forward   out (N,H) = silu(g) u = g sig u                             out overwritten
//   backward  dg = dout u sig (1 + g (1 - sig)),  du = dout g sig        dinp (N,2H) overwritten
// One thread per (n, i < H): it reads g, u (and dout) and writes its own
// outputs only; nothing accumulates (deterministic).
#include "swiglu.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

template <class T>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int H, size_t n) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const size_t row = idx / H, i = idx % H;
  const float g = to_f32(inp[row * 2 * H + i]), u = to_f32(inp[row * 2 * H + H + i]);
  out[idx] = from_f32<T>(g * sigmoid_f(g) * u);
}

template <class T>
__global__ void swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int H, size_t n) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const size_t row = idx / H, i = idx % H;
  const size_t gi = row * 2 * H + i, ui = gi + H;
  const float g = to_f32(inp[gi]), u = to_f32(inp[ui]), d = to_f32(dout[idx]);
  const float s = sigmoid_f(g);
  dinp[gi] = from_f32<T>(d * u * s * (1.0f + g * (1.0f - s)));
  dinp[ui] = from_f32<T>(d * g * s);
}

// ==== launchers ==================================================================================

template <class T>
void swiglu_forward(T* out, const T* inp, int N, int H, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("swiglu_forward");
  RATCHET_REQUIRE(N > 0 && H > 0, "swiglu_forward: N, H must be positive");
  const size_t n = (size_t)N * H;
  const int block = 256;
  RATCHET_LAUNCH((swiglu_forward_kernel<T>), (unsigned)ceil_div<size_t>(n, block), block, 0,
                 stream, out, inp, H, n);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int H, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("swiglu_backward");
  RATCHET_REQUIRE(N > 0 && H > 0, "swiglu_backward: N, H must be positive");
  const size_t n = (size_t)N * H;
  const int block = 256;
  RATCHET_LAUNCH((swiglu_backward_kernel<T>), (unsigned)ceil_div<size_t>(n, block), block, 0,
                 stream, dinp, inp, dout, H, n);
  RATCHET_CHECK_LAUNCH();
}

#define RATCHET_INSTANTIATE(T)                                                                 \
  template void swiglu_forward<T>(T*, const T*, int, int, cudaStream_t);                       \
  template void swiglu_backward<T>(T*, const T*, const T*, int, int, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

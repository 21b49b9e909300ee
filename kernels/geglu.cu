// GeGLU, element-wise in FP32 on T storage (Gemma's gelu_pytorch_tanh gate):
//   inp (N,2H) rows g (gate, columns [0,H)) | u (up, columns [H,2H))
//   forward   out (N,H) = gelu(g) u                                     out overwritten
//   backward  dg = dout u gelu'(g),  du = dout gelu(g)                 dinp (N,2H) overwritten
// gelu, gelu': the tanh approximation of kernels/gelu_math.cuh (gelu_forward's).
// One thread per (n, i < H): it reads g, u (and dout) and writes its own
// outputs only; nothing accumulates (deterministic). kernels/swiglu.cu's layout.
#include "geglu.cuh"
#include "gelu_math.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

template <class T>
__global__ void geglu_forward_kernel(T* out, const T* inp, int H, size_t n) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const size_t row = idx / H, i = idx % H;
  const float g = to_f32(inp[row * 2 * H + i]), u = to_f32(inp[row * 2 * H + H + i]);
  out[idx] = from_f32<T>(gelu_f(g) * u);
}

template <class T>
__global__ void geglu_backward_kernel(T* dinp, const T* inp, const T* dout, int H, size_t n) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const size_t row = idx / H, i = idx % H;
  const size_t gi = row * 2 * H + i, ui = gi + H;
  const float g = to_f32(inp[gi]), u = to_f32(inp[ui]), d = to_f32(dout[idx]);
  dinp[gi] = from_f32<T>(d * u * gelu_grad_f(g));
  dinp[ui] = from_f32<T>(d * gelu_f(g));
}

// ==== launchers ==================================================================================

template <class T>
void geglu_forward(T* out, const T* inp, int N, int H, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("geglu_forward");
  RATCHET_REQUIRE(N > 0 && H > 0, "geglu_forward: N, H must be positive");
  const size_t n = (size_t)N * H;
  const int block = 256;
  RATCHET_LAUNCH((geglu_forward_kernel<T>), (unsigned)ceil_div<size_t>(n, block), block, 0,
                 stream, out, inp, H, n);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void geglu_backward(T* dinp, const T* inp, const T* dout, int N, int H, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("geglu_backward");
  RATCHET_REQUIRE(N > 0 && H > 0, "geglu_backward: N, H must be positive");
  const size_t n = (size_t)N * H;
  const int block = 256;
  RATCHET_LAUNCH((geglu_backward_kernel<T>), (unsigned)ceil_div<size_t>(n, block), block, 0,
                 stream, dinp, inp, dout, H, n);
  RATCHET_CHECK_LAUNCH();
}

#define RATCHET_INSTANTIATE(T)                                                                 \
  template void geglu_forward<T>(T*, const T*, int, int, cudaStream_t);                        \
  template void geglu_backward<T>(T*, const T*, const T*, int, int, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

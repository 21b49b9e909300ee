// Element-wise in place, FP32 math on T storage:
//   scale:    x = x * s
//   softcap:  x = c * tanh(x * (1/c))      (the cpu backend's expression)
//   clip:     out = min(max(in, -c), c); its backward zeroes dx where x < -c
//             or x > c (torch.clamp's gradient; the cpu backend's test)
// The soft-cap's gradient never runs here: the classifier applies 1 - (y/c)^2
// to its gradient (kernels/classifier.cu). Each element is read and written by
// the same thread (grid-stride), nothing accumulates.
#include "softcap.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

template <class T>
__global__ void scale_kernel(T* x, size_t n, float s) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = from_f32<T>(to_f32(x[i]) * s);
}

template <class T>
__global__ void softcap_forward_kernel(T* x, size_t n, float c, float inv_c) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = from_f32<T>(c * tanhf(to_f32(x[i]) * inv_c));
}

template <class T>
__global__ void clip_forward_kernel(T* out, const T* in, size_t n, float c) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_f32<T>(fminf(fmaxf(to_f32(in[i]), -c), c));
}

template <class T>
__global__ void clip_backward_kernel(T* dx, const T* x, size_t n, float c) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = to_f32(x[i]);
    if (v < -c || v > c) dx[i] = from_f32<T>(0.0f);
  }
}

// ==== launchers ==================================================================================

namespace {
constexpr int kBlock = 256;
unsigned grid_for(size_t n) {
  return (unsigned)std::min<size_t>(ceil_div<size_t>(n, kBlock), 65536);
}
}  // namespace

template <class T>
void scale(T* x, size_t n, float s, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("scale");
  if (n == 0) return;
  RATCHET_LAUNCH((scale_kernel<T>), grid_for(n), kBlock, 0, stream, x, n, s);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void softcap_forward(T* x, size_t n, float c, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("softcap_forward");
  RATCHET_REQUIRE(c > 0.0f, "softcap_forward: the cap c must be positive");
  if (n == 0) return;
  RATCHET_LAUNCH((softcap_forward_kernel<T>), grid_for(n), kBlock, 0, stream, x, n, c, 1.0f / c);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void clip_forward(T* out, const T* in, size_t n, float c, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("clip_forward");
  RATCHET_REQUIRE(c > 0.0f, "clip_forward: the bound c must be positive");
  if (n == 0) return;
  RATCHET_LAUNCH((clip_forward_kernel<T>), grid_for(n), kBlock, 0, stream, out, in, n, c);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void clip_backward(T* dx, const T* x, size_t n, float c, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("clip_backward");
  RATCHET_REQUIRE(c > 0.0f, "clip_backward: the bound c must be positive");
  if (n == 0) return;
  RATCHET_LAUNCH((clip_backward_kernel<T>), grid_for(n), kBlock, 0, stream, dx, x, n, c);
  RATCHET_CHECK_LAUNCH();
}

#define RATCHET_INSTANTIATE(T)                                                  \
  template void scale<T>(T*, size_t, float, cudaStream_t);                     \
  template void softcap_forward<T>(T*, size_t, float, cudaStream_t);           \
  template void clip_forward<T>(T*, const T*, size_t, float, cudaStream_t);    \
  template void clip_backward<T>(T*, const T*, size_t, float, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

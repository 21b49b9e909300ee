// GELU, tanh approximation (GPT-2), element-wise in FP32:
//   u = sqrt(2/pi) * (x + 0.044715 x^3)
//   gelu(x)  = 0.5 x (1 + tanh u)                                 out overwritten
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//   dinp = gelu'(x) * dout                                        dinp overwritten
// Each element is read and written by the same thread, so out may alias inp and
// dinp may alias dout. When n is a multiple of the 16-byte pack and the
// pointers are 16-byte aligned, each thread moves whole packs (128-bit access).
#include "gelu.cuh"
#include "gelu_math.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

// gelu_f, gelu_grad_f: kernels/gelu_math.cuh (shared with GeGLU).

// Packed variants: n_packs packs of Packed128<T>::size elements.
template <class T>
__global__ void gelu_forward_packed_kernel(T* out, const T* inp, size_t n_packs) {
  constexpr int P = Packed128<T>::size;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_packs; i += stride) {
    Packed128<T> x = load128(inp + i * P), y;
    for (int k = 0; k < P; k++) y[k] = from_f32<T>(gelu_f(to_f32(x[k])));
    store128(out + i * P, y);
  }
}
template <class T>
__global__ void gelu_backward_packed_kernel(T* dinp, const T* inp, const T* dout, size_t n_packs) {
  constexpr int P = Packed128<T>::size;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_packs; i += stride) {
    Packed128<T> x = load128(inp + i * P), d = load128(dout + i * P), g;
    for (int k = 0; k < P; k++) g[k] = from_f32<T>(gelu_grad_f(to_f32(x[k])) * to_f32(d[k]));
    store128(dinp + i * P, g);
  }
}

template <class T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = from_f32<T>(gelu_f(to_f32(inp[i])));
  }
}

template <class T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    dinp[i] = from_f32<T>(gelu_grad_f(to_f32(inp[i])) * to_f32(dout[i]));
  }
}

// ==== launchers ==================================================================================

template <class T>
void gelu_forward(T* out, const T* inp, size_t n, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("gelu_forward");
  if (n == 0) return;
  const int block = 256;
  constexpr int P = Packed128<T>::size;
  if (n % P == 0 && aligned16(out) && aligned16(inp)) {
    unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(n / P, block), 65536);
    RATCHET_LAUNCH((gelu_forward_packed_kernel<T>), grid, block, 0, stream, out, inp, n / P);
  } else {
    unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(n, block), 65536);
    RATCHET_LAUNCH((gelu_forward_kernel<T>), grid, block, 0, stream, out, inp, n);
  }
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("gelu_backward");
  if (n == 0) return;
  const int block = 256;
  constexpr int P = Packed128<T>::size;
  if (n % P == 0 && aligned16(dinp) && aligned16(inp) && aligned16(dout)) {
    unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(n / P, block), 65536);
    RATCHET_LAUNCH((gelu_backward_packed_kernel<T>), grid, block, 0, stream, dinp, inp, dout,
                   n / P);
  } else {
    unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(n, block), 65536);
    RATCHET_LAUNCH((gelu_backward_kernel<T>), grid, block, 0, stream, dinp, inp, dout, n);
  }
  RATCHET_CHECK_LAUNCH();
}

template void gelu_forward<float>(float*, const float*, size_t, cudaStream_t);
template void gelu_forward<bf16>(bf16*, const bf16*, size_t, cudaStream_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t, cudaStream_t);
template void gelu_backward<bf16>(bf16*, const bf16*, const bf16*, size_t, cudaStream_t);

}  // namespace ratchet::kernels

// SwiGLU, element-wise in FP32 on T storage:
//   inp (N,2H) rows g (gate, columns [0,H)) | u (up, columns [H,2H)); sig = 1/(1 + e^-g)
//   forward   out (N,H) = silu(g) u = g sig u                             out overwritten
//   backward  dg = dout u sig (1 + g (1 - sig)),  du = dout g sig        dinp (N,2H) overwritten
// One thread per pack of columns of a row (below): it reads g, u (and dout)
// and writes its own outputs only; nothing accumulates (deterministic).
#include "swiglu.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

// One thread per pack of P = 16/sizeof(T) consecutive columns of a row:
// with kVec (H a multiple of P, every pointer 16-byte aligned: packs_fit) one
// 128-bit access per operand, else element by element up to the row's end.
// The per-element arithmetic is the same either way, so are the bits. The
// kernel until 2026-11 took one element per thread with 2-byte loads in BF16:
// 1,479 GB/s (forward) on an H200 (bench/gpu/results/2026-11-30-h200).
template <bool kVec, class T>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int H, int packs_per_row,
                                      size_t packs) {
  constexpr int P = Packed128<T>::size;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= packs) return;
  const size_t row = idx / packs_per_row;
  const int c0 = (int)(idx % packs_per_row) * P, n = H - c0;
  const T* g = inp + row * 2 * H + c0;
  const Packed128<T> gp = load_pack<kVec, true>(g, n), up = load_pack<kVec, true>(g + H, n);
  Packed128<T> o;
  for (int k = 0; k < P; k++) {
    const float gv = pack_f32(gp, k);
    o[k] = from_f32<T>(gv * sigmoid_f(gv) * pack_f32(up, k));
  }
  store_pack<kVec>(out + row * H + c0, o, n);
}

template <bool kVec, class T>
__global__ void swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int H,
                                       int packs_per_row, size_t packs) {
  constexpr int P = Packed128<T>::size;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= packs) return;
  const size_t row = idx / packs_per_row;
  const int c0 = (int)(idx % packs_per_row) * P, n = H - c0;
  const size_t gi = row * 2 * H + c0;
  const Packed128<T> gp = load_pack<kVec, true>(inp + gi, n),
                     up = load_pack<kVec, true>(inp + gi + H, n),
                     dp = load_pack<kVec, true>(dout + row * H + c0, n);
  Packed128<T> dg, du;
  for (int k = 0; k < P; k++) {
    const float g = pack_f32(gp, k), u = pack_f32(up, k), d = pack_f32(dp, k);
    const float s = sigmoid_f(g);
    dg[k] = from_f32<T>(d * u * s * (1.0f + g * (1.0f - s)));
    du[k] = from_f32<T>(d * g * s);
  }
  store_pack<kVec>(dinp + gi, dg, n);
  store_pack<kVec>(dinp + gi + H, du, n);
}

// ==== launchers ==================================================================================

template <class T>
void swiglu_forward(T* out, const T* inp, int N, int H, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("swiglu_forward");
  RATCHET_REQUIRE(N > 0 && H > 0, "swiglu_forward: N, H must be positive");
  const int ppr = ceil_div(H, Packed128<T>::size);
  const size_t packs = (size_t)N * ppr;
  const int block = 256;
  const unsigned grid = (unsigned)ceil_div<size_t>(packs, block);
  if (packs_fit<T>(H, {out, inp}))
    RATCHET_LAUNCH((swiglu_forward_kernel<true, T>), grid, block, 0, stream, out, inp, H, ppr,
                   packs);
  else
    RATCHET_LAUNCH((swiglu_forward_kernel<false, T>), grid, block, 0, stream, out, inp, H, ppr,
                   packs);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int H, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("swiglu_backward");
  RATCHET_REQUIRE(N > 0 && H > 0, "swiglu_backward: N, H must be positive");
  const int ppr = ceil_div(H, Packed128<T>::size);
  const size_t packs = (size_t)N * ppr;
  const int block = 256;
  const unsigned grid = (unsigned)ceil_div<size_t>(packs, block);
  if (packs_fit<T>(H, {dinp, inp, dout}))
    RATCHET_LAUNCH((swiglu_backward_kernel<true, T>), grid, block, 0, stream, dinp, inp, dout,
                   H, ppr, packs);
  else
    RATCHET_LAUNCH((swiglu_backward_kernel<false, T>), grid, block, 0, stream, dinp, inp, dout,
                   H, ppr, packs);
  RATCHET_CHECK_LAUNCH();
}

#define RATCHET_INSTANTIATE(T)                                                                 \
  template void swiglu_forward<T>(T*, const T*, int, int, cudaStream_t);                       \
  template void swiglu_backward<T>(T*, const T*, const T*, int, int, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

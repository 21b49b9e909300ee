// RoPE, Hugging Face transformers' convention (rotate_half over the two halves
// of each head), in FP32 on T storage:
//   x at position t, half = hs/2, i < half, c = cos(t f_i), s = sin(t f_i):
//   forward   x'[i] = x[i] c - x[i+half] s ;  x'[i+half] = x[i+half] c + x[i] s
//   backward  dx[i] = dx'[i] c + dx'[i+half] s ;  dx[i+half] = dx'[i+half] c - dx'[i] s
//             (the transpose of the rotation: the same kernel with s negated)
// Shapes: qkv (B,T,W), W = (NH+2KV)*hs, rotated in place on its first
// (NH+KV)*hs columns (q heads then k heads); cos_sin FP32 (2, maxT, half),
// built by the model (theta, llama3 scaling) so the kernel holds no frequency math.
// One thread per pack of rotated pairs (row, head, i..i+P): it reads and
// writes its own elements only, so in place is safe and nothing accumulates
// (deterministic).
#include "rope.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

// pairs = B*T*(NH+KV)*half; sign +1 forward, -1 backward. One thread per pack
// of P = 16/sizeof(T) consecutive i of one (row, head): with kVec (half a
// multiple of P, so every head's halves and every row start on a 16-byte
// boundary, and the table's rows on one too) one 128-bit access for each
// half and 16-byte loads of cos and sin; else element by element up to half.
// The per-element arithmetic is the same either way, so are the bits. The
// kernel until 2026-11 took one pair per thread with 2-byte loads in BF16:
// 1,380 GB/s on an H200 (bench/gpu/results/2026-11-30-h200).
template <bool kVec, class T>
__global__ void rope_kernel(T* qkv, const float* cos_sin, int Tn, int heads, int W, int half,
                            int maxT, float sign, int packs_per_head, size_t packs) {
  constexpr int P = Packed128<T>::size;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= packs) return;
  const int i0 = (int)(idx % packs_per_head) * P, n = half - i0;
  const size_t rh = idx / packs_per_head;  // (row, head)
  const int h = (int)(rh % heads);
  const size_t row = rh / heads;
  const int t = (int)(row % Tn);
  const float* cr = cos_sin + (size_t)t * half + i0;
  const float* sr = cos_sin + ((size_t)maxT + t) * half + i0;
  float c[P], sn[P];
  for (int k0 = 0; k0 < P; k0 += Packed128<float>::size) {  // FP32 packs of 4
    const Packed128<float> cp = load_pack<kVec>(cr + k0, n - k0), sp = load_pack<kVec>(sr + k0, n - k0);
    for (int k = 0; k < Packed128<float>::size; k++) {
      c[k0 + k] = cp[k];
      sn[k0 + k] = sign * sp[k];
    }
  }
  T* x = qkv + row * W + (size_t)h * 2 * half + i0;
  const Packed128<T> a = load_pack<kVec>(x, n), b = load_pack<kVec>(x + half, n);
  Packed128<T> oa, ob;
  for (int k = 0; k < P; k++) {
    const float x1 = pack_f32(a, k), x2 = pack_f32(b, k);
    oa[k] = from_f32<T>(x1 * c[k] - x2 * sn[k]);
    ob[k] = from_f32<T>(x2 * c[k] + x1 * sn[k]);
  }
  store_pack<kVec>(x, oa, n);
  store_pack<kVec>(x + half, ob, n);
}

// ==== launchers ==================================================================================

namespace {
template <class T>
void rope_launch(T* qkv, const float* cos_sin, int B, int Tn, int NH, int KV, int hs, int maxT,
                 float sign, cudaStream_t stream) {
  RATCHET_REQUIRE(B > 0 && Tn > 0 && NH > 0 && KV > 0 && hs > 0,
                  "rope: B, T, NH, KV, hs must be positive");
  RATCHET_REQUIRE(hs % 2 == 0, "rope: the head size must be even");
  RATCHET_REQUIRE(Tn <= maxT, "rope: T exceeds the cos/sin table's maxT");
  const int half = hs / 2, heads = NH + KV, W = (NH + 2 * KV) * hs;
  const int pph = ceil_div(half, Packed128<T>::size);
  const size_t packs = (size_t)B * Tn * heads * pph;
  const int block = 256;
  const unsigned grid = (unsigned)ceil_div<size_t>(packs, block);
  // half % P == 0 makes hs and W multiples of P too (every head and row
  // aligned), and half a multiple of 4 (the FP32 table's rows aligned).
  if (packs_fit<T>(half, {qkv, cos_sin}))
    RATCHET_LAUNCH((rope_kernel<true, T>), grid, block, 0, stream, qkv, cos_sin, Tn, heads, W,
                   half, maxT, sign, pph, packs);
  else
    RATCHET_LAUNCH((rope_kernel<false, T>), grid, block, 0, stream, qkv, cos_sin, Tn, heads, W,
                   half, maxT, sign, pph, packs);
  RATCHET_CHECK_LAUNCH();
}
}  // namespace

template <class T>
void rope_forward(T* qkv, const float* cos_sin, int B, int Tn, int NH, int KV, int hs, int maxT,
                  cudaStream_t stream) {
  RATCHET_NVTX_RANGE("rope_forward");
  rope_launch(qkv, cos_sin, B, Tn, NH, KV, hs, maxT, 1.0f, stream);
}

template <class T>
void rope_backward(T* dqkv, const float* cos_sin, int B, int Tn, int NH, int KV, int hs,
                   int maxT, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("rope_backward");
  rope_launch(dqkv, cos_sin, B, Tn, NH, KV, hs, maxT, -1.0f, stream);
}

#define RATCHET_INSTANTIATE(T)                                                                  \
  template void rope_forward<T>(T*, const float*, int, int, int, int, int, int, cudaStream_t);  \
  template void rope_backward<T>(T*, const float*, int, int, int, int, int, int, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

// RoPE, Hugging Face transformers' convention (rotate_half over the two halves
// of each head), in FP32 on T storage:
//   x at position t, half = hs/2, i < half, c = cos(t f_i), s = sin(t f_i):
//   forward   x'[i] = x[i] c - x[i+half] s ;  x'[i+half] = x[i+half] c + x[i] s
//   backward  dx[i] = dx'[i] c + dx'[i+half] s ;  dx[i+half] = dx'[i+half] c - dx'[i] s
//             (the transpose of the rotation: the same kernel with s negated)
// Shapes: qkv (B,T,W), W = (NH+2KV)*hs, rotated in place on its first
// (NH+KV)*hs columns (q heads then k heads); cos_sin FP32 (2, maxT, half),
// built by the model (theta, llama3 scaling) so the kernel holds no frequency math.
// One thread per rotated pair (row, head, i): it reads and writes its two
// elements only, so in place is safe and nothing accumulates (deterministic).
#include "rope.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

// pairs = B*T*(NH+KV)*half; sign +1 forward, -1 backward.
template <class T>
__global__ void rope_kernel(T* qkv, const float* cos_sin, int Tn, int heads, int W, int half,
                            int maxT, float sign, size_t pairs) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= pairs) return;
  const int i = (int)(idx % half);
  const size_t rh = idx / half;  // (row, head)
  const int h = (int)(rh % heads);
  const size_t row = rh / heads;
  const int t = (int)(row % Tn);
  const float c = cos_sin[(size_t)t * half + i];
  const float s = sign * cos_sin[((size_t)maxT + t) * half + i];
  T* x = qkv + row * W + (size_t)h * 2 * half;
  const float x1 = to_f32(x[i]), x2 = to_f32(x[i + half]);
  x[i] = from_f32<T>(x1 * c - x2 * s);
  x[i + half] = from_f32<T>(x2 * c + x1 * s);
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
  const size_t pairs = (size_t)B * Tn * heads * half;
  const int block = 256;
  RATCHET_LAUNCH((rope_kernel<T>), (unsigned)ceil_div<size_t>(pairs, block), block, 0, stream,
                 qkv, cos_sin, Tn, heads, W, half, maxT, sign, pairs);
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

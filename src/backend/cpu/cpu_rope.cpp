// Rotary position embedding (RoPE), in place on the q and k heads of qkv, in
// Hugging Face transformers' convention (rotate_half: the pairs are (i, i+hs/2)).
//
// qkv (B,T,W), W = (NH+2KV)*hs: the first NH+KV heads of each row (q heads,
// then k heads) are rotated, the KV v heads are left alone. For a head x at
// position t, half = hs/2, i < half, c = cos_sin[t*half + i],
// s = cos_sin[maxT*half + t*half + i]:
//   forward   x'[i] = x[i] c - x[i+half] s ;  x'[i+half] = x[i+half] c + x[i] s
//   backward  the transpose of that rotation (s -> -s), applied to dqkv.
// Parallel over the B*T rows; each element is written once (deterministic).
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace ratchet {

namespace {
void rope_rows(float* qkv, const float* cos_sin, int B, int T, int NH, int KV, int hs, int maxT,
               float sign, int threads) {
  RATCHET_ASSERT(hs % 2 == 0 && T <= maxT);
  const int half = hs / 2, W = (NH + 2 * KV) * hs, heads = NH + KV;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long row = 0; row < (long)B * T; row++) {
    const int t = (int)(row % T);
    const float* cs = cos_sin + (size_t)t * half;                  // (half) cos
    const float* sn = cos_sin + ((size_t)maxT + t) * half;         // (half) sin
    for (int h = 0; h < heads; h++) {
      float* x = qkv + (size_t)row * W + (size_t)h * hs;  // (hs)
#pragma omp simd
      for (int i = 0; i < half; i++) {
        const float x1 = x[i], x2 = x[i + half], c = cs[i], s = sign * sn[i];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
      }
    }
  }
}
}  // namespace

void CpuBackend::rope_forward(dptr qkv, const float* cos_sin, int B, int T, int NH, int KV,
                              int hs, int maxT) {
  rope_rows(static_cast<float*>(qkv), cos_sin, B, T, NH, KV, hs, maxT, 1.0f, threads_);
}

void CpuBackend::rope_backward(dptr dqkv, const float* cos_sin, int B, int T, int NH, int KV,
                               int hs, int maxT) {
  rope_rows(static_cast<float*>(dqkv), cos_sin, B, T, NH, KV, hs, maxT, -1.0f, threads_);
}

}  // namespace ratchet

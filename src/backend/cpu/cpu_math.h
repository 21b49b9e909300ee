// Inline math shared by the CPU kernels, written so that GCC auto-vectorises
// the loops that call it (no libm calls: glibc's expf/tanhf only vectorise
// under -ffast-math, which this project does not use).
//
//   exp_f(x)   e^x for x in [-87.3, 88], about 1 ulp (Cephes polynomial after
//              Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2); inputs
//              outside are clamped (exp_f(-inf) ~ 1e-38, not 0).
//   GELU, tanh form, rewritten without cancellation:
//     u = sqrt(2/pi) (x + 0.044715 x^3),  s = sigmoid(2u) = 1 / (1 + e^{-2u})
//     gelu(x)  = 0.5 x (1 + tanh u) = x s
//     gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u'
//              = s + 2 x s (1 - s) u',   u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//   sigmoid_f(x) = 1 / (1 + e^{-x}) (SiLU: silu(x) = x sigmoid(x),
//              silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))))
#pragma once
#include <cstdint>
#include <cstring>

namespace ratchet::cpu {

inline float exp_f(float x) {
  x = x < -87.33f ? -87.33f : x;  // 2^n stays a normal number: n >= -126
  x = x > 88.0f ? 88.0f : x;      // n <= 127
  // n = round(x / ln2) by the 1.5*2^23 trick (exact for |n| < 2^22). A NaN
  // takes n from 0: converting NaN to int and shifting the negative result was
  // undefined (UBSan, scripts/sanitize.sh: "left shift of negative value" in
  // CpuOps.NanPropagates); r, and so the result, stay NaN.
  const float xn = x == x ? x : 0.0f;
  float n = xn * 1.44269504088896341f + 12582912.0f;
  n -= 12582912.0f;
  float r = x - n * 0.693359375f;  // ln2 = 0.693359375 - 2.12194440e-4 (Cody-Waite)
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * (r * r) + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

constexpr float kGeluS = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

inline float gelu_f(float x) {
  float u = kGeluS * (x + kGeluC * x * x * x);
  return x / (1.0f + exp_f(-2.0f * u));
}

inline float gelu_grad_f(float x) {
  float u = kGeluS * (x + kGeluC * x * x * x);
  float s = 1.0f / (1.0f + exp_f(-2.0f * u));
  float du = kGeluS * (1.0f + 3.0f * kGeluC * x * x);
  return s + 2.0f * x * s * (1.0f - s) * du;
}

inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

}  // namespace ratchet::cpu

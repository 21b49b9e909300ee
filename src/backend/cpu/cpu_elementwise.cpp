// Element-wise ops over n contiguous elements.
//
//   gelu_forward:  out  = gelu(inp) = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))
//   gelu_backward: dinp = gelu'(inp) * dout          (overwritten; may alias dout)
//   residual:      out  = a + b                      (out may alias a or b)
//   swiglu_forward:  inp (N,2H) rows gate g | up u;  out (N,H) = silu(g) * u
//   swiglu_backward: dinp (N,2H) overwritten, with s = sigmoid(g):
//                    dg = dout * u * s (1 + g (1 - s)),  du = dout * g * s
//   geglu_forward:   out (N,H) = gelu(g) * u  (Gemma's gelu_pytorch_tanh gate)
//   geglu_backward:  dg = dout * u * gelu'(g),  du = dout * gelu(g)
//   scale:           x *= s;   softcap_forward: x = c tanh(x / c)
//   clip_forward:    out = min(max(in, -c), c); clip_backward: dx = 0 where |x| > c
// GELU is evaluated in the cancellation-free sigmoid form of cpu_math.h.
// Small arrays run on the calling thread (the result is the same either way).
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"

namespace ratchet {

namespace {
constexpr long kParallelMin = 1 << 14;  // below this, threading costs more than it saves
}

void CpuBackend::gelu_forward(dptr out_, cdptr inp_, size_t n) {
  float* out = static_cast<float*>(out_);
  const float* inp = static_cast<const float*>(inp_);
  const long len = (long)n;
#pragma omp parallel for simd num_threads(threads_) schedule(static) if (len >= kParallelMin)
  for (long i = 0; i < len; i++) out[i] = cpu::gelu_f(inp[i]);
}

void CpuBackend::gelu_backward(dptr dinp_, cdptr inp_, cdptr dout_, size_t n) {
  float* dinp = static_cast<float*>(dinp_);
  const float* inp = static_cast<const float*>(inp_);
  const float* dout = static_cast<const float*>(dout_);
  const long len = (long)n;
#pragma omp parallel for simd num_threads(threads_) schedule(static) if (len >= kParallelMin)
  for (long i = 0; i < len; i++) dinp[i] = cpu::gelu_grad_f(inp[i]) * dout[i];
}

void CpuBackend::residual_forward(dptr out_, cdptr a_, cdptr b_, size_t n) {
  float* out = static_cast<float*>(out_);
  const float* a = static_cast<const float*>(a_);
  const float* b = static_cast<const float*>(b_);
  const long len = (long)n;
#pragma omp parallel for simd num_threads(threads_) schedule(static) if (len >= kParallelMin)
  for (long i = 0; i < len; i++) out[i] = a[i] + b[i];
}

void CpuBackend::swiglu_forward(dptr out_, cdptr inp_, int N, int H) {
  float* out = static_cast<float*>(out_);
  const float* inp = static_cast<const float*>(inp_);
#pragma omp parallel for num_threads(threads_) schedule(static) if ((long)N * H >= kParallelMin)
  for (int n = 0; n < N; n++) {
    const float* g = inp + (size_t)n * 2 * H;  // (H) gate, then (H) up
    const float* u = g + H;
    float* o = out + (size_t)n * H;
#pragma omp simd
    for (int i = 0; i < H; i++) o[i] = g[i] * cpu::sigmoid_f(g[i]) * u[i];
  }
}

void CpuBackend::swiglu_backward(dptr dinp_, cdptr inp_, cdptr dout_, int N, int H) {
  float* dinp = static_cast<float*>(dinp_);
  const float* inp = static_cast<const float*>(inp_);
  const float* dout = static_cast<const float*>(dout_);
#pragma omp parallel for num_threads(threads_) schedule(static) if ((long)N * H >= kParallelMin)
  for (int n = 0; n < N; n++) {
    const float* g = inp + (size_t)n * 2 * H;
    const float* u = g + H;
    const float* d = dout + (size_t)n * H;
    float* dg = dinp + (size_t)n * 2 * H;
    float* du = dg + H;
#pragma omp simd
    for (int i = 0; i < H; i++) {
      const float s = cpu::sigmoid_f(g[i]);
      dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
      du[i] = d[i] * g[i] * s;
    }
  }
}

void CpuBackend::geglu_forward(dptr out_, cdptr inp_, int N, int H) {
  float* out = static_cast<float*>(out_);
  const float* inp = static_cast<const float*>(inp_);
#pragma omp parallel for num_threads(threads_) schedule(static) if ((long)N * H >= kParallelMin)
  for (int n = 0; n < N; n++) {
    const float* g = inp + (size_t)n * 2 * H;
    const float* u = g + H;
    float* o = out + (size_t)n * H;
#pragma omp simd
    for (int i = 0; i < H; i++) o[i] = cpu::gelu_f(g[i]) * u[i];
  }
}

void CpuBackend::geglu_backward(dptr dinp_, cdptr inp_, cdptr dout_, int N, int H) {
  float* dinp = static_cast<float*>(dinp_);
  const float* inp = static_cast<const float*>(inp_);
  const float* dout = static_cast<const float*>(dout_);
#pragma omp parallel for num_threads(threads_) schedule(static) if ((long)N * H >= kParallelMin)
  for (int n = 0; n < N; n++) {
    const float* g = inp + (size_t)n * 2 * H;
    const float* u = g + H;
    const float* d = dout + (size_t)n * H;
    float* dg = dinp + (size_t)n * 2 * H;
    float* du = dg + H;
#pragma omp simd
    for (int i = 0; i < H; i++) {
      dg[i] = d[i] * u[i] * cpu::gelu_grad_f(g[i]);
      du[i] = d[i] * cpu::gelu_f(g[i]);
    }
  }
}

void CpuBackend::scale(dptr x_, size_t n, float s) {
  float* x = static_cast<float*>(x_);
  const long len = (long)n;
#pragma omp parallel for simd num_threads(threads_) schedule(static) if (len >= kParallelMin)
  for (long i = 0; i < len; i++) x[i] *= s;
}

void CpuBackend::softcap_forward(dptr x_, size_t n, float c) {
  float* x = static_cast<float*>(x_);
  const long len = (long)n;
  const float inv = 1.0f / c;
#pragma omp parallel for num_threads(threads_) schedule(static) if (len >= kParallelMin)
  for (long i = 0; i < len; i++) x[i] = c * std::tanh(x[i] * inv);
}

void CpuBackend::clip_forward(dptr out_, cdptr in_, size_t n, float c) {
  float* out = static_cast<float*>(out_);
  const float* in = static_cast<const float*>(in_);
  const long len = (long)n;
#pragma omp parallel for num_threads(threads_) schedule(static) if (len >= kParallelMin)
  for (long i = 0; i < len; i++) out[i] = std::min(std::max(in[i], -c), c);
}

void CpuBackend::clip_backward(dptr dx_, cdptr x_, size_t n, float c) {
  float* dx = static_cast<float*>(dx_);
  const float* x = static_cast<const float*>(x_);
  const long len = (long)n;
#pragma omp parallel for num_threads(threads_) schedule(static) if (len >= kParallelMin)
  for (long i = 0; i < len; i++)
    if (x[i] < -c || x[i] > c) dx[i] = 0.0f;
}

}  // namespace ratchet

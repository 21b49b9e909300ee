// SwiGLU experts on packed rows: for each expert with rows, its slice of the
// packed buffer goes through the backend's affine op (OpenBLAS sgemm) and
// SwiGLU, forward and backward (math in moe_ops.h). One gemm per expert and
// weight; CUDA's grouped GEMM is a later slice.
#include <algorithm>
#include <vector>

#include "moe/moe_ops.h"

namespace ratchet::moe {

void experts_forward(CpuBackend& be, const MoeShape& s, const Dispatch& d, const float* w1,
                     const float* w2, const float* xp, float* h, float* a, float* y) {
  const int C = s.C, I = s.I;
  for (int e = 0; e < s.E; e++) {
    const int rows = d.counts[e];
    if (rows == 0) continue;  // no tokens: no call
    const size_t r0 = d.offsets[e];
    const float* w1e = w1 + (size_t)e * 2 * I * C;  // (2I,C)
    const float* w2e = w2 + (size_t)e * C * I;      // (C,I)
    float* he = h + r0 * 2 * I;
    float* ae = a + r0 * I;
    be.matmul_forward(he, nullptr, xp + r0 * C, w1e, nullptr, rows, C, 2 * I);
    be.swiglu_forward(ae, he, rows, I);
    be.matmul_forward(y + r0 * C, nullptr, ae, w2e, nullptr, rows, I, C);
  }
}

void experts_backward(CpuBackend& be, const MoeShape& s, const Dispatch& d, const float* w1,
                      const float* w2, const float* xp, const float* h, const float* a,
                      float* dy, float* dxp, float* dw1, float* dw2) {
  const int C = s.C, I = s.I;
  // da and dh of one expert at a time; the largest expert bounds them.
  int most = 0;
  for (int e = 0; e < s.E; e++) most = std::max(most, d.counts[e]);
  std::vector<float> da((size_t)most * I), dh((size_t)most * 2 * I);
  for (int e = 0; e < s.E; e++) {
    const int rows = d.counts[e];
    if (rows == 0) continue;  // no tokens: no gradient added
    const size_t r0 = d.offsets[e];
    const float* w1e = w1 + (size_t)e * 2 * I * C;
    const float* w2e = w2 + (size_t)e * C * I;
    be.matmul_backward(da.data(), dw2 + (size_t)e * C * I, nullptr, dy + r0 * C, a + r0 * I, w2e,
                       rows, I, C);
    be.swiglu_backward(dh.data(), h + r0 * 2 * I, da.data(), rows, I);
    be.matmul_backward(dxp + r0 * C, dw1 + (size_t)e * 2 * I * C, nullptr, dh.data(), xp + r0 * C,
                       w1e, rows, C, 2 * I);
  }
}

}  // namespace ratchet::moe

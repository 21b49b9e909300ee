// SwiGLU experts on packed rows: for each expert with rows, its slice of the
// packed buffer goes through the backend's affine op (OpenBLAS sgemm) and
// SwiGLU, forward and backward (math in moe_ops.h). One gemm per expert and
// weight; CUDA's grouped GEMM is a later slice.
//
// Threads: the experts are shared out among the backend's threads (whole
// experts, dynamically), not each expert's GEMMs split among them: one
// parallel region per pass instead of three per expert, whose barriers cost
// most on a loaded machine (bench/cpu/results.md, MoE). Inside, the backend's
// ops open their own regions, which run on the calling thread alone (nested
// parallelism off, OpenMP's default: max-active-levels 1) and make the same
// sgemm calls on the same blocks, so the bits do not change. With nesting on
// the experts go one by one, each op using every thread, as before.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "moe/moe_ops.h"

namespace ratchet::moe {

namespace {
// Threads sharing out the experts: the backend's, when the ops inside run
// on one thread each (nesting off) and there are experts to share; else 1
// (the experts in turn, each op parallel inside).
int by_expert(const CpuBackend& be, const MoeShape& s) {
  if (be.threads() <= 1 || s.E <= 1 || omp_get_max_active_levels() > 1) return 1;
  return std::min(be.threads(), s.E);
}
}  // namespace

void experts_forward(CpuBackend& be, const MoeShape& s, const Dispatch& d, const float* w1,
                     const float* w2, const float* xp, float* h, float* a, float* y) {
  const int C = s.C, I = s.I;
  const int team = by_expert(be, s);
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) if (team > 1)
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
  // da and dh per thread of the team.
  int most = 0;
  for (int e = 0; e < s.E; e++) most = std::max(most, d.counts[e]);
  const int team = by_expert(be, s);
  std::vector<float> da_all((size_t)team * most * I), dh_all((size_t)team * most * 2 * I);
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) if (team > 1)
  for (int e = 0; e < s.E; e++) {
    const int rows = d.counts[e];
    if (rows == 0) continue;  // no tokens: no gradient added
    const int t = team > 1 ? omp_get_thread_num() : 0;
    float* da = da_all.data() + (size_t)t * most * I;
    float* dh = dh_all.data() + (size_t)t * most * 2 * I;
    const size_t r0 = d.offsets[e];
    const float* w1e = w1 + (size_t)e * 2 * I * C;
    const float* w2e = w2 + (size_t)e * C * I;
    be.matmul_backward(da, dw2 + (size_t)e * C * I, nullptr, dy + r0 * C, a + r0 * I, w2e,
                       rows, I, C);
    be.swiglu_backward(dh, h + r0 * 2 * I, da, rows, I);
    be.matmul_backward(dxp + r0 * C, dw1 + (size_t)e * 2 * I * C, nullptr, dh, xp + r0 * C,
                       w1e, rows, C, 2 * I);
  }
}

}  // namespace ratchet::moe

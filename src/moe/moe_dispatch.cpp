// Dropless dispatch: the per-expert histogram, the stable permutation of
// (token, slot) pairs grouped by expert, the gather into packed rows and the
// fixed-order combine (math in moe_ops.h).
#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet::moe {

void build_dispatch(const MoeShape& s, const int* idx, Dispatch& d) {
  check_shape(s);
  const int E = s.E;
  const long slots = (long)s.N * s.k;
  d.counts.assign(E, 0);
  d.offsets.assign(E + 1, 0);
  d.slot_of.assign(slots, 0);
  d.row_of.assign(slots, 0);
  // A counting sort on one thread: O(N k), small beside the expert GEMMs, and
  // its order (token, then slot, within an expert) needs no coordination.
  for (long i = 0; i < slots; i++) {
    const int e = idx[i];
    if (e < 0 || e >= E) fail("MoE dispatch: slot ", i, " routes to expert ", e, " of ", E);
    d.counts[e]++;
  }
  for (int e = 0; e < E; e++) d.offsets[e + 1] = d.offsets[e] + d.counts[e];
  std::vector<int> next(d.offsets.begin(), d.offsets.end() - 1);
  for (long i = 0; i < slots; i++) {
    const int r = next[idx[i]]++;
    d.slot_of[r] = (int)i;
    d.row_of[i] = r;
  }
}

void gather_rows(CpuBackend& be, const MoeShape& s, const Dispatch& d, const float* x, float* xp) {
  const long rows = (long)s.N * s.k;
  const int C = s.C;
#pragma omp parallel for num_threads(be.threads()) schedule(static)
  for (long r = 0; r < rows; r++) {
    const float* src = x + (size_t)(d.slot_of[r] / s.k) * C;
    float* dst = xp + (size_t)r * C;
    for (int c = 0; c < C; c++) dst[c] = src[c];
  }
}

void combine(CpuBackend& be, const MoeShape& s, const Dispatch& d, const float* w, const float* y, float* out) {
  const int C = s.C, k = s.k;
#pragma omp parallel for num_threads(be.threads()) schedule(static)
  for (int n = 0; n < s.N; n++) {
    float* o = out + (size_t)n * C;
    for (int c = 0; c < C; c++) o[c] = 0.0f;
    for (int j = 0; j < k; j++) {  // slot order: the same bits every run
      const float wj = w[(size_t)n * k + j];
      const float* yr = y + (size_t)d.row_of[(size_t)n * k + j] * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] += wj * yr[c];
    }
  }
}

}  // namespace ratchet::moe

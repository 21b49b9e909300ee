// Token + position embedding.
//
// forward:  out (B,T,C) = wte (Vp,C)[inp[b,t], :] + wpe (maxT,C)[t, :]   (overwritten)
// backward: dwte (Vp,C) [inp[b,t], :] += dout[b,t,:]                       (accumulated)
//           dwpe (maxT,C) [t, :]      += sum_b dout[b,t,:]                 (accumulated)
// The backward is parallel over channel blocks; each thread walks all (b,t)
// positions in order, so repeated tokens add up in a fixed order without
// atomics and the result does not depend on the thread count.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"

namespace ratchet {

void CpuBackend::encoder_forward(dptr out_, const int* inp, cdptr wte_, cdptr wpe_, int B, int T,
                                 int C) {
  float* out = static_cast<float*>(out_);
  const float* wte = static_cast<const float*>(wte_);
  const float* wpe = static_cast<const float*>(wpe_);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    const float* e = wte + (size_t)inp[bt] * C;
    const float* p = wpe + (size_t)(bt % T) * C;
    float* o = out + (size_t)bt * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
  }
}

void CpuBackend::encoder_backward(dptr dwte_, dptr dwpe_, cdptr dout_, const int* inp, int B, int T,
                                  int C) {
  float* dwte = static_cast<float*>(dwte_);
  float* dwpe = static_cast<float*>(dwpe_);
  const float* dout = static_cast<const float*>(dout_);
  constexpr int kBlock = 64;  // channels per work item
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        const float* d = dout + ((size_t)b * T + t) * C;
        float* gw = dwte + (size_t)inp[b * T + t] * C;
        float* gp = dwpe + (size_t)t * C;
#pragma omp simd
        for (int c = c0; c < c1; c++) {
          gw[c] += d[c];
          gp[c] += d[c];
        }
      }
    }
  }
}

}  // namespace ratchet

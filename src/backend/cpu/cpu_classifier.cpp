// Fused softmax + cross-entropy over the first V of Vp columns, per row of
// logits (BT,Vp):
//   mx      = max_{j<V} logits[j]
//   sum     = sum_{j<V} exp(logits[j] - mx)       (float sums of 512 columns, added in double)
//   loss    = (mx - logits[target]) + log(sum)    = logsumexp - logit[target]
//   if dloss != 0, logits is OVERWRITTEN with its gradient:
//     logits[j] = dloss * (exp(logits[j] - mx) / sum - [j == target])   j < V
//     logits[j] = 0                                                      V <= j < Vp
// softcap c > 0: logits hold y = c tanh(x/c), and the gradient is x's: each
// column's is multiplied by 1 - (y/c)^2, taken before the row is overwritten.
// Rows are OpenMP-parallel (static); each row's reductions are fixed-order.
#include <algorithm>
#include <omp.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "core/error.h"

namespace ratchet {

void CpuBackend::classifier(dptr logits_, float* losses, const int* targets, int BT, int V, int Vp,
                            float dloss, float softcap) {
  float* logits = static_cast<float*>(logits_);
  const bool capped = softcap > 0.0f && dloss != 0.0f;
  float* slopes = capped ? scratch((size_t)V) : nullptr;
  const size_t stride = capped ? scratch_stride() : 0;
  constexpr int kBlock = 512;  // columns per float partial sum
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int r = 0; r < BT; r++) {
    float* x = logits + (size_t)r * Vp;
    const int t = targets[r];
    RATCHET_ASSERT(t >= 0 && t < V);
    float mx = x[0];
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    const float xt = x[t];
    float* slope = capped ? slopes + stride * omp_get_thread_num() : nullptr;
    if (capped) {
      const float inv = 1.0f / softcap;
      for (int j = 0; j < V; j++) slope[j] = 1.0f - (x[j] * inv) * (x[j] * inv);
    }
    // Float partial sums over blocks of kBlock columns (vectorised), added in
    // double: 10x faster than a double-lane reduction, and as accurate.
    double sum = 0.0;
    for (int j0 = 0; j0 < V; j0 += kBlock) {
      const int j1 = std::min(V, j0 + kBlock);
      float s = 0.0f;
      if (dloss != 0.0f) {
#pragma omp simd reduction(+ : s)
        for (int j = j0; j < j1; j++) {
          const float e = cpu::exp_f(x[j] - mx);
          x[j] = e;
          s += e;
        }
      } else {
#pragma omp simd reduction(+ : s)
        for (int j = j0; j < j1; j++) s += cpu::exp_f(x[j] - mx);
      }
      sum += s;
    }
    losses[r] = (float)((double)(mx - xt) + std::log(sum));
    if (dloss != 0.0f) {
      const float k = (float)(dloss / sum);
#pragma omp simd
      for (int j = 0; j < V; j++) x[j] *= k;
      x[t] -= dloss;
      if (capped)
        for (int j = 0; j < V; j++) x[j] *= slope[j];
      for (int j = V; j < Vp; j++) x[j] = 0.0f;
    }
  }
}

}  // namespace ratchet

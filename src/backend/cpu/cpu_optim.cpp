// Optimizer-side reductions and updates over n contiguous elements.
//
// sum_squares: sum x^2 in double. The array is cut into kChunks fixed ranges
//   (boundaries depend on n only); each range is summed by one thread in a
//   fixed vector order, and the partials are added in range order: the result
//   is the same for any thread count.
// adamw (t = step, 1-based; every output overwritten in place):
//   g = grad_scale * grads
//   m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2
//   mhat = m / (1-b1^t) ;  vhat = v / (1-b2^t)
//   p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)
//   p is `master` when given (then params = p, a copy: storage is FP32 here),
//   else params itself.
#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_backend.h"

namespace ratchet {

double CpuBackend::sum_squares(cdptr x_, size_t n) {
  const float* x = static_cast<const float*>(x_);
  constexpr int kChunks = 64;
  double part[kChunks];
  const size_t chunk = (n + kChunks - 1) / kChunks;
#pragma omp parallel for num_threads(threads_) schedule(static) if (n >= (1u << 16))
  for (int c = 0; c < kChunks; c++) {
    const size_t lo = std::min(n, c * chunk), hi = std::min(n, lo + chunk);
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = lo; i < hi; i++) acc += (double)x[i] * (double)x[i];
    part[c] = acc;
  }
  double total = 0.0;
  for (int c = 0; c < kChunks; c++) total += part[c];
  return total;
}

namespace {

struct AdamConsts {
  float b1, b2, lr, eps, wd, gs, bc1, bc2;
};

// One element of the update (builds without AVX; the AVX path below is the
// same expression, evaluated without contraction).
inline void adamw_one(float* p, const float* grads, float* m, float* v, long i,
                      const AdamConsts& k) {
  const float g = k.gs * grads[i];
  const float mi = k.b1 * m[i] + (1.0f - k.b1) * g;
  const float vi = k.b2 * v[i] + (1.0f - k.b2) * (g * g);
  m[i] = mi;
  v[i] = vi;
  const float mhat = mi / k.bc1, vhat = vi / k.bc2;
  p[i] -= k.lr * (mhat / (std::sqrt(vhat) + k.eps) + k.wd * p[i]);
}

// Elements [lo, hi). std::sqrt does not auto-vectorise without
// -fno-math-errno (it may set errno), so the update uses AVX intrinsics where
// the build targets AVX (3x faster on 124M parameters, memory-bound then).
// The last < 8 elements go through the same vector arithmetic with masked
// loads and stores: a scalar tail would be compiled with FMA contraction
// (-march=native, GCC's -ffp-contract=fast) and round otherwise, so an update
// split into pieces at other boundaries (ZeRO shards, distributed/buckets.h) would not
// give the same bits as the whole.
void adamw_range(float* p, const float* grads, float* m, float* v, long lo, long hi,
                 const AdamConsts& k) {
  long i = lo;
#if defined(__AVX__)
  const __m256 b1 = _mm256_set1_ps(k.b1), b2 = _mm256_set1_ps(k.b2);
  const __m256 c1 = _mm256_set1_ps(1.0f - k.b1), c2 = _mm256_set1_ps(1.0f - k.b2);
  const __m256 gs = _mm256_set1_ps(k.gs), lr = _mm256_set1_ps(k.lr);
  const __m256 eps = _mm256_set1_ps(k.eps), wd = _mm256_set1_ps(k.wd);
  const __m256 bc1 = _mm256_set1_ps(k.bc1), bc2 = _mm256_set1_ps(k.bc2);
  // Lane j is loaded and stored when mask[j] < 0 (its sign bit).
  auto step8 = [&](long at, __m256i mask, bool full) {
    auto load = [&](const float* x) {
      return full ? _mm256_loadu_ps(x + at) : _mm256_maskload_ps(x + at, mask);
    };
    auto store = [&](float* x, __m256 y) {
      if (full) _mm256_storeu_ps(x + at, y);
      else _mm256_maskstore_ps(x + at, mask, y);
    };
    const __m256 g = _mm256_mul_ps(gs, load(grads));
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, load(m)), _mm256_mul_ps(c1, g));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, load(v)), _mm256_mul_ps(c2, _mm256_mul_ps(g, g)));
    store(m, mi);
    store(v, vi);
    const __m256 mhat = _mm256_div_ps(mi, bc1), vhat = _mm256_div_ps(vi, bc2);
    const __m256 pi = load(p);
    const __m256 upd = _mm256_add_ps(_mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), eps)),
                                     _mm256_mul_ps(wd, pi));
    store(p, _mm256_sub_ps(pi, _mm256_mul_ps(lr, upd)));
  };
  for (; i + 8 <= hi; i += 8) step8(i, _mm256_setzero_si256(), true);
  if (i < hi) {
    // The first `left` lanes set: a window into 8 ones then 8 zeros (AVX, no AVX2).
    static const int32_t ones_then_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
    const int left = (int)(hi - i);
    step8(i, _mm256_loadu_si256((const __m256i*)(ones_then_zeros + 8 - left)), false);
    i = hi;
  }
#endif
  for (; i < hi; i++) adamw_one(p, grads, m, v, i, k);
}

}  // namespace

void CpuBackend::adamw(dptr params_, float* master, cdptr grads_, float* m, float* v, size_t n,
                       const AdamWArgs& a) {
  float* params = static_cast<float*>(params_);
  const float* grads = static_cast<const float*>(grads_);
  float* p = master ? master : params;
  AdamConsts k;
  k.b1 = a.beta1;
  k.b2 = a.beta2;
  k.lr = a.lr;
  k.eps = a.eps;
  k.wd = a.weight_decay;
  k.gs = a.grad_scale;
  k.bc1 = 1.0f - std::pow(a.beta1, (float)a.step);
  k.bc2 = 1.0f - std::pow(a.beta2, (float)a.step);
  const long len = (long)n;
  const int parts = len >= (1 << 14) ? threads_ : 1;
#pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (int t = 0; t < parts; t++) {
    // Contiguous ranges with 16-element (64-byte) aligned edges.
    const long lo = len * t / parts / 16 * 16;
    const long hi = t == parts - 1 ? len : len * (t + 1) / parts / 16 * 16;
    adamw_range(p, grads, m, v, lo, hi, k);
    if (master) std::copy(master + lo, master + hi, params + lo);
  }
}

}  // namespace ratchet

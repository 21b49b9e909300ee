// Causal grouped-query self-attention, blocked with an online softmax (the
// FlashAttention-2 scheme on the CPU): no (T,T) matrix is ever formed, forward
// keeps only the per-row log-sum-exp for backward.
//
// Layout: qkv (B,T,W), W = (NH+2KV)*hs, hs = C/NH, scale = 1/sqrt(hs): NH q
// heads (columns [h*hs, (h+1)*hs)), then KV k heads (from C), then KV v heads
// (from C + KV*hs). Query head h uses KV head g = h / (NH/KV). Per (b,h) the
// q, k, v heads are (T,hs) matrices read in place with leading dimension W;
// the output head is a (T,hs) block of out (B,T,C) with leading dim C.
// KV == NH is multi-head attention on the GPT-2 layout (W = 3C).
//
// forward, per query tile Qi (rows i0..i0+nr, nr <= kFwdQ), over key tiles Kj,
// Vj (kFwdK columns, only those at or left of the diagonal):
//   S  (nr,nc) = scale * Qi @ Kj^T                      sgemm into scratch
//   m' = max(m, rowmax S)  (causal entries only); P = exp(S - m'), 0 if j > i
//   l  = l * exp(m - m') + rowsum P
//   Oi = Oi * exp(m - m') + P @ Vj                      sgemm, beta 1, in out
// then Oi /= l and lse (B,NH,T) = m + log l. kFwdK is a multiple of kFwdQ, so
// every query row sees at least one causal key in its first key tile.
// backward (dqkv fully overwritten; every column belongs to one head), per
// key tile Kj, Vj (kBwd), over query tiles Qi at or below the diagonal:
//   D  (T)   = rowsum(dO * O)                          (once per head)
//   P  (nr,nc) = exp(scale * Qi @ Kj^T - lse_i), 0 if j > i   (recomputed)
//   dVj += P^T @ dOi ;  dP = dOi @ Vj^T ;  dS = P * (dP - D_i) * scale
//   dQi += dS @ Kj  ;  dKj += dS^T @ Qi                 (sgemm, beta 0 first)
// Memory: per thread kFwdQ·kFwdK (+2·kFwdQ) floats forward and 2·kBwd² + T
// backward, against B·NH·T² for the materialized probabilities. FLOPs as the
// materialized form: 4·T²·hs per head forward (half of it above the diagonal
// skipped, tile by tile), 10·T²·hs backward (P is recomputed).
// GQA backward: dK, dV of KV head g sum over its NH/KV query heads, so the
// heads of a group run in order in one work item (the first writes dK, dV with
// beta 0 on each key tile's first query tile, the others add).
// Options (AttnOpts, issue 38): a sliding window W skips key tiles wholly left
// of every row's window (forward) and query tiles wholly below every key's
// window (backward), so the work grows with T·W rather than T²; entries left
// of a row's window are masked like those right of the diagonal. A soft-cap c
// replaces S by Y = c·tanh(S/c) before the softmax; backward multiplies dS by
// dY/dS = 1 - (Y/c)² (kept per tile in a third buffer). With the default
// options every operation is the one the unmasked code did, bit for bit.
// Work items: (b,h,query tile) forward, (b,g) backward (dQ of a head collects
// every key tile, dK/dV of a group every head), spread over the OpenMP threads; each sgemm runs on its
// calling thread (OpenBLAS single-threaded, see cpu_backend.cpp). Every item
// is computed by the same calls in the same order whatever thread runs it, so
// results are bit-identical for any thread count.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "core/error.h"

namespace ratchet {

namespace {
constexpr int kFwdQ = 64;   // query rows per forward tile
constexpr int kFwdK = 256;  // key columns per forward tile (a multiple of kFwdQ)
constexpr int kBwd = 64;    // query rows and key columns per backward tile: 64 wastes
                            // less on diagonal tiles than 128 (bench_attention, 1 thread:
                            // 124 vs 103 GFLOP/s at T=256, 142 vs 141 at T=2048)
static_assert(kFwdK % kFwdQ == 0, "forward key tile must be a multiple of the query tile");

// S row -> P in place: exp(S - m) on the visible columns [lo, valid), 0
// elsewhere. The caller owns m.
inline void masked_exp_row(float* row, int lo, int valid, int nc, float m) {
  for (int c = 0; c < lo; c++) row[c] = 0.0f;
#pragma omp simd
  for (int c = lo; c < valid; c++) row[c] = cpu::exp_f(row[c] - m);
  for (int c = std::max(lo, valid); c < nc; c++) row[c] = 0.0f;
}

// Y = cap·tanh(S/cap) on [lo, valid); with `slope`, also dY/dS = 1 - (Y/cap)².
inline void softcap_row(float* row, float* slope, int lo, int valid, float cap) {
  const float inv = 1.0f / cap;
  for (int c = lo; c < valid; c++) {
    const float t = std::tanh(row[c] * inv);
    row[c] = cap * t;
    if (slope) slope[c] = 1.0f - t * t;
  }
}

// The first key column query row i sees: i - W + 1 under a window W, else 0.
inline int first_key(int i, int W) { return W > 0 ? std::max(0, i - W + 1) : 0; }
}  // namespace

void CpuBackend::attention_forward(dptr out_, void* lse_, cdptr qkv_, int B, int T, int C,
                                   int NH, int KV, const AttnOpts& opt) {
  float* out = static_cast<float*>(out_);
  float* lse = static_cast<float*>(lse_);  // (B,NH,T)
  const float* qkv = static_cast<const float*>(qkv_);
  RATCHET_ASSERT(NH > 0 && C % NH == 0 && KV > 0 && NH % KV == 0);
  blas_single_thread();
  const int hs = C / NH, W = (NH + 2 * KV) * hs, nq = (T + kFwdQ - 1) / kFwdQ;
  const int group = NH / KV;  // query heads per KV head
  const float scale = opt.scale_for(hs), cap = opt.softcap;
  const int Wn = opt.window;
  float* scr = scratch((size_t)kFwdQ * kFwdK + 3 * kFwdQ);
  const size_t stride = scratch_stride();
#pragma omp parallel for num_threads(threads_) schedule(static, 1)
  for (long item = 0; item < (long)B * NH * nq; item++) {
    const int bh = (int)(item / nq), qi = (int)(item % nq);
    const int b = bh / NH, h = bh % NH;
    const int i0 = qi * kFwdQ, nr = std::min(kFwdQ, T - i0);
    const float* q = qkv + ((size_t)b * T + i0) * W + h * hs;  // (nr,hs), ld W
    const int g = h / group;
    const float* k = qkv + (size_t)b * T * W + C + g * hs;     // (T,hs), ld W
    const float* v = k + (size_t)KV * hs;
    float* o = out + ((size_t)b * T + i0) * C + h * hs;  // (nr,hs), ld C
    float* s = scr + stride * omp_get_thread_num();      // (kFwdQ, kFwdK)
    float* m = s + (size_t)kFwdQ * kFwdK;                // (kFwdQ) running max
    float* l = m + kFwdQ;                                // (kFwdQ) running sum
    float* seen = l + kFwdQ;                             // (kFwdQ) 1 once a row met a visible key
    for (int r = 0; r < nr; r++) seen[r] = 0.0f;
    // The first key any row of this query tile sees (0 without a window):
    // key tiles start there, so no whole-tile work left of the window.
    const int jstart = first_key(i0, Wn);
    for (int j0 = jstart; j0 < i0 + nr; j0 += kFwdK) {
      const int nc = std::min(kFwdK, i0 + nr - j0);
      const bool first = j0 == jstart;  // the PV product overwrites o
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hs, scale, q, W,
                  k + (size_t)j0 * W, W, 0.0f, s, nc);
      for (int r = 0; r < nr; r++) {
        float* row = s + (size_t)r * nc;
        // <= 0 for rows above a window tile starting inside the query tile:
        // they see nothing here (lo == valid below)
        const int valid = std::min(nc, i0 + r - j0 + 1);
        const int lo = std::min(valid, std::max(0, first_key(i0 + r, Wn) - j0));
        if (lo == valid) {  // the row's window starts in a later tile
          for (int c = 0; c < nc; c++) row[c] = 0.0f;
          continue;
        }
        if (cap > 0) softcap_row(row, nullptr, lo, valid, cap);
        const bool row_first = seen[r] == 0.0f;
        float mx = row_first ? row[lo] : m[r];
#pragma omp simd reduction(max : mx)
        for (int c = lo; c < valid; c++) mx = row[c] > mx ? row[c] : mx;
        float sum = 0.0f;  // exp and row sum in one pass over the tile row
        for (int c = 0; c < lo; c++) row[c] = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int c = lo; c < valid; c++) {
          row[c] = cpu::exp_f(row[c] - mx);
          sum += row[c];
        }
        for (int c = valid; c < nc; c++) row[c] = 0.0f;
        seen[r] = 1.0f;
        if (row_first) {
          l[r] = sum;
        } else {
          const float alpha = std::exp(m[r] - mx);  // <= 1: the old terms shrink
          l[r] = l[r] * alpha + sum;
          float* orow = o + (size_t)r * C;
#pragma omp simd
          for (int d = 0; d < hs; d++) orow[d] *= alpha;
        }
        m[r] = mx;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nc, 1.0f, s, nc,
                  v + (size_t)j0 * W, W, first ? 0.0f : 1.0f, o, C);
    }
    float* lrow = lse + (size_t)bh * T + i0;
    for (int r = 0; r < nr; r++) {
      const float inv = 1.0f / l[r];
      float* orow = o + (size_t)r * C;
#pragma omp simd
      for (int d = 0; d < hs; d++) orow[d] *= inv;
      lrow[r] = m[r] + std::log(l[r]);
    }
  }
}

void CpuBackend::attention_backward(dptr dqkv_, cdptr dout_, cdptr qkv_, cdptr out_,
                                    const void* lse_, int B, int T, int C, int NH, int KV,
                                    const AttnOpts& opt) {
  float* dqkv = static_cast<float*>(dqkv_);
  const float* dout = static_cast<const float*>(dout_);
  const float* qkv = static_cast<const float*>(qkv_);
  const float* out = static_cast<const float*>(out_);
  const float* lse = static_cast<const float*>(lse_);
  RATCHET_ASSERT(NH > 0 && C % NH == 0 && KV > 0 && NH % KV == 0);
  blas_single_thread();
  const int hs = C / NH, W = (NH + 2 * KV) * hs, group = NH / KV;
  const float scale = opt.scale_for(hs), cap = opt.softcap;
  const int Wn = opt.window;
  float* scr = scratch(3 * (size_t)kBwd * kBwd + T);
  const size_t stride = scratch_stride();
#pragma omp parallel for num_threads(threads_) schedule(static, 1)
  for (int bg = 0; bg < B * KV; bg++) {
    const int b = bg / KV, g = bg % KV;
    const size_t koff = (size_t)b * T * W + C + g * hs;
    const float* k = qkv + koff;  // (T,hs) each, ld W
    const float* v = k + (size_t)KV * hs;
    float* dk = dqkv + koff;
    float* dv = dk + (size_t)KV * hs;
    float* p = scr + stride * omp_get_thread_num();  // (kBwd,kBwd) P
    float* dp = p + (size_t)kBwd * kBwd;             // (kBwd,kBwd) dP, then dS
    float* slope = dp + (size_t)kBwd * kBwd;         // (kBwd,kBwd) soft-cap dY/dS
    float* D = slope + (size_t)kBwd * kBwd;          // (T)
    for (int h = g * group; h < (g + 1) * group; h++) {
      const bool first_head = h == g * group;
      const size_t qoff = (size_t)b * T * W + h * hs;
      const float* q = qkv + qoff;  // (T,hs), ld W
      float* dq = dqkv + qoff;
      const float* o = out + (size_t)b * T * C + h * hs;   // (T,hs), ld C
      const float* d = dout + (size_t)b * T * C + h * hs;  // (T,hs), ld C
      const float* L = lse + ((size_t)b * NH + h) * T;     // (T)
      for (int i = 0; i < T; i++) {
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int c = 0; c < hs; c++) acc += d[(size_t)i * C + c] * o[(size_t)i * C + c];
        D[i] = acc;
        float* dqr = dq + (size_t)i * W;
        for (int c = 0; c < hs; c++) dqr[c] = 0.0f;
      }
      for (int j0 = 0; j0 < T; j0 += kBwd) {
        const int nc = std::min(kBwd, T - j0);
        const float* kj = k + (size_t)j0 * W;
        const float* vj = v + (size_t)j0 * W;
        float* dkj = dk + (size_t)j0 * W;
        float* dvj = dv + (size_t)j0 * W;
        // Query rows past j0 + nc - 1 + W - 1 see none of these keys under a window.
        const int iend = Wn > 0 ? (int)std::min<long>(T, (long)j0 + nc - 1 + Wn) : T;
        for (int i0 = j0; i0 < iend; i0 += kBwd) {  // square tiles: i0 = j0 is the diagonal one
          const int nr = std::min(kBwd, T - i0);
          // dK_j, dV_j: the group's first head overwrites on its first tile
          const float beta = first_head && i0 == j0 ? 0.0f : 1.0f;
          const float* qi = q + (size_t)i0 * W;
          const float* di = d + (size_t)i0 * C;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hs, scale, qi, W, kj, W,
                      0.0f, p, nc);
          for (int r = 0; r < nr; r++) {
            const int valid = std::min(nc, i0 + r - j0 + 1);
            const int lo = std::max(0, std::min(valid, first_key(i0 + r, Wn) - j0));
            if (cap > 0) softcap_row(p + (size_t)r * nc, slope + (size_t)r * nc, lo, valid, cap);
            masked_exp_row(p + (size_t)r * nc, lo, valid, nc, L[i0 + r]);
          }
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hs, nr, 1.0f, p, nc, di, C,
                      beta, dvj, W);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hs, 1.0f, di, C, vj, W,
                      0.0f, dp, nc);
          for (int r = 0; r < nr; r++) {
            const float* pr = p + (size_t)r * nc;
            float* gr = dp + (size_t)r * nc;
            const float Di = D[i0 + r];
#pragma omp simd
            for (int c = 0; c < nc; c++) gr[c] = pr[c] * (gr[c] - Di) * scale;
            if (cap > 0) {  // P is 0 where masked, so the unset slope there is never used
              const float* sl = slope + (size_t)r * nc;
              for (int c = 0; c < nc; c++) gr[c] = pr[c] != 0.0f ? gr[c] * sl[c] : 0.0f;
            }
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nc, 1.0f, dp, nc, kj, W,
                      1.0f, dq + (size_t)i0 * W, W);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hs, nr, 1.0f, dp, nc, qi, W,
                      beta, dkj, W);
        }
      }
    }
  }
}

}  // namespace ratchet

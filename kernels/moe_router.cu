// The MoE router kernels (math, shapes and accumulation: moe_router.cuh).
// Each warp owns a token row. The top-k loop follows the CPU's selection
// (k passes, each taking the largest probability not yet taken, the lowest
// index among equals), so the experts chosen and the order of w are the CPU's
// whenever the probabilities are. With a selection bias or groups the passes
// compare the CPU's choice scores (p + bias, 0.0 outside the kept groups),
// computed with the same FP32 adds.
#include "moe_router.cuh"
#include "scratch_bytes.h"

#include <cmath>

namespace ratchet::kernels {

// ==== kernels ====================================================================================

constexpr int kRouterRowsPerBlock = 8;  // warps per 256-thread block, one row each

template <class T>
__global__ void moe_router_forward_kernel(float* probs, int* idx, float* w, const T* logits, int N,
                                          int E, int k, bool norm, bool sigmoid, float scale,
                                          const float* bias, int n_group, int topk_group) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kRouterRowsPerBlock + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp: every warp collective below has all 32 lanes
  const T* l = logits + (size_t)n * E;
  float* p = probs + (size_t)n * E;
  if (sigmoid) {  // uniform over the warp: no collective is skipped by some lanes only
    for (int e = lane; e < E; e += 32) p[e] = 1.0f / (1.0f + expf(-to_f32(l[e])));
  } else {
    float mx = to_f32(l[0]);
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, to_f32(l[e]));
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) {
      const float v = expf(to_f32(l[e]) - mx);
      p[e] = v;
      sum += v;
    }
    sum = warp_sum(sum);
    const float inv = 1.0f / sum;
    for (int e = lane; e < E; e += 32) p[e] *= inv;  // this lane's own entries: no barrier needed
  }

  // Every lane reads other lanes' probabilities below (the group scores, the
  // winner's weight): make this warp's writes visible first.
  __syncwarp();
  // The choice score of expert e: p + bias (HF scores_for_choice), 0.0 in a
  // group not kept (moe_ops.h). Plain adds, as the CPU's: the same bits.
  const int G = E / n_group;
  unsigned keep = 0xffffffffu;  // bit g: group g kept (n_group <= 32)
  if (n_group > 1) {            // uniform over the warp
    // Lane g scores group g: the sum of its two largest choice scores.
    float gs = -INFINITY;
    if (lane < n_group) {
      float v0 = -INFINITY, v1 = -INFINITY;
      for (int e = lane * G; e < (lane + 1) * G; e++) {
        const float c = bias ? p[e] + bias[e] : p[e];
        if (c > v0) {
          v1 = v0;
          v0 = c;
        } else if (c > v1) {
          v1 = c;
        }
      }
      gs = G >= 2 ? v0 + v1 : v0;
    }
    // topk_group passes of a warp argmax over (score desc, group asc): the
    // CPU's order. Lanes at or past n_group never win (index INT_MAX).
    keep = 0;
    for (int j = 0; j < topk_group; j++) {
      const bool free = lane < n_group && !(keep >> lane & 1u);
      float bs = free ? gs : -INFINITY;
      int bg = free ? lane : 0x7fffffff;
      for (int off = 16; off > 0; off >>= 1) {
        const float os = __shfl_xor_sync(0xffffffffu, bs, off);
        const int og = __shfl_xor_sync(0xffffffffu, bg, off);
        if (og != 0x7fffffff && (bg == 0x7fffffff || os > bs || (os == bs && og < bg))) {
          bs = os;
          bg = og;
        }
      }
      keep |= 1u << bg;
    }
  }

  int* ix = idx + (size_t)n * k;
  float* wr = w + (size_t)n * k;
  unsigned taken = 0;  // bit t: expert lane + 32 t is chosen
  float wsum = 0.0f;
  for (int j = 0; j < k; j++) {
    // The lane's best among its free experts (ascending e: strict '>' keeps the
    // lowest). be = INT_MAX: none yet (biased scores may be below any constant).
    float bp = -INFINITY;
    int be = 0x7fffffff;
    for (int t = 0, e = lane; e < E; t++, e += 32) {
      if (taken >> t & 1u) continue;
      const float sc = !(keep >> (e / G) & 1u) ? 0.0f : bias ? p[e] + bias[e] : p[e];
      if (be == 0x7fffffff || sc > bp) {
        bp = sc;
        be = e;
      }
    }
    // ...then the warp's: (score desc, index asc) is a total order, so every
    // lane ends with the same winner whatever the butterfly's pairing.
    for (int off = 16; off > 0; off >>= 1) {
      const float op = __shfl_xor_sync(0xffffffffu, bp, off);
      const int oe = __shfl_xor_sync(0xffffffffu, be, off);
      if (oe != 0x7fffffff && (be == 0x7fffffff || op > bp || (op == bp && oe < be))) {
        bp = op;
        be = oe;
      }
    }
    if (be % 32 == lane) taken |= 1u << (be / 32);
    const float pw = p[be];  // the weight is the unbiased probability
    wsum += pw;              // slot order, as the CPU
    if (lane == 0) {
      ix[j] = be;
      wr[j] = pw;
    }
  }
  if (lane == 0) {
    if (norm) {
      const float S = sigmoid ? wsum + 1e-20f : wsum;  // DeepSeek-V3's + 1e-20, as the CPU
      for (int j = 0; j < k; j++) wr[j] /= S;
    }
    for (int j = 0; j < k; j++) wr[j] *= scale;  // x * 1.0f is x
  }
}

// dprob of expert e (moe_router.cuh): the aux term plus its slot's term, if selected.
__device__ __forceinline__ float router_dprob(int e, const int* ix, const float* dwr, int k,
                                              bool norm, float dot, float S, const float* aux,
                                              float scale) {
  float d = aux ? aux[e] : 0.0f;
  for (int j = 0; j < k; j++)
    if (ix[j] == e) d += norm ? (scale * dwr[j] - dot) / S : scale * dwr[j];
  return d;
}

template <class T>
__global__ void moe_router_backward_kernel(T* dlogits, const float* probs, const int* idx,
                                           const float* w, const float* dw, const float* aux,
                                           int N, int E, int k, bool norm, bool sigmoid,
                                           float scale) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kRouterRowsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const float* p = probs + (size_t)n * E;
  const int* ix = idx + (size_t)n * k;
  (void)w;  // the unscaled weights p / S are recomputed to the bit, as on the CPU
  const float* dwr = dw + (size_t)n * k;
  float S = 0.0f, dot = 0.0f;  // every lane the same, in slot order
  if (norm) {
    for (int j = 0; j < k; j++) S += p[ix[j]];
    if (sigmoid) S += 1e-20f;
    for (int j = 0; j < k; j++) dot += (scale * dwr[j]) * (p[ix[j]] / S);
  }
  T* dl = dlogits + (size_t)n * E;
  if (sigmoid) {  // element-wise: no warp sum (uniform over the warp)
    for (int e = lane; e < E; e += 32)
      dl[e] = from_f32<T>(router_dprob(e, ix, dwr, k, norm, dot, S, aux, scale) * p[e] *
                          (1.0f - p[e]));
    return;
  }
  float pd = 0.0f;  // sum_e p_e dprob_e
  for (int e = lane; e < E; e += 32)
    pd += p[e] * router_dprob(e, ix, dwr, k, norm, dot, S, aux, scale);
  pd = warp_sum(pd);
  for (int e = lane; e < E; e += 32)
    dl[e] = from_f32<T>(p[e] * (router_dprob(e, ix, dwr, k, norm, dot, S, aux, scale) - pd));
}

constexpr int kStatsWarps = 16;

__global__ void moe_aux_stats_kernel(double* counts, double* prob_sums, const float* probs,
                                     const int* idx, int N, int E, int k) {
  __shared__ double psum[kStatsWarps][32];
  __shared__ int pcount[kStatsWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int e = blockIdx.x * 32 + lane;
  double s = 0.0;
  int c = 0;
  if (e < E)
    for (int n = warp; n < N; n += kStatsWarps) {
      s += probs[(size_t)n * E + e];
      for (int j = 0; j < k; j++) c += idx[(size_t)n * k + j] == e;
    }
  psum[warp][lane] = s;
  pcount[warp][lane] = c;
  __syncthreads();
  if (warp != 0 || e >= E) return;
  double t = 0.0;
  int tc = 0;
  for (int r = 0; r < kStatsWarps; r++) {
    t += psum[r][lane];
    tc += pcount[r][lane];
  }
  prob_sums[e] += t;
  counts[e] += tc;
}

// ---- Qwen2-MoE's shared-expert gate --------------------------------------------------------

template <class T>
__global__ void moe_shared_gate_forward_kernel(T* out, const T* x, const T* g, const T* y, int N,
                                               int C) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kRouterRowsPerBlock + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp
  const T* xr = x + (size_t)n * C;
  float z = 0.0f;
  for (int c = lane; c < C; c += 32) z += to_f32(xr[c]) * to_f32(g[c]);
  z = warp_sum(z);
  const float s = 1.0f / (1.0f + expf(-z));
  T* o = out + (size_t)n * C;
  const T* yr = y + (size_t)n * C;
  for (int c = lane; c < C; c += 32) o[c] = from_f32<T>(to_f32(o[c]) + s * to_f32(yr[c]));
}

constexpr int kGateBackwardThreads = 256;

template <class T>
__global__ void moe_shared_gate_backward_kernel(T* dys, T* dx, float* partial, const T* dy,
                                                const T* x, const T* g, const T* y, int N, int C,
                                                int rows_per_block) {
  __shared__ float red[32];
  const int t0 = blockIdx.x * rows_per_block, t1 = N - t0 < rows_per_block ? N : t0 + rows_per_block;
  float* part = partial + (size_t)blockIdx.x * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) part[c] = 0.0f;
  for (int t = t0; t < t1; t++) {  // uniform over the block: every barrier is reached by all
    const size_t r = (size_t)t * C;
    float px = 0.0f, pd = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      px += to_f32(x[r + c]) * to_f32(g[c]);
      pd += to_f32(dy[r + c]) * to_f32(y[r + c]);
    }
    const float z = block_sum(px, red), ds = block_sum(pd, red);
    const float s = 1.0f / (1.0f + expf(-z)), d = ds * s * (1.0f - s);
    // Each thread writes only the columns it read y from: dys may alias y.
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      dys[r + c] = from_f32<T>(s * to_f32(dy[r + c]));
      dx[r + c] = from_f32<T>(to_f32(dx[r + c]) + d * to_f32(g[c]));
      part[c] += d * to_f32(x[r + c]);
    }
  }
}

// ==== launchers ==================================================================================

namespace {
void check_router_shape(const char* what, int N, int E, int k) {
  RATCHET_REQUIRE(N >= 0, what);
  RATCHET_REQUIRE(E >= 1 && E <= kMoeMaxExperts, what);
  RATCHET_REQUIRE(k >= 1 && k <= E, what);
}
void check_groups(int E, int k, int n_group, int topk_group) {
  RATCHET_REQUIRE(n_group >= 1 && n_group <= kMoeMaxGroups && E % n_group == 0,
                  "moe_router_forward: 1 <= n_group <= 32, n_group divides E");
  RATCHET_REQUIRE(topk_group >= 1 && topk_group <= n_group && k <= topk_group * (E / n_group),
                  "moe_router_forward: 1 <= topk_group <= n_group, k <= topk_group * E / n_group");
}
}  // namespace

template <class T>
void moe_router_forward(float* probs, int* idx, float* w, const T* logits, int N, int E, int k,
                        bool norm_topk_prob, cudaStream_t stream, bool sigmoid, float scale,
                        const float* bias, int n_group, int topk_group) {
  RATCHET_NVTX_RANGE("moe_router_forward");
  check_router_shape("moe_router_forward: N >= 0, 1 <= E <= 1024, 1 <= k <= E", N, E, k);
  check_groups(E, k, n_group, topk_group);
  if (N == 0) return;
  RATCHET_LAUNCH((moe_router_forward_kernel<T>), (unsigned)ceil_div(N, kRouterRowsPerBlock),
                 32 * kRouterRowsPerBlock, 0, stream, probs, idx, w, logits, N, E, k,
                 norm_topk_prob, sigmoid, scale, bias, n_group, topk_group);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void moe_router_backward(T* dlogits, const float* probs, const int* idx, const float* w,
                         const float* dw, const float* aux_dprob, int N, int E, int k,
                         bool norm_topk_prob, cudaStream_t stream, bool sigmoid, float scale) {
  RATCHET_NVTX_RANGE("moe_router_backward");
  check_router_shape("moe_router_backward: N >= 0, 1 <= E <= 1024, 1 <= k <= E", N, E, k);
  if (N == 0) return;
  RATCHET_LAUNCH((moe_router_backward_kernel<T>), (unsigned)ceil_div(N, kRouterRowsPerBlock),
                 32 * kRouterRowsPerBlock, 0, stream, dlogits, probs, idx, w, dw, aux_dprob, N, E,
                 k, norm_topk_prob, sigmoid, scale);
  RATCHET_CHECK_LAUNCH();
}

void moe_aux_stats(double* counts, double* prob_sums, const float* probs, const int* idx, int N,
                   int E, int k, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("moe_aux_stats");
  RATCHET_REQUIRE(N >= 0 && E >= 1 && k >= 1 && k <= E,
                  "moe_aux_stats: N >= 0, E >= 1, 1 <= k <= E");
  if (N == 0) return;
  RATCHET_LAUNCH(moe_aux_stats_kernel, (unsigned)ceil_div(E, 32), 32 * kStatsWarps, 0, stream,
                 counts, prob_sums, probs, idx, N, E, k);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void moe_shared_gate_forward(T* out, const T* x, const T* g, const T* y, int N, int C,
                             cudaStream_t stream) {
  RATCHET_NVTX_RANGE("moe_shared_gate_forward");
  RATCHET_REQUIRE(N >= 0 && C >= 1, "moe_shared_gate_forward: N >= 0, C >= 1");
  if (N == 0) return;
  RATCHET_LAUNCH((moe_shared_gate_forward_kernel<T>), (unsigned)ceil_div(N, kRouterRowsPerBlock),
                 32 * kRouterRowsPerBlock, 0, stream, out, x, g, y, N, C);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void moe_shared_gate_backward(T* dys, T* dx, T* dg, void* scratch, const T* dy, const T* x,
                              const T* g, const T* y, int N, int C, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("moe_shared_gate_backward");
  RATCHET_REQUIRE(N >= 0 && C >= 1, "moe_shared_gate_backward: N >= 0, C >= 1");
  if (N == 0) return;
  const int blocks = column_sum_blocks(N);
  float* partial = static_cast<float*>(scratch);
  RATCHET_LAUNCH((moe_shared_gate_backward_kernel<T>), (unsigned)blocks, kGateBackwardThreads, 0,
                 stream, dys, dx, partial, dy, x, g, y, N, C, column_sum_rows_per_block(N));
  RATCHET_CHECK_LAUNCH();
  column_sums<T>(dg, nullptr, partial, blocks, C, C, stream);
}

#define RATCHET_INSTANTIATE(T)                                                                   \
  template void moe_router_forward<T>(float*, int*, float*, const T*, int, int, int, bool,       \
                                      cudaStream_t, bool, float, const float*, int, int);        \
  template void moe_router_backward<T>(T*, const float*, const int*, const float*, const float*, \
                                       const float*, int, int, int, bool, cudaStream_t, bool,    \
                                       float);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE
#define RATCHET_INSTANTIATE(T)                                                                   \
  template void moe_shared_gate_forward<T>(T*, const T*, const T*, const T*, int, int,           \
                                           cudaStream_t);                                        \
  template void moe_shared_gate_backward<T>(T*, T*, T*, void*, const T*, const T*, const T*,     \
                                            const T*, int, int, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

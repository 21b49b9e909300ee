// Attention around cuBLAS: causal multi-head self-attention is
//   q, k, v = permute(qkv)                  (B,T,W) -> 3 x (B,NH,T,HS)
//     qkv's row W = (NH+2KV)*HS holds NH q heads, KV k heads, KV v heads
//     (grouped-query; KV == NH is (B,T,3,NH,HS)); query head h's k and v are
//     KV head h / (NH/KV), copied out once per query head, so the GEMMs and
//     softmax below are plain multi-head attention over NH heads.
//   preatt  = q k^T                         cuBLAS, (B*NH, T, T)
//   att     = causal_softmax(preatt / sqrt(HS))
//   y       = att v                         cuBLAS, (B*NH, T, HS)
//   out     = unpermute(y)                  (B,NH,T,HS) -> (B,T,C)
// and backward
//   dy = unpermute_backward(dout); datt = dy v^T; dv = att^T dy        (cuBLAS)
//   dpreatt = softmax_backward(datt, att); dq = dpreatt k; dk = dpreatt^T q (cuBLAS)
//   dqkv = permute_backward(dq, dk, dv): dk, dv of KV head g = the sum, in head
//     order and in FP32, of dk, dv over the NH/KV query heads of its group
// Softmax (row t of a (T,T) matrix, columns s <= t only):
//   att[t,s] = exp(scale*p[t,s] - M) / sum_{s'<=t} exp(scale*p[t,s'] - M),  M = max
//   dpreatt[t,s] = scale * att[t,s] * (datt[t,s] - sum_{s'<=t} att[t,s'] datt[t,s'])
// All outputs are overwritten. One warp per softmax row; each element is read
// and written by the same lane, so in-place use is allowed.
// Options (AttnParams, issue 38): a window W keeps columns t-W < s <= t (the
// rest are 0, like those right of the diagonal); a soft-cap c softmaxes
// y = c·tanh(scale·p/c), and backward multiplies by dy/dp' = 1 - tanh², with
// the scores recomputed from q, k (B,NH,T,HS) per entry (a plain dot per
// element, rounded to the storage type as the GEMM's preatt was): no second
// (T,T) buffer. The reference path: the masked (T,T) work is not skipped.
#include "attention.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kWarpsPerBlock = 4;

// Coordinates of element i of a (B,NH,T,HS) tensor (d fastest).
struct Bhtd {
  size_t b;
  int h, t, d;
};
__device__ __forceinline__ Bhtd bhtd_index(size_t i, int Tn, int NH, int HS) {
  const int d = (int)(i % HS);
  size_t r = i / HS;
  const int t = (int)(r % Tn);
  r /= Tn;
  return {r / NH, (int)(r % NH), t, d};
}
}  // namespace

// ==== kernels ====================================================================================

// One thread per element of q (B,NH,T,HS).
template <class T>
__global__ void permute_kernel(T* q, T* k, T* v, const T* qkv, int Tn, int NH, int KV, int HS,
                               size_t total) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const auto [b, h, t, d] = bhtd_index(i, Tn, NH, HS);
  size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * KV) * HS;
  size_t row = (b * Tn + t) * W, kv = C + (size_t)(h / (NH / KV)) * HS + d;
  q[i] = qkv[row + (size_t)h * HS + d];
  k[i] = qkv[row + kv];
  v[i] = qkv[row + kv + (size_t)KV * HS];
}

// One thread per element of dq (B,NH,T,HS); the threads of heads h < KV also
// write KV head h's dk, dv: the sum over the query heads of its group.
template <class T>
__global__ void permute_backward_kernel(T* dqkv, const T* dq, const T* dk, const T* dv, int Tn,
                                        int NH, int KV, int HS, size_t total) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const auto [b, h, t, d] = bhtd_index(i, Tn, NH, HS);
  size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * KV) * HS;
  size_t row = (b * Tn + t) * W;
  dqkv[row + (size_t)h * HS + d] = dq[i];
  if (h >= KV) return;
  const int group = NH / KV;
  const size_t stride = (size_t)Tn * HS;  // between heads in (B,NH,T,HS)
  const size_t first = (((b * NH) + (size_t)h * group) * Tn + t) * HS + d;  // head h*group
  float sk = 0.0f, sv = 0.0f;
  for (int e = 0; e < group; e++) {
    sk += to_f32(dk[first + e * stride]);
    sv += to_f32(dv[first + e * stride]);
  }
  dqkv[row + C + (size_t)h * HS + d] = from_f32<T>(sk);
  dqkv[row + C + (size_t)(KV + h) * HS + d] = from_f32<T>(sv);
}

// forward: out[b,t,h,d] = y[b,h,t,d]; backward the reverse. One thread per
// 16-byte pack of a head's row of y (element copies where HS is not whole
// packs or a pointer is unaligned). The kernel until 2026-11 copied one
// element per thread: 809 GB/s in BF16 on an H200 (bench/gpu/results/2026-11-30-h200).
template <class T, bool backward, bool kVec>
__global__ void unpermute_kernel(T* dst, const T* src, int Tn, int NH, int HS, int packs_per_row,
                                 size_t packs) {
  constexpr int P = Packed128<T>::size;
  const size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= packs) return;
  const size_t row = p / packs_per_row;  // (b, h, t)
  const int d0 = (int)(p % packs_per_row) * P, n = HS - d0;
  const int t = (int)(row % Tn);
  const size_t bh = row / Tn, b = bh / NH;
  const int h = (int)(bh % NH);
  const size_t i = row * HS + d0, j = ((b * Tn + t) * NH + h) * HS + d0;  // j: in (B,T,NH,HS)
  if (backward)
    store_pack<kVec>(dst + i, load_pack<kVec, true>(src + j, n), n);
  else
    store_pack<kVec>(dst + j, load_pack<kVec, true>(src + i, n), n);
}

// The softmax's input from a stored score p: scale·p, soft-capped when c > 0.
__device__ __forceinline__ float capped_score(float p, const AttnParams& o) {
  const float s = o.scale * p;
  return o.softcap > 0.0f ? o.softcap * tanhf(s / o.softcap) : s;
}

template <class T>
__global__ void softmax_forward_kernel(T* att, const T* preatt, int rows, int Tn, AttnParams o) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // (bh, t)
  if (row >= rows) return;  // whole warp; no block barrier here
  const int lane = threadIdx.x % 32;
  const int t = row % Tn, lo = attn_first_key(t, o.window);  // columns [lo, t] are visible
  const T* p = preatt + (size_t)row * Tn;
  T* a = att + (size_t)row * Tn;
  float mx = -INFINITY;
  for (int s = lo + lane; s <= t; s += 32) mx = fmaxf(mx, capped_score(to_f32(p[s]), o));
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int s = lo + lane; s <= t; s += 32) sum += expf(capped_score(to_f32(p[s]), o) - mx);
  const float inv = 1.0f / warp_sum(sum);
  for (int s = lane; s < Tn; s += 32)
    a[s] = from_f32<T>(s >= lo && s <= t ? expf(capped_score(to_f32(p[s]), o) - mx) * inv : 0.0f);
}

// q, k (BH,T,HS): read only under a soft-cap (the slope's scores).
template <class T>
__global__ void softmax_backward_kernel(T* dpreatt, const T* datt, const T* att, int rows,
                                        int Tn, AttnParams o, const T* q, const T* k, int HS) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int t = row % Tn, lo = attn_first_key(t, o.window);
  const size_t off = (size_t)row * Tn;
  float dot = 0.0f;
  for (int s = lo + lane; s <= t; s += 32) dot += to_f32(att[off + s]) * to_f32(datt[off + s]);
  dot = warp_sum(dot);
  const size_t head = (size_t)(row / Tn) * Tn * HS;  // this (b,h)'s q, k rows
  for (int s = lane; s < Tn; s += 32) {
    float g = 0.0f;
    if (s >= lo && s <= t) {
      g = o.scale * to_f32(att[off + s]) * (to_f32(datt[off + s]) - dot);
      if (o.softcap > 0.0f) {
        float qk = 0.0f;
        for (int d = 0; d < HS; d++)
          qk += to_f32(q[head + (size_t)t * HS + d]) * to_f32(k[head + (size_t)s * HS + d]);
        const float th = tanhf(o.scale * to_f32(from_f32<T>(qk)) / o.softcap);
        g *= 1.0f - th * th;
      }
    }
    dpreatt[off + s] = from_f32<T>(g);
  }
}

// ==== launchers ==================================================================================

namespace {
void require_shape(int B, int Tn, int NH, int HS) {
  RATCHET_REQUIRE(B > 0 && Tn > 0 && NH > 0 && HS > 0, "attention: B, T, NH, HS must be positive");
}
}  // namespace

template <class T>
void attention_permute(T* q, T* k, T* v, const T* qkv, int B, int Tn, int NH, int KV, int HS,
                       cudaStream_t stream) {
  RATCHET_NVTX_RANGE("attention_permute");
  require_shape(B, Tn, NH, HS);
  RATCHET_REQUIRE(KV > 0 && NH % KV == 0, "attention: KV heads must divide NH");
  size_t total = (size_t)B * NH * Tn * HS;
  RATCHET_LAUNCH((permute_kernel<T>), (unsigned)ceil_div<size_t>(total, 256), 256, 0, stream, q,
                 k, v, qkv, Tn, NH, KV, HS, total);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void attention_permute_backward(T* dqkv, const T* dq, const T* dk, const T* dv, int B, int Tn,
                                int NH, int KV, int HS, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("attention_permute_backward");
  require_shape(B, Tn, NH, HS);
  RATCHET_REQUIRE(KV > 0 && NH % KV == 0, "attention: KV heads must divide NH");
  size_t total = (size_t)B * NH * Tn * HS;
  RATCHET_LAUNCH((permute_backward_kernel<T>), (unsigned)ceil_div<size_t>(total, 256), 256, 0,
                 stream, dqkv, dq, dk, dv, Tn, NH, KV, HS, total);
  RATCHET_CHECK_LAUNCH();
}

namespace {
template <class T, bool backward>
void unpermute_launch(T* dst, const T* src, int B, int Tn, int NH, int HS, cudaStream_t stream) {
  const int ppr = ceil_div(HS, Packed128<T>::size);
  const size_t packs = (size_t)B * NH * Tn * ppr;
  const unsigned grid = (unsigned)ceil_div<size_t>(packs, 256);
  if (packs_fit<T>(HS, {dst, src}))
    RATCHET_LAUNCH((unpermute_kernel<T, backward, true>), grid, 256, 0, stream, dst, src, Tn, NH,
                   HS, ppr, packs);
  else
    RATCHET_LAUNCH((unpermute_kernel<T, backward, false>), grid, 256, 0, stream, dst, src, Tn, NH,
                   HS, ppr, packs);
  RATCHET_CHECK_LAUNCH();
}
}  // namespace

template <class T>
void attention_unpermute(T* out, const T* y, int B, int Tn, int NH, int HS, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("attention_unpermute");
  require_shape(B, Tn, NH, HS);
  unpermute_launch<T, false>(out, y, B, Tn, NH, HS, stream);
}

template <class T>
void attention_unpermute_backward(T* dy, const T* dout, int B, int Tn, int NH, int HS,
                                  cudaStream_t stream) {
  RATCHET_NVTX_RANGE("attention_unpermute_backward");
  require_shape(B, Tn, NH, HS);
  unpermute_launch<T, true>(dy, dout, B, Tn, NH, HS, stream);
}

template <class T>
void attention_softmax_forward(T* att, const T* preatt, int BH, int Tn, const AttnParams& o,
                               cudaStream_t stream) {
  RATCHET_NVTX_RANGE("attention_softmax_forward");
  RATCHET_REQUIRE(BH > 0 && Tn > 0, "attention_softmax_forward: BH, T must be positive");
  RATCHET_REQUIRE(o.window >= 0 && o.softcap >= 0.0f,
                  "attention_softmax_forward: window and soft-cap must be >= 0 (0: none)");
  int rows = BH * Tn;
  RATCHET_LAUNCH((softmax_forward_kernel<T>), (unsigned)ceil_div(rows, kWarpsPerBlock),
                 32 * kWarpsPerBlock, 0, stream, att, preatt, rows, Tn, o);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void attention_softmax_backward(T* dpreatt, const T* datt, const T* att, int BH, int Tn,
                                const AttnParams& o, const T* q, const T* k, int HS,
                                cudaStream_t stream) {
  RATCHET_NVTX_RANGE("attention_softmax_backward");
  RATCHET_REQUIRE(BH > 0 && Tn > 0, "attention_softmax_backward: BH, T must be positive");
  RATCHET_REQUIRE(o.window >= 0 && o.softcap >= 0.0f,
                  "attention_softmax_backward: window and soft-cap must be >= 0 (0: none)");
  RATCHET_REQUIRE(o.softcap == 0.0f || (q && k && HS > 0),
                  "attention_softmax_backward: a soft-cap needs q, k and HS (the scores)");
  int rows = BH * Tn;
  RATCHET_LAUNCH((softmax_backward_kernel<T>), (unsigned)ceil_div(rows, kWarpsPerBlock),
                 32 * kWarpsPerBlock, 0, stream, dpreatt, datt, att, rows, Tn, o, q, k, HS);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void attention_softmax_forward(T* att, const T* preatt, int BH, int Tn, float scale,
                               cudaStream_t stream) {
  AttnParams o;
  o.scale = scale;
  attention_softmax_forward(att, preatt, BH, Tn, o, stream);
}

template <class T>
void attention_softmax_backward(T* dpreatt, const T* datt, const T* att, int BH, int Tn,
                                float scale, cudaStream_t stream) {
  AttnParams o;
  o.scale = scale;
  attention_softmax_backward<T>(dpreatt, datt, att, BH, Tn, o, nullptr, nullptr, 0, stream);
}

#define RATCHET_INSTANTIATE(T)                                                                 \
  template void attention_permute<T>(T*, T*, T*, const T*, int, int, int, int, int,           \
                                     cudaStream_t);                                            \
  template void attention_permute_backward<T>(T*, const T*, const T*, const T*, int, int, int, \
                                              int, int, cudaStream_t);                         \
  template void attention_unpermute<T>(T*, const T*, int, int, int, int, cudaStream_t);        \
  template void attention_unpermute_backward<T>(T*, const T*, int, int, int, int,              \
                                                cudaStream_t);                                 \
  template void attention_softmax_forward<T>(T*, const T*, int, int, float, cudaStream_t);     \
  template void attention_softmax_backward<T>(T*, const T*, const T*, int, int, float,         \
                                              cudaStream_t);                                   \
  template void attention_softmax_forward<T>(T*, const T*, int, int, const AttnParams&,        \
                                             cudaStream_t);                                    \
  template void attention_softmax_backward<T>(T*, const T*, const T*, int, int,                \
                                              const AttnParams&, const T*, const T*, int,      \
                                              cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

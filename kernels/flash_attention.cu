// Causal flash attention (FlashAttention-2 scheme); math, shapes and costs in
// flash_attention.cuh. Options (AttnParams, kernels/attn_mask.h): a window
// starts the key loops (forward, dq) at the first tile any row of the query
// tile sees and ends the dk/dv query loop past the last row that sees the key
// tile; entries left of a row's window are masked like those right of the
// diagonal. A soft-cap c maps s to y = c·tanh(s/c) before the softmax, and
// backward multiplies ds by dy/ds = 1 - tanh² (recomputed with p).
// Block layout shared by the three tile kernels: Br = Bc = 2048/HS rows per
// tile, 4 threads per row (tid/4 = row, tid%4 = part), part p owning output
// columns [p*HS/4, (p+1)*HS/4) in registers.
#include "flash_attention.cuh"

#include <cmath>

namespace ratchet::kernels {

namespace {
template <int HS>
struct Tile {
  static constexpr int rows = HS <= 64 ? 32 : 2048 / HS;  // Br = Bc
  static constexpr int threads = 4 * rows;
  static constexpr int cols = HS / 4;  // output columns per thread
};

// dst (R,HS) FP32 <- rows [r0, r0+R) of a (Tn, ld) matrix, zeros past Tn.
template <class T, int R, int HS>
__device__ __forceinline__ void load_tile(float (*dst)[HS], const T* src, size_t ld, int r0,
                                          int Tn) {
  for (int idx = threadIdx.x; idx < R * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS, i = r0 + r;
    dst[r][d] = i < Tn ? to_f32(src[(size_t)i * ld + d]) : 0.0f;
  }
}

// Where a tile kernel's thread is: its row in the block's tile and its part
// of the columns, the (b, h) of the block (h: a query head, or a KV head in
// the dk/dv kernel, whose blockIdx.y runs over B*KV), the tile's first row,
// the widths: C = NH*HS, W = (NH+2KV)*HS the row of qkv.
template <int HS>
struct HeadTile {
  int row, part, bh, b, h, r0;
  int C, W;  // small: ints keep the tile kernels' register use as before GQA
  __device__ HeadTile(int NH, int KV, int heads_per_y)
      : row(threadIdx.x / 4), part(threadIdx.x % 4), bh(blockIdx.y), b(bh / heads_per_y),
        h(bh % heads_per_y), r0(blockIdx.x * Tile<HS>::rows), C((size_t)NH * HS),
        W((size_t)(NH + 2 * KV) * HS) {}
  // Rows of head h in a (B,T,ld) tensor: q (ld W), out, dout (ld C).
  template <class T>
  __device__ const T* head(const T* x, int Tn, size_t ld, int hh) const {
    return x + (size_t)b * Tn * ld + (size_t)hh * HS;
  }
  // Key head g's rows in qkv (ld W); its value head is KV*HS further.
  template <class T>
  __device__ const T* key(const T* qkv, int Tn, int g) const {
    return qkv + (size_t)b * Tn * W + C + g * HS;
  }
};

template <int HS>
__device__ __forceinline__ float dot_row(const float* a, const float* b) {
  float s = 0.0f;
  for (int d = 0; d < HS; d++) s += a[d] * b[d];
  return s;
}

// The score of a visible pair from the dot product: scale·dot, soft-capped
// when c > 0.
__device__ __forceinline__ float attn_score(float dot, const AttnParams& o) {
  const float s = o.scale * dot;
  return o.softcap > 0.0f ? o.softcap * tanhf(s / o.softcap) : s;
}
// Backward: p = exp(y - lse) and ds = p·(dp - D)·scale·dy/ds, dy/ds = 1 - tanh²
// under a soft-cap (exactly 1 without: the same bits as the plain kernel).
__device__ __forceinline__ float attn_ds(float qk, float dp, float L, float D,
                                         const AttnParams& o, float* p) {
  const float s = o.scale * qk;
  float y = s, slope = 1.0f;
  if (o.softcap > 0.0f) {
    const float t = tanhf(s / o.softcap);
    y = o.softcap * t;
    slope = 1.0f - t * t;
  }
  *p = expf(y - L);
  return *p * (dp - D) * o.scale * slope;
}
}  // namespace

// ==== forward ====================================================================================
// grid (ceil(T/Br), B*NH). kBarrier = false drops the barrier between loading
// a K/V tile and reading it (test only: the planted bug).
template <class T, int HS, bool kBarrier = true>
__global__ void __launch_bounds__(Tile<HS>::threads)
    flash_forward_kernel(T* out, float* lse, const T* qkv, int Tn, int NH, int KV,
                         AttnParams opt) {
  constexpr int R = Tile<HS>::rows, CPT = Tile<HS>::cols;
  __shared__ float Qs[R][HS];  // (Br,HS) this block's queries
  __shared__ float Ks[R][HS];  // (Bc,HS) the current key tile
  __shared__ float Vs[R][HS];  // (Bc,HS) the current value tile
  __shared__ float S[R][R];    // (Br,Bc) scores of the tile
  const HeadTile<HS> t(NH, KV, NH);
  const int row = t.row, part = t.part, bh = t.bh, i0 = t.r0, i = i0 + row;
  const int C = t.C, W = t.W, VO = KV * HS;  // VO: value head after its key head
  const T* q = t.head(qkv, Tn, W, t.h);
  const T* k = t.key(qkv, Tn, t.h / (NH / KV));
  load_tile<T, R, HS>(Qs, q, W, i0, Tn);
  float o[CPT];
  for (int d = 0; d < CPT; d++) o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int last = min(i0 + R, Tn) - 1;  // the tile's last query row
  for (int j0 = flash_key_tile_start(i0, opt.window, R); j0 <= last; j0 += R) {
    __syncthreads();  // the previous tile's Ks, Vs, S are read (and Qs is loaded)
    load_tile<T, R, HS>(Ks, k, W, j0, Tn);
    load_tile<T, R, HS>(Vs, k + VO, W, j0, Tn);
    if (kBarrier) __syncthreads();
    for (int c = part; c < R; c += 4) {
      const int j = j0 + c;
      S[row][c] = (i < Tn && attn_visible(i, j, opt.window))
                      ? attn_score(dot_row<HS>(Qs[row], Ks[c]), opt)
                      : -INFINITY;
    }
    __syncthreads();
    float mx = m;
    for (int c = 0; c < R; c++) mx = fmaxf(mx, S[row][c]);
    const float base = mx == -INFINITY ? 0.0f : mx;  // no visible key (yet, or past T)
    const float alpha = expf(m - base);               // 0 on the first tile
    float sum = 0.0f;
    for (int d = 0; d < CPT; d++) o[d] *= alpha;
    for (int c = 0; c < R; c++) {
      const float p = expf(S[row][c] - base);  // 0 for masked scores
      sum += p;
      for (int d = 0; d < CPT; d++) o[d] += p * Vs[c][part * CPT + d];
    }
    l = l * alpha + sum;
    m = mx;
  }
  if (i >= Tn) return;
  const float inv = 1.0f / l;
  T* dst = out + ((size_t)t.b * Tn + i) * C + (size_t)t.h * HS + part * CPT;
  for (int d = 0; d < CPT; d++) dst[d] = from_f32<T>(o[d] * inv);
  if (part == 0) lse[(size_t)bh * Tn + i] = m + logf(l);
}

// ==== backward ===================================================================================
// D (B,NH,T) = rowsum(dout * out) per head; one thread per (bh, i).
template <class T>
__global__ void flash_backward_dot_kernel(float* D, const T* dout, const T* out, int Tn, int NH,
                                          int HS, size_t total) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int i = (int)(idx % Tn);
  const size_t bh = idx / Tn, b = bh / NH, h = bh % NH, C = (size_t)NH * HS;
  const size_t off = (b * Tn + i) * C + h * HS;
  float s = 0.0f;
  for (int d = 0; d < HS; d++) s += to_f32(dout[off + d]) * to_f32(out[off + d]);
  D[idx] = s;
}

// dk, dv of one key tile of KV head g, over the query tiles at and below it,
// for each of the NH/KV query heads of its group in order (the group's sum
// stays in registers: one writer, fixed order). grid (ceil(T/Bc), B*KV).
template <class T, int HS>
__global__ void __launch_bounds__(Tile<HS>::threads)
    flash_backward_dkdv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                               const float* D, int Tn, int NH, int KV, AttnParams opt) {
  constexpr int R = Tile<HS>::rows, CPT = Tile<HS>::cols;
  __shared__ float Ks[R][HS], Vs[R][HS];   // (Bc,HS) this block's keys, values
  __shared__ float Qs[R][HS], dOs[R][HS];  // (Br,HS) the current query tile
  __shared__ float Ps[R][R], dSs[R][R];    // (Br,Bc) p and ds of the tile
  __shared__ float Ls[R], Ds[R];           // (Br) lse and D of the query tile
  const HeadTile<HS> t(NH, KV, KV);
  const int c = t.row, part = t.part, g = t.h, j0 = t.r0, j = j0 + c;  // c: the key row
  const int C = t.C, W = t.W, VO = KV * HS;
  const int group = NH / KV;
  const T* k = t.key(qkv, Tn, g);
  load_tile<T, R, HS>(Ks, k, W, j0, Tn);
  load_tile<T, R, HS>(Vs, k + VO, W, j0, Tn);
  float dk[CPT], dv[CPT];
  for (int d = 0; d < CPT; d++) dk[d] = dv[d] = 0.0f;
  // One flat loop over (query head of the group, query tile at or below the
  // diagonal, before the rows past every key's window): fewer live values
  // than two nested loops (no spills on sm_80).
  const int tiles = ceil_div(flash_query_row_end(j0, R, Tn, opt.window) - j0, R);
  for (int it = 0; it < group * tiles; it++) {
    const int h = g * group + it / tiles, i0 = j0 + (it % tiles) * R;  // Br == Bc
    const T* q = t.head(qkv, Tn, W, h);
    const T* dO = t.head(dout, Tn, C, h);
    const size_t bh = (size_t)t.b * NH + h;  // lse, D (B,NH,T)
    __syncthreads();  // the previous tile's Qs, dOs, Ps, dSs are read
    load_tile<T, R, HS>(Qs, q, W, i0, Tn);
    load_tile<T, R, HS>(dOs, dO, C, i0, Tn);
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
      const bool in = i0 + r < Tn;
      Ls[r] = in ? lse[bh * Tn + i0 + r] : 0.0f;
      Ds[r] = in ? D[bh * Tn + i0 + r] : 0.0f;
    }
    __syncthreads();
    for (int r = part; r < R; r += 4) {
      const int i = i0 + r;
      float p = 0.0f, ds = 0.0f;
      if (i < Tn && attn_visible(i, j, opt.window))
        ds = attn_ds(dot_row<HS>(Qs[r], Ks[c]), dot_row<HS>(dOs[r], Vs[c]), Ls[r], Ds[r], opt,
                     &p);
      Ps[r][c] = p;
      dSs[r][c] = ds;
    }
    __syncthreads();
    for (int r = 0; r < R; r++) {
      const float p = Ps[r][c], ds = dSs[r][c];
      for (int d = 0; d < CPT; d++) {
        dv[d] += p * dOs[r][part * CPT + d];
        dk[d] += ds * Qs[r][part * CPT + d];
      }
    }
  }
  if (j >= Tn) return;
  T* dst = dqkv + ((size_t)t.b * Tn + j) * W + C + (size_t)g * HS + part * CPT;
  for (int d = 0; d < CPT; d++) {
    dst[d] = from_f32<T>(dk[d]);
    dst[VO + d] = from_f32<T>(dv[d]);
  }
}

// dq of one query tile, over the key tiles at and left of it. grid (ceil(T/Br), B*NH).
template <class T, int HS>
__global__ void __launch_bounds__(Tile<HS>::threads)
    flash_backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                             const float* D, int Tn, int NH, int KV, AttnParams opt) {
  constexpr int R = Tile<HS>::rows, CPT = Tile<HS>::cols;
  __shared__ float Qs[R][HS], dOs[R][HS];  // (Br,HS) this block's queries
  __shared__ float Ks[R][HS], Vs[R][HS];   // (Bc,HS) the current key tile
  __shared__ float dSs[R][R];              // (Br,Bc)
  const HeadTile<HS> t(NH, KV, NH);
  const int row = t.row, part = t.part, bh = t.bh, i0 = t.r0, i = i0 + row;
  const int C = t.C, W = t.W, VO = KV * HS;
  const T* q = t.head(qkv, Tn, W, t.h);
  const T* k = t.key(qkv, Tn, t.h / (NH / KV));
  load_tile<T, R, HS>(Qs, q, W, i0, Tn);
  load_tile<T, R, HS>(dOs, t.head(dout, Tn, C, t.h), C, i0, Tn);
  const float L = i < Tn ? lse[(size_t)bh * Tn + i] : 0.0f;
  const float Di = i < Tn ? D[(size_t)bh * Tn + i] : 0.0f;
  float dq[CPT];
  for (int d = 0; d < CPT; d++) dq[d] = 0.0f;
  const int last = min(i0 + R, Tn) - 1;
  for (int j0 = flash_key_tile_start(i0, opt.window, R); j0 <= last; j0 += R) {
    __syncthreads();  // the previous Ks, Vs, dSs are read (and Qs, dOs loaded)
    load_tile<T, R, HS>(Ks, k, W, j0, Tn);
    load_tile<T, R, HS>(Vs, k + VO, W, j0, Tn);
    __syncthreads();
    for (int c = part; c < R; c += 4) {
      const int j = j0 + c;
      float ds = 0.0f;
      if (i < Tn && attn_visible(i, j, opt.window)) {
        float p;
        ds = attn_ds(dot_row<HS>(Qs[row], Ks[c]), dot_row<HS>(dOs[row], Vs[c]), L, Di, opt, &p);
      }
      dSs[row][c] = ds;
    }
    __syncthreads();
    for (int c = 0; c < R; c++) {
      const float ds = dSs[row][c];
      for (int d = 0; d < CPT; d++) dq[d] += ds * Ks[c][part * CPT + d];
    }
  }
  if (i >= Tn) return;
  T* dst = dqkv + ((size_t)t.b * Tn + i) * W + (size_t)t.h * HS + part * CPT;
  for (int d = 0; d < CPT; d++) dst[d] = from_f32<T>(dq[d]);
}

// ==== launchers ==================================================================================

bool flash_attention_supports(int HS) {
  return HS == 8 || HS == 16 || HS == 32 || HS == 64 || HS == 128;
}

namespace {
void require_flash_shape(int B, int Tn, int NH, int KV, int HS) {
  RATCHET_REQUIRE(B > 0 && Tn > 0 && NH > 0, "flash attention: B, T, NH must be positive");
  RATCHET_REQUIRE(KV > 0 && NH % KV == 0, "flash attention: KV heads must divide NH");
  RATCHET_REQUIRE(flash_attention_supports(HS),
                  "flash attention: head size must be 8, 16, 32, 64 or 128");
}
void require_params(const AttnParams& o) {
  RATCHET_REQUIRE(o.window >= 0, "flash attention: the window must be >= 0 (0: none)");
  RATCHET_REQUIRE(o.scale != 0.0f && std::isfinite(o.scale),
                  "flash attention: the score scale must be finite and nonzero");
  RATCHET_REQUIRE(o.softcap >= 0.0f && std::isfinite(o.softcap),
                  "flash attention: the soft-cap must be >= 0 (0: none) and finite");
}

template <class T, int HS, bool kBarrier>
void forward_hs(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int KV,
                const AttnParams& o, cudaStream_t stream) {
  constexpr int R = Tile<HS>::rows;
  const dim3 grid((unsigned)ceil_div(Tn, R), (unsigned)(B * NH));
  RATCHET_LAUNCH((flash_forward_kernel<T, HS, kBarrier>), grid, Tile<HS>::threads, 0, stream, out,
                 lse, qkv, Tn, NH, KV, o);
  RATCHET_CHECK_LAUNCH();
}

template <class T, int HS>
void backward_hs(T* dqkv, const float* D, const T* dout, const T* qkv, const float* lse, int B,
                 int Tn, int NH, int KV, const AttnParams& o, cudaStream_t stream) {
  constexpr int R = Tile<HS>::rows;
  const dim3 grid_kv((unsigned)ceil_div(Tn, R), (unsigned)(B * KV));
  RATCHET_LAUNCH((flash_backward_dkdv_kernel<T, HS>), grid_kv, Tile<HS>::threads, 0, stream, dqkv,
                 dout, qkv, lse, D, Tn, NH, KV, o);
  RATCHET_CHECK_LAUNCH();
  const dim3 grid((unsigned)ceil_div(Tn, R), (unsigned)(B * NH));
  RATCHET_LAUNCH((flash_backward_dq_kernel<T, HS>), grid, Tile<HS>::threads, 0, stream, dqkv,
                 dout, qkv, lse, D, Tn, NH, KV, o);
  RATCHET_CHECK_LAUNCH();
}
}  // namespace

template <class T>
void flash_attention_forward(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int KV,
                             int HS, const AttnParams& o, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("flash_attention_forward");
  require_flash_shape(B, Tn, NH, KV, HS);
  require_params(o);
  switch (HS) {
    case 8: return forward_hs<T, 8, true>(out, lse, qkv, B, Tn, NH, KV, o, stream);
    case 16: return forward_hs<T, 16, true>(out, lse, qkv, B, Tn, NH, KV, o, stream);
    case 32: return forward_hs<T, 32, true>(out, lse, qkv, B, Tn, NH, KV, o, stream);
    case 64: return forward_hs<T, 64, true>(out, lse, qkv, B, Tn, NH, KV, o, stream);
    default: return forward_hs<T, 128, true>(out, lse, qkv, B, Tn, NH, KV, o, stream);
  }
}

template <class T>
void flash_attention_backward(T* dqkv, float* D, const T* dout, const T* qkv, const T* out,
                              const float* lse, int B, int Tn, int NH, int KV, int HS,
                              const AttnParams& o, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("flash_attention_backward");
  require_flash_shape(B, Tn, NH, KV, HS);
  require_params(o);
  const size_t total = (size_t)B * NH * Tn;
  RATCHET_LAUNCH((flash_backward_dot_kernel<T>), (unsigned)ceil_div<size_t>(total, 256), 256, 0,
                 stream, D, dout, out, Tn, NH, HS, total);
  RATCHET_CHECK_LAUNCH();
  switch (HS) {
    case 8: return backward_hs<T, 8>(dqkv, D, dout, qkv, lse, B, Tn, NH, KV, o, stream);
    case 16: return backward_hs<T, 16>(dqkv, D, dout, qkv, lse, B, Tn, NH, KV, o, stream);
    case 32: return backward_hs<T, 32>(dqkv, D, dout, qkv, lse, B, Tn, NH, KV, o, stream);
    case 64: return backward_hs<T, 64>(dqkv, D, dout, qkv, lse, B, Tn, NH, KV, o, stream);
    default: return backward_hs<T, 128>(dqkv, D, dout, qkv, lse, B, Tn, NH, KV, o, stream);
  }
}

#if RATCHET_SIMT
void flash_attention_forward_missing_barrier(float* out, float* lse, const float* qkv, int B,
                                             int Tn, int NH, int HS) {
  require_flash_shape(B, Tn, NH, NH, HS);
  RATCHET_REQUIRE(HS == 64, "the planted-bug forward is built for head size 64 only");
  forward_hs<float, 64, false>(out, lse, qkv, B, Tn, NH, NH, flash_causal_params(64), nullptr);
}
#endif

#define RATCHET_INSTANTIATE(T)                                                                   \
  template void flash_attention_forward<T>(T*, float*, const T*, int, int, int, int, int,        \
                                           const AttnParams&, cudaStream_t);                     \
  template void flash_attention_backward<T>(T*, float*, const T*, const T*, const T*,            \
                                            const float*, int, int, int, int, int,               \
                                            const AttnParams&, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

// Token + position embedding.
//   forward:  out[b,t,c] = wte[inp[b,t], c] + wpe[t, c]         out (B,T,C) overwritten
//   backward: dwte[v,c] += sum_{(b,t): inp[b,t]=v} dout[b,t,c]  dwte (Vp,C) accumulated
//             dwpe[t,c] += sum_b dout[b,t,c]                    dwpe (maxT,C) accumulated
// The dwte scatter is deterministic without atomics: the (token, position)
// keys (token<<32 | position: unique, so every sort gives the same order) are
// sorted in chunks of kEncoderSortChunk in shared memory (one launch), then
// merged pairwise (one launch per doubling: 3 at B*T = 16384); then one block
// per run of equal tokens and channel chunk sums the run's rows, its warps
// taking every kEncoderRunWarps-th element, in a fixed order. dwpe: one thread
// per 128-bit pack of (t, c) sums over b. All sums are FP32, stored in T once.
// Bytes per call: encoder_backward_bytes (encoder.cuh).
#include "encoder.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kEncoderRunWarps = 16;    // warps summing one run
constexpr int kEncoderRunBlocks = 2048;  // blocks walking the sorted indices
}  // namespace

// ==== kernels ====================================================================================

// forward: one thread per 16-byte pack of a row (element loads where C is
// not whole packs or a pointer is unaligned; the same sum either way). The
// kernel until 2026-11 took one element per thread with 2-byte loads in BF16:
// 962 GB/s on an H200 (bench/gpu/results/2026-11-30-h200).
template <bool kVec, class T>
__global__ void encoder_forward_kernel(T* out, const int* inp, const T* wte, const T* wpe, int Tn,
                                       int C, int packs_per_row, size_t packs) {
  constexpr int P = Packed128<T>::size;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += stride) {
    const size_t bt = i / packs_per_row;
    const int c0 = (int)(i % packs_per_row) * P, n = C - c0;
    const int t = (int)(bt % Tn), tok = inp[bt];
    const Packed128<T> e = load_pack<kVec>(wte + (size_t)tok * C + c0, n),
                       p = load_pack<kVec>(wpe + (size_t)t * C + c0, n);
    Packed128<T> o;
    for (int k = 0; k < P; k++) o[k] = from_f32<T>(pack_f32(e, k) + pack_f32(p, k));
    store_pack<kVec>(out + bt * C + c0, o, n);
  }
}

// dwpe (T,C) += sum over b of dout (B,T,C); one thread per pack of (t, c), b in order.
template <class T, bool kVec>
__global__ void encoder_dwpe_kernel(T* __restrict__ dwpe, const T* __restrict__ dout, int B,
                                    int Tn, int C) {
  constexpr int P = Packed128<T>::size;
  const int packs_per_row = ceil_div(C, P);
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)Tn * packs_per_row) return;
  const int t = (int)(i / packs_per_row), c0 = (int)(i % packs_per_row) * P;
  float acc[P];
  for (int k = 0; k < P; k++) acc[k] = 0.0f;
  for (int b = 0; b < B; b++) {
    const Packed128<T> d = load_pack<kVec, true>(dout + ((size_t)b * Tn + t) * C + c0, C - c0);
    for (int k = 0; k < P; k++) acc[k] += pack_f32(d, k);
  }
  T* dst = dwpe + (size_t)t * C + c0;
  Packed128<T> o = load_pack<kVec>(dst, C - c0);
  for (int k = 0; k < P; k++) o[k] = from_f32<T>(to_f32(o[k]) + acc[k]);
  store_pack<kVec>(dst, o, C - c0);
}

// Sort key of position g: token << 32 | g (unique: ties cannot occur); the
// padding past BT sorts last, still unique.
__device__ __forceinline__ unsigned long long encoder_key(const int* inp, int BT, int g) {
  const unsigned long long tok = g < BT ? (unsigned)inp[g] : 0xFFFFFFFFu;
  return tok << 32 | (unsigned)g;
}

// keys (n) = the keys of positions [blockIdx.x * 2 blockDim.x, +2 blockDim.x),
// sorted ascending by a bitonic network in shared memory (chunk = 2 blockDim.x
// keys, a power of two).
__global__ void __launch_bounds__(kEncoderSortChunk / 2)
    encoder_sort_chunks_kernel(unsigned long long* __restrict__ keys, const int* __restrict__ inp,
                               int BT) {
  unsigned long long* sk = dynamic_smem<unsigned long long>();
  const int chunk = 2 * blockDim.x, base = blockIdx.x * chunk;
  for (int i = threadIdx.x; i < chunk; i += blockDim.x) sk[i] = encoder_key(inp, BT, base + i);
  __syncthreads();
  for (int k = 2; k <= chunk; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      const int t = threadIdx.x;
      const int i = (t / j) * 2 * j + t % j, l = i + j;  // one pair (i, i + j) per thread
      const unsigned long long a = sk[i], b = sk[l];
      const bool ascending = (i & k) == 0;
      if (ascending ? a > b : a < b) {
        sk[i] = b;
        sk[l] = a;
      }
      __syncthreads();
    }
  for (int i = threadIdx.x; i < chunk; i += blockDim.x) keys[base + i] = sk[i];
}

// out (n) = in (n) with its sorted runs of L keys merged pairwise into runs of
// 2L: each key lands at its index in its run plus the number of keys of the
// partner run below it (binary search; keys are unique, so no ties).
__global__ void encoder_merge_kernel(unsigned long long* __restrict__ out,
                                     const unsigned long long* __restrict__ in, int n, int L) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned long long key = in[i];
  const int run = i / L, a = i % L;
  const unsigned long long* partner = in + (size_t)(run ^ 1) * L;
  int lo = 0, hi = L;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (partner[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  out[(size_t)(run & ~1) * L + a + lo] = key;
}

// grid (kEncoderRunBlocks or fewer, channel chunks of 32 packs). Block b takes
// the sorted indices s = b, b + gridDim.x, ... that start a run of equal
// tokens; its warps sum the run's dout rows (warp w: run elements w, w +
// warps, ..., in order), then warp 0 adds the warps' sums in warp order into
// the token's dwte row.
// Issue 41 tried a variant with 8 rows of a run in flight per warp (fewer
// dependent key -> dout loads on the long runs of frequent tokens). On the
// H200 it was faster on the byte-level KJV (153.9 -> 124.8 us/call at d12
// B=16 T=1024) but half as fast in bench_kernels (332 -> 172 GB/s), for
// 0.03 ms of a 31.9 ms step: not kept (bench/gpu/README.md).
template <class T, bool kVec>
__global__ void __launch_bounds__(kEncoderRunWarps * 32)
    encoder_dwte_kernel(T* __restrict__ dwte, const T* __restrict__ dout,
                        const unsigned long long* __restrict__ keys, int BT, int C) {
  constexpr int P = Packed128<T>::size;
  __shared__ float sums[kEncoderRunWarps][32 * P];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int c0 = (blockIdx.y * 32 + lane) * P;
  for (int s = blockIdx.x; s < BT; s += gridDim.x) {
    const unsigned tok = (unsigned)(keys[s] >> 32);
    if (s > 0 && (unsigned)(keys[s - 1] >> 32) == tok) continue;  // uniform: depends on s only
    float acc[P];
    for (int k = 0; k < P; k++) acc[k] = 0.0f;
    for (int r = s + warp; r < BT; r += kEncoderRunWarps) {
      const unsigned long long key = keys[r];
      if ((unsigned)(key >> 32) != tok) break;
      const size_t pos = (unsigned)(key & 0xFFFFFFFFu);
      const Packed128<T> d = load_pack<kVec, true>(dout + pos * C + c0, C - c0);
      for (int k = 0; k < P; k++) acc[k] += pack_f32(d, k);
    }
    for (int k = 0; k < P; k++) sums[warp][lane * P + k] = acc[k];
    __syncthreads();
    if (warp == 0) {
      for (int k = 0; k < P; k++) acc[k] = 0.0f;
      for (int w = 0; w < kEncoderRunWarps; w++)
        for (int k = 0; k < P; k++) acc[k] += sums[w][lane * P + k];
      T* dst = dwte + (size_t)tok * C + c0;
      Packed128<T> o = load_pack<kVec>(dst, C - c0);
      for (int k = 0; k < P; k++) o[k] = from_f32<T>(to_f32(o[k]) + acc[k]);
      store_pack<kVec>(dst, o, C - c0);
    }
    __syncthreads();  // sums is rewritten by the next run
  }
}

// ==== launchers ==================================================================================

template <class T>
void encoder_forward(T* out, const int* inp, const T* wte, const T* wpe, int B, int Tn, int C,
                     cudaStream_t stream) {
  RATCHET_NVTX_RANGE("encoder_forward");
  RATCHET_REQUIRE(B > 0 && Tn > 0 && C > 0, "encoder_forward: B, T, C must be positive");
  const int ppr = ceil_div(C, Packed128<T>::size);
  const size_t packs = (size_t)B * Tn * ppr;
  const int block = 256;
  const unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(packs, block), 65536);
  if (packs_fit<T>(C, {out, wte, wpe}))
    RATCHET_LAUNCH((encoder_forward_kernel<true, T>), grid, block, 0, stream, out, inp, wte, wpe,
                   Tn, C, ppr, packs);
  else
    RATCHET_LAUNCH((encoder_forward_kernel<false, T>), grid, block, 0, stream, out, inp, wte, wpe,
                   Tn, C, ppr, packs);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, void* scratch, const T* dout, const int* inp, int B,
                      int Tn, int C, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("encoder_backward");
  RATCHET_REQUIRE(B > 0 && Tn > 0 && C > 0, "encoder_backward: B, T, C must be positive");
  RATCHET_REQUIRE((size_t)B * Tn < (1u << 30), "encoder_backward: B*T must be < 2^30");
  RATCHET_REQUIRE(scratch != nullptr, "encoder_backward: needs encoder_backward_scratch_bytes");
  constexpr int P = Packed128<T>::size;
  const bool vec = packs_fit<T>(C, {dwte, dwpe, dout});
  const int block = 256, packs = ceil_div(C, P);
  const unsigned pgrid = (unsigned)ceil_div<size_t>((size_t)Tn * packs, block);
  if (vec)
    RATCHET_LAUNCH((encoder_dwpe_kernel<T, true>), pgrid, block, 0, stream, dwpe, dout, B, Tn, C);
  else
    RATCHET_LAUNCH((encoder_dwpe_kernel<T, false>), pgrid, block, 0, stream, dwpe, dout, B, Tn, C);
  RATCHET_CHECK_LAUNCH();

  // Sort the (token, position) keys: chunks in shared memory, then merges.
  const int BT = B * Tn, n = (int)encoder_sort_keys(B, Tn);
  const int chunk = std::min(n, kEncoderSortChunk);
  auto* keys = static_cast<unsigned long long*>(scratch);
  unsigned long long* other = keys + n;
  RATCHET_LAUNCH(encoder_sort_chunks_kernel, (unsigned)(n / chunk), (unsigned)(chunk / 2),
                 chunk * sizeof(unsigned long long), stream, keys, inp, BT);
  RATCHET_CHECK_LAUNCH();
  for (int L = chunk; L < n; L *= 2) {
    RATCHET_LAUNCH(encoder_merge_kernel, (unsigned)ceil_div(n, block), block, 0, stream, other,
                   keys, n, L);
    RATCHET_CHECK_LAUNCH();
    std::swap(keys, other);
  }
  const dim3 rgrid((unsigned)std::min(BT, kEncoderRunBlocks), (unsigned)ceil_div(packs, 32));
  if (vec)
    RATCHET_LAUNCH((encoder_dwte_kernel<T, true>), rgrid, kEncoderRunWarps * 32, 0, stream, dwte,
                   dout, keys, BT, C);
  else
    RATCHET_LAUNCH((encoder_dwte_kernel<T, false>), rgrid, kEncoderRunWarps * 32, 0, stream, dwte,
                   dout, keys, BT, C);
  RATCHET_CHECK_LAUNCH();
}

#define RATCHET_INSTANTIATE(T)                                                                 \
  template void encoder_forward<T>(T*, const int*, const T*, const T*, int, int, int,          \
                                   cudaStream_t);                                              \
  template void encoder_backward<T>(T*, T*, void*, const T*, const int*, int, int, int,        \
                                    cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

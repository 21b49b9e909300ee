// The MoE dispatch kernels (math, shapes and accumulation: moe_dispatch.cuh).
//
// The dispatch is three launches over chunks of kMoeDispatchChunk slots:
//   1. histogram: per chunk, a shared (E+1) histogram (integer atomics:
//      exact in any order) written to scratch row `chunk`;
//   2. offsets (one block): counts = column sums of the chunk rows, offsets
//      their exclusive scan, and each chunk row replaced in place by the first
//      packed row its slots of each expert take (offsets[e] + earlier chunks);
//   3. permutation: per chunk, the warps in order (a barrier between them);
//      lanes with the same expert are ranked by lane (ballots), the lowest
//      such lane then advances the expert's next row. Slot order within an
//      expert is kept: the CPU's counting sort, bit for bit.
// Gather, combine and their backward are one thread per (row, channel);
// combine' is one warp per slot (the dw dot product over C).
#include "moe_dispatch.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

__global__ void moe_histogram_kernel(int* chunk_counts, const int* idx, int slots, int E) {
  int* h = dynamic_smem<int>();  // (E+1)
  for (int e = threadIdx.x; e <= E; e += blockDim.x) h[e] = 0;
  __syncthreads();
  const int i = blockIdx.x * kMoeDispatchChunk + threadIdx.x;
  if (i < slots) {
    const int e = idx[i];
    atomicAdd(&h[e >= 0 && e < E ? e : E], 1);
  }
  __syncthreads();
  int* out = chunk_counts + (size_t)blockIdx.x * (E + 1);
  for (int e = threadIdx.x; e <= E; e += blockDim.x) out[e] = h[e];
}

__global__ void moe_offsets_kernel(int* counts, int* offsets, int* chunk_rows, int chunks,
                                   int E) {
  for (int e = threadIdx.x; e <= E; e += blockDim.x) {
    int t = 0;
    for (int c = 0; c < chunks; c++) t += chunk_rows[(size_t)c * (E + 1) + e];
    counts[e] = t;
  }
  __syncthreads();  // counts (global) visible to thread 0
  if (threadIdx.x == 0) {
    int run = 0;
    for (int e = 0; e < E; e++) {
      offsets[e] = run;
      run += counts[e];
    }
    offsets[E] = run;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int run = offsets[e];
    for (int c = 0; c < chunks; c++) {
      int* r = chunk_rows + (size_t)c * (E + 1) + e;
      const int n = *r;
      *r = run;
      run += n;
    }
  }
}

__global__ void moe_permute_kernel(int* row_of, int* slot_of, const int* chunk_rows,
                                   const int* idx, int slots, int E) {
  int* next = dynamic_smem<int>();  // (E): the next packed row of each expert in this chunk
  const int* base = chunk_rows + (size_t)blockIdx.x * (E + 1);
  for (int e = threadIdx.x; e < E; e += blockDim.x) next[e] = base[e];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int i = blockIdx.x * kMoeDispatchChunk + threadIdx.x;
  int e = i < slots ? idx[i] : -1;
  if (e >= E) e = -1;  // out of range: counted by the histogram, never placed
  for (int wv = 0; wv < kMoeDispatchChunk / 32; wv++) {
    __syncthreads();  // next[] as the previous warp left it
    if (warp != wv) continue;
    // The lanes holding my expert: peel one expert per round off the lanes left.
    unsigned left = 0xffffffffu, same = 0;
    while (left) {
      const int leader = __ffs((int)left) - 1;
      const int le = __shfl_sync(0xffffffffu, e, leader);
      const unsigned g = __ballot_sync(0xffffffffu, e == le);
      if (e == le) same = g;
      left &= ~g;
    }
    const int rank = __popc(same & ((1u << lane) - 1u));
    int row = 0;
    if (e >= 0) row = next[e] + rank;
    __syncwarp();  // every lane read next[e] before it moves
    if (e >= 0) {
      row_of[i] = row;
      slot_of[row] = i;
      if (rank == 0) next[e] += __popc(same);
    }
  }
}

template <class T>
__global__ void moe_gather_kernel(T* xp, const T* x, const int* slot_of, int k, int C, size_t n) {
  const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const size_t r = t / C, c = t % C;
  xp[t] = x[(size_t)(slot_of[r] / k) * C + c];
}

template <class T>
__global__ void moe_gather_backward_kernel(T* dx, const T* dxp, const int* row_of, int k, int C,
                                           size_t n) {
  const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const size_t tok = t / C, c = t % C;
  float acc = to_f32(dx[t]);
  for (int j = 0; j < k; j++) acc += to_f32(dxp[(size_t)row_of[tok * k + j] * C + c]);
  dx[t] = from_f32<T>(acc);
}

template <class T>
__global__ void moe_combine_kernel(T* out, const float* w, const T* y, const int* row_of, int k,
                                   int C, size_t n) {
  const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const size_t tok = t / C, c = t % C;
  float acc = 0.0f;
  for (int j = 0; j < k; j++)
    acc += w[tok * k + j] * to_f32(y[(size_t)row_of[tok * k + j] * C + c]);
  out[t] = from_f32<T>(acc);
}

constexpr int kCombineBackwardWarps = 8;

template <class T>
__global__ void moe_combine_backward_kernel(T* dy, float* dw, const T* dout, const float* w,
                                            const T* y, const int* row_of, int k, int C,
                                            int slots) {
  const int lane = threadIdx.x % 32;
  const int i = blockIdx.x * kCombineBackwardWarps + threadIdx.x / 32;
  if (i >= slots) return;  // the whole warp
  const size_t r = row_of[i], tok = (size_t)(i / k);
  const float wi = w[i];
  const T* g = dout + tok * C;
  const T* yr = y + r * C;
  T* dyr = dy + r * C;
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float gc = to_f32(g[c]);
    dyr[c] = from_f32<T>(wi * gc);
    dot += gc * to_f32(yr[c]);
  }
  dot = warp_sum(dot);
  if (lane == 0) dw[i] = dot;
}

// ==== launchers ==================================================================================

size_t moe_dispatch_scratch_bytes(int slots, int E) {
  return (size_t)std::max(1, ceil_div(slots, kMoeDispatchChunk)) * (E + 1) * sizeof(int);
}

void moe_dispatch(int* counts, int* offsets, int* row_of, int* slot_of, void* scratch,
                  const int* idx, int slots, int E, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("moe_dispatch");
  RATCHET_REQUIRE(slots >= 0 && E >= 1, "moe_dispatch: slots >= 0, E >= 1");
  RATCHET_REQUIRE((size_t)(E + 1) * sizeof(int) <= kMaxDynamicSmem,
                  "moe_dispatch: E + 1 counters must fit 48 KiB of shared memory");
  const int chunks = ceil_div(slots, kMoeDispatchChunk);
  int* chunk_rows = static_cast<int*>(scratch);
  const size_t smem = (size_t)(E + 1) * sizeof(int);
  if (chunks > 0) {
    RATCHET_LAUNCH(moe_histogram_kernel, (unsigned)chunks, kMoeDispatchChunk, smem, stream,
                   chunk_rows, idx, slots, E);
    RATCHET_CHECK_LAUNCH();
  }
  // Also with no slots: counts and offsets become zeros.
  RATCHET_LAUNCH(moe_offsets_kernel, 1, 256, 0, stream, counts, offsets, chunk_rows, chunks, E);
  RATCHET_CHECK_LAUNCH();
  if (chunks > 0) {
    RATCHET_LAUNCH(moe_permute_kernel, (unsigned)chunks, kMoeDispatchChunk, smem, stream, row_of,
                   slot_of, (const int*)chunk_rows, idx, slots, E);
    RATCHET_CHECK_LAUNCH();
  }
}

template <class T>
void moe_gather(T* xp, const T* x, const int* slot_of, int slots, int k, int C,
                cudaStream_t stream) {
  RATCHET_NVTX_RANGE("moe_gather");
  RATCHET_REQUIRE(slots >= 0 && k >= 1 && C >= 1, "moe_gather: slots >= 0, k, C >= 1");
  const size_t n = (size_t)slots * C;
  if (n == 0) return;
  RATCHET_LAUNCH((moe_gather_kernel<T>), (unsigned)ceil_div<size_t>(n, 256), 256, 0, stream, xp,
                 x, slot_of, k, C, n);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void moe_gather_backward(T* dx, const T* dxp, const int* row_of, int N, int k, int C,
                         cudaStream_t stream) {
  RATCHET_NVTX_RANGE("moe_gather_backward");
  RATCHET_REQUIRE(N >= 0 && k >= 1 && C >= 1, "moe_gather_backward: N >= 0, k, C >= 1");
  const size_t n = (size_t)N * C;
  if (n == 0) return;
  RATCHET_LAUNCH((moe_gather_backward_kernel<T>), (unsigned)ceil_div<size_t>(n, 256), 256, 0,
                 stream, dx, dxp, row_of, k, C, n);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void moe_combine(T* out, const float* w, const T* y, const int* row_of, int N, int k, int C,
                 cudaStream_t stream) {
  RATCHET_NVTX_RANGE("moe_combine");
  RATCHET_REQUIRE(N >= 0 && k >= 1 && C >= 1, "moe_combine: N >= 0, k, C >= 1");
  const size_t n = (size_t)N * C;
  if (n == 0) return;
  RATCHET_LAUNCH((moe_combine_kernel<T>), (unsigned)ceil_div<size_t>(n, 256), 256, 0, stream, out,
                 w, y, row_of, k, C, n);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void moe_combine_backward(T* dy, float* dw, const T* dout, const float* w, const T* y,
                          const int* row_of, int N, int k, int C, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("moe_combine_backward");
  RATCHET_REQUIRE(N >= 0 && k >= 1 && C >= 1, "moe_combine_backward: N >= 0, k, C >= 1");
  const int slots = N * k;
  if (slots == 0) return;
  RATCHET_LAUNCH((moe_combine_backward_kernel<T>),
                 (unsigned)ceil_div(slots, kCombineBackwardWarps), 32 * kCombineBackwardWarps, 0,
                 stream, dy, dw, dout, w, y, row_of, k, C, slots);
  RATCHET_CHECK_LAUNCH();
}

#define RATCHET_INSTANTIATE(T)                                                                     \
  template void moe_gather<T>(T*, const T*, const int*, int, int, int, cudaStream_t);              \
  template void moe_gather_backward<T>(T*, const T*, const int*, int, int, int, cudaStream_t);     \
  template void moe_combine<T>(T*, const float*, const T*, const int*, int, int, int,              \
                               cudaStream_t);                                                      \
  template void moe_combine_backward<T>(T*, float*, const T*, const float*, const T*, const int*, \
                                        int, int, int, cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

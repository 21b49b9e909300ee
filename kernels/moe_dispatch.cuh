// Mixture-of-Experts dropless dispatch: the per-expert histogram, the stable
// permutation of (token, slot) pairs grouped by expert, the gather into packed
// rows, the combine, and their backward. The CUDA side of
// src/moe/moe_dispatch.cpp and of moe_backward's un-combine and dx sum (math:
// src/moe/moe_ops.h).
//
// N tokens, k slots per token, E experts, C channels; slot i = n*k + j;
// S = N*k slots = packed rows.
//   dispatch   counts (E+1): counts[e] = slots routed to expert e; counts[E] =
//                slots whose idx is outside [0,E) (the caller must refuse any)
//              offsets (E+1): offsets[e] = sum_{f<e} counts[f]
//              row_of (S): slot -> packed row = offsets[e] + the number of
//                earlier slots (lower i) with the same expert (a stable
//                counting sort: the CPU's build_dispatch order, exactly)
//              slot_of (S): packed row -> slot                  all overwritten
//   gather     xp (S,C)[r] = x (N,C)[slot_of[r] / k]                overwritten
//   combine    out (N,C)[n] = sum_{j<k} w[n,j] y (S,C)[row_of[n*k+j]],
//                FP32, j in order, rounded to T once                overwritten
//   combine'   dy (S,C)[row_of[i]] = w[i] dout[n];  dw (S)[i] = dout[n] . y[row_of[i]]
//                                                               both overwritten
//   gather'    dx (N,C)[n] += sum_{j<k} dxp (S,C)[row_of[n*k+j]], FP32 from
//                dx's value, j in order, rounded to T once          ACCUMULATES
// w, dw FP32; x, xp, y, out, dout, dy, dx, dxp storage T; indices int.
//
// Determinism: no floating-point atomics anywhere. The histogram counts with
// integer atomics in shared memory (exact in any order); the permutation then
// walks each chunk's warps in order, ranking lanes of the same expert by lane,
// so the rows are a function of idx only.
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// Slots per block of the histogram and the permutation.
constexpr int kMoeDispatchChunk = 256;

// Scratch of moe_dispatch: one (E+1) row of counts per chunk of slots.
size_t moe_dispatch_scratch_bytes(int slots, int E);

void moe_dispatch(int* counts, int* offsets, int* row_of, int* slot_of, void* scratch,
                  const int* idx, int slots, int E, cudaStream_t stream);

template <class T>
void moe_gather(T* xp, const T* x, const int* slot_of, int slots, int k, int C,
                cudaStream_t stream);

template <class T>
void moe_gather_backward(T* dx, const T* dxp, const int* row_of, int N, int k, int C,
                         cudaStream_t stream);

template <class T>
void moe_combine(T* out, const float* w, const T* y, const int* row_of, int N, int k, int C,
                 cudaStream_t stream);

template <class T>
void moe_combine_backward(T* dy, float* dw, const T* dout, const float* w, const T* y,
                          const int* row_of, int N, int k, int C, cudaStream_t stream);

}  // namespace ratchet::kernels

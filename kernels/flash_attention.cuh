// Causal flash attention, forward and backward, in the FlashAttention-2 scheme
// (Dao 2023): the (T,T) score matrix is never stored.
//
// Shapes (read and written in place, no permutes): qkv (B,T,W), W = (NH+2KV)*HS,
// = NH q heads | KV k heads | KV v heads on the last axis (grouped-query
// attention: query head h reads KV head g = h / (NH/KV); KV == NH is the GPT-2
// layout (B,T,3C)); out, dout (B,T,C), C = NH*HS; lse, D (B,NH,T) FP32. HS = C/NH in {8, 16, 32, 64, 128} (the cuda
// backend refuses others with a message); any T >= 1. Storage T = float or bf16; every product,
// sum, max, exp and log is FP32 (inputs converted on load into FP32 shared
// tiles), outputs rounded once to T at the store.
//
// Math, per (b,h), scale = 1/sqrt(HS) by default, causal j <= i (options:
// AttnParams below, a window W keeps i-W < j <= i, a soft-cap c replaces s_ij
// by y_ij = c·tanh(s_ij/c) and backward's ds by ds·(1 - (y/c)²); the window
// skips whole tiles, so the costs below become ~T·W instead of T²/2):
//   forward: s_ij = scale q_i.k_j ;  lse_i = log sum_j exp(s_ij)
//            out_i = sum_j exp(s_ij - lse_i) v_j
//     Tiles of Br query rows (in shared memory) sweep the key/value tiles of
//     Bc rows left of the diagonal with the online softmax: a running max m
//     and sum l per row, the output accumulator rescaled by exp(m_old - m_new)
//     (registers), divided by l at the end. Only lse (B,NH,T) is kept.
//   backward: D_i = dout_i.out_i;  p_ij = exp(s_ij - lse_i) recomputed per tile;
//            dv_j = sum_i p_ij dout_i ;  ds_ij = p_ij (dout_i.v_j - D_i) scale
//            dk_j = sum_i ds_ij q_i   ;  dq_i = sum_j ds_ij k_j
//     One kernel per key tile of a KV head accumulates dk, dv over the query
//     tiles below it, for each query head of the KV head's group in turn;
//     a second kernel per query tile accumulates dq over the key tiles (p and
//     ds recomputed again). No atomics: each output element has one writer and
//     a fixed summation order, so results are deterministic.
//   Tiles: Br = Bc = 32 rows (16 at HS 128), 4 threads per row, each owning
//   HS/4 output columns in registers.
//
// Memory: kept per layer 4·B·NH·T bytes (lse) instead of sb·B·NH·T² for the
// probabilities; backward scratch D (B,NH,T) FP32. Shared memory per block:
// forward (3·Br·HS + Br·Bc)·4 bytes = 28 KiB (HS 64) / 25 KiB (HS 128);
// backward (4·Br·HS + 2·Br·Bc)·4 = 40 / 34 KiB.
// FLOPs (causal, per head, leading terms): forward 2·T²·HS (QK^T and PV on
// the lower triangle), backward 7·T²·HS here (QK^T and dO V^T in both
// kernels, and dV, dK, dQ: 2·T²·HS more than FA-2's version with atomic dQ).
// These are simple FP32 FMA kernels (no tensor cores): written to be correct
// and tested under simt; their GPU speed against cuDNN is measured by
// bench/kernels on a GPU (not here).
#pragma once
#include <cmath>

#include "attn_mask.h"
#include "common.cuh"
#include "scratch_bytes.h"

namespace ratchet::kernels {

// Whether HS is one the flash kernels are built for (8, 16, 32, 64, 128).
bool flash_attention_supports(int HS);

// out (B,T,C), lse (B,NH,T) from qkv (B,T,(NH+2KV)*HS).           (overwritten)
// o: issue 38's window, scale, soft-cap (kernels/attn_mask.h; scale resolved, > 0).
template <class T>
void flash_attention_forward(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int KV,
                             int HS, const AttnParams& o, cudaStream_t stream);
// dqkv (B,T,(NH+2KV)*HS) from dout (B,T,C), qkv, out, lse; D (B,NH,T) FP32 scratch.
template <class T>
void flash_attention_backward(T* dqkv, float* D, const T* dout, const T* qkv, const T* out,
                              const float* lse, int B, int Tn, int NH, int KV, int HS,
                              const AttnParams& o, cudaStream_t stream);
// Its scratch (D): kernels/scratch_bytes.h.

// The plain causal attention (no window, scale 1/sqrt(HS), no soft-cap).
inline AttnParams flash_causal_params(int HS) {
  AttnParams o;
  o.scale = 1.0f / std::sqrt((float)HS);
  return o;
}
template <class T>
void flash_attention_forward(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int KV,
                             int HS, cudaStream_t stream) {
  flash_attention_forward(out, lse, qkv, B, Tn, NH, KV, HS, flash_causal_params(HS), stream);
}
template <class T>
void flash_attention_backward(T* dqkv, float* D, const T* dout, const T* qkv, const T* out,
                              const float* lse, int B, int Tn, int NH, int KV, int HS,
                              cudaStream_t stream) {
  flash_attention_backward(dqkv, D, dout, qkv, out, lse, B, Tn, NH, KV, HS,
                           flash_causal_params(HS), stream);
}

#if RATCHET_SIMT
// Test only: the forward with the barrier after the K/V tile load removed
// (the planted bug simt must catch).
void flash_attention_forward_missing_barrier(float* out, float* lse, const float* qkv, int B,
                                             int Tn, int NH, int HS);
#endif

}  // namespace ratchet::kernels

// Attention support for the cuBLAS path: the GEMMs (q k^T, att v and their
// backward) are cuBLAS batched GEMMs; these kernels do everything around them.
#pragma once
#include "attn_mask.h"
#include "common.cuh"

namespace ratchet::kernels {

// qkv (B,T,(NH+2KV)*HS) -> q, k, v each (B,NH,T,HS): query head h's k, v are
// KV head h / (NH/KV) (grouped-query; KV == NH: qkv is (B,T,3,NH,HS)).  (overwritten)
template <class T>
void attention_permute(T* q, T* k, T* v, const T* qkv, int B, int Tn, int NH, int KV, int HS,
                       cudaStream_t stream);
// dq, dk, dv (B,NH,T,HS) -> dqkv (B,T,(NH+2KV)*HS), dk and dv of a KV head
// summed (FP32, head order) over its group's query heads.        (overwritten)
template <class T>
void attention_permute_backward(T* dqkv, const T* dq, const T* dk, const T* dv, int B, int Tn,
                                int NH, int KV, int HS, cudaStream_t stream);
// y (B,NH,T,HS) -> out (B,T,NH,HS) = (B,T,C)                     (overwritten)
template <class T>
void attention_unpermute(T* out, const T* y, int B, int Tn, int NH, int HS, cudaStream_t stream);
// dout (B,T,C) -> dy (B,NH,T,HS)                                 (overwritten)
template <class T>
void attention_unpermute_backward(T* dy, const T* dout, int B, int Tn, int NH, int HS,
                                  cudaStream_t stream);

// att (BH,T,T) = causal softmax(scale * preatt) row-wise; entries above the
// diagonal are 0. scale = 1/sqrt(HS). Overwritten; att may alias preatt.
template <class T>
void attention_softmax_forward(T* att, const T* preatt, int BH, int Tn, float scale,
                               cudaStream_t stream);
// dpreatt (BH,T,T) = scale * att * (datt - sum_row(att * datt)) on and below
// the diagonal, 0 above. Overwritten; dpreatt may alias datt.
template <class T>
void attention_softmax_backward(T* dpreatt, const T* datt, const T* att, int BH, int Tn,
                                float scale, cudaStream_t stream);

// With issue 38's options (kernels/attn_mask.h): the softmax of
// y = scale·preatt, soft-capped to c·tanh(y/c) when c > 0, over the columns
// t-W < s <= t of a window W (0 elsewhere).
template <class T>
void attention_softmax_forward(T* att, const T* preatt, int BH, int Tn, const AttnParams& o,
                               cudaStream_t stream);
// Its backward; under a soft-cap each entry is multiplied by 1 - tanh² of its
// score, recomputed from q, k (BH,T,HS) (the permuted copies; unused, may be
// null, without a soft-cap).
template <class T>
void attention_softmax_backward(T* dpreatt, const T* datt, const T* att, int BH, int Tn,
                                const AttnParams& o, const T* q, const T* k, int HS,
                                cudaStream_t stream);

}  // namespace ratchet::kernels

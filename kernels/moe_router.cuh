// Mixture-of-Experts router: FP32 softmax over all E experts, deterministic
// top-k with optional renormalisation, its backward, and the load-balancing
// loss's statistics. The CUDA side of src/moe/moe_router.cpp and
// moe_aux_loss.cpp (the math and its sources: src/moe/moe_ops.h).
//
// N tokens, E experts (1 <= E <= kMoeMaxExperts), k per token (1 <= k <= E):
//   forward   probs (N,E) = softmax(logits) in FP32
//             idx (N,k)   = the k largest probs, descending; among equal
//                           probabilities the lower expert index comes first
//             w (N,k)     = probs[idx], divided by their sum (in slot order)
//                           when norm_topk_prob
//             logits (N,E) storage T; probs, w FP32; idx int      all overwritten
//   DeepSeek-V3 (src/moe/moe_ops.h): sigmoid: probs = sigmoid(logits) per
//             element, and the renormalising sum gets + 1e-20; scale: w *= scale
//             after the renormalisation (1: the bits above)
//             bias (E, device FP32, or null): the top k are chosen on probs +
//             bias (HF e_score_correction_bias), w stays the unbiased probs
//             n_group > 1 (<= kMoeMaxGroups, dividing E), topk_group: the
//             choice scores of all but the topk_group groups with the largest
//             sum of their two largest choice scores become 0.0 before the
//             top k (DeepseekV3TopkRouter; ties: the lower group index)
//   backward  dprob[e] = aux_dprob[e] (or 0) + (selected e = idx[j]), with
//             dv_j = scale dw_j and S = sum_l probs[idx_l] (+ 1e-20 if sigmoid):
//                          norm: (dv_j - sum_l dv_l probs[idx_l] / S) / S
//                          else: dv_j
//             dlogits[e] = p_e (dprob_e - sum_f p_f dprob_f); sigmoid:
//                          dprob_e p_e (1 - p_e)
//             dlogits (N,E) storage T, overwritten; dw (N,k), aux_dprob (E) FP32
//   stats     counts (E)    += number of (n, j) with idx[n,j] == e
//             prob_sums (E) += sum_n probs[n,e]                  both FP64, ACCUMULATE
// One warp per token row (lane l owns experts l, l+32, ...); every sum has a
// fixed order (lane partials, then a butterfly), so each run gives the same
// bits. Top-k compares (prob, -index) pairs, a total order, so the choice
// does not depend on the reduction order at all and equals the CPU's.
//
// Qwen2-MoE's shared-expert gate (Qwen2MoeSparseMoeBlock.shared_expert_gate,
// a Linear(C, 1) whose row is g; Backend::shared_gate_*):
//   forward   s_t = sigmoid(x_t · g);  out_t += s_t · y_t     (y: the shared expert's output)
//   backward  s_t again (the same sums in the same order: the same bits),
//             ds_t = dy_t · y_t, z'_t = ds_t s_t (1 - s_t);
//             dys_t = s_t dy_t (overwritten; may alias y), dx_t += z'_t g,
//             dg += sum_t z'_t x_t
//             x, g, y, out, dy, dys, dx, dg storage T; the dots and z' FP32.
// The forward: one warp per row (lane partials, then a butterfly). The
// backward: one 256-thread block per column_sum_rows_per_block(N) rows
// (scratch_bytes.h), each thread owning columns c = tid, tid + 256, ...: a
// row's two dots are block sums of the threads' partials, and the block's
// partial dg row goes to scratch (column_sum_blocks(N), C) FP32, which
// column_sums then adds into dg in a fixed order (rmsnorm_backward's scheme:
// no atomics, the bits depend on N and C only).
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// A lane keeps one bit per expert it owns (which are taken): 32 lanes x 32.
constexpr int kMoeMaxExperts = 1024;
// Group-limited selection: lane g scores group g, one warp argmax per kept group.
constexpr int kMoeMaxGroups = 32;

template <class T>
void moe_router_forward(float* probs, int* idx, float* w, const T* logits, int N, int E, int k,
                        bool norm_topk_prob, cudaStream_t stream, bool sigmoid = false,
                        float scale = 1.0f, const float* bias = nullptr, int n_group = 1,
                        int topk_group = 1);

template <class T>
void moe_router_backward(T* dlogits, const float* probs, const int* idx, const float* w,
                         const float* dw, const float* aux_dprob, int N, int E, int k,
                         bool norm_topk_prob, cudaStream_t stream, bool sigmoid = false,
                         float scale = 1.0f);

template <class T>
void moe_shared_gate_forward(T* out, const T* x, const T* g, const T* y, int N, int C,
                             cudaStream_t stream);
// scratch: moe_shared_gate_backward_scratch_bytes(N, C) (kernels/scratch_bytes.h).
template <class T>
void moe_shared_gate_backward(T* dys, T* dx, T* dg, void* scratch, const T* dy, const T* x,
                              const T* g, const T* y, int N, int C, cudaStream_t stream);

// Column e: warp r of a block sums rows r, r+16, ... in order, then the 16
// partials are added in warp order: the bits depend on N and E only.
void moe_aux_stats(double* counts, double* prob_sums, const float* probs, const int* idx, int N,
                   int E, int k, cudaStream_t stream);

}  // namespace ratchet::kernels

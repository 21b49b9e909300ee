// Mixture-of-Experts layer ops on the CPU backend (issue 39, first slice):
// the router, dropless dispatch, SwiGLU experts on packed rows, the combine,
// their backward, and the load-balancing loss's statistics. Free functions on
// a CpuBackend; the model does not use them yet (see docs/moe.md).
//
// The math (transformers' Qwen3MoeSparseMoeBlock / OlmoeSparseMoeBlock /
// MixtralSparseMoeBlock), N tokens, C channels, E experts, k per token,
// I = moe_intermediate_size:
//   logits (N,E) = x (N,C) @ gate (E,C)^T
//   probs  (N,E) = softmax(logits) over all E, FP32
//   idx    (N,k) = the k largest probs, descending; ties go to the lower
//                  expert index (torch.topk leaves ties unspecified)
//   w      (N,k) = probs[idx], divided by their sum when norm_topk_prob
//                  (Qwen3-MoE and OLMoE configs choose; Mixtral always does)
//   expert e on its rows r: h (2I) = x_r @ w1_e^T, rows gate | up of w1_e
//                  (2I,C); a (I) = silu(g) * u; y_r (C) = a @ w2_e^T, w2_e (C,I)
//   out[n] (C)   = sum_{j<k} w[n,j] * y[(n,j)], summed in slot order j
// Dispatch: slot (n,j) goes to expert idx[n,j]; the packed rows are grouped
// by expert (a counting sort, so token order is kept within an expert), and
// row = offsets[e] + rank of (n,j) among e's slots.
//
// Backward (parameter gradients ACCUMULATE, +=; activation gradients are
// overwritten):
//   dy[(n,j)]  = w[n,j] * dout[n];   dw[n,j] = dout[n] . y[(n,j)]
//   per expert: da = dy @ w2_e, dw2_e += dy^T a, dh = swiglu'(h, da),
//               dxp = dh @ w1_e, dw1_e += dh^T x_p
//   dx[n]      = sum_j dxp[(n,j)] (slot order) + dlogits[n] @ gate
//   dprobs     : only the selected experts carry gradient; without
//                renormalisation dp[idx_j] = dw_j, with it (S = sum_j p[idx_j])
//                dp[idx_j] = (dw_j - sum_l dw_l w_l) / S; plus the aux loss's
//                per-expert term aux_dprob[e] on every token
//   dlogits    = p * (dp - sum_e p_e dp_e);  dgate += dlogits^T x
//   An expert with no rows is skipped: no gemm, no gradient added.
// Determinism: every sum has a fixed order (slot order, token order, one
// sgemm per output element), so 1 and 2 threads give the same bits.
//
// Load-balancing loss (transformers' load_balancing_loss_func without an
// attention mask): over the T router rows it sees (all MoE layers'
// logits concatenated), f_e = (number of top-k selections of e) / T and
// P_e = (sum of probs[:,e]) / T; loss = E * sum_e f_e P_e. It sums to k when
// the probabilities are uniform (P_e = 1/E, sum_e f_e = k) or the selections
// are (f_e = k/E, sum_e P_e = 1). The op outputs counts and sums (+=), so
// layers, micro-batches and ranks add them (an all-reduce) before the loss.
// f is a count and carries no gradient: dloss/dprobs[n,e] = E count_e / T^2.
//
// DeepSeek-V3-style options (transformers' DeepseekV3TopkRouter and
// DeepseekV3MoE; every default keeps the math above bit for bit):
//   sigmoid      probs = sigmoid(logits), element-wise, FP32, instead of the
//                softmax; dlogits = dp * p * (1 - p)
//   bias (E)     a selection bias (HF e_score_correction_bias): the top k are
//                chosen on probs + bias, the weights are the UNBIASED probs
//                of the chosen experts; no gradient flows into the bias
//   renormalise  with sigmoid, w = p / (sum + 1e-20) as DeepSeek-V3 writes it
//                (the softmax families divide by the plain sum)
//   routed_scale w *= routed_scaling_factor after the renormalisation
//   n_group,     group-limited selection (DeepseekV3TopkRouter.get_topk_indices):
//   topk_group   the E experts are n_group contiguous groups of G = E/n_group;
//                a group's score is the sum of its two largest choice scores
//                (probs + bias; its one score when G = 1); the topk_group
//                best groups are kept (ties: the lower group index), the
//                other groups' choice scores become 0.0 (HF's masked_fill
//                value; DeepSeek's own inference code uses -inf: the two
//                differ only when a kept expert's biased score is below 0),
//                then the top k as above. The weights stay the unbiased probs.
//   shared       Is = I * n_shared_experts: one SwiGLU MLP sw1 (2Is,C),
//                sw2 (C,Is) on every token, its output added to the routed
//                output (HF shared_experts, gate | up rows as in w1)
// The bias is updated outside the layer (bias_update below), from the global
// load, after each optimizer step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "moe/moe_exchange.h"

namespace ratchet::moe {

struct MoeShape {
  int N = 0;  // tokens
  int C = 0;  // channels
  int E = 0;  // experts
  int k = 0;  // experts per token
  int I = 0;  // expert intermediate size (moe_intermediate_size)
  bool norm_topk_prob = true;
  bool sigmoid = false;         // DeepSeek-V3 scoring_func "sigmoid" (default softmax)
  float routed_scale = 1.0f;    // HF routed_scaling_factor
  int Is = 0;                   // shared expert hidden size I * n_shared_experts; 0: none
  // DeepSeek-V3's group-limited selection (HF n_group, topk_group): 1 / 1 is
  // plain top-k over all experts (the bits above).
  int n_group = 1, topk_group = 1;
  // --expert-parallel P (the exchange's size, also in a call without it:
  // evaluation) and --moe-ep-capacity F: the received rows' buffers are
  // reserved for moe_ep_received_rows(N, k, P, F) rows on the first call and
  // grown when a step receives more (logged with `layer`, the model's layer
  // index, for the message only). The math does not depend on them.
  int expert_parallel = 1;
  double ep_capacity = 2.0;
  int layer = -1;
  // w1/w2 (and dw1/dw2) hold only the exchange's rank's E/P experts,
  // (E/P, 2I, C) and (E/P, C, I) from expert rank·E/P: a model holding an
  // expert slice (model/expert_slice.h). Every call then needs the exchange.
  // false: all E experts' (E, 2I, C) and (E, C, I).
  bool expert_slice = false;
};
// The DeepSeek-V3 parameters of one layer beside gate/w1/w2 (null: unused).
// bias (E): the selection bias; sw1 (2Is,C), sw2 (C,Is): the shared expert.
struct MoeExtra {
  const float* bias = nullptr;
  const float* sw1 = nullptr;
  const float* sw2 = nullptr;
};
// Throws Error naming the bad value (k < 1, k > E, E < 1, a size < 0; n_group
// not dividing E, topk_group outside [1, n_group], k above topk_group * E/n_group).
void check_shape(const MoeShape& s);
// The group-limited mask of one token (n_group > 1): keep (n_group) gets 1 for
// the topk_group groups whose sum of their two largest choice[e] is largest.
// choice (E): probs + bias (or probs). Exposed for the tests.
void group_mask(const MoeShape& s, const float* choice, unsigned char* keep);

// ---- router (moe_router.cpp) -------------------------------------------------
// logits (N,E), probs (N,E), idx (N,k), w (N,k): all overwritten.
// bias (E) or null: the selection bias (top-k on probs + bias, weights from probs).
void router_forward(CpuBackend& be, const MoeShape& s, const float* x, const float* gate,
                    float* logits, float* probs, int* idx, float* w,
                    const float* bias = nullptr);
// dw (N,k) gradient of the routing weights; aux_dprob (E) or null: the aux
// loss's gradient per probability (moe_aux_loss). dlogits (N,E) and dx (N,C)
// overwritten, dgate (E,C) accumulated.
void router_backward(CpuBackend& be, const MoeShape& s, const float* x, const float* gate,
                     const float* probs, const int* idx, const float* w, const float* dw,
                     const float* aux_dprob, float* dlogits, float* dx, float* dgate);

// ---- dispatch and combine (moe_dispatch.cpp) ---------------------------------
struct Dispatch {
  std::vector<int> counts;   // (E) rows per expert
  std::vector<int> offsets;  // (E+1) first packed row of each expert
  std::vector<int> slot_of;  // (N*k) packed row -> slot n*k+j
  std::vector<int> row_of;   // (N*k) slot n*k+j -> packed row
};
void build_dispatch(const MoeShape& s, const int* idx, Dispatch& d);
// xp (N*k,C) overwritten: xp[row] = x[slot_of[row] / k].
void gather_rows(CpuBackend& be, const MoeShape& s, const Dispatch& d, const float* x, float* xp);
// out (N,C) overwritten: out[n] = sum_j w[n,j] y[row_of[n*k+j]], j in order.
void combine(CpuBackend& be, const MoeShape& s, const Dispatch& d, const float* w, const float* y, float* out);

// ---- experts (moe_experts.cpp) -----------------------------------------------
// w1 (E,2I,C), w2 (E,C,I); xp (N*k,C); h (N*k,2I), a (N*k,I), y (N*k,C)
// overwritten (rows of experts with no tokens untouched).
void experts_forward(CpuBackend& be, const MoeShape& s, const Dispatch& d, const float* w1,
                     const float* w2, const float* xp, float* h, float* a, float* y);
// dy (N*k,C) in (clobbered: reused as scratch); dxp (N*k,C) overwritten;
// dw1, dw2 accumulated.
void experts_backward(CpuBackend& be, const MoeShape& s, const Dispatch& d, const float* w1,
                      const float* w2, const float* xp, const float* h, const float* a,
                      float* dy, float* dxp, float* dw1, float* dw2);

// ---- expert parallelism (moe_expert_parallel.cpp) ----------------------------
// The experts sharded over the P ranks of a MoeExchange: this rank computes
// its E/P experts on every row the P ranks route to them. The packed rows xp
// are grouped by expert, so block q (experts of rank q) goes to rank q. The
// received rows are reordered to (local expert, source rank, slot): the order
// one process would have for the concatenation of the P ranks' tokens, so an
// expert's GEMMs see the same rows in the same order as on one rank with
// P·N tokens. The results go back (the reverse exchange) into the local
// packed order, and the combine is the local one.
struct ExpertShard {
  int P = 1, El = 0;              // ranks, experts per rank
  std::vector<int> recv_split;    // (P*El) rows from rank p for local expert i
  std::vector<size_t> send_n;     // (P) floats of C-rows to each rank
  std::vector<size_t> recv_n;     // (P) floats of C-rows from each rank
  Dispatch local;                 // counts / offsets over the El local experts
  std::vector<int> perm;          // received row -> expert-ordered row
  std::vector<float> xe;          // (R,C) received rows in expert order
  size_t reserved = 0;            // received rows xe, perm and the cache's h, a hold room for
};
// --moe-ep-capacity: reserves xe, perm, h and a for moe_ep_received_rows(N,
// k, s.expert_parallel, s.ep_capacity) rows (exactly: vector::reserve), so
// the memory accounting's figure is what a state holds until a step
// receives more. No-op for s.expert_parallel <= 1.
struct MoeCache;
void reserve_expert_rows(const MoeShape& s, MoeCache& c);
// A step received R rows, more than the `reserved` ones: the line logged for
// it (any rank; names the layer, the rows and --moe-ep-capacity), and the
// Error when the grown buffers cannot be had (names --moe-ep-capacity, the
// factor this step needed, and that the last checkpoint is intact).
std::string ep_growth_note(const MoeShape& s, size_t R, size_t reserved);
[[noreturn]] void ep_growth_failed(const MoeShape& s, size_t R, size_t reserved,
                                   const std::string& why);
// Throws Error when E is not a multiple of P.
void check_expert_shards(const MoeShape& s, int P);
// Throws Error when s.expert_slice and ex is null or of one rank (the layer
// then cannot reach the other experts).
void check_slice_exchange(const MoeShape& s, const MoeExchange* ex);
// The host-side bookkeeping every backend shares: exchanges the counts per
// expert (counts (E), offsets (E+1): the local dispatch, host memory) over
// ex and fills sh's P, El, recv_split, send_n, recv_n, local and perm (not
// xe). Collective over ex's ranks.
void plan_expert_shard(const MoeShape& s, const int* counts, const int* offsets, MoeExchange& ex,
                       ExpertShard& sh);
// Fills y (N*k,C, local packed order) from xp; h, a hold the local experts'
// (R rows) hidden states; sh what the backward needs.
void expert_parallel_forward(CpuBackend& be, const MoeShape& s, const Dispatch& d, MoeExchange& ex,
                             const float* w1, const float* w2, const float* xp,
                             std::vector<float>& h, std::vector<float>& a, float* y,
                             ExpertShard& sh);
// dy (N*k,C, local packed order) in; dxp (N*k,C) overwritten; dw1, dw2 (the
// whole (E,..) tensors, or the slice's with s.expert_slice) accumulated in
// this rank's experts' slices only.
void expert_parallel_backward(CpuBackend& be, const MoeShape& s, MoeExchange& ex, const float* w1,
                              const float* w2, const std::vector<float>& h,
                              const std::vector<float>& a, const ExpertShard& sh, const float* dy,
                              float* dxp, float* dw1, float* dw2);

// ---- the whole layer (moe_layer.cpp) -----------------------------------------
// What the forward keeps for the backward.
struct MoeCache {
  std::vector<float> logits, probs, w;  // (N,E) (N,E) (N,k)
  std::vector<int> idx;                 // (N,k)
  Dispatch dispatch;
  std::vector<float> xp, h, a, y;       // (N*k,C) (N*k,2I) (N*k,I) (N*k,C); with
                                        // experts sharded, h and a are (R,2I) (R,I)
  bool sharded = false;                 // the forward ran with a MoeExchange
  ExpertShard shard;
  std::vector<float> sh_h, sh_a;        // the shared expert's (N,2Is) (N,Is); empty: none
};
// out (N,C) overwritten. ex: the experts sharded over its ranks (null: all
// experts here).
// extra: the bias and the shared expert (null: neither; the shared expert's
// weights are required when s.Is > 0).
void moe_forward(CpuBackend& be, const MoeShape& s, const float* x, const float* gate,
                 const float* w1, const float* w2, float* out, MoeCache& cache,
                 MoeExchange* ex = nullptr, const MoeExtra* extra = nullptr);
// dx (N,C) overwritten; dgate, dw1, dw2 accumulated; aux_dprob (E) or null.
// dw_route (N,k) or null: receives the routing weights' gradient (for tests).
// ex: as the forward's (checked against the cache). extra as the forward's;
// dsw1 (2Is,C), dsw2 (C,Is): the shared expert's gradients, accumulated
// (required when s.Is > 0). The bias gets no gradient.
void moe_backward(CpuBackend& be, const MoeShape& s, const float* x, const float* gate,
                  const float* w1, const float* w2, const float* dout, const MoeCache& cache,
                  const float* aux_dprob, float* dx, float* dgate, float* dw1, float* dw2,
                  float* dw_route = nullptr, MoeExchange* ex = nullptr,
                  const MoeExtra* extra = nullptr, float* dsw1 = nullptr, float* dsw2 = nullptr);

// ---- load-balancing statistics (moe_aux_loss.cpp) ------------------------------
// counts (E) += top-k selections per expert, prob_sums (E) += column sums of
// probs (N,E), tokens in the order n = 0..N-1.
void aux_stats(const MoeShape& s, const float* probs, const int* idx, double* counts,
               double* prob_sums);
// The loss E sum_e (counts_e/T)(prob_sums_e/T) for T router rows, and
// dprob (E, overwritten, or null) = coef * E * counts_e / T^2, the gradient of
// coef * loss w.r.t. each probability of column e (router_backward's aux_dprob).
double aux_loss(int E, const double* counts, const double* prob_sums, double T, float coef,
                float* dprob);

// ---- the selection bias's update (moe_bias_update.cpp) -------------------------
// DeepSeek-V3's auxiliary-loss-free balancing, as torchtitan writes it: from
// load (E), the GLOBAL top-k selections per expert of one layer over the
// step (all ranks, all micro-batches), delta_e = rate * sign(mean(load) -
// load_e), then delta -= mean(delta), and bias (E) += delta. Computed in
// double from exact counts, so every rank that has the same counts (the
// all-reduced statistics) makes the same bits. A step with no tokens
// (every load 0) leaves the bias unchanged.
void bias_update(int E, const double* load, float rate, float* bias);

}  // namespace ratchet::moe

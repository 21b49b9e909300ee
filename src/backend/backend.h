// The Backend: memory and the ops a GPT-2 or Llama model needs, forward and backward.
//
// Pointers passed to ops live in the backend's memory space (host memory for
// cpu, device memory for cuda) and are obtained from alloc(). Two storage
// types appear in signatures:
//   dptr / cdptr : tensors in the backend's STORAGE dtype (FP32 on cpu; BF16
//                  on cuda): parameters, gradients, activations.
//   float*       : always FP32, whatever the backend: layernorm statistics,
//                  per-position losses, optimizer master weights and moments.
//   int*         : token ids (B,T), in backend memory.
//
// Accumulation convention (llm.c's CUDA trainer):
//   - parameter gradients (dw, db, dwte, dwpe) are ACCUMULATED (+=), so that
//     micro-batches add up; the model zeroes them once per optimizer step.
//   - matmul_backward, attention_backward, gelu_backward and swiglu_backward
//     OVERWRITE their input gradient; layernorm_backward and rmsnorm_backward
//     ACCUMULATE into dinp (the residual stream gradient collects contributions
//     from both branches); rope_backward works in place.
// Every op is deterministic: same inputs and thread count, same bits.
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/attention_choice.h"
#include "backend/attention_impl.h"
#include "backend/memory_model.h"

namespace ratchet {

using dptr = void*;
using cdptr = const void*;

struct AdamWArgs {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // already 0 for tensors that are not decayed
  int step = 1;               // 1-based, for bias correction
  float grad_scale = 1.0f;    // multiplies the gradient first (clipping, averaging)
  // BF16 storage: the index of params[0] in its tensor (the call updates a
  // piece of it). Stochastic rounding draws by position in the tensor, so an
  // update split into pieces rounds as the whole tensor's (optim/adamw.h).
  size_t round_offset = 0;
  // BF16 storage: the tensor's first element in the FLAT parameter vector,
  // which keys its random bits; unset (-1): the tensor's offset in params'
  // allocation (the same thing for the model's flat params). ZeRO-3 updates
  // pieces held elsewhere (distributed/param_shards.h) and sets it.
  size_t tensor_offset = (size_t)-1;
};

// What a layer's attention does beyond plain causal softmax(q k^T / sqrt(hs)) v
// (issue 38). The defaults are Llama's and GPT-2's.
struct AttnOpts {
  int window = 0;      // W > 0: query i sees keys j with i - W < j <= i (Mistral, Gemma 3
                       // sliding layers; HF's sliding_window mask); 0: every j <= i
  float scale = 0.f;   // the score scale; 0 -> 1/sqrt(hs)
  float softcap = 0.f; // c > 0: scores s = c·tanh(scale·q·k / c) (Gemma attn_logit_softcapping)
  float scale_for(int hs) const;  // scale, or 1/sqrt(hs) when 0
};

// A Mixture-of-Experts layer's shape (Backend::moe_forward): N tokens, C
// channels, E experts, k per token, I the experts' hidden size (HF
// moe_intermediate_size); norm_topk_prob renormalises the k routing weights.
// exchange: the experts sharded over its ranks (--expert-parallel,
// distributed/expert_parallel.h; src/moe/moe_exchange.h), null: every expert
// here. The forward and backward of one state get the same one.
class MoeExchange;
// sigmoid / routed_scale: DeepSeek-V3's scoring_func "sigmoid" and
// routed_scaling_factor (moe_ops.h); the defaults are the softmax families'.
// bias: HOST (E) FP32, the layer's selection bias (HF e_score_correction_bias:
// top k on scores + bias, weights from the scores; no gradient), null: none.
// The cpu backend takes it; cuda refuses it by name.
struct MoeDims {
  int N = 0, C = 0, E = 0, k = 0, I = 0;
  bool norm_topk_prob = true;
  bool sigmoid = false;
  float routed_scale = 1.f;
  int n_group = 1, topk_group = 1;  // DeepSeek-V3's group-limited selection (1 / 1: none)
  const float* bias = nullptr;
  MoeExchange* exchange = nullptr;
  // The exchange's size whenever the model has one, also in a call without
  // it (evaluation runs every expert here): the cuda state sizes its
  // buffers for the exchange's rows on its first call, whichever comes first.
  int expert_parallel = 1;
  // --moe-ep-capacity F: the received rows' buffers are reserved for
  // moe_ep_received_rows(N, k, expert_parallel, F) (backend/memory_model.h)
  // and grow when a step receives more. layer: the model's layer index, for
  // that growth's message.
  double ep_capacity = 2.0;
  int layer = -1;
  // w1/w2 and dw1/dw2 hold only the exchange's rank's E/P experts (a model
  // holding an expert slice, model/expert_slice.h; moe_ops.h MoeShape).
  bool expert_slice = false;
};
// What one MoE layer's forward keeps for its backward, in the backend's own
// form (the cpu backend: host vectors; cuda: device buffers). Opaque.
class MoeState {
 public:
  virtual ~MoeState() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Bytes of one element in storage dtype (4 for FP32, 2 for BF16).
  size_t storage_bytes() const { return memory_model().storage_bytes; }

  // ---- memory -------------------------------------------------------------
  virtual void* alloc(size_t bytes) = 0;  // zero-filled
  virtual void release(void* p) = 0;
  // Bytes currently held by alloc() (as allocated, after any rounding); 0 if
  // the backend does not count. Memory accounting tests and `ratchet plan`.
  virtual size_t bytes_in_use() const { return 0; }
  virtual void zero(void* p, size_t bytes) = 0;
  // Host FP32 <-> storage dtype conversion with copy (n elements).
  virtual void upload_f32(dptr dst, const float* src, size_t n) = 0;
  virtual void download_f32(float* dst, cdptr src, size_t n) = 0;
  // Raw byte copies for non-storage buffers (tokens, FP32 state).
  virtual void upload_bytes(void* dst, const void* src, size_t bytes) = 0;
  virtual void download_bytes(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() {}

  // ---- host memory for snapshots (ckpt/host_snapshot.h) --------------------
  // Host memory that device-to-host copies reach fastest, for buffers kept
  // and reused (the --ckpt-async snapshot): page-locked on the cuda backend
  // (cudaHostAlloc), plain host memory elsewhere (cpu, simt). Out of memory:
  // nullptr, or an Error naming the request (cuda); free_host_pinned takes
  // only what alloc_host_pinned gave.
  virtual void* alloc_host_pinned(size_t bytes) {
    return std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  }
  virtual void free_host_pinned(void* p) { std::free(p); }
  // Whether alloc_host_pinned's memory is page-locked.
  virtual bool host_memory_pinned() const { return false; }
  // download_bytes that may return before the copy is done: dst holds the
  // bytes after the next synchronize(), and src must not change before that
  // (ops enqueued after it are ordered after the copy on the cuda backend).
  // dst: alloc_host_pinned memory (into pageable memory a CUDA copy is
  // synchronous anyway). Default: download_bytes.
  virtual void download_bytes_async(void* dst, const void* src, size_t bytes) {
    download_bytes(dst, src, bytes);
  }

  // ---- forward/backward ops (shapes in comments) ---------------------------
  // out (B,T,C) = wte[inp[b,t], :] + wpe[t, :]
  virtual void encoder_forward(dptr out, const int* inp, cdptr wte, cdptr wpe, int B, int T,
                               int C) = 0;
  // dwte (Vp,C) += scatter of dout by token; dwpe (maxT,C) += sum over b of dout
  virtual void encoder_backward(dptr dwte, dptr dwpe, cdptr dout, const int* inp, int B, int T,
                                int C) = 0;

  // out (N,C) = (inp - mean) * rstd * w + b, eps 1e-5; writes mean (N), rstd (N)
  virtual void layernorm_forward(dptr out, float* mean, float* rstd, cdptr inp, cdptr w,
                                 cdptr b, int N, int C) = 0;
  // dinp (N,C) +=, dw (C) +=, db (C) +=
  virtual void layernorm_backward(dptr dinp, dptr dw, dptr db, cdptr dout, cdptr inp, cdptr w,
                                  const float* mean, const float* rstd, int N, int C) = 0;

  // out (N,OC) = inp (N,C) @ w(OC,C)^T + bias (OC; may be null).
  // If pre_gelu is non-null, the affine result goes to pre_gelu (N,OC) and
  // out = gelu(pre_gelu) (the cuBLASLt GELU_AUX_BIAS epilogue).
  virtual void matmul_forward(dptr out, dptr pre_gelu, cdptr inp, cdptr w, cdptr bias, int N,
                              int C, int OC) = 0;
  // dinp (N,C) = dout (N,OC) @ w (OC,C)          (overwritten)
  // dw (OC,C) += dout^T @ inp;  dbias (OC) += column sums of dout (dbias may be null)
  virtual void matmul_backward(dptr dinp, dptr dw, dptr dbias, cdptr dout, cdptr inp, cdptr w,
                               int N, int C, int OC) = 0;

  // Causal multi-head self-attention, grouped-query: NH query heads share KV
  // key/value heads (KV divides NH; KV == NH is multi-head, KV == 1 multi-query).
  // hs = C/NH. qkv (B,T,(NH+2KV)*hs) holds q | k | v along the last axis: query
  // head h at [h*hs, (h+1)*hs), key head g at C + g*hs, value head g at
  // C + KV*hs + g*hs; query head h reads KV head h / (NH/KV). KV == NH is the
  // GPT-2 layout (B,T,3C) exactly.
  // C here is NH*hs, what attention writes (the model's channels unless
  // head_dim says otherwise).
  // out (B,T,C) = concat_h softmax(s(q_h, k_g), causal [and window]) v_g with
  //   s = o.scale_for(hs)·q·k, then c·tanh(s/c) when o.softcap = c > 0;
  //   o.window = W > 0 masks keys j <= i - W too.
  // saved: what forward keeps for backward, attention_saved_bytes() of it, laid
  // out as the backend's attention_impl() says (see AttentionImpl):
  //   flash, cudnn   lse (B,NH,T) FP32: log sum_{visible j} exp(s(q_i, k_j))
  //   materialized   att (B,NH,T,T) storage dtype: the probabilities (0 where
  //                  masked)
  virtual void attention_forward(dptr out, void* saved, cdptr qkv, int B, int T, int C, int NH,
                                 int KV, const AttnOpts& o = AttnOpts{}) = 0;
  // dqkv (B,T,(NH+2KV)*hs) overwritten from dout (B,T,C), qkv, and forward's
  // out and saved; dk, dv of a KV head sum over the NH/KV query heads of its group.
  virtual void attention_backward(dptr dqkv, cdptr dout, cdptr qkv, cdptr out, const void* saved,
                                  int B, int T, int C, int NH, int KV,
                                  const AttnOpts& o = AttnOpts{}) = 0;
  // Which attention the ops above run (`--attention`; the cpu backend: flash,
  // its blocked online-softmax attention): part of the memory model.
  AttentionImpl attention_impl() const { return memory_model().attention; }

  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  virtual void gelu_forward(dptr out, cdptr inp, size_t n) = 0;
  // dinp = gelu'(inp) * dout (overwritten; dinp may alias dout)
  virtual void gelu_backward(dptr dinp, cdptr inp, cdptr dout, size_t n) = 0;

  // out = a + b (n elements; out may alias a or b)
  virtual void residual_forward(dptr out, cdptr a, cdptr b, size_t n) = 0;
  // Fused residual add + LayerNorm (one kernel on cuda): resid (N,C) = a + b,
  // then out, mean, rstd = layernorm(resid) of resid AS STORED (so the same
  // bits as layernorm_forward on it: recompute policies rely on that).
  // resid may alias a or b, not out.
  virtual void residual_layernorm_forward(dptr resid, dptr out, float* mean, float* rstd, cdptr a,
                                          cdptr b, cdptr w, cdptr bias, int N, int C) {
    residual_forward(resid, a, b, (size_t)N * C);
    layernorm_forward(out, mean, rstd, resid, w, bias, N, C);
  }

  // ---- Llama ops (RMSNorm, RoPE, SwiGLU) ---------------------------------------
  // RMSNorm: rstd (N) FP32 = 1/sqrt(mean_c(inp^2) + eps);
  // out (N,C) = inp * rstd * (w + w_offset)   (w_offset 1: Gemma's (1+w) form, else 0)
  virtual void rmsnorm_forward(dptr out, float* rstd, cdptr inp, cdptr w, int N, int C,
                               float eps, float w_offset = 0.f) = 0;
  // dinp (N,C) +=, dw (C) +=   (accumulates, like layernorm_backward; dw is
  // the gradient of w, the same whatever w_offset)
  virtual void rmsnorm_backward(dptr dinp, dptr dw, cdptr dout, cdptr inp, cdptr w,
                                const float* rstd, int N, int C, float w_offset = 0.f) = 0;
  // Fused residual add + RMSNorm (one kernel on cuda): resid (N,C) = a + b, then
  // out, rstd = rmsnorm(resid). resid may alias a or b.
  virtual void residual_rmsnorm_forward(dptr resid, dptr out, float* rstd, cdptr a, cdptr b,
                                        cdptr w, int N, int C, float eps, float w_offset = 0.f) {
    residual_forward(resid, a, b, (size_t)N * C);
    rmsnorm_forward(out, rstd, resid, w, N, C, eps, w_offset);
  }
  // q/k RMSNorm on a projection qkv (N,(NH+2KV)*hs) (Qwen3, Gemma 3, OLMo 2):
  // out = inp with the q and k parts normalised, the v part copied.
  //   per_head:  each of the NH q heads and KV k heads over its hs values,
  //              with qw (hs) / kw (hs); rstd (N, NH+KV) FP32, q heads first
  //   otherwise: q's NH*hs values with qw (NH*hs), k's KV*hs with kw (KV*hs);
  //              rstd (N, 2) FP32
  // Each is rmsnorm_forward's math (eps, w_offset). out must not alias inp.
  virtual void qk_norm_forward(dptr out, float* rstd, cdptr inp, cdptr qw, cdptr kw, int N,
                               int NH, int KV, int hs, bool per_head, float eps, float w_offset);
  // dinp (N,(NH+2KV)*hs) OVERWRITTEN (the v part = dout's); dqw, dkw accumulate.
  virtual void qk_norm_backward(dptr dinp, dptr dqw, dptr dkw, cdptr dout, cdptr inp, cdptr qw,
                                cdptr kw, const float* rstd, int N, int NH, int KV, int hs,
                                bool per_head, float w_offset);
  // x (n) *= s in place (Gemma's embedding scale, forward and backward).
  virtual void scale(dptr x, size_t n, float s);
  // x (n) = c·tanh(x/c) in place (final_logit_softcapping); c > 0.
  virtual void softcap_forward(dptr x, size_t n, float c);
  // RoPE in place on the q and k heads of qkv (B,T,(NH+2KV)*hs); v untouched.
  // Hugging Face transformers' convention (rotate_half): for a head vector x at
  // position t and i < hs/2,
  //   x'[i]      = x[i] cos(t·f_i) - x[i+hs/2] sin(t·f_i)
  //   x'[i+hs/2] = x[i+hs/2] cos(t·f_i) + x[i] sin(t·f_i)
  // cos_sin: FP32 in backend memory, (maxT, hs/2) cos values then (maxT, hs/2)
  // sin values, built on the host by the model. hs even, T <= maxT.
  virtual void rope_forward(dptr qkv, const float* cos_sin, int B, int T, int NH, int KV, int hs,
                            int maxT) = 0;
  // In place on dqkv: the inverse rotation (the gradient through an orthogonal
  // map is its transpose: sin -> -sin); the v part untouched.
  virtual void rope_backward(dptr dqkv, const float* cos_sin, int B, int T, int NH, int KV,
                             int hs, int maxT) = 0;
  // SwiGLU: inp (N,2H) rows gate | up; out (N,H) = silu(gate) * up,
  // silu(x) = x / (1 + exp(-x))
  virtual void swiglu_forward(dptr out, cdptr inp, int N, int H) = 0;
  // dinp (N,2H) overwritten from dout (N,H) and inp:
  //   dgate = dout * up * sig(g) (1 + g (1 - sig(g))),  dup = dout * silu(g)
  virtual void swiglu_backward(dptr dinp, cdptr inp, cdptr dout, int N, int H) = 0;
  // GeGLU (Gemma): out (N,H) = gelu_tanh(gate) * up, gelu_tanh as gelu_forward's.
  virtual void geglu_forward(dptr out, cdptr inp, int N, int H);
  // dinp (N,2H) overwritten: dgate = dout * up * gelu_tanh'(g), dup = dout * gelu_tanh(g)
  virtual void geglu_backward(dptr dinp, cdptr inp, cdptr dout, int N, int H);

  // OLMoE's clip_qkv: out (n) = min(max(in, -c), c), c > 0 (out may alias in).
  virtual void clip_forward(dptr out, cdptr in, size_t n, float c);
  // dx (n) zeroed in place where the clamp's input x (n) lies outside [-c, c]
  // (torch.clamp's gradient: 1 inside the closed interval, 0 outside).
  virtual void clip_backward(dptr dx, cdptr x, size_t n, float c);

  // ---- Mixture-of-Experts (issue 39; math and shapes in src/moe/moe_ops.h) ----
  // One MoE layer on N tokens: router gate (E,C), experts w1 (E,2I,C) rows
  // gate | up and w2 (E,C,I), top-k dropless token choice. What a layer's
  // forward keeps for its backward (probabilities, choices, the dispatch, the
  // packed expert rows) is a MoeState the backend makes (moe_state) and
  // sizes itself; the model keeps one per MoE layer and never looks inside.
  // moe_forward: out (N,C) overwritten.
  // moe_backward: dx (N,C) overwritten; dgate, dw1, dw2 ACCUMULATE;
  //   aux_dprob: HOST FP32 (E) or null, the aux loss's gradient per
  //   probability of each expert's column (moe::aux_loss), added on every token.
  // moe_aux_stats: HOST FP64 counts (E) += top-k selections per expert and
  //   prob_sums (E) += column sums of the probabilities, of st's last forward.
  // The defaults refuse by name (a backend without MoE).
  virtual std::unique_ptr<MoeState> moe_state();
  // A state for another MoE layer of the model that holds `sibling`: the
  // layers run one at a time, so the backend may let them share what a call
  // uses only while it runs (cuda: the backward's scratch and the exchange's
  // buffers, BackendMemoryModel::moe_scratch_bytes once per model). The
  // default: moe_state(), nothing shared.
  virtual std::unique_ptr<MoeState> moe_state_beside(const MoeState& sibling);
  virtual void moe_forward(const MoeDims& d, cdptr x, cdptr gate, cdptr w1, cdptr w2, dptr out,
                           MoeState& st);
  virtual void moe_backward(const MoeDims& d, cdptr x, cdptr gate, cdptr w1, cdptr w2, cdptr dout,
                            const MoeState& st, const float* aux_dprob, dptr dx, dptr dgate,
                            dptr dw1, dptr dw2);
  virtual void moe_aux_stats(const MoeDims& d, const MoeState& st, double* counts,
                             double* prob_sums);

  // Qwen2-MoE's gated shared expert (Qwen2MoeSparseMoeBlock): g (C) is the
  // layer's shared_expert_gate row, y (N,C) the shared expert's output, x
  // (N,C) the MoE layer's input; s_t = sigmoid(x_t · g), one scalar per token.
  // shared_gate_forward: out (N,C) += s_t · y_t.
  // shared_gate_backward, s recomputed from x and g (the forward's order:
  // the same bits), with ds_t = dy_t · y_t and z'_t = ds_t s_t (1 - s_t):
  //   dys (N,C) = s_t · dy_t (overwritten; may alias y: a row's dot is taken
  //   before the row is written), dx (N,C) += z'_t g, dg (C) += Σ_t z'_t x_t.
  // The defaults refuse by name.
  virtual void shared_gate_forward(dptr out, cdptr x, cdptr g, cdptr y, int N, int C);
  virtual void shared_gate_backward(dptr dys, dptr dx, dptr dg, cdptr dy, cdptr x, cdptr g, cdptr y,
                                    int N, int C);

  // Fused softmax + cross-entropy over the first V of Vp columns.
  // logits (BT,Vp); targets (BT); losses (BT) = -log softmax(logits)[target].
  // If dloss != 0, logits is OVERWRITTEN with its gradient:
  //   dloss * (softmax - onehot(target)) on columns < V, and 0 on padded columns.
  // softcap c > 0: logits hold y = c·tanh(x/c) (softcap_forward ran) and the
  // gradient written is x's: dloss * (softmax - onehot) * (1 - (y/c)^2).
  virtual void classifier(dptr logits, float* losses, const int* targets, int BT, int V, int Vp,
                          float dloss, float softcap = 0.f) = 0;

  // ---- optimizer -------------------------------------------------------------
  // Sum of squares of n storage-dtype elements, accumulated in double
  // (deterministic order).
  virtual double sum_squares(cdptr x, size_t n) = 0;
  // AdamW on n elements. master (FP32) is the master copy of params; if
  // master is null, params itself is the FP32 master (the cpu backend).
  //   g = grad_scale * grads
  //   m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2
  //   mhat = m / (1-b1^t) ; vhat = v / (1-b2^t)
  //   p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)
  virtual void adamw(dptr params, float* master, cdptr grads, float* m, float* v, size_t n,
                     const AdamWArgs& a) = 0;

  // ---- fused and optional ops (defaults compose the ops above) -----------------
  // matmul_backward whose input gradient also goes through the GELU derivative
  // (cuBLASLt's DGELU epilogue on the cuda backend):
  //   dinp (N,C) = (dout (N,OC) @ w (OC,C)) * gelu'(pre_gelu (N,C))   (overwritten)
  //   dw, dbias as matmul_backward (accumulated).
  virtual void matmul_backward_gelu(dptr dinp, dptr dw, dptr dbias, cdptr dout, cdptr inp,
                                    cdptr w, cdptr pre_gelu, int N, int C, int OC) {
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
    gelu_backward(dinp, pre_gelu, dinp, (size_t)N * C);
  }
  // GELU's output again, for a recompute policy that did not keep it
  // (model/recompute.h): out (N,OC) gets the bits that
  // matmul_forward(out, pre_gelu, inp, w, bias, N, C, OC) wrote, from its kept
  // pre_gelu (N,OC). By default gelu_forward on pre_gelu, which is how the
  // forward computed it when GELU ran as a kernel (the cpu backend, FP32
  // storage, no epilogue plan). A backend whose forward took GELU from the
  // GEMM epilogue, computed from the FP32 accumulator and not from the rounded
  // pre_gelu, re-runs that GEMM with its pinned algorithm instead (pre_gelu is
  // rewritten with the bits it holds): inp (N,C) must then hold the forward's
  // input again.
  virtual void gelu_recompute(dptr out, dptr pre_gelu, cdptr /*inp*/, cdptr /*w*/, cdptr /*bias*/,
                              int N, int /*C*/, int OC) {
    gelu_forward(out, pre_gelu, (size_t)N * OC);
  }
  // Whether gelu_recompute re-runs the GEMM now (reads inp; 2·N·C·OC FLOPs).
  virtual bool gelu_recompute_reruns_gemm() const { return false; }
  // The allocation p (from alloc()) holds parameters. A backend that keeps a
  // separate FP32 master copy of parameters (extra_bytes_per_param() > 0)
  // creates it now, so that upload_f32() into p sets the master copy exactly
  // (a resumed BF16 run continues from the FP32 weights it saved, not from
  // their BF16 rounding). No-op otherwise.
  // ranges (sorted, disjoint [lo, hi) element ranges of p; null: all of p):
  // the master covers only these elements, packed back to back (4 bytes per
  // covered element, one allocation). ZeRO-1/2 on W > 1 shards: each rank
  // keeps the master of the ranges whose optimizer state it owns. Updates
  // (adamw, round_from_master) must then lie inside one range; upload_f32
  // sets the covered part's master, download_f32 returns the master where
  // covered and the storage-dtype values elsewhere.
  virtual void keep_master_copy(void* /*p*/,
                                const std::vector<std::pair<size_t, size_t>>* /*ranges*/ = nullptr) {}
  // Rewrites params (n, storage dtype) from their FP32 master copy exactly as
  // adamw() at 1-based `step` wrote them (stochastic rounding is a function of
  // the step and the tensor's position): after a resume, the storage-dtype
  // weights are bit-identical to the uninterrupted run's. Call with the same
  // (params, n, round_offset) pieces adamw() was given (any other split of
  // the tensor gives the same bits). No-op without a master copy.
  virtual void round_from_master(dptr /*params*/, size_t /*n*/, int /*step*/,
                                 size_t /*round_offset*/ = 0,
                                 size_t /*tensor_offset*/ = (size_t)-1) {}
  // The FP32 master copy of params[0, n) in backend memory, when this backend
  // keeps one that holds all of them back to back (the whole master, or one
  // kept range covering them); null otherwise (FP32 storage, the cpu
  // backend, or elements outside the kept ranges). Written through it by a
  // collective (--expert-parallel's master all-gather), then round_from_master.
  virtual float* master_of(cdptr /*params*/, size_t /*n*/) { return nullptr; }
  // Copy `bytes` within backend memory (dst and src do not overlap).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;

  // ---- memory plan (exact accounting; see model/memory.h) ----------------------
  using OpShapes = ratchet::OpShapes;
  // How this backend allocates (backend/memory_model.h): the one description
  // that alloc() follows and that model/memory.h and `ratchet plan` compute with.
  virtual const BackendMemoryModel& memory_model() const = 0;
  // Bytes of scratch the backend's ops need at most for these shapes (attention
  // permutes, reduction scratch, epilogue outputs); 0 if the ops need none.
  size_t workspace_bytes(const OpShapes& s) const { return memory_model().workspace_bytes(s); }
  // Sizes the scratch once (the model calls it with workspace_bytes() when it
  // sizes its activations), so that no op grows it later.
  virtual void reserve_workspace(size_t /*bytes*/) {}
  // Bytes one alloc(bytes) really takes (after rounding); what bytes_in_use adds.
  size_t alloc_size(size_t bytes) const { return memory_model().alloc_size(bytes); }
  // Bytes the backend holds for itself from construction (reduction results,
  // GEMM workspace), counted in bytes_in_use.
  size_t overhead_bytes() const { return memory_model().overhead_bytes; }
  // From now on every alloc() comes out of one block of `bytes` (the arena,
  // sized by the memory accounting); exceeding it is an Error naming the
  // request. 0 or unsupported: allocate as before. The highest bytes_in_use
  // seen is peak_bytes_in_use().
  virtual void use_arena(size_t /*bytes*/) {}
  virtual size_t peak_bytes_in_use() const { return bytes_in_use(); }

  // ---- profiler ranges (NVTX on the cuda backend), around every model op -------
  virtual void range_push(const char* /*name*/) {}
  virtual void range_pop() {}

  // ---- device facts (optional) -------------------------------------------------
  // Free memory of the device, for --batch-size auto; 0: host memory (MemAvailable).
  virtual size_t free_memory_bytes() const { return 0; }
  // Lines for the run's log, once at setup (after the memory accounting, before
  // step 1): which library paths the ops take for these shapes (the cuda
  // backend: cuDNN's attention engines and workspaces, BGRADB or the bias_grad
  // kernel, the GELU path). "" when there is nothing to say.
  virtual std::string setup_report(const OpShapes& /*s*/) { return ""; }
  // Extra bytes per parameter the backend allocates by itself (e.g. 4 for the
  // cuda backend's FP32 master weights with BF16 storage), for memory plans.
  size_t extra_bytes_per_param() const { return memory_model().extra_bytes_per_param; }
  // Dense peak of the device in the storage precision, TFLOP/s (MFU); 0: unknown.
  virtual double peak_tflops() const { return 0.0; }
  // Peak memory bandwidth of the device, GB/s (1e9 bytes); 0: unknown. With
  // peak_tflops() the roofline `train --profile` holds each op against.
  virtual double peak_gbps() const { return 0.0; }
};

// Backend factory: "cpu" (threads <= 0 means all cores).
std::unique_ptr<Backend> make_cpu_backend(int threads);

// ---- the backend factory (src/backend/backend_factory.cpp) --------------------------------
// `ratchet train --device cpu|cuda|auto|simt`. "cpu" is always there; "cuda"
// (the nvcc-built cuda backend) and "simt" (the same backend run on the CPU by
// kernels/simt, RATCHET_DEVICE_SIMT=ON) exist when the executable registered
// them (src/cli/main.cpp). "auto" is cuda when a device is usable, else cpu
// with a note.
struct BackendOptions {
  std::string device = "cpu";  // cpu | cuda | auto | simt
  int threads = 0;             // cpu: threads (<= 0: all cores)
  std::string storage = "bf16";  // cuda/simt: bf16 | f32
  bool tf32 = false;             // cuda, f32 storage: TF32 tensor-core GEMMs
  AttentionImpl attention = AttentionImpl::flash;  // cuda/simt: --attention
  bool attention_auto = false;  // --attention auto: make_backend chooses (attention_choice.h)
  AttentionHeads heads;         // the model's, for that choice (HS 0: not checked)
  bool deterministic = true;    // --deterministic (cudnn's backward)
};
using BackendMaker = std::unique_ptr<Backend> (*)(const BackendOptions&);
// available(why): whether the device can run now; on false *why says why.
using BackendProbe = bool (*)(std::string* why);
// The device the backend runs on, for --attention auto (called after available()).
using BackendDescribe = AttentionDevice (*)();
void register_backend(const std::string& device, BackendMaker make, BackendProbe available,
                      BackendDescribe describe = nullptr);
// Throws Error with what to do when the device is unknown, not built in, or
// has no usable hardware. *note (if given) receives lines for the log: when
// "auto" fell back to cpu, which attention was picked and why, and a
// "warning: " line when an explicit --attention costs speed for nothing.
std::unique_ptr<Backend> make_backend(const BackendOptions& o, std::string* note = nullptr);
// Registers the cuda backend linked into this executable: "cuda" (nvcc build)
// or "simt" (simt build). Defined in src/backend/cuda; called by main() when
// linked (RATCHET_REGISTER_CUDA_BACKEND / RATCHET_REGISTER_SIMT_BACKEND).
void register_cuda_backend();

}  // namespace ratchet

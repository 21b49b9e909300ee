// GPT-2 forward and backward, orchestrated over a Backend.
//
// The model owns three flat buffers in backend memory:
//   params (P)   every parameter, in ParamLayout order (storage dtype)
//   grads  (P)   their gradients, same layout (storage dtype); ACCUMULATED by
//                forward_backward() until zero_grad(). Not allocated when the
//                model is built with flat_grads = false: a GradStore
//                (model/grad_store.h, set_grad_store) then says where each
//                block's gradients go (ZeRO-2's reused bucket buffers)
//   acts         activations for one micro-batch (layout below), sized for the
//                largest (B, T) used so far
// Forward (pre-LayerNorm GPT-2), per layer l, with x = residual stream (B,T,C):
//   ln1 = LN(x); qkv = ln1 qkvw^T + qkvb; atty = attention(qkv)
//   r2  = x + atty attprojw^T + attprojb
//   ln2 = LN(r2); fch = ln2 fcw^T + fcb; fch_gelu = gelu(fch)
//   r3  = r2 + fch_gelu fcprojw^T + fcprojb           (x of layer l+1)
// logits = LN_f(x_L) wte^T (tied); loss = mean over (b,t) of cross-entropy
// over the V real columns.
// Llama (cfg.arch == Arch::llama; model/llama_block.cpp), per layer l:
//   ln1 = RMSNorm(x) (layer 0; later layers get it fused into the previous
//   layer's last residual add); qkv = ln1 qkvw^T (B,T,(NH+2KV)hs); rope(q, k)
//   in place; atty = attention(qkv; NH, KV) (GQA)
//   r2  = x + atty attprojw^T; ln2 = RMSNorm(r2)          (fused add + norm)
//   fch = ln2 fcw^T (BT,2H) gate|up; fch_gelu = swiglu(fch) (BT,H)
//   r3  = r2 + fch_gelu fcprojw^T; the next ln1 (or lnf) = RMSNorm(r3)
// logits = lnf (lmhead or wte)^T. No biases, no position table (RoPE). Which activations are kept for backward and which
// are recomputed is the recompute policy (model/recompute.h); gradients are
// the same under every policy.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/expert_slice.h"
#include "model/grad_store.h"
#include "model/param_store.h"
#include "model/param_layout.h"
#include "model/recompute.h"

namespace ratchet {

// Per-op timing, filled when profiling is on (train --profile).
struct OpStat {
  long calls = 0;
  double seconds = 0;
  double flops = 0;  // floating-point operations done (0 if not a FLOP-bound op)
  double bytes = 0;  // bytes moved (estimate; for memory-bound ops)
};

class GPT {
 public:
  // flat_grads false: no flat gradient buffer (grads() is null); a
  // GradStore must be set before forward_backward().
  // flat_params false: no flat params buffer (params() is null, ZeRO-3); a
  // ParamStore must be set before anything reads or sets parameters
  // (init_random, set_params and get_params go through it).
  // master_ranges: the [lo, hi) element ranges of the flat params whose FP32
  // master copy the backend keeps (BF16 storage; null: all of them). ZeRO-1/2
  // on several shards pass the rank's DistributedStrategy::owned_ranges(): get_params
  // then returns FP32 master values there and the BF16 values elsewhere
  // (DistributedStrategy::params_f32 gathers every owner's). They are global
  // (the whole model's places, as owned_ranges() are): an expert slice keeps
  // them at their places in its local layout.
  // experts: the slice of every MoE layer's experts this model holds
  // (model/expert_slice.h): with experts.shards N > 1 its flat buffers are
  // ParamLayout(cfg, N), E/N experts' weights and gradients, and every MoE
  // layer's forward needs the exchange over the N ranks holding the others
  // (set_moe_exchange; forward() too: collective_forward()). Default: all.
  GPT(const GPTConfig& cfg, Backend& be, bool flat_grads = true, bool flat_params = true,
      const std::vector<std::pair<size_t, size_t>>* master_ranges = nullptr,
      ExpertSlice experts = {});
  ~GPT();
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const GPTConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  size_t num_params() const { return layout_.total; }  // this model's flat buffers
  // The whole model's layout (checkpoints, exports, params_f32): layout()
  // unless this model holds an expert slice.
  const ParamLayout& global_layout() const { return global_; }
  Backend& backend() { return be_; }

  // GPT-2 initialisation: weights ~ N(0, 0.02), the two residual projections
  // (attprojw, fcprojw) ~ N(0, 0.02/sqrt(2L)), biases 0, LayerNorm gains 1,
  // padded wte rows 0. Deterministic in seed. A model holding an expert
  // slice gets that slice of the whole model's values (init_host).
  void init_random(uint64_t seed);
  // The same values into `host`: the whole model's (ParamLayout(cfg).total
  // floats), or slice x's part of them (ParamLayout(cfg, x.shards).total),
  // without holding the rest. Drawn by threads in pieces of `piece` values,
  // each from the one stream's state there: the values do not depend on the
  // piece size or the thread count (a test's small pieces check that).
  static constexpr size_t kInitPiece = size_t(1) << 22;
  static void init_host(const GPTConfig& cfg, uint64_t seed, float* host, ExpertSlice x = {},
                        size_t piece = kInitPiece);
  // The experts this model holds (all of them unless built with a slice).
  const ExpertSlice& experts() const { return experts_; }
  void set_params(const float* host);  // num_params() floats
  // From the whole model's values (global_layout().total floats): an expert
  // slice takes its part (a checkpoint, --init-from).
  void set_whole_params(const float* host);
  void get_params(float* host) const;
  void get_grads(float* host) const;
  dptr params() { return params_; }
  dptr grads() { return grads_; }

  // Forward only. inputs/targets: (B,T) host arrays; targets may be null.
  // Returns the mean loss (NaN when targets is null). Logits stay available.
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T);
  // Forward and backward on one micro-batch: grads += loss_scale * d(mean loss)/dparams.
  // Returns the mean loss of this micro-batch (unscaled).
  float forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                         float loss_scale);
  void zero_grad();
  // Allocates (and first-touches) the activations for micro-batches of (B, T)
  // now rather than in the first forward: the trainer does it while the
  // loader reads the first batch.
  void reserve_activations(int B, int T) { ensure_acts(B, T); }
  // The recompute policy for the following steps (default none). Changing it
  // re-lays out (and reallocates) the activations.
  void set_recompute(const Recompute& p);
  const Recompute& recompute() const { return recompute_; }
  // Logits of the last forward() (B,T,Vp) as FP32 on the host; only valid
  // after forward() (forward_backward overwrites them with their gradient).
  void get_logits(float* host) const;
  // Logits of position t of row 0, first V columns (for sampling).
  void get_logits_row(int t, float* host_V) const;
  // Forward for scoring only some positions (evaluation, src/eval): the
  // blocks run on all (B,T) positions, the classifier (lm-head GEMM and
  // cross-entropy) only on `spans`, each positions [first, first + count) of
  // row `row`, in increasing (row, first) order without overlap. targets
  // holds one target per scored position, in span order; losses (as many
  // floats) receives -log softmax(logits)[target] for each. The skipped
  // positions' logits are never computed (for a multiple-choice ending
  // after a long context, most of the lm-head's FLOPs). get_logits() and
  // get_losses() are not valid after it.
  struct Span {
    int row, first, count;
  };
  void forward_spans(const int32_t* inputs, int B, int T, const std::vector<Span>& spans,
                     const int32_t* targets, float* losses);
  // Per-position losses of the last forward() with targets: (B,T) floats,
  // -log softmax(logits)[target] (the classifier's; for evaluation, which
  // needs each position's log-probability without the (B,T,Vp) logits).
  void get_losses(float* host) const;

  // Exact bytes of backend memory this model allocates (what alloc() is asked
  // for): parameters and gradients (storage dtype), and activations for one
  // micro-batch of (B, T) under recompute policy p, with what attention
  // implementation `att` keeps per layer (attention_saved_bytes), including
  // backward scratch and 64-byte alignment (one allocation). The optimizer's FP32 moments
  // (2·P·4 bytes) are AdamW's, not counted here; the whole step's memory is
  // model/memory.h.
  static size_t param_bytes(const GPTConfig& cfg, size_t storage_bytes);
  static size_t activation_bytes(const GPTConfig& cfg, int B, int T, size_t storage_bytes,
                                 const Recompute& p = Recompute(),
                                 AttentionImpl att = AttentionImpl::flash);

  // Called from forward_backward() as gradients become final for this
  // micro-batch: with l = L-1 down to 0 right after layer l's backward (its
  // twelve tensors ln1w..fcprojb, see ParamLayout), then once with l = -1
  // when the rest (wte, wpe, lnfw, lnfb) are done. For overlapping the
  // gradient all-reduce with the backward of the layers below (distributed/replicated.h).
  using GradReadyHook = std::function<void(int layer)>;
  void set_grad_ready_hook(GradReadyHook h) { grad_ready_ = std::move(h); }
  // Where the backward writes gradients (model/grad_store.h); null: the flat
  // grads buffer. The store must outlive its use (set null to detach).
  void set_grad_store(GradStore* s) { store_ = s; }
  GradStore* grad_store() const { return store_; }
  // Where every parameter is read from (model/param_store.h); null: the flat
  // params buffer. The store must outlive its use (set null to detach).
  void set_param_store(ParamStore* s) { pstore_ = s; }
  ParamStore* param_store() const { return pstore_; }
  // Whether each forward pass is collective (ZeRO-3 on several ranks, or an
  // expert slice: its MoE layers exchange rows with the other slices): every
  // rank must then make the same passes (distributed/forward_balance.h).
  bool collective_forward() const {
    return (pstore_ && pstore_->collective()) || experts_.partial();
  }

  // ---- Mixture-of-Experts (docs/moe.md) ----------------------------------------
  // The load-balancing statistics of one training micro-batch, after the
  // reducer: counts (Lm·E, the MoE layers in layer order, E each) of top-k
  // selections per expert, prob_sums (E) the router probabilities' column
  // sums pooled over the MoE layers, rows the router rows they cover (tokens
  // x MoE layers), and aux_loss = transformers' load_balancing_loss_func of
  // them (E·sum_e f_e·P_e with f, P pooled over the layers; unweighted).
  struct MoeStats {
    std::vector<double> counts, prob_sums;
    double rows = 0, aux_loss = 0;
  };
  // Sums the statistics buffer (n doubles) over the data-parallel group in
  // place (an all-reduce), so that the aux loss of every rank is the global
  // micro-batch's; `world` ranks each add their gradient (the trainer's
  // gradients SUM over ranks). Unset: one rank.
  using MoeStatsReducer = std::function<void(double* buf, size_t n)>;
  void set_moe_stats_reducer(MoeStatsReducer r, int world) {
    moe_reduce_ = std::move(r);
    moe_world_ = world;
  }
  // Of the last forward_backward() (empty for a dense model).
  const MoeStats& moe_stats() const { return moe_stats_; }
  // Expert parallelism (distributed/expert_parallel.h applies it): the MoE
  // layers of forward_backward() compute only this rank's experts and
  // exchange rows with the other ranks holding the rest. A model that keeps
  // every expert's weights computes all of them locally in forward()
  // (evaluation, sampling: not made by every rank alike) with no exchange;
  // one holding an expert slice exchanges there too (collective_forward()),
  // and its exchange must have the slice's size and index (an Error
  // otherwise). Null: every expert here. The exchange must outlive its use.
  void set_moe_exchange(MoeExchange* ex);
  MoeExchange* moe_exchange() const { return moe_exchange_; }
  // The selection bias (cfg.moe_selection_bias; HF e_score_correction_bias):
  // (L,E) FP32 on the host, row l the bias of layer l (zeros for dense
  // layers; empty without the option). Not a parameter: no gradient, not in
  // AdamW, saved as state.h5's /moe_selection_bias. Starts at zeros.
  const std::vector<float>& moe_bias() const { return moe_bias_; }
  void set_moe_bias(const std::vector<float>& b);  // (L,E), asserted
  // After an optimizer step: moe::bias_update of each MoE layer's row from
  // counts (Lm,E), the GLOBAL top-k selections of the whole step (every
  // rank, every micro-batch), at cfg.moe_bias_update_rate. The same counts
  // make the same bits on every rank.
  void moe_bias_update(const std::vector<double>& counts);

  // Profiling: when on, every op is timed (with a backend synchronize).
  void set_profiling(bool on) { profiling_ = on; }
  const std::map<std::string, OpStat>& profile() const { return prof_; }
  void clear_profile() { prof_.clear(); }

 private:
  struct Acts;  // pointers into acts_ for the current (B, T)
  void ensure_acts(int B, int T);
  Acts acts_for(int B, int T) const;
  // count_only: only `bytes` is filled (no per-layer pointer lists, which at
  // 10^7 layers were 1 GB allocated before the memory check could refuse).
  static Acts layout_acts(const GPTConfig& cfg, int B, int T, size_t storage_bytes,
                          const Recompute& p, AttentionImpl att, void* base,
                          bool count_only = false);
  void run_forward(const Acts& a, int B, int T, bool has_targets, float dloss,
                   bool lm_head = true);
  // Layer l's forward from its input residual x; with `to_gelu` it stops after
  // fch_gelu (what backward needs; r3 is kept), else it also writes r3[l] and,
  // in the same fused residual + norm op, the next layer's ln1 (the last
  // layer: lnf). So ln1 is normalised here only for layer 0 and when recomputing.
  void forward_block(const Acts& a, int l, int B, int T, bool to_gelu);
  void run_backward(const Acts& a, int B, int T);
  // The llama blocks (model/llama_block.cpp): forward_block's and
  // run_backward's per-layer part for Arch::llama.
  void forward_block_llama(const Acts& a, int l, int B, int T, bool to_act);
  void backward_block_llama(const Acts& a, int l, int B, int T);
  float mean_loss(const Acts& a, int BT) const;
  float embed_scale() const;  // Gemma's sqrt(C)
  // The llama block's pieces (llama_block.cpp): the q/k projection (bias,
  // q/k norm, RoPE) and a branch output's post norm.
  void qkv_forward(const Acts& a, int l, int B, int T, cdptr in);
  void qkv_backward(const Acts& a, int l, int B, int T, cdptr in);
  AttnOpts attn_opts(int l) const;
  const float* rope_table(const Acts& a, int l) const;
  cdptr param(int i, int layer = 0) const;
  // MoE layers (llama_block.cpp): layer l's state (the shared one for a
  // layer the policy recomputes), its shape, the forward and backward.
  MoeState& moe_state(int l);
  MoeDims moe_dims(int BT, int layer = -1) const;  // layer >= 0: with its selection bias
  void moe_collect_stats(const Acts& a, int BT, float loss_scale);
  dptr grad(int i, int layer = 0);

  GPTConfig cfg_;
  Backend& be_;
  ExpertSlice experts_;
  ParamLayout layout_;
  ParamLayout global_;
  dptr params_ = nullptr;
  dptr grads_ = nullptr;
  void* acts_ = nullptr;
  size_t acts_bytes_ = 0;
  int last_B_ = 0, last_T_ = 0;
  Recompute recompute_;
  bool profiling_ = false;
  std::map<std::string, OpStat> prof_;
  GradReadyHook grad_ready_;
  GradStore* store_ = nullptr;
  ParamStore* pstore_ = nullptr;
  std::vector<std::unique_ptr<MoeState>> moe_states_;  // per layer (null: dense)
  std::vector<float> moe_bias_;  // (L,E): the selection bias (empty: none)
  std::unique_ptr<MoeState> moe_shared_;  // layers the blocks policy recomputes
  bool moe_collect_ = false;              // forward_backward: gather statistics
  std::vector<double> moe_buf_;           // the reducer's buffer: counts | prob_sums | rows
  std::vector<float> aux_dprob_;          // (E) host: coef · d aux / d prob, or empty
  MoeStats moe_stats_;
  MoeStatsReducer moe_reduce_;
  int moe_world_ = 1;
  MoeExchange* moe_exchange_ = nullptr;
  bool moe_training_ = false;  // inside forward_backward: the exchange applies
  dptr slots_[kNumParamTensors] = {};  // the store's destinations, this pass
  int slot_layer_ = -1;                // the block slots_ holds
  friend class OpScope;
};

// The shapes the backend's op scratch depends on (Backend::workspace_bytes).
Backend::OpShapes op_shapes(const GPTConfig& cfg, int B, int T);

// Training FLOPs per token (forward + backward): 6 per parameter used in a
// matmul (all but wpe, and but wte when a llama's lm_head is untied: then wte
// is only a lookup), plus attention's 12·L·C·T (PaLM appendix B; GQA does
// not change it: every query head still attends over T keys).
double train_flops_per_token(const GPTConfig& cfg, int T);
// Keys a query of layer l attends to at sequence length T (FLOP counts):
// T, or min(T, W) on a sliding layer.
double attention_keys_per_query(const GPTConfig& cfg, int l, int T);

}  // namespace ratchet

#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/parallel_pieces.h"
#include "core/rng.h"
#include "model/gpt_internals.h"
#include "model/rope_table.h"
#include "moe/moe_exchange.h"

namespace ratchet {

GPT::GPT(const GPTConfig& cfg, Backend& be, bool flat_grads, bool flat_params,
         const std::vector<std::pair<size_t, size_t>>* master_ranges, ExpertSlice experts)
    : cfg_(cfg), be_(be), experts_(experts), layout_(cfg, experts.shards), global_(cfg) {
  std::vector<std::pair<size_t, size_t>> local;  // a slice's master ranges in its layout
  if (experts_.partial()) {
    const std::vector<FlatSegment> segments = local_segments(cfg_, experts_);  // an Error for a bad index
    if (master_ranges) local = local_ranges(segments, *master_ranges);
  }
  if (flat_params) {
    params_ = be_.alloc(layout_.total * be_.storage_bytes());
    // set_params() then sets the FP32 master exactly (of master_ranges only, when given)
    be_.keep_master_copy(params_, master_ranges && experts_.partial() ? &local : master_ranges);
  }
  if (flat_grads) grads_ = be_.alloc(layout_.total * be_.storage_bytes());
  if (cfg_.moe_selection_bias) moe_bias_.assign((size_t)cfg_.num_layers * cfg_.num_experts, 0.f);
}

GPT::~GPT() {
  be_.release(params_);
  be_.release(grads_);
  if (acts_) be_.release(acts_);
}

cdptr GPT::param(int i, int layer) const {
  if (pstore_) return pstore_->param(i, layer);
  size_t off = layout_.offsets[i] + (size_t)layer * layout_.per_layer(i, cfg_.num_layers);
  return (const char*)params_ + off * be_.storage_bytes();
}

dptr GPT::grad(int i, int layer) {
  if (store_) {
    // The block tensors of the block the store last placed; the rest always.
    RATCHET_ASSERT(slots_[i] != nullptr);
    RATCHET_ASSERT(!is_block_tensor(i) || layer == slot_layer_);
    return slots_[i];
  }
  size_t off = layout_.offsets[i] + (size_t)layer * layout_.per_layer(i, cfg_.num_layers);
  return (char*)grads_ + off * be_.storage_bytes();
}

void GPT::init_random(uint64_t seed) {
  // Left uninitialised: init_host writes every element (zeroing 28 GB at 7B
  // parameters is seconds of one core).
  std::unique_ptr<float[]> host(new float[layout_.total]);
  init_host(cfg_, seed, host.get(), experts_);
  set_params(host.get());
}

void GPT::set_whole_params(const float* host) {
  if (!experts_.partial()) return set_params(host);
  std::vector<float> mine(layout_.total);
  slice_experts(cfg_, experts_, host, mine.data());
  set_params(mine.data());
}

// The whole model's values are drawn in its flat order (one Rng stream), and
// each lands at its local place when the slice holds it: a slice never
// allocates the whole model (30.5B floats for qwen3-30b-a3b). The stream is
// cut into pieces that threads draw at once, each from the state the one
// stream would have there (Rng::skip), so the values do not depend on the
// thread count (olmoe-1b-7b's start-up with one thread ran past 90 s on an
// H200: bench/gpu/results/2026-11-30-h200/window3/moe.log).
void GPT::init_host(const GPTConfig& cfg, uint64_t seed, float* host, ExpertSlice x,
                    size_t piece) {
  const ParamLayout g(cfg), layout(cfg, x.shards);
  const std::vector<FlatSegment> segs = local_segments(cfg, x);  // ascending in both layouts
  RATCHET_ASSERT(piece > 0);
  // Zeros first (biases, padded rows, unused slices): every element is written.
  parallel_ranges(layout.total, piece,
                  [&](size_t lo, size_t hi) { std::fill(host + lo, host + hi, 0.0f); });
  // A run of global elements [at, at + n): the constant `value`, or normals
  // times sd drawn from the stream at `state`.
  struct Fill {
    size_t at, n;
    bool normal;
    float value;  // the constant, or sd
    uint64_t state;
  };
  std::vector<Fill> fills;
  const float std_proj = 0.02f / std::sqrt(2.0f * cfg.num_layers);
  Rng rng(seed);
  for (int i = 0; i < kNumParamTensors; i++) {
    const size_t at = g.offsets[i];
    size_t n = g.sizes[i];
    if (i == P_LN1W || i == P_LN2W || i == P_LNFW || i == P_QNORMW || i == P_KNORMW ||
        i == P_ATTNPOSTW || i == P_MLPPOSTW) {
      // RMSNorm gains start at identity: w = 1, or w = 0 in Gemma's (1+w) form
      // (GPT-2's LayerNorm keeps 1; its bias slots are not in this list).
      const float one = cfg.llama() && cfg.norm_unit_offset ? 0.0f : 1.0f;
      fills.push_back({at, n, false, one, 0});
    } else if (ParamLayout::decayed(i)) {
      float sd = (i == P_ATTPROJW || i == P_FCPROJW) ? std_proj : 0.02f;
      // wte, lmhead: only the V real rows; padded rows stay zero.
      if (i == P_WTE || i == P_LMHEAD) n = std::min(n, (size_t)cfg.vocab_size * cfg.channels);
      fills.push_back({at, n, true, sd, rng.state});
      rng.skip(n * Rng::kDrawsPerNormal);
    }  // biases stay zero
  }
  // Pieces of at most `piece` elements, taken in turn by the threads.
  std::vector<std::pair<size_t, size_t>> pieces;  // (fill, first element in it)
  for (size_t f = 0; f < fills.size(); f++)
    for (size_t j = 0; j < fills[f].n; j += piece) pieces.push_back({f, j});
  auto draw = [&](size_t p) {
    const Fill& f = fills[pieces[p].first];
    const size_t j0 = pieces[p].second, j1 = std::min(f.n, j0 + piece);
    Rng r(f.state);
    r.skip(j0 * Rng::kDrawsPerNormal);
    // The first segment that ends after this piece's first element.
    size_t s = std::upper_bound(segs.begin(), segs.end(), f.at + j0,
                                [](size_t v, const FlatSegment& q) { return v < q.global + q.len; }) -
               segs.begin();
    for (size_t j = j0; j < j1; j++) {
      const float v = f.normal ? f.value * r.normal() : f.value;
      const size_t at = f.at + j;
      while (s < segs.size() && at >= segs[s].global + segs[s].len) s++;
      if (s < segs.size() && at >= segs[s].global) host[segs[s].local + (at - segs[s].global)] = v;
    }
  };
  parallel_pieces(pieces.size(), draw);
  // A model mixing dense and MoE layers holds both MLPs' tensors for every
  // layer (param_layout.h); the slices a layer does not use stay zero. Per
  // layer the local layout has the same tensors, so this works on it alone.
  for (int l = 0; cfg.moe() && l < cfg.num_layers; l++)
    for (int i : {P_FCW, P_FCPROJW, P_ROUTERW, P_EXPW1, P_EXPW2, P_SHW1, P_SHW2, P_SHGATE}) {
      const bool used = (i == P_FCW || i == P_FCPROJW) != cfg.layer_is_moe(l);
      const size_t n = layout.per_layer(i, cfg.num_layers);
      if (!used && n > 0) std::fill_n(host + layout.offsets[i] + l * n, n, 0.0f);
    }
}

void GPT::set_moe_exchange(MoeExchange* ex) {
  if (experts_.partial() && (!ex || ex->size() != experts_.shards || ex->rank() != experts_.index))
    fail("this model holds expert slice ", experts_.index, " of ", experts_.shards,
         " and needs the exchange over those ", experts_.shards, " ranks at that place; got ",
         ex ? "one of " + std::to_string(ex->size()) + " ranks at place " + std::to_string(ex->rank())
            : std::string("none"));
  moe_exchange_ = ex;
}

// Without flat params (ZeRO-3) through the store: each rank keeps its shard.
void GPT::set_params(const float* host) {
  if (params_) return be_.upload_f32(params_, host, layout_.total);
  if (!pstore_ || !pstore_->set_host(host))
    fail("this model has no flat parameters (ZeRO-3) and no parameter store to set them in");
}
void GPT::get_params(float* host) const {
  if (params_) return be_.download_f32(host, params_, layout_.total);
  if (!pstore_ || !pstore_->get_host(host))
    fail("this model has no flat parameters (ZeRO-3) and no parameter store to read them from");
}
void GPT::get_grads(float* host) const {
  if (!grads_)
    fail("this model has no flat gradient buffer (ZeRO-2 keeps only each rank's shard of the "
         "summed gradient)");
  be_.download_f32(host, grads_, layout_.total);
}
// Without a flat buffer the store hands out zeroed buffers per pass.
void GPT::zero_grad() {
  if (grads_) be_.zero(grads_, layout_.total * be_.storage_bytes());
}

GPT::Acts GPT::acts_for(int B, int T) const {
  return layout_acts(cfg_, B, T, be_.storage_bytes(), recompute_, be_.attention_impl(), acts_);
}

void GPT::set_recompute(const Recompute& p) {
  if (p == recompute_) return;
  recompute_ = p;
  if (acts_) be_.release(acts_);  // the layout changed: re-allocate on the next step
  acts_ = nullptr;
  acts_bytes_ = 0;
  // Which MoE layers share a state follows the policy: made again on use.
  moe_states_.clear();
  moe_shared_.reset();
}

size_t GPT::param_bytes(const GPTConfig& cfg, size_t storage_bytes) {
  return 2 * ParamLayout(cfg).total * storage_bytes;  // params + grads
}

size_t GPT::activation_bytes(const GPTConfig& cfg, int B, int T, size_t storage_bytes,
                             const Recompute& p, AttentionImpl att) {
  return layout_acts(cfg, B, T, storage_bytes, p, att, nullptr, /*count_only=*/true).bytes;
}

// The one definition of the activation layout: used to place buffers (base
// non-null) and to count bytes (base null) — so accounting is exact. Under a
// recompute policy some per-layer entries point at one shared buffer (see
// model/recompute.h): their contents are only valid for the layer that last
// wrote them, and backward rewrites them before use.
GPT::Acts GPT::layout_acts(const GPTConfig& cfg, int B, int T, size_t sb, const Recompute& p,
                           AttentionImpl att, void* acts, bool count_only) {
  const size_t BT = (size_t)B * T, C = cfg.channels, NH = cfg.num_heads,
               Vp = cfg.padded_vocab, L = cfg.num_layers, QKV = cfg.qkv_channels();
  const bool llama = cfg.llama();
  // MoE layers have no fch / fch_gelu of their own (their state is the
  // backend's MoeState); the dense MLP's buffers exist when some layer is
  // dense, and the shared experts (Is wide, llama_block.cpp) use the same
  // buffers on the MoE layers, so the width is the larger of the two.
  const bool dense_mlp = !cfg.moe() || cfg.moe_layer_count() < (int)L;
  const size_t Is = llama ? (size_t)cfg.shared_ffn() : 0;
  const bool mlp_bufs = dense_mlp || Is > 0;
  const size_t Hw = std::max(dense_mlp || Is == 0 ? (size_t)cfg.ffn() : 0, Is);
  const size_t F = llama ? 2 * Hw : 4 * C, A = llama ? Hw : 4 * C;
  const size_t Cq = llama ? (size_t)cfg.attn_channels() : C;  // what attention writes
  // qkvr keeps the projection before the q/k norm, and before it the
  // clip_qkv clamp (whose backward reads the clamped values).
  const bool qkn = llama && (cfg.qk_norm != QkNorm::none || cfg.clip_qkv > 0),
             post = llama && cfg.has_post_norms();
  const size_t R = cfg.qk_norm == QkNorm::per_head ? NH + cfg.kv_heads() : 2;
  Acts a{};
  char* base = (char*)acts;
  size_t off = 0;
  // Each buffer starts 64-byte aligned (vector loads, cuBLASLt's 16-byte rule).
  auto take = [&](size_t bytes) -> void* {
    void* ptr = base ? base + off : nullptr;
    off += (bytes + 63) / 64 * 64;
    return ptr;
  };
  auto st = [&](size_t elems) { return take(elems * sb); };
  auto f32 = [&](size_t elems) { return (float*)take(elems * sizeof(float)); };
  // First, so that they stay where ensure_acts() uploaded them for any (B, T).
  if (llama) a.rope = f32((size_t)cfg.max_seq_len * cfg.head_size());  // (2, maxT, hs/2)
  if (llama && cfg.rope_local_theta > 0) a.rope_local = f32((size_t)cfg.max_seq_len * cfg.head_size());
  a.inputs = (int*)take(BT * sizeof(int));
  a.targets = (int*)take(BT * sizeof(int));
  if (llama) a.zero_pos = st((size_t)T * C);
  a.encoded = st(BT * C);
  // Shared buffers of the policy (taken only when the policy uses them).
  dptr gelu_shared = p.shares_gelu() && mlp_bufs ? st(BT * A) : nullptr;  // (BT,A)
  const bool pre_norms = !llama || cfg.has_pre_norms();  // OLMo 2 has no ln1, ln2
  dptr ln_shared = p.shares_ln() && pre_norms ? st(BT * C) : nullptr;  // (BT,C)
  // One block's working set (every per-layer buffer but r3 and mlpo), laid
  // out in the order of the per-layer buffers below; blocks:k layers all point here.
  struct Block {
    dptr ln1, qkv, atty, att, r2, ln2, fch, fch_gelu, qkvr, attno;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *qk_rstd, *attno_rstd;
  };
  auto take_block = [&](bool gelu_own, bool ln_own, bool mlp) {
    Block k{};
    if (pre_norms) {
      k.ln1 = ln_own ? st(BT * C) : ln_shared;
      k.ln1_mean = llama ? nullptr : f32(BT);
      k.ln1_rstd = f32(BT);
    }
    if (qkn) k.qkvr = st(BT * QKV), k.qk_rstd = f32(BT * R);
    k.qkv = st(BT * QKV);
    k.atty = st(BT * Cq);
    k.att = take(attention_saved_bytes(att, B, NH, T, sb));
    if (post) k.attno = st(BT * C), k.attno_rstd = f32(BT);
    k.r2 = st(BT * C);
    if (pre_norms) {
      k.ln2 = ln_own ? st(BT * C) : ln_shared;
      k.ln2_mean = llama ? nullptr : f32(BT);
      k.ln2_rstd = f32(BT);
    }
    if (mlp) {
      k.fch = st(BT * F);
      k.fch_gelu = gelu_own ? st(BT * A) : gelu_shared;
    }
    return k;
  };
  Block shared_block{};
  if (p.blocks_recomputed((int)L) > 0) shared_block = take_block(true, true, mlp_bufs);
  for (size_t l = 0; l < L; l++) {
    const Block k = p.recomputes_block((int)l) ? shared_block
                                               : take_block(!p.shares_gelu(), !p.shares_ln(),
                                                            !cfg.layer_is_moe((int)l) || Is > 0);
    if (count_only) {
      if (post) st(BT * C), f32(BT);  // mlpo, mlpo_rstd
      st(BT * C);  // r3
      continue;
    }
    a.ln1.push_back(k.ln1);
    a.ln1_mean.push_back(k.ln1_mean);
    a.ln1_rstd.push_back(k.ln1_rstd);
    a.qkvr.push_back(k.qkvr);
    a.qk_rstd.push_back(k.qk_rstd);
    a.qkv.push_back(k.qkv);
    a.atty.push_back(k.atty);
    a.att.push_back(k.att);
    a.attno.push_back(k.attno);
    a.attno_rstd.push_back(k.attno_rstd);
    a.r2.push_back(k.r2);
    a.ln2.push_back(k.ln2);
    a.ln2_mean.push_back(k.ln2_mean);
    a.ln2_rstd.push_back(k.ln2_rstd);
    a.fch.push_back(k.fch);
    a.fch_gelu.push_back(k.fch_gelu);
    if (post) {
      a.mlpo.push_back(st(BT * C));
      a.mlpo_rstd.push_back(f32(BT));
    }
    a.r3.push_back(st(BT * C));  // kept by every policy
  }
  a.lnf = st(BT * C);
  a.lnf_mean = llama ? nullptr : f32(BT);
  a.lnf_rstd = f32(BT);
  a.logits = st(BT * Vp);
  a.losses = f32(BT);
  a.dresidual = st(BT * C);
  a.dbtc = st(BT * std::max(C, Cq));
  a.dqkv = st(BT * QKV);
  if (mlp_bufs) a.dfch = st(BT * F);
  if (llama && mlp_bufs) a.dact = st(BT * A);
  if (Is > 0) a.shout = st(BT * C);
  if (post) a.postn = st(BT * C), a.dpost = st(BT * C);
  if (qkn) a.dqkvr = st(BT * QKV);
  a.bytes = off;
  return a;
}

void GPT::ensure_acts(int B, int T) {
  if (T > cfg_.max_seq_len)
    fail("sequence length ", T, " exceeds the model's max_seq_len ", cfg_.max_seq_len,
         ": lower --seq-len or raise --max-seq-len");
  size_t need = activation_bytes(cfg_, B, T, be_.storage_bytes(), recompute_, be_.attention_impl());
  if (need <= acts_bytes_) return;
  if (acts_) be_.release(acts_);
  acts_ = be_.alloc(need);
  acts_bytes_ = need;
  if (cfg_.llama()) {  // the RoPE tables live in the activations (counted there)
    const Acts a = acts_for(B, T);
    const std::vector<float> tab = rope_cos_sin(cfg_, cfg_.max_seq_len);
    be_.upload_bytes(a.rope, tab.data(), tab.size() * sizeof(float));
    if (a.rope_local) {  // sliding layers' base, without the global layers' scaling
      GPTConfig local = cfg_;
      local.rope_theta = cfg_.rope_local_theta;
      local.rope_factor = 0;
      const std::vector<float> lt = rope_cos_sin(local, cfg_.max_seq_len);
      be_.upload_bytes(a.rope_local, lt.data(), lt.size() * sizeof(float));
    }
  }
  // The backend's op scratch, sized once for these shapes (exact accounting).
  be_.reserve_workspace(be_.workspace_bytes(op_shapes(cfg_, B, T)));
}

Backend::OpShapes op_shapes(const GPTConfig& cfg, int B, int T) {
  Backend::OpShapes s;
  s.B = B;
  s.T = T;
  s.C = cfg.channels;
  s.NH = cfg.num_heads;
  s.KV = cfg.kv_heads();
  s.HS = cfg.head_size();  // the attention's width NH·HS may differ from C (head_dim)
  s.H = cfg.llama() ? cfg.ffn() : 0;  // 0: a GPT-2 MLP
  s.Vp = cfg.padded_vocab;
  if (cfg.llama()) {
    const int hs = cfg.head_size();
    s.QKVB = cfg.qkv_bias ? cfg.qkv_channels() : 0;
    s.QN = cfg.qk_norm == QkNorm::per_head ? hs : cfg.qk_norm == QkNorm::full_width ? cfg.num_heads * hs : 0;
    s.KN = cfg.qk_norm == QkNorm::per_head ? hs : cfg.qk_norm == QkNorm::full_width ? cfg.kv_heads() * hs : 0;
  }
  return s;
}

float GPT::mean_loss(const Acts& a, int BT) const {
  std::vector<float> losses(BT);
  be_.download_bytes(losses.data(), a.losses, BT * sizeof(float));
  double s = 0;
  for (float x : losses) s += x;
  return (float)(s / BT);
}

float GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  ensure_acts(B, T);
  Acts a = acts_for(B, T);
  be_.upload_bytes(a.inputs, inputs, sizeof(int) * B * T);
  if (targets) be_.upload_bytes(a.targets, targets, sizeof(int) * B * T);
  run_forward(a, B, T, targets != nullptr, 0.0f);
  last_B_ = B;
  last_T_ = T;
  return targets ? mean_loss(a, B * T) : NAN;
}

float GPT::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                            float loss_scale) {
  RATCHET_ASSERT(targets != nullptr);
  RATCHET_ASSERT(grads_ != nullptr || store_ != nullptr);
  ensure_acts(B, T);
  Acts a = acts_for(B, T);
  be_.upload_bytes(a.inputs, inputs, sizeof(int) * B * T);
  be_.upload_bytes(a.targets, targets, sizeof(int) * B * T);
  // d(mean loss)/d(loss at one position) = 1/(B*T)
  // The expert exchange (if any) in this forward and backward only; reset
  // on the way out, an exception included.
  struct Training {
    bool& on;
    explicit Training(bool& b) : on(b) { on = true; }
    ~Training() { on = false; }
  } training(moe_training_);
  moe_collect_ = cfg_.moe();
  if (moe_collect_) {  // the MoE layers' statistics: counts | prob_sums | rows
    moe_buf_.assign((size_t)(cfg_.moe_layer_count() + 1) * cfg_.num_experts + 1, 0.0);
  }
  run_forward(a, B, T, true, loss_scale / (float)(B * T));
  moe_collect_ = false;
  if (cfg_.moe()) moe_collect_stats(a, B * T, loss_scale);
  run_backward(a, B, T);
  // Host synchronisations per micro-batch on a device, and why each stays:
  // - the mean loss is read AFTER the backward is enqueued (only the forward's
  //   classifier writes a.losses), so the device runs forward and backward
  //   back to back; reading it between them left the GPU idle while the host
  //   summed the losses and enqueued the whole backward. This read is the one
  //   sync per micro-batch: the loss is returned by value (the trainer's
  //   NaN check and log need it per step) and it also bounds how far the host
  //   runs ahead (the next upload reuses the host batch buffer).
  // - upload_bytes synchronises because the source is pageable host memory
  //   the loader refills at once; it then waits for nothing (the loss read
  //   above has drained the queue): a few microseconds, not a bubble.
  float loss = mean_loss(a, B * T);
  last_B_ = B;
  last_T_ = T;
  return loss;
}

void GPT::get_logits(float* host) const {
  Acts a = acts_for(last_B_, last_T_);
  be_.download_f32(host, a.logits, (size_t)last_B_ * last_T_ * cfg_.padded_vocab);
}

void GPT::forward_spans(const int32_t* inputs, int B, int T, const std::vector<Span>& spans,
                        const int32_t* targets, float* losses) {
  ensure_acts(B, T);
  Acts a = acts_for(B, T);
  be_.upload_bytes(a.inputs, inputs, sizeof(int) * B * T);
  run_forward(a, B, T, false, 0.0f, false);
  // Compact the scored rows of lnf (B*T, C) to its first M rows, in place:
  // spans are in increasing order, so a row is read before anything is
  // written over it (destination <= source); copies of at most the gap's
  // rows never overlap (Backend::copy's contract).
  const int C = cfg_.channels, V = cfg_.vocab_size, Vp = cfg_.padded_vocab;
  const size_t row_bytes = (size_t)C * be_.storage_bytes();
  int M = 0;
  for (const Span& s : spans) {
    RATCHET_ASSERT(s.row >= 0 && s.row < B && s.first >= 0 && s.count >= 0 && s.first + s.count <= T);
    const size_t src = (size_t)s.row * T + s.first;
    RATCHET_ASSERT(src >= (size_t)M);
    const size_t gap = src - (size_t)M;
    for (size_t done = 0; gap > 0 && done < (size_t)s.count;) {
      const size_t n = std::min(gap, (size_t)s.count - done);
      be_.copy((char*)a.lnf + ((size_t)M + done) * row_bytes,
               (const char*)a.lnf + (src + done) * row_bytes, n * row_bytes);
      done += n;
    }
    M += s.count;
  }
  last_B_ = B;
  last_T_ = T;
  if (M == 0) return;
  be_.upload_bytes(a.targets, targets, sizeof(int) * M);
  {
    OpScope s(*this, "matmul_lmhead_fwd", 2.0 * M * C * Vp, 0);
    be_.matmul_forward(a.logits, nullptr, a.lnf, param(layout_.classifier()), nullptr, M, C, Vp);
  }
  if (cfg_.llama() && cfg_.final_softcap > 0) {
    OpScope s(*this, "softcap_fwd", 0, 2.0 * M * Vp * be_.storage_bytes());
    be_.softcap_forward(a.logits, (size_t)M * Vp, cfg_.final_softcap);
  }
  {
    OpScope s(*this, "classifier", 0, 2.0 * M * Vp * be_.storage_bytes());
    be_.classifier(a.logits, a.losses, a.targets, M, V, Vp, 0.0f);
  }
  be_.download_bytes(losses, a.losses, sizeof(float) * M);
}

void GPT::get_losses(float* host) const {
  Acts a = acts_for(last_B_, last_T_);
  be_.download_bytes(host, a.losses, (size_t)last_B_ * last_T_ * sizeof(float));
}

void GPT::get_logits_row(int t, float* host_V) const {
  Acts a = acts_for(last_B_, last_T_);
  const char* row = (const char*)a.logits + (size_t)t * cfg_.padded_vocab * be_.storage_bytes();
  be_.download_f32(host_V, row, cfg_.vocab_size);
}

void GPT::forward_block(const Acts& a, int l, int B, int T, bool to_gelu) {
  if (cfg_.llama()) return forward_block_llama(a, l, B, T, to_gelu);
  const int C = cfg_.channels, NH = cfg_.num_heads, BT = B * T;
  const double sb = be_.storage_bytes(), mm = 2.0 * BT;  // matmul FLOPs = 2·BT·in·out
  const double attn_flops = 4.0 * B * T * (double)T * C;  // q·k and att·v
  cdptr x = l == 0 ? a.encoded : a.r3[l - 1];
  // ln1 of layers > 0 was written by the previous block's fused residual add;
  // a recomputed block (to_gelu) normalises its kept input itself, which gives
  // the same bits (residual_layernorm_forward normalises the residual as stored).
  if (l == 0 || to_gelu) {
    OpScope s(*this, "layernorm_fwd", 0, 2.0 * BT * C * sb);
    be_.layernorm_forward(a.ln1[l], a.ln1_mean[l], a.ln1_rstd[l], x, param(P_LN1W, l),
                          param(P_LN1B, l), BT, C);
  }
  {
    OpScope s(*this, "matmul_fwd", mm * C * 3 * C, 0);
    be_.matmul_forward(a.qkv[l], nullptr, a.ln1[l], param(P_QKVW, l), param(P_QKVB, l), BT, C,
                       3 * C);
  }
  {
    OpScope s(*this, "attention_fwd", attn_flops, 0);
    be_.attention_forward(a.atty[l], a.att[l], a.qkv[l], B, T, C, NH, cfg_.kv_heads());
  }
  {
    OpScope s(*this, "matmul_fwd", mm * C * C, 0);
    be_.matmul_forward(a.r2[l], nullptr, a.atty[l], param(P_ATTPROJW, l), param(P_ATTPROJB, l),
                       BT, C, C);
  }
  {
    OpScope s(*this, "residual_layernorm_fwd", 0, 4.0 * BT * C * sb);
    be_.residual_layernorm_forward(a.r2[l], a.ln2[l], a.ln2_mean[l], a.ln2_rstd[l], x, a.r2[l],
                                   param(P_LN2W, l), param(P_LN2B, l), BT, C);
  }
  {
    OpScope s(*this, "matmul_gelu_fwd", mm * C * 4 * C, 0);
    be_.matmul_forward(a.fch_gelu[l], a.fch[l], a.ln2[l], param(P_FCW, l), param(P_FCB, l), BT,
                       C, 4 * C);
  }
  if (to_gelu) return;
  {
    OpScope s(*this, "matmul_fwd", mm * 4 * C * C, 0);
    be_.matmul_forward(a.r3[l], nullptr, a.fch_gelu[l], param(P_FCPROJW, l),
                       param(P_FCPROJB, l), BT, 4 * C, C);
  }
  // r3 = r2 + mlp, then the next block's ln1 (or the final lnf) in the same kernel.
  const bool last = l == cfg_.num_layers - 1;
  {
    OpScope s(*this, "residual_layernorm_fwd", 0, 4.0 * BT * C * sb);
    be_.residual_layernorm_forward(a.r3[l], last ? a.lnf : a.ln1[l + 1],
                                   last ? a.lnf_mean : a.ln1_mean[l + 1],
                                   last ? a.lnf_rstd : a.ln1_rstd[l + 1], a.r2[l], a.r3[l],
                                   last ? param(P_LNFW) : param(P_LN1W, l + 1),
                                   last ? param(P_LNFB) : param(P_LN1B, l + 1), BT, C);
  }
}

void GPT::run_forward(const Acts& a, int B, int T, bool has_targets, float dloss, bool lm_head) {
  const int C = cfg_.channels, L = cfg_.num_layers, Vp = cfg_.padded_vocab,
            V = cfg_.vocab_size, BT = B * T;
  const double sb = be_.storage_bytes(), mm = 2.0 * BT;
  const bool llama = cfg_.llama();
  // Llama has no position table: the encoder adds a zero one (and its
  // backward scratch, so re-zeroed here).
  if (llama) be_.zero(a.zero_pos, (size_t)T * C * be_.storage_bytes());
  {
    OpScope s(*this, "encoder_fwd", 0, 3.0 * BT * C * sb);
    be_.encoder_forward(a.encoded, a.inputs, param(P_WTE), llama ? a.zero_pos : param(P_WPE),
                        B, T, C);
  }
  if (llama && cfg_.embed_scale) {  // Gemma: times sqrt(C), rounded to the storage dtype as HF does
    OpScope s(*this, "embed_scale", 0, 2.0 * BT * C * sb);
    be_.scale(a.encoded, (size_t)BT * C, embed_scale());
  }
  // The final norm is fused into the last block's residual add (both archs).
  for (int l = 0; l < L; l++) {
    if (pstore_) {
      // ZeRO-3: the wait for block l's gather (started during block l-1:
      // --profile shows what the prefetch did not hide), and l+1's start.
      OpScope s(*this, "zero3_gather_wait_fwd", 0, 0);
      pstore_->forward_block(l);
    }
    forward_block(a, l, B, T, false);
  }
  if (!lm_head) return;  // forward_spans runs it on its positions only
  {
    OpScope s(*this, "matmul_lmhead_fwd", mm * C * Vp, 0);
    be_.matmul_forward(a.logits, nullptr, a.lnf, param(layout_.classifier()), nullptr, BT, C,
                       Vp);
  }
  if (llama && cfg_.final_softcap > 0) {
    OpScope s(*this, "softcap_fwd", 0, 2.0 * BT * Vp * sb);
    be_.softcap_forward(a.logits, (size_t)BT * Vp, cfg_.final_softcap);
  }
  if (has_targets) {
    OpScope s(*this, "classifier", 0, 2.0 * BT * Vp * sb);
    be_.classifier(a.logits, a.losses, a.targets, BT, V, Vp, dloss,
                   llama ? cfg_.final_softcap : 0.0f);
  }
}

void GPT::run_backward(const Acts& a, int B, int T) {
  const int C = cfg_.channels, NH = cfg_.num_heads, L = cfg_.num_layers, Vp = cfg_.padded_vocab,
            BT = B * T;
  const double sb = be_.storage_bytes(), mm = 4.0 * BT;  // dinp and dw: 2 matmuls
  const double attn_flops = 8.0 * B * T * (double)T * C;
  const int cls = layout_.classifier();  // wte (tied) or lmhead
  if (store_) {
    for (dptr& s : slots_) s = nullptr;
    slot_layer_ = -1;
    store_->non_block(slots_);
  }
  // Block l's gradient destinations, from the store (before anything of the
  // block's backward, recompute included, runs).
  auto place_block = [&](int l) {
    if (!store_) return;
    for (int i : kBlockTensors) slots_[i] = nullptr;
    slot_layer_ = l;
    store_->block(l, slots_);
  };
  {
    OpScope s(*this, "matmul_lmhead_bwd", mm * C * Vp, 0);
    be_.matmul_backward(a.dbtc, grad(cls), nullptr, a.logits, a.lnf, param(cls), BT, C, Vp);
  }
  be_.zero(a.dresidual, (size_t)BT * C * be_.storage_bytes());
  const bool llama = cfg_.llama();
  if (llama) {
    OpScope s(*this, "rmsnorm_bwd", 0, 4.0 * BT * C * sb);
    be_.rmsnorm_backward(a.dresidual, grad(P_LNFW), a.dbtc, a.r3[L - 1], param(P_LNFW),
                         a.lnf_rstd, BT, C, cfg_.norm_offset());
  } else {
    OpScope s(*this, "layernorm_bwd", 0, 4.0 * BT * C * sb);
    be_.layernorm_backward(a.dresidual, grad(P_LNFW), grad(P_LNFB), a.dbtc, a.r3[L - 1],
                           param(P_LNFW), a.lnf_mean, a.lnf_rstd, BT, C);
  }
  const Recompute& rp = recompute_;
  for (int l = L - 1; l >= 0; l--) {
    place_block(l);
    if (pstore_) {
      OpScope s(*this, "zero3_gather_wait_bwd", 0, 0);  // as in the forward
      pstore_->backward_block(l);
    }
    if (llama) {
      backward_block_llama(a, l, B, T);
      if (grad_ready_) grad_ready_(l);
      continue;
    }
    cdptr x = l == 0 ? a.encoded : a.r3[l - 1];
    // Refill what the policy did not keep (same ops, same inputs: same bits).
    if (rp.recomputes_block(l)) {
      forward_block(a, l, B, T, /*to_gelu=*/true);
    } else if (rp.shares_gelu()) {
      // ln2 first (gelu+ln): a backend may recompute GELU by re-running the
      // fc GEMM on it (Backend::gelu_recompute); the shared buffer's last
      // reader, the layer above's qkv gradient, is done.
      if (rp.shares_ln()) {
        OpScope s(*this, "layernorm_recompute", 0, 2.0 * BT * C * sb);
        be_.layernorm_forward(a.ln2[l], a.ln2_mean[l], a.ln2_rstd[l], a.r2[l], param(P_LN2W, l),
                              param(P_LN2B, l), BT, C);
      }
      const bool gemm = be_.gelu_recompute_reruns_gemm();
      OpScope s(*this, "gelu_recompute", gemm ? mm * C * 4 * C : 0, gemm ? 0 : 2.0 * BT * 4 * C * sb);
      be_.gelu_recompute(a.fch_gelu[l], a.fch[l], a.ln2[l], param(P_FCW, l), param(P_FCB, l), BT, C,
                         4 * C);
    }
    // dresidual = d r3[l]; the MLP branch. dfch = (dresidual fcprojw) * gelu'(fch)
    {
      OpScope s(*this, "matmul_dgelu_bwd", mm * 4 * C * C, 0);
      be_.matmul_backward_gelu(a.dfch, grad(P_FCPROJW, l), grad(P_FCPROJB, l), a.dresidual,
                               a.fch_gelu[l], param(P_FCPROJW, l), a.fch[l], BT, 4 * C, C);
    }
    {
      OpScope s(*this, "matmul_bwd", mm * C * 4 * C, 0);
      be_.matmul_backward(a.dbtc, grad(P_FCW, l), grad(P_FCB, l), a.dfch, a.ln2[l],
                          param(P_FCW, l), BT, C, 4 * C);
    }
    {
      OpScope s(*this, "layernorm_bwd", 0, 4.0 * BT * C * sb);
      be_.layernorm_backward(a.dresidual, grad(P_LN2W, l), grad(P_LN2B, l), a.dbtc, a.r2[l],
                             param(P_LN2W, l), a.ln2_mean[l], a.ln2_rstd[l], BT, C);
    }
    // dresidual = d r2[l]; the attention branch:
    {
      OpScope s(*this, "matmul_bwd", mm * C * C, 0);
      be_.matmul_backward(a.dbtc, grad(P_ATTPROJW, l), grad(P_ATTPROJB, l), a.dresidual,
                          a.atty[l], param(P_ATTPROJW, l), BT, C, C);
    }
    {
      OpScope s(*this, "attention_bwd", attn_flops, 0);
      be_.attention_backward(a.dqkv, a.dbtc, a.qkv[l], a.atty[l], a.att[l], B, T, C, NH,
                             cfg_.kv_heads());
    }
    if (rp.shares_ln() && !rp.recomputes_block(l)) {
      OpScope s(*this, "layernorm_recompute", 0, 2.0 * BT * C * sb);
      be_.layernorm_forward(a.ln1[l], a.ln1_mean[l], a.ln1_rstd[l], x, param(P_LN1W, l),
                            param(P_LN1B, l), BT, C);
    }
    {
      OpScope s(*this, "matmul_bwd", mm * C * 3 * C, 0);
      be_.matmul_backward(a.dbtc, grad(P_QKVW, l), grad(P_QKVB, l), a.dqkv, a.ln1[l],
                          param(P_QKVW, l), BT, C, 3 * C);
    }
    {
      OpScope s(*this, "layernorm_bwd", 0, 4.0 * BT * C * sb);
      be_.layernorm_backward(a.dresidual, grad(P_LN1W, l), grad(P_LN1B, l), a.dbtc, x,
                             param(P_LN1W, l), a.ln1_mean[l], a.ln1_rstd[l], BT, C);
    }
    // dresidual = d x (the stream entering layer l)
    if (grad_ready_) grad_ready_(l);
  }
  if (llama && cfg_.embed_scale) {  // d wte rows = d encoded · sqrt(C)
    OpScope s(*this, "embed_scale", 0, 2.0 * BT * C * sb);
    be_.scale(a.dresidual, (size_t)BT * C, embed_scale());
  }
  {
    OpScope s(*this, "encoder_bwd", 0, 3.0 * BT * C * sb);
    be_.encoder_backward(grad(P_WTE), llama ? a.zero_pos : grad(P_WPE), a.dresidual, a.inputs,
                         B, T, C);
  }
  if (grad_ready_) grad_ready_(-1);
}

float GPT::embed_scale() const {
  // HF Gemma: hidden * torch.tensor(hidden_size ** 0.5, dtype=hidden.dtype):
  // the square root in double, rounded to the dtype (FP32 here).
  return (float)std::sqrt((double)cfg_.channels);
}

double attention_keys_per_query(const GPTConfig& cfg, int l, int T) {
  const int W = cfg.llama() ? cfg.window(l) : 0;
  return W > 0 ? std::min(T, W) : T;
}

double train_flops_per_token(const GPTConfig& cfg, int T) {
  ParamLayout lay(cfg);
  double n_matmul = (double)lay.total - (double)lay.sizes[P_WPE];
  if (lay.classifier() == P_LMHEAD) n_matmul -= (double)lay.sizes[P_WTE];  // lookup only
  // Attention (PaLM's count, fwd + bwd): 12·keys·(NH·hs) per layer, where a
  // sliding layer's query sees min(T, W) keys.
  const double Cq = cfg.llama() ? cfg.attn_channels() : cfg.channels;
  double attn = 0;
  for (int l = 0; l < cfg.num_layers; l++) attn += 12.0 * Cq * attention_keys_per_query(cfg, l, T);
  return 6.0 * n_matmul + attn;
}

}  // namespace ratchet

// The llama-architecture transformer block, forward and backward, for Llama
// and the 2026 families that change a few places of it (issue 38; see
// model/config.h for the options and model/gpt.h for the whole model,
// model/recompute.h for what each policy keeps). With hs the head size,
// Cq = NH·hs, n(·; w) an RMSNorm (x·rstd·(w + off), off = 1 in Gemma's form):
//   in   = pre norms ? ln1 = n(x; ln1w) : x     (layer 0, or a recomputed block;
//                                              otherwise the previous block wrote ln1)
//   qkv  = in qkvw^T [+ qkvb]  (BT,QKV)        [qkv_bias: Qwen2.5]
//          [q/k norm: qkvr keeps this, qkv = qk_norm(qkvr)]   (Qwen3, Gemma 3, OLMo 2)
//          [clip_qkv c: qkv = clamp(qkv, -c, c), after the q/k norm as
//           transformers' OlmoeAttention does; qkvr keeps the projection]
//          rope(q, k) in place, unless the layer is NoPE (SmolLM3); the layer's
//          table (Gemma 3: sliding layers have their own base)
//   atty = attention(qkv; NH, KV, window, scale, soft-cap)  (BT,Cq)
//   o    = atty attprojw^T (BT,C)
//   r2   = x + (post norms ? n(o; attnpostw) : o)      (o kept as attno when normed)
//   mid  = pre norms ? ln2 = n(r2; ln2w) : r2
//   fch  = mid fcw^T (BT,2H) gate|up; act = swiglu | geglu (fch) (BT,H)
//   m    = act fcprojw^T (BT,C)
//          [a MoE layer (cfg.layer_is_moe(l)): m = Backend::moe_forward(mid;
//           routerw, expw1, expw2), its state in moe_state(l); the forward of
//           a training step adds the router statistics (GPT::MoeStats);
//           with shared experts m += swiglu(mid shw1^T) shw2^T, in fch /
//           fch_gelu like a dense MLP (DeepseekV3MoE's shared_experts)]
//   r3   = r2 + (post norms ? n(m; mlppostw) : m)      (m kept as mlpo when normed)
//   then the next layer's ln1 (or lnf) = n(r3), fused with the add where it exists.
// Backward mirrors it; the policy's shared buffers are refilled with the same
// ops on the same inputs, so gradients keep their bits under every policy.
#include <string>

#include "core/error.h"
#include "model/gpt_internals.h"
#include "moe/moe_ops.h"

namespace ratchet {

AttnOpts GPT::attn_opts(int l) const {
  AttnOpts o;
  o.window = cfg_.window(l);
  o.scale = cfg_.attn_scale;
  o.softcap = cfg_.attn_softcap;
  return o;
}

const float* GPT::rope_table(const Acts& a, int l) const {
  return cfg_.layer_local_rope(l) ? a.rope_local : a.rope;
}

// qkv[l] from the attention input `in`: projection, bias, q/k norm, RoPE.
void GPT::qkv_forward(const Acts& a, int l, int B, int T, cdptr in) {
  const int C = cfg_.channels, NH = cfg_.num_heads, KV = cfg_.kv_heads(), hs = cfg_.head_size(),
            QKV = cfg_.qkv_channels(), BT = B * T;
  const double sb = be_.storage_bytes();
  const bool qkn = cfg_.qk_norm != QkNorm::none, clip = cfg_.clip_qkv > 0;
  {
    OpScope s(*this, "matmul_fwd", 2.0 * BT * C * QKV, 0);
    be_.matmul_forward(qkn || clip ? a.qkvr[l] : a.qkv[l], nullptr, in, param(P_QKVW, l),
                       cfg_.qkv_bias ? param(P_QKVB, l) : nullptr, BT, C, QKV);
  }
  if (qkn) {
    OpScope s(*this, "qk_norm_fwd", 0, 2.0 * BT * QKV * sb);
    be_.qk_norm_forward(a.qkv[l], a.qk_rstd[l], a.qkvr[l], param(P_QNORMW, l),
                        param(P_KNORMW, l), BT, NH, KV, hs, cfg_.qk_norm == QkNorm::per_head,
                        cfg_.norm_eps, cfg_.norm_offset());
  }
  if (clip) {  // OLMoE: q, k (normed) and v clamped; qkvr keeps the projection
    OpScope s(*this, "clip_qkv_fwd", 0, 2.0 * BT * QKV * sb);
    be_.clip_forward(a.qkv[l], qkn ? a.qkv[l] : a.qkvr[l], (size_t)BT * QKV, cfg_.clip_qkv);
  }
  if (cfg_.layer_has_rope(l)) {
    OpScope s(*this, "rope_fwd", 0, 2.0 * BT * (NH + KV) * hs * sb);
    be_.rope_forward(a.qkv[l], rope_table(a, l), B, T, NH, KV, hs, cfg_.max_seq_len);
  }
}

// From a.dqkv (d qkv[l], destroyed) to a.dbtc = d in, with the weight
// gradients of the projection, its bias and the q/k norm.
void GPT::qkv_backward(const Acts& a, int l, int B, int T, cdptr in) {
  const int C = cfg_.channels, NH = cfg_.num_heads, KV = cfg_.kv_heads(), hs = cfg_.head_size(),
            QKV = cfg_.qkv_channels(), BT = B * T;
  const double sb = be_.storage_bytes();
  const bool qkn = cfg_.qk_norm != QkNorm::none, clip = cfg_.clip_qkv > 0;
  if (cfg_.layer_has_rope(l)) {
    OpScope s(*this, "rope_bwd", 0, 2.0 * BT * (NH + KV) * hs * sb);
    be_.rope_backward(a.dqkv, rope_table(a, l), B, T, NH, KV, hs, cfg_.max_seq_len);
  }
  if (clip) {
    // The clamp's input again: the projection, or its q/k norm (written into
    // dqkvr, free until qk_norm_backward; the rstd rewritten with its bits).
    OpScope s(*this, "clip_qkv_bwd", 0, 3.0 * BT * QKV * sb);
    if (qkn)
      be_.qk_norm_forward(a.dqkvr, a.qk_rstd[l], a.qkvr[l], param(P_QNORMW, l),
                          param(P_KNORMW, l), BT, NH, KV, hs, cfg_.qk_norm == QkNorm::per_head,
                          cfg_.norm_eps, cfg_.norm_offset());
    be_.clip_backward(a.dqkv, qkn ? a.dqkvr : a.qkvr[l], (size_t)BT * QKV, cfg_.clip_qkv);
  }
  if (qkn) {
    OpScope s(*this, "qk_norm_bwd", 0, 4.0 * BT * QKV * sb);
    be_.qk_norm_backward(a.dqkvr, grad(P_QNORMW, l), grad(P_KNORMW, l), a.dqkv, a.qkvr[l],
                         param(P_QNORMW, l), param(P_KNORMW, l), a.qk_rstd[l], BT, NH, KV, hs,
                         cfg_.qk_norm == QkNorm::per_head, cfg_.norm_offset());
  }
  {
    OpScope s(*this, "matmul_bwd", 4.0 * BT * C * QKV, 0);
    be_.matmul_backward(a.dbtc, grad(P_QKVW, l), cfg_.qkv_bias ? grad(P_QKVB, l) : nullptr,
                        qkn ? a.dqkvr : a.dqkv, in, param(P_QKVW, l), BT, C, QKV);
  }
}

namespace {
// "swiglu_fwd" / "geglu_fwd" and so on: the profile's op names.
const char* glu_name(MlpAct act, const std::string& what) {
  static const std::string names[] = {"swiglu_fwd", "swiglu_bwd", "swiglu_recompute",
                                      "geglu_fwd",  "geglu_bwd",  "geglu_recompute"};
  const int base = act == MlpAct::gelu_tanh ? 3 : 0;
  const int k = what == "_fwd" ? 0 : what == "_bwd" ? 1 : 2;
  return names[base + k].c_str();
}

void act_forward(Backend& be, MlpAct act, dptr out, cdptr fch, int N, int H) {
  if (act == MlpAct::gelu_tanh) return be.geglu_forward(out, fch, N, H);
  be.swiglu_forward(out, fch, N, H);
}
}  // namespace

void GPT::forward_block_llama(const Acts& a, int l, int B, int T, bool to_act) {
  const int C = cfg_.channels, NH = cfg_.num_heads, KV = cfg_.kv_heads(), H = cfg_.ffn(),
            Cq = cfg_.attn_channels(), L = cfg_.num_layers, BT = B * T;
  const float eps = cfg_.norm_eps, off = cfg_.norm_offset();
  const bool pre = cfg_.has_pre_norms(), post = cfg_.has_post_norms();
  const double sb = be_.storage_bytes(), mm = 2.0 * BT;  // matmul FLOPs = 2·BT·in·out
  const double attn_flops = 4.0 * B * T * attention_keys_per_query(cfg_, l, T) * Cq;
  cdptr x = l == 0 ? a.encoded : a.r3[l - 1];
  if (pre && (l == 0 || to_act)) {
    OpScope s(*this, "rmsnorm_fwd", 0, 2.0 * BT * C * sb);
    be_.rmsnorm_forward(a.ln1[l], a.ln1_rstd[l], x, param(P_LN1W, l), BT, C, eps, off);
  }
  qkv_forward(a, l, B, T, pre ? a.ln1[l] : x);
  {
    OpScope s(*this, "attention_fwd", attn_flops, 0);
    be_.attention_forward(a.atty[l], a.att[l], a.qkv[l], B, T, Cq, NH, KV, attn_opts(l));
  }
  {
    OpScope s(*this, "matmul_fwd", mm * Cq * C, 0);
    be_.matmul_forward(post ? a.attno[l] : a.r2[l], nullptr, a.atty[l], param(P_ATTPROJW, l),
                       nullptr, BT, Cq, C);
  }
  if (post) {
    OpScope s(*this, "rmsnorm_fwd", 0, 2.0 * BT * C * sb);
    be_.rmsnorm_forward(a.postn, a.attno_rstd[l], a.attno[l], param(P_ATTNPOSTW, l), BT, C, eps,
                        off);
  }
  if (pre) {
    OpScope s(*this, "residual_rmsnorm_fwd", 0, 4.0 * BT * C * sb);
    be_.residual_rmsnorm_forward(a.r2[l], a.ln2[l], a.ln2_rstd[l], x, post ? a.postn : a.r2[l],
                                 param(P_LN2W, l), BT, C, eps, off);
  } else {
    OpScope s(*this, "residual_fwd", 0, 3.0 * BT * C * sb);
    be_.residual_forward(a.r2[l], x, a.postn, (size_t)BT * C);
  }
  const bool moe = cfg_.layer_is_moe(l);
  if (moe) {
    // The whole MoE MLP in one backend op. A recompute (to_act) only refills
    // the layer's state: its output goes to the backward's free dbtc scratch.
    const int k = cfg_.experts_per_tok, I = cfg_.moe_ffn_hidden, Is = cfg_.shared_ffn();
    cdptr mid = pre ? a.ln2[l] : a.r2[l];
    const dptr out = to_act ? a.dbtc : post ? a.mlpo[l] : a.r3[l];
    MoeState& st = moe_state(l);
    {
      OpScope s(*this, "moe_fwd", mm * C * (cfg_.num_experts + (double)k * 3 * I), 0);
      be_.moe_forward(moe_dims(BT, l), mid, param(P_ROUTERW, l), param(P_EXPW1, l),
                      param(P_EXPW2, l), out, st);
    }
    if (Is > 0) {
      // DeepSeek-V3's shared experts: a dense SwiGLU MLP (shw1, shw2) of
      // width Is on every token, through the dense MLP's ops and buffers
      // (fch, fch_gelu); its output is added to the routed output below.
      {
        OpScope s(*this, "matmul_fwd", mm * C * 2 * Is, 0);
        be_.matmul_forward(a.fch[l], nullptr, mid, param(P_SHW1, l), nullptr, BT, C, 2 * Is);
      }
      OpScope s(*this, "swiglu_fwd", 0, 3.0 * BT * Is * sb);
      act_forward(be_, MlpAct::silu, a.fch_gelu[l], a.fch[l], BT, Is);
    }
    if (to_act) return;
    if (Is > 0) {
      {
        OpScope s(*this, "matmul_fwd", mm * Is * C, 0);
        be_.matmul_forward(a.shout, nullptr, a.fch_gelu[l], param(P_SHW2, l), nullptr, BT, Is, C);
      }
      if (cfg_.shared_expert_gated()) {
        // routed + sigmoid(x · g) · shared, as Qwen2MoeSparseMoeBlock adds them
        OpScope s(*this, "shared_gate_fwd", 2.0 * BT * C, 4.0 * BT * C * sb);
        be_.shared_gate_forward(out, mid, param(P_SHGATE, l), a.shout, BT, C);
      } else {
        // routed + shared, as DeepseekV3MoE adds them
        OpScope s(*this, "residual_fwd", 0, 3.0 * BT * C * sb);
        be_.residual_forward(out, out, a.shout, (size_t)BT * C);
      }
    }
    if (moe_collect_) {  // this layer's counts, the pooled probability sums, its rows
      int m = 0;
      for (int j = 0; j < l; j++) m += cfg_.layer_is_moe(j);
      const size_t E = cfg_.num_experts, Lm = cfg_.moe_layer_count();
      be_.moe_aux_stats(moe_dims(BT), st, moe_buf_.data() + m * E, moe_buf_.data() + Lm * E);
      moe_buf_.back() += BT;
    }
  } else {
    {
      OpScope s(*this, "matmul_fwd", mm * C * 2 * H, 0);
      be_.matmul_forward(a.fch[l], nullptr, pre ? a.ln2[l] : a.r2[l], param(P_FCW, l), nullptr,
                         BT, C, 2 * H);
    }
    {
      OpScope s(*this, glu_name(cfg_.mlp_act, "_fwd"), 0, 3.0 * BT * H * sb);
      act_forward(be_, cfg_.mlp_act, a.fch_gelu[l], a.fch[l], BT, H);
    }
    if (to_act) return;
    OpScope s(*this, "matmul_fwd", mm * H * C, 0);
    be_.matmul_forward(post ? a.mlpo[l] : a.r3[l], nullptr, a.fch_gelu[l], param(P_FCPROJW, l),
                       nullptr, BT, H, C);
  }
  if (post) {
    OpScope s(*this, "rmsnorm_fwd", 0, 2.0 * BT * C * sb);
    be_.rmsnorm_forward(a.postn, a.mlpo_rstd[l], a.mlpo[l], param(P_MLPPOSTW, l), BT, C, eps, off);
  }
  cdptr branch = post ? a.postn : a.r3[l];
  const bool last = l == L - 1;  // then the norm is the final one, lnf
  if (last || pre) {
    OpScope s(*this, "residual_rmsnorm_fwd", 0, 4.0 * BT * C * sb);
    be_.residual_rmsnorm_forward(a.r3[l], last ? a.lnf : a.ln1[l + 1],
                                 last ? a.lnf_rstd : a.ln1_rstd[l + 1], a.r2[l], branch,
                                 last ? param(P_LNFW) : param(P_LN1W, l + 1), BT, C, eps, off);
  } else {  // OLMo 2: the next layer reads r3 itself
    OpScope s(*this, "residual_fwd", 0, 3.0 * BT * C * sb);
    be_.residual_forward(a.r3[l], a.r2[l], branch, (size_t)BT * C);
  }
}

// On entry a.dresidual = d r3[l]; on exit d x (the stream entering layer l).
void GPT::backward_block_llama(const Acts& a, int l, int B, int T) {
  const int C = cfg_.channels, NH = cfg_.num_heads, KV = cfg_.kv_heads(), H = cfg_.ffn(),
            Cq = cfg_.attn_channels(), BT = B * T;
  const float eps = cfg_.norm_eps, off = cfg_.norm_offset();
  const bool pre = cfg_.has_pre_norms(), post = cfg_.has_post_norms();
  const double sb = be_.storage_bytes(), mm = 4.0 * BT;  // dinp and dw: 2 matmuls
  const double attn_flops = 8.0 * B * T * attention_keys_per_query(cfg_, l, T) * Cq;
  const Recompute& rp = recompute_;
  cdptr x = l == 0 ? a.encoded : a.r3[l - 1];
  // Refill what the policy did not keep (same ops, same inputs: same bits).
  const bool block = rp.recomputes_block(l), moe = cfg_.layer_is_moe(l);
  const int Is = moe ? cfg_.shared_ffn() : 0;  // the shared experts' width (0: none)
  if (block) {
    forward_block_llama(a, l, B, T, /*to_act=*/true);
  } else if (rp.shares_gelu() && !moe) {
    OpScope s(*this, glu_name(cfg_.mlp_act, "_recompute"), 0, 3.0 * BT * H * sb);
    act_forward(be_, cfg_.mlp_act, a.fch_gelu[l], a.fch[l], BT, H);
  } else if (rp.shares_gelu() && Is > 0) {  // the shared experts' activation
    OpScope s(*this, "swiglu_recompute", 0, 3.0 * BT * Is * sb);
    act_forward(be_, MlpAct::silu, a.fch_gelu[l], a.fch[l], BT, Is);
  }
  // d of a normed branch output: dpost = n'(branch) dresidual (zeroed first:
  // rmsnorm_backward accumulates).
  auto post_norm_backward = [&](dptr w_grad, int w, cdptr branch, const float* rstd) {
    be_.zero(a.dpost, (size_t)BT * C * be_.storage_bytes());
    OpScope s(*this, "rmsnorm_bwd", 0, 4.0 * BT * C * sb);
    be_.rmsnorm_backward(a.dpost, w_grad, a.dresidual, branch, param(w, l), rstd, BT, C, off);
  };
  // The MLP branch.
  if (post) post_norm_backward(grad(P_MLPPOSTW, l), P_MLPPOSTW, a.mlpo[l], a.mlpo_rstd[l]);
  if (moe) {
    if (pre && rp.shares_ln() && !block) {  // the layer's input, before the MoE backward reads it
      OpScope s(*this, "rmsnorm_recompute", 0, 2.0 * BT * C * sb);
      be_.rmsnorm_forward(a.ln2[l], a.ln2_rstd[l], a.r2[l], param(P_LN2W, l), BT, C, eps, off);
    }
    const int k = cfg_.experts_per_tok, I = cfg_.moe_ffn_hidden;
    cdptr mid = pre ? a.ln2[l] : a.r2[l], dout = post ? a.dpost : a.dresidual;
    {
      OpScope s(*this, "moe_bwd", mm * C * (cfg_.num_experts + (double)k * 3 * I), 0);
      be_.moe_backward(moe_dims(BT), mid, param(P_ROUTERW, l), param(P_EXPW1, l),
                       param(P_EXPW2, l), dout, moe_state(l),
                       aux_dprob_.empty() ? nullptr : aux_dprob_.data(), a.dbtc,
                       grad(P_ROUTERW, l), grad(P_EXPW1, l), grad(P_EXPW2, l));
    }
    if (Is > 0) {  // the shared experts: the dense MLP's backward, its dx added to dbtc
      cdptr dshared = dout;  // d of the shared expert's output
      if (cfg_.shared_expert_gated()) {
        // Qwen2-MoE's gate: its backward needs the ungated output y, which
        // no buffer keeps (shout is scratch): the down projection again,
        // then d y = s·dout into shout, the gate's d x into dbtc (which
        // moe_backward has just written) and d g into its gradient.
        {
          OpScope s(*this, "matmul_recompute", 2.0 * BT * Is * C, 0);
          be_.matmul_forward(a.shout, nullptr, a.fch_gelu[l], param(P_SHW2, l), nullptr, BT, Is, C);
        }
        OpScope s(*this, "shared_gate_bwd", 8.0 * BT * C, 6.0 * BT * C * sb);
        be_.shared_gate_backward(a.shout, a.dbtc, grad(P_SHGATE, l), dout, mid, param(P_SHGATE, l),
                                 a.shout, BT, C);
        dshared = a.shout;
      }
      {
        OpScope s(*this, "matmul_bwd", mm * Is * C, 0);
        be_.matmul_backward(a.dact, grad(P_SHW2, l), nullptr, dshared, a.fch_gelu[l],
                            param(P_SHW2, l), BT, Is, C);
      }
      {
        OpScope s(*this, "swiglu_bwd", 0, 5.0 * BT * Is * sb);
        be_.swiglu_backward(a.dfch, a.fch[l], a.dact, BT, Is);
      }
      {
        OpScope s(*this, "matmul_bwd", mm * C * 2 * Is, 0);
        be_.matmul_backward(a.shout, grad(P_SHW1, l), nullptr, a.dfch, mid, param(P_SHW1, l),
                            BT, C, 2 * Is);
      }
      OpScope s(*this, "residual_fwd", 0, 3.0 * BT * C * sb);
      be_.residual_forward(a.dbtc, a.dbtc, a.shout, (size_t)BT * C);
    }
  } else {
    {
      OpScope s(*this, "matmul_bwd", mm * H * C, 0);
      be_.matmul_backward(a.dact, grad(P_FCPROJW, l), nullptr, post ? a.dpost : a.dresidual,
                          a.fch_gelu[l], param(P_FCPROJW, l), BT, H, C);
    }
    {
      OpScope s(*this, glu_name(cfg_.mlp_act, "_bwd"), 0, 5.0 * BT * H * sb);
      if (cfg_.mlp_act == MlpAct::gelu_tanh)
        be_.geglu_backward(a.dfch, a.fch[l], a.dact, BT, H);
      else
        be_.swiglu_backward(a.dfch, a.fch[l], a.dact, BT, H);
    }
    if (pre && rp.shares_ln() && !block) {
      OpScope s(*this, "rmsnorm_recompute", 0, 2.0 * BT * C * sb);
      be_.rmsnorm_forward(a.ln2[l], a.ln2_rstd[l], a.r2[l], param(P_LN2W, l), BT, C, eps, off);
    }
    OpScope s(*this, "matmul_bwd", mm * C * 2 * H, 0);
    be_.matmul_backward(a.dbtc, grad(P_FCW, l), nullptr, a.dfch, pre ? a.ln2[l] : a.r2[l],
                        param(P_FCW, l), BT, C, 2 * H);
  }
  if (pre) {
    OpScope s(*this, "rmsnorm_bwd", 0, 4.0 * BT * C * sb);
    be_.rmsnorm_backward(a.dresidual, grad(P_LN2W, l), a.dbtc, a.r2[l], param(P_LN2W, l),
                         a.ln2_rstd[l], BT, C, off);
  } else {
    OpScope s(*this, "residual_bwd", 0, 3.0 * BT * C * sb);
    be_.residual_forward(a.dresidual, a.dresidual, a.dbtc, (size_t)BT * C);
  }
  // dresidual = d r2[l]; the attention branch.
  if (post) post_norm_backward(grad(P_ATTNPOSTW, l), P_ATTNPOSTW, a.attno[l], a.attno_rstd[l]);
  {
    OpScope s(*this, "matmul_bwd", mm * C * Cq, 0);
    be_.matmul_backward(a.dbtc, grad(P_ATTPROJW, l), nullptr, post ? a.dpost : a.dresidual,
                        a.atty[l], param(P_ATTPROJW, l), BT, Cq, C);
  }
  {
    OpScope s(*this, "attention_bwd", attn_flops, 0);
    be_.attention_backward(a.dqkv, a.dbtc, a.qkv[l], a.atty[l], a.att[l], B, T, Cq, NH, KV,
                           attn_opts(l));
  }
  if (pre && rp.shares_ln() && !block) {
    OpScope s(*this, "rmsnorm_recompute", 0, 2.0 * BT * C * sb);
    be_.rmsnorm_forward(a.ln1[l], a.ln1_rstd[l], x, param(P_LN1W, l), BT, C, eps, off);
  }
  qkv_backward(a, l, B, T, pre ? a.ln1[l] : x);
  if (pre) {
    OpScope s(*this, "rmsnorm_bwd", 0, 4.0 * BT * C * sb);
    be_.rmsnorm_backward(a.dresidual, grad(P_LN1W, l), a.dbtc, x, param(P_LN1W, l),
                         a.ln1_rstd[l], BT, C, off);
  } else {
    OpScope s(*this, "residual_bwd", 0, 3.0 * BT * C * sb);
    be_.residual_forward(a.dresidual, a.dresidual, a.dbtc, (size_t)BT * C);
  }
}

// Every state after the first is made beside one the model already has, so
// the backend can give them one scratch (Backend::moe_state_beside; step_memory
// counts it once).
MoeState& GPT::moe_state(int l) {
  auto make = [this]() {
    const MoeState* sibling = moe_shared_.get();
    for (size_t i = 0; i < moe_states_.size() && !sibling; i++) sibling = moe_states_[i].get();
    return sibling ? be_.moe_state_beside(*sibling) : be_.moe_state();
  };
  if (recompute_.recomputes_block(l)) {  // refilled by the block's recompute before its backward
    if (!moe_shared_) moe_shared_ = make();
    return *moe_shared_;
  }
  if (moe_states_.size() != (size_t)cfg_.num_layers) moe_states_.resize(cfg_.num_layers);
  if (!moe_states_[l]) moe_states_[l] = make();
  return *moe_states_[l];
}

MoeDims GPT::moe_dims(int BT, int layer) const {
  MoeDims d;
  d.N = BT;
  d.C = cfg_.channels;
  d.E = cfg_.num_experts;
  d.k = cfg_.experts_per_tok;
  d.I = cfg_.moe_ffn_hidden;
  d.norm_topk_prob = cfg_.norm_topk_prob;
  d.sigmoid = cfg_.moe_sigmoid;
  d.routed_scale = cfg_.routed_scaling_factor;
  d.n_group = cfg_.n_group;
  d.topk_group = cfg_.topk_group;
  // An expert slice exchanges in every pass (the other experts are elsewhere).
  d.exchange = moe_training_ || experts_.partial() ? moe_exchange_ : nullptr;
  d.expert_slice = experts_.partial();
  d.expert_parallel = moe_exchange_ ? moe_exchange_->size() : 1;
  d.ep_capacity = moe_exchange_ ? moe_exchange_->capacity : 2.0;
  d.layer = layer;
  if (layer >= 0 && !moe_bias_.empty()) d.bias = moe_bias_.data() + (size_t)layer * cfg_.num_experts;
  return d;
}

void GPT::set_moe_bias(const std::vector<float>& b) {
  RATCHET_ASSERT(b.size() == moe_bias_.size());
  moe_bias_ = b;
}

void GPT::moe_bias_update(const std::vector<double>& counts) {
  const int E = cfg_.num_experts;
  if (moe_bias_.empty() || cfg_.moe_bias_update_rate == 0) return;
  RATCHET_ASSERT(counts.size() == (size_t)cfg_.moe_layer_count() * E);
  int m = 0;  // counts hold the MoE layers in layer order
  for (int l = 0; l < cfg_.num_layers; l++)
    if (cfg_.layer_is_moe(l))
      moe::bias_update(E, counts.data() + (size_t)m++ * E, cfg_.moe_bias_update_rate,
                       moe_bias_.data() + (size_t)l * E);
}

// After a training forward: the statistics summed over the data-parallel
// group (the reducer), the aux loss of the global micro-batch, and its
// gradient per probability for the backward. The trainer's gradients SUM
// over ranks (each rank's CE is scaled by loss_scale = 1/(accum·W)); the aux
// loss is already global, so each rank backpropagates its own tokens' part of
// coef·accum⁻¹·d aux/d p = coef·loss_scale·W·E·count_e/T², and the sum over
// ranks is exactly the gradient of the global aux loss.
void GPT::moe_collect_stats(const Acts& /*a*/, int /*BT*/, float loss_scale) {
  const int E = cfg_.num_experts, Lm = cfg_.moe_layer_count();
  if (moe_reduce_) moe_reduce_(moe_buf_.data(), moe_buf_.size());
  MoeStats& st = moe_stats_;
  st.counts.assign(moe_buf_.begin(), moe_buf_.begin() + (size_t)Lm * E);
  st.prob_sums.assign(moe_buf_.begin() + (size_t)Lm * E, moe_buf_.begin() + (size_t)(Lm + 1) * E);
  st.rows = moe_buf_.back();
  std::vector<double> pooled(E, 0.0);  // f counts every MoE layer's selections
  for (int m = 0; m < Lm; m++)
    for (int e = 0; e < E; e++) pooled[e] += st.counts[(size_t)m * E + e];
  const float coef = cfg_.router_aux_loss_coef;
  aux_dprob_.assign(coef != 0 ? E : 0, 0.0f);
  st.aux_loss = moe::aux_loss(E, pooled.data(), st.prob_sums.data(), st.rows,
                              coef * loss_scale * (float)moe_world_,
                              coef != 0 ? aux_dprob_.data() : nullptr);
}

}  // namespace ratchet

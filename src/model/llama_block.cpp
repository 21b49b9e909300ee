// The llama transformer block, forward and backward (see model/gpt.h for the
// whole model and model/recompute.h for what each policy keeps):
//   ln1 = RMSNorm(x; ln1w)                  (layer 0, or a recomputed block;
//                                            otherwise the previous block wrote it)
//   qkv = ln1 qkvw^T (BT,QKV); rope(q, k) in place
//   atty = attention(qkv; NH, KV)           (BT,C)
//   r2 = x + atty attprojw^T; ln2 = RMSNorm(r2; ln2w)        (fused)
//   fch = ln2 fcw^T (BT,2H) gate|up; act = swiglu(fch) (BT,H) (Acts::fch_gelu)
//   r3 = r2 + act fcprojw^T; next ln1 (or lnf) = RMSNorm(r3)  (fused)
// Backward mirrors it; the policy's shared buffers are refilled with the same
// ops on the same inputs, so gradients keep their bits under every policy.
#include "core/error.h"
#include "model/gpt_internals.h"

namespace ratchet {

void GPT::forward_block_llama(const Acts& a, int l, int B, int T, bool to_act) {
  const int C = cfg_.channels, NH = cfg_.num_heads, KV = cfg_.kv_heads(), hs = cfg_.head_size(),
            H = cfg_.ffn(), QKV = cfg_.qkv_channels(), L = cfg_.num_layers, BT = B * T;
  const float eps = cfg_.norm_eps;
  const double sb = be_.storage_bytes(), mm = 2.0 * BT;  // matmul FLOPs = 2·BT·in·out
  const double attn_flops = 4.0 * B * T * (double)T * C;  // q·k and att·v, per query head
  cdptr x = l == 0 ? a.encoded : a.r3[l - 1];
  if (l == 0 || to_act) {
    OpScope s(*this, "rmsnorm_fwd", 0, 2.0 * BT * C * sb);
    be_.rmsnorm_forward(a.ln1[l], a.ln1_rstd[l], x, param(P_LN1W, l), BT, C, eps);
  }
  {
    OpScope s(*this, "matmul_fwd", mm * C * QKV, 0);
    be_.matmul_forward(a.qkv[l], nullptr, a.ln1[l], param(P_QKVW, l), nullptr, BT, C, QKV);
  }
  {
    OpScope s(*this, "rope_fwd", 0, 2.0 * BT * (NH + KV) * hs * sb);
    be_.rope_forward(a.qkv[l], a.rope, B, T, NH, KV, hs, cfg_.max_seq_len);
  }
  {
    OpScope s(*this, "attention_fwd", attn_flops, 0);
    be_.attention_forward(a.atty[l], a.att[l], a.qkv[l], B, T, C, NH, KV);
  }
  {
    OpScope s(*this, "matmul_fwd", mm * C * C, 0);
    be_.matmul_forward(a.r2[l], nullptr, a.atty[l], param(P_ATTPROJW, l), nullptr, BT, C, C);
  }
  {
    OpScope s(*this, "residual_rmsnorm_fwd", 0, 4.0 * BT * C * sb);
    be_.residual_rmsnorm_forward(a.r2[l], a.ln2[l], a.ln2_rstd[l], x, a.r2[l], param(P_LN2W, l),
                                 BT, C, eps);
  }
  {
    OpScope s(*this, "matmul_fwd", mm * C * 2 * H, 0);
    be_.matmul_forward(a.fch[l], nullptr, a.ln2[l], param(P_FCW, l), nullptr, BT, C, 2 * H);
  }
  {
    OpScope s(*this, "swiglu_fwd", 0, 3.0 * BT * H * sb);
    be_.swiglu_forward(a.fch_gelu[l], a.fch[l], BT, H);
  }
  if (to_act) return;
  {
    OpScope s(*this, "matmul_fwd", mm * H * C, 0);
    be_.matmul_forward(a.r3[l], nullptr, a.fch_gelu[l], param(P_FCPROJW, l), nullptr, BT, H, C);
  }
  const bool last = l == L - 1;  // then the norm is the final one, lnf
  {
    OpScope s(*this, "residual_rmsnorm_fwd", 0, 4.0 * BT * C * sb);
    be_.residual_rmsnorm_forward(a.r3[l], last ? a.lnf : a.ln1[l + 1],
                                 last ? a.lnf_rstd : a.ln1_rstd[l + 1], a.r2[l], a.r3[l],
                                 last ? param(P_LNFW) : param(P_LN1W, l + 1), BT, C, eps);
  }
}

// On entry a.dresidual = d r3[l]; on exit d x (the stream entering layer l).
void GPT::backward_block_llama(const Acts& a, int l, int B, int T) {
  const int C = cfg_.channels, NH = cfg_.num_heads, KV = cfg_.kv_heads(), hs = cfg_.head_size(),
            H = cfg_.ffn(), QKV = cfg_.qkv_channels(), BT = B * T;
  const float eps = cfg_.norm_eps;
  const double sb = be_.storage_bytes(), mm = 4.0 * BT;  // dinp and dw: 2 matmuls
  const double attn_flops = 8.0 * B * T * (double)T * C;
  const Recompute& rp = recompute_;
  cdptr x = l == 0 ? a.encoded : a.r3[l - 1];
  // Refill what the policy did not keep (same ops, same inputs: same bits).
  const bool block = rp.recomputes_block(l);
  if (block) {
    forward_block_llama(a, l, B, T, /*to_act=*/true);
  } else if (rp.shares_gelu()) {
    OpScope s(*this, "swiglu_recompute", 0, 3.0 * BT * H * sb);
    be_.swiglu_forward(a.fch_gelu[l], a.fch[l], BT, H);
  }
  // The MLP branch.
  {
    OpScope s(*this, "matmul_bwd", mm * H * C, 0);
    be_.matmul_backward(a.dact, grad(P_FCPROJW, l), nullptr, a.dresidual, a.fch_gelu[l],
                        param(P_FCPROJW, l), BT, H, C);
  }
  {
    OpScope s(*this, "swiglu_bwd", 0, 5.0 * BT * H * sb);
    be_.swiglu_backward(a.dfch, a.fch[l], a.dact, BT, H);
  }
  if (rp.shares_ln() && !block) {
    OpScope s(*this, "rmsnorm_recompute", 0, 2.0 * BT * C * sb);
    be_.rmsnorm_forward(a.ln2[l], a.ln2_rstd[l], a.r2[l], param(P_LN2W, l), BT, C, eps);
  }
  {
    OpScope s(*this, "matmul_bwd", mm * C * 2 * H, 0);
    be_.matmul_backward(a.dbtc, grad(P_FCW, l), nullptr, a.dfch, a.ln2[l], param(P_FCW, l), BT,
                        C, 2 * H);
  }
  {
    OpScope s(*this, "rmsnorm_bwd", 0, 4.0 * BT * C * sb);
    be_.rmsnorm_backward(a.dresidual, grad(P_LN2W, l), a.dbtc, a.r2[l], param(P_LN2W, l),
                         a.ln2_rstd[l], BT, C);
  }
  // dresidual = d r2[l]; the attention branch.
  {
    OpScope s(*this, "matmul_bwd", mm * C * C, 0);
    be_.matmul_backward(a.dbtc, grad(P_ATTPROJW, l), nullptr, a.dresidual, a.atty[l],
                        param(P_ATTPROJW, l), BT, C, C);
  }
  {
    OpScope s(*this, "attention_bwd", attn_flops, 0);
    be_.attention_backward(a.dqkv, a.dbtc, a.qkv[l], a.atty[l], a.att[l], B, T, C, NH, KV);
  }
  {
    OpScope s(*this, "rope_bwd", 0, 2.0 * BT * (NH + KV) * hs * sb);
    be_.rope_backward(a.dqkv, a.rope, B, T, NH, KV, hs, cfg_.max_seq_len);
  }
  if (rp.shares_ln() && !block) {
    OpScope s(*this, "rmsnorm_recompute", 0, 2.0 * BT * C * sb);
    be_.rmsnorm_forward(a.ln1[l], a.ln1_rstd[l], x, param(P_LN1W, l), BT, C, eps);
  }
  {
    OpScope s(*this, "matmul_bwd", mm * C * QKV, 0);
    be_.matmul_backward(a.dbtc, grad(P_QKVW, l), nullptr, a.dqkv, a.ln1[l], param(P_QKVW, l), BT,
                        C, QKV);
  }
  {
    OpScope s(*this, "rmsnorm_bwd", 0, 4.0 * BT * C * sb);
    be_.rmsnorm_backward(a.dresidual, grad(P_LN1W, l), a.dbtc, x, param(P_LN1W, l),
                         a.ln1_rstd[l], BT, C);
  }
}

}  // namespace ratchet

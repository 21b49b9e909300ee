// Recompute policy: which activations a training step keeps from forward for
// backward, and which backward recomputes. A model-level decision shared by
// every backend (DESIGN.md, "The model"): the gradients never change with the
// policy (bitwise with FP32 storage; tested), only memory and time.
//
// Per layer, a step with no recompute keeps (BT = B·T, storage dtype unless
// marked f32; every buffer starts on a 64-byte boundary, see GPT::layout_acts):
//   ln1 (BT,C) ln1_mean/rstd (BT f32) qkv (BT,3C) atty (BT,C)
//   att (what attention keeps: lse (B,NH,T) f32, or (B,NH,T,T) materialized;
//   backend/attention_impl.h)
//   r2 (BT,C)  ln2 (BT,C) ln2_mean/rstd (BT f32) fch (BT,4C) fch_gelu (BT,4C)
//   r3 (BT,C)  (the block's output = the next block's input residual)
// plus, once: inputs, targets, encoded (BT,C), lnf (BT,C) + stats, logits
// (BT,Vp), losses, and the backward scratch (dresidual, dbtc, dqkv, dfch).
//
// The policies, with S(n) = n·storage bytes rounded up to 64, and the
// activation bytes each saves against "none" (exact: GPT::activation_bytes
// and plan/ report these, tests check them):
//   none      keeps everything.
//   gelu      fch_gelu of every layer lives in ONE shared (BT,4C) buffer;
//             backward recomputes gelu(fch) into it before the fcproj weight
//             gradient (Backend::gelu_recompute: the element-wise kernel, or,
//             where the forward took GELU from the GEMM epilogue (the cuda
//             backend in BF16), the fc GEMM again, so that the bits are the
//             forward's). Saves (L-1)·S(BT·4C).
//   gelu+ln   as gelu, and ln1, ln2 of every layer share ONE (BT,C) buffer;
//             backward re-runs the layernorm from the kept block input / r2
//             (rewriting the kept mean and rstd with the same bits).
//             Saves (L-1)·S(BT·4C) + (2L-1)·S(BT·C).
//   blocks:k  the layers l with l % k == 0 (n = ceil(L/k) of them) keep only
//             their output r3; everything else of theirs lives in ONE shared
//             block working set W (every per-layer buffer but r3), which
//             backward refills by re-running the block's forward from its kept
//             input. "blocks" is blocks:1 (every layer). Saves (n-1)·W; costs
//             one more forward of n blocks (recompute_flops_per_token).
// The shared parts (embeddings' output, lnf, logits, losses, scratch) are kept
// by every policy.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace ratchet {

struct Recompute {
  enum Kind { kNone = 0, kGelu = 1, kGeluLn = 2, kBlocks = 3 };
  Kind kind = kNone;
  int every = 1;  // blocks: layer l is recomputed when l % every == 0

  bool shares_gelu() const { return kind == kGelu || kind == kGeluLn; }
  bool shares_ln() const { return kind == kGeluLn; }
  bool recomputes_block(int layer) const { return kind == kBlocks && layer % every == 0; }
  int blocks_recomputed(int num_layers) const {
    return kind == kBlocks ? (num_layers + every - 1) / every : 0;
  }
  std::string name() const;  // "none", "gelu", "gelu+ln", "blocks", "blocks:k"
  bool operator==(const Recompute& o) const {
    return kind == o.kind && (kind != kBlocks || every == o.every);
  }
};

// Parses a name above; throws Error naming --recompute otherwise.
Recompute parse_recompute(const std::string& name);
// none, gelu, gelu+ln, blocks (= blocks:1): the ones `ratchet plan` tabulates.
std::vector<Recompute> standard_recompute_policies();

// Extra FLOPs per trained token that recomputation adds (matmuls and
// attention only; the element-wise GELU and LayerNorm recomputes are memory-
// bound and counted as 0). blocks:k: one more forward of the n recomputed
// blocks, n/L · (2·(per-layer parameters)·L + 4·L·C·T) (the attention part is
// a third of train_flops_per_token's 12·L·C·T). gelu, gelu+ln with
// gelu_by_gemm (a GPT-2 MLP whose GELU comes from the GEMM epilogue: the cuda
// backend in BF16): the fc GEMM again, 2·C·F·L (F = 4C).
double recompute_flops_per_token(const GPTConfig& cfg, int T, const Recompute& p,
                                 bool gelu_by_gemm = false);

}  // namespace ratchet

// Recompute policy: which activations a training step keeps from forward for
// backward, and which it recomputes. A model-level decision shared by every
// backend (DESIGN.md, "The model"): gradients never change with the policy,
// only memory and time. This file is the one definition; `ratchet plan`
// reports memory for each policy, and the CUDA backend will implement them.
//
// Per layer, GPT::Acts holds (BT = B·T, storage dtype unless marked f32):
//   ln1 (BT,C) ln1_mean/rstd (BT f32) qkv (BT,3C) atty (BT,C) att (B,NH,T,T)
//   r2 (BT,C)  ln2 (BT,C) ln2_mean/rstd (BT f32) fch (BT,4C) fch_gelu (BT,4C)
//   r3 (BT,C)  (the block's output = the next block's input residual)
// plus, once: inputs, targets, encoded (BT,C), lnf (BT,C) + stats, logits
// (BT,Vp), losses, and the backward scratch (dresidual, dbtc, dqkv, dfch).
// Every buffer starts on a 64-byte boundary, as in GPT::layout_acts.
//
//   none     keeps everything above: exactly GPT::activation_bytes().
//   gelu     does not keep fch_gelu; backward recomputes gelu(fch) into the
//            dfch scratch. Saves L · (B·T·4C) elements.
//   gelu+ln  as gelu, and does not keep ln1, ln2 either; backward recomputes
//            them from the block input / r2 with the kept mean and rstd
//            (one fused normalisation, no reduction). Saves L · (B·T·2C) more.
//   blocks   keeps only each block's input residual (encoded, r3 of every
//            layer) plus one block's working set (every per-layer buffer but
//            r3), which backward refills by re-running that block's forward.
//            Saves (L-1) block working sets; costs one more forward of the
//            blocks (see recompute_flops_per_token).
// The shared parts (embeddings' output, lnf, logits, losses, scratch) are
// kept by every policy.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "model/config.h"

namespace ratchet::plan {

enum class Recompute { kNone, kGelu, kGeluLn, kBlocks };

const char* recompute_name(Recompute p);  // "none", "gelu", "gelu+ln", "blocks"
// Parses a name above; throws Error naming --recompute otherwise.
Recompute parse_recompute(const std::string& name);
std::vector<Recompute> all_recompute_policies();

// Bytes one block's buffers take (64-byte aligned each), split into the
// parts the policies drop.
struct BlockActBytes {
  size_t fch_gelu = 0;      // (BT,4C)
  size_t ln = 0;            // ln1 + ln2, (BT,C) each
  size_t residual_out = 0;  // r3 (BT,C)
  size_t total = 0;         // every per-layer buffer, r3 included
};
BlockActBytes block_act_bytes(const GPTConfig& cfg, int B, int T, size_t storage_bytes);

// Activation bytes for one micro-batch of (B, T) under policy p.
size_t activation_bytes(const GPTConfig& cfg, int B, int T, size_t storage_bytes, Recompute p);

// Extra FLOPs per trained token that recomputation adds (matmuls and
// attention only; the element-wise GELU and LayerNorm recomputes are memory-
// bound and counted as 0). blocks: one more forward of every block,
// 2·(per-layer parameters)·L + 4·L·C·T (a third of train_flops_per_token's
// attention term).
double recompute_flops_per_token(const GPTConfig& cfg, int T, Recompute p);

}  // namespace ratchet::plan

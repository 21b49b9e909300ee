// What gpt.cpp and llama_block.cpp share inside the GPT class: the
// activation layout of one micro-batch (GPT::Acts, placed by
// GPT::layout_acts) and the per-op timer used when profiling.
#pragma once
#include <vector>

#include "core/log.h"
#include "model/gpt.h"

namespace ratchet {

// Activation layout for one micro-batch of (B, T). Shapes use BT = B*T,
// QKV = (NH+2KV)·hs (3C for GPT-2), F = 4C (GPT-2) or 2H (llama: gate|up),
// A = 4C (GPT-2) or H (llama); with shared experts H is the larger of the
// dense ffn() (if any layer is dense) and the shared experts' Is. Storage-dtype tensors unless marked f32.
struct GPT::Acts {
  int* inputs;         // (B,T) token ids
  int* targets;        // (B,T)
  float* rope;         // llama: (2, maxT, hs/2) f32 RoPE cos | sin (model/rope_table.h)
  float* rope_local;   // sliding layers' table when they have their own base (Gemma 3), else null
  dptr zero_pos;       // llama: (T,C) zeros, the encoder's position table (llama has none);
                       // its backward scratch too, so zeroed before each forward
  dptr encoded;        // (BT,C)    residual stream entering layer 0
  std::vector<dptr> ln1, qkv, atty, att, r2, ln2, fch, fch_gelu, r3;
  //                   ln1 (BT,C) qkv (BT,QKV) atty (BT,NH*hs) att: what attention
  //                   keeps for backward (lse (B,NH,T) f32, or (B,NH,T,T))
  //                   r2 (BT,C) ln2 (BT,C) fch (BT,F) fch_gelu (BT,A) r3 (BT,C)
  std::vector<float*> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;  // (BT) f32; no means (llama)
  // The 2026 families' (issue 38), empty unless the config has the feature:
  //   qkvr (BT,QKV) the projection before the q/k norm; qk_rstd (BT,R) f32
  //   (R = NH+KV per head, 2 full width)              [qk_norm]
  //   attno (BT,C) o_proj's output before its norm; attno_rstd (BT) f32
  //   mlpo (BT,C) down_proj's output before its norm; mlpo_rstd (BT) f32
  //   (mlpo is kept by every policy, like r3)         [post / sandwich norms]
  std::vector<dptr> qkvr, attno, mlpo;
  std::vector<float*> qk_rstd, attno_rstd, mlpo_rstd;
  dptr lnf;            // (BT,C)
  float* lnf_mean;     // (BT) f32
  float* lnf_rstd;     // (BT) f32
  dptr logits;         // (BT,Vp)   gradient in place during backward
  float* losses;       // (BT) f32
  // backward scratch
  dptr dresidual;      // (BT,C)    gradient of the residual stream
  dptr dbtc;           // (BT,max(C,NH*hs)) dln / datty scratch
  dptr dqkv;           // (BT,QKV)
  dptr dfch;           // (BT,F)
  dptr dact;           // llama: (BT,H) gradient of the SwiGLU output
  dptr postn;          // post norms: (BT,C) a branch output after its norm (forward scratch)
  dptr dpost;          // post norms: (BT,C) gradient of a branch output before its norm
  dptr dqkvr;          // qk_norm: (BT,QKV) gradient of the projection before the q/k norm
  dptr shout;          // shared experts: (BT,C) their output (forward), their dx (backward)
  size_t bytes;        // total (for allocation)
};

// Times an op when profiling is on (synchronizing the backend so the time is
// the op's own); free when off.
class OpScope {
 public:
  OpScope(GPT& m, const char* name, double flops, double bytes)
      : m_(m), name_(name), flops_(flops), bytes_(bytes) {
    m_.be_.range_push(name);  // NVTX range on the cuda backend
    if (m_.profiling_) t0_ = now_s();
  }
  ~OpScope() {
    m_.be_.range_pop();
    if (!m_.profiling_) return;
    m_.be_.synchronize();
    OpStat& s = m_.prof_[name_];
    s.calls++;
    s.seconds += now_s() - t0_;
    s.flops += flops_;
    s.bytes += bytes_;
  }

 private:
  GPT& m_;
  const char* name_;
  double flops_, bytes_, t0_ = 0;
};

}  // namespace ratchet

// What a Mixture-of-Experts model (issue 39) costs per token, for `ratchet
// plan` and the trainer's MFU: a token runs the router and k of a MoE layer's E experts,
// so its FLOPs follow the active parameters while memory (weights, grads,
// AdamW state) holds the total.
//
//   active parameters  param_count() less (E - k) experts (3·C·I each) per
//                      MoE layer: attention, norms, embeddings (and lm_head
//                      when untied) as param_count() counts them, the router
//                      whole, k experts, the shared experts (every token
//                      runs them); a dense model's is param_count().
//   unused matmul      the flat buffer's matmul elements a token never
//                      multiplies: the E - k experts of each MoE layer, and
//                      in a model mixing dense and MoE layers the zero slices
//                      (param_layout.h: the dense MLP's on MoE layers, the
//                      router's, experts' and shared experts' on dense layers).
//   FLOPs per token    train_flops_per_token (model/gpt.h: 6 per matmul
//                      parameter of the flat buffer, plus attention) less
//                      6 · unused matmul; a recomputed block's forward
//                      (recompute_flops_per_token: 2 per block parameter)
//                      less 2 · its layer's unused matmul.
#pragma once
#include "model/config.h"

namespace ratchet {

double active_param_count(const GPTConfig& c);
double unused_matmul_params(const GPTConfig& c);
double unused_matmul_params_of_layer(const GPTConfig& c, int l);  // layer l's share
// Training FLOPs per token (forward + backward) at sequence length T, on
// the active parameters for a MoE model.
double active_train_flops_per_token(const GPTConfig& c, int T);

}  // namespace ratchet

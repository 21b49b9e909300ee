#include "model/moe_cost.h"

#include "model/gpt.h"

namespace ratchet {

double active_param_count(const GPTConfig& c) {
  if (!c.llama() || !c.moe()) return c.param_count();
  const double C = c.channels, I = c.moe_ffn_hidden, E = c.num_experts, k = c.experts_per_tok;
  return c.param_count() - c.moe_layer_count() * (E - k) * 3 * C * I;
}

double unused_matmul_params_of_layer(const GPTConfig& c, int l) {
  if (!c.llama() || !c.moe()) return 0;
  const double C = c.channels, H = c.ffn(), I = c.moe_ffn_hidden, E = c.num_experts, k = c.experts_per_tok;
  const int Lm = c.moe_layer_count();
  const bool mixed = Lm < c.num_layers;  // both MLPs held for every layer (param_layout.h)
  if (c.layer_is_moe(l)) return (E - k) * 3 * C * I + (mixed ? 3 * C * H : 0);
  // a dense layer of a mixed model: its router, expert and shared-expert
  // slices (and the shared expert's gate row, Qwen2-MoE)
  return E * C + 3 * E * C * I + 3 * C * (double)c.shared_ffn() + (c.shared_expert_gated() ? C : 0);
}

double unused_matmul_params(const GPTConfig& c) {
  double unused = 0;
  for (int l = 0; c.moe() && l < c.num_layers; l++) unused += unused_matmul_params_of_layer(c, l);
  return unused;
}

double active_train_flops_per_token(const GPTConfig& c, int T) {
  return train_flops_per_token(c, T) - 6.0 * unused_matmul_params(c);
}

}  // namespace ratchet

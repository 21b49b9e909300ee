// See plan.h (moe_a2a_bytes).
#include "plan/plan.h"

namespace ratchet::plan {

double moe_a2a_bytes(const GPTConfig& cfg, int B, int T, int accum, int N) {
  if (!cfg.moe() || N <= 1) return 0;
  const double others = (double)(N - 1) / N;
  const double counts = (double)(N - 1) * (cfg.num_experts / N) * sizeof(int);
  const double rows = 4.0 * others * B * T * cfg.experts_per_tok * cfg.channels * sizeof(float);
  return (double)cfg.moe_layer_count() * accum * (counts + rows);
}

}  // namespace ratchet::plan

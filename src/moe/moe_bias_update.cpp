// DeepSeek-V3's auxiliary-loss-free load balancing: the selection bias's
// update from one step's global load (math in moe_ops.h).
#include <cmath>
#include <vector>

#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet::moe {

void bias_update(int E, const double* load, float rate, float* bias) {
  if (E < 1) fail("MoE bias update: num_experts is ", E, "; it must be at least 1");
  if (!(rate >= 0) || !std::isfinite(rate))
    fail("MoE bias update: rate ", rate, " must be finite and >= 0");
  double total = 0.0;
  for (int e = 0; e < E; e++) total += load[e];
  if (total == 0.0) return;  // no tokens this step: nothing to balance
  const double mean = total / E;
  std::vector<double> delta(E);
  double dmean = 0.0;
  for (int e = 0; e < E; e++) {
    const double d = mean - load[e];
    delta[e] = rate * (double)((d > 0) - (d < 0));  // sign, with sign(0) = 0
    dmean += delta[e];
  }
  dmean /= E;
  for (int e = 0; e < E; e++) bias[e] = (float)((double)bias[e] + (delta[e] - dmean));
}

}  // namespace ratchet::moe

// The load-balancing loss's statistics and the loss (math in moe_ops.h):
// counts and sums, so layers, micro-batches and ranks add them first.
#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet::moe {

void aux_stats(const MoeShape& s, const float* probs, const int* idx, double* counts,
               double* prob_sums) {
  check_shape(s);
  const int E = s.E;
  // One thread, tokens in order: the sums' bits do not depend on threads.
  for (int n = 0; n < s.N; n++) {
    for (int e = 0; e < E; e++) prob_sums[e] += probs[(size_t)n * E + e];
    for (int j = 0; j < s.k; j++) counts[idx[(size_t)n * s.k + j]] += 1.0;
  }
}

double aux_loss(int E, const double* counts, const double* prob_sums, double T, float coef,
                float* dprob) {
  if (E < 1) fail("MoE aux loss: num_experts is ", E, "; it must be at least 1");
  if (!(T > 0)) fail("MoE aux loss: ", T, " router rows; the statistics cover no tokens");
  double loss = 0.0;
  for (int e = 0; e < E; e++) loss += (counts[e] / T) * (prob_sums[e] / T);
  if (dprob)
    for (int e = 0; e < E; e++) dprob[e] = (float)(coef * E * counts[e] / (T * T));
  return E * loss;
}

}  // namespace ratchet::moe

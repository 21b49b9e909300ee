// See plan.h (moe_a2a_bytes).
#include "plan/plan.h"

#include <algorithm>

namespace ratchet::plan {

double moe_a2a_bytes(const GPTConfig& cfg, int B, int T, int accum, int N, size_t elem_bytes) {
  if (!cfg.moe() || N <= 1) return 0;
  const double others = (double)(N - 1) / N;
  const double counts = (double)(N - 1) * (cfg.num_experts / N) * sizeof(int);
  const double rows = 4.0 * others * B * T * cfg.experts_per_tok * cfg.channels * (double)elem_bytes;
  return (double)cfg.moe_layer_count() * accum * (counts + rows);
}

double moe_a2a_seconds(double bytes, int P, int gpus_per_node, const Fabric& f) {
  if (P <= 1 || bytes <= 0) return 0;
  // A rank sends an equal share to each of the P - 1 others; those in its
  // node (consecutive ranks) go over NVLink, the rest over its own link.
  const int local = std::min(P, std::max(gpus_per_node, 1)) - 1;
  const double intra = bytes * local / (P - 1), inter = bytes - intra;
  const double ti = intra > 0 && f.intra_bytes_per_s > 0 ? intra / f.intra_bytes_per_s : 0;
  const double tx = inter > 0 && f.inter_bytes_per_s > 0 ? inter / f.inter_bytes_per_s : 0;
  return std::max(ti, tx);
}

}  // namespace ratchet::plan

// See expert_shards.h.
#include "distributed/expert_shards.h"

#include <algorithm>

#include "core/error.h"
#include "model/config.h"

namespace ratchet {

FlatRangeList expert_ranges(const GPTConfig& cfg, int n, int q) {
  FlatRangeList out;
  if (!cfg.moe()) return out;
  const ParamLayout layout(cfg);
  const int L = cfg.num_layers, E = cfg.num_experts;
  for (int t : {P_EXPW1, P_EXPW2}) {
    const size_t per = layout.per_layer(t, L), per_expert = per / (size_t)E;
    const size_t a = q < 0 ? 0 : (size_t)q * (E / n), b = q < 0 ? E : a + E / n;
    for (int l = 0; l < L; l++) {
      const size_t base = layout.offsets[t] + (size_t)l * per;
      if (per > 0) out.push_back({base + a * per_expert, base + b * per_expert});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

FlatRangeList subtract_ranges(const FlatRangeList& a, const FlatRangeList& b) {
  FlatRangeList out;
  size_t j = 0;
  for (auto [lo, hi] : a) {
    while (j < b.size() && b[j].second <= lo) j++;
    for (size_t k = j; k < b.size() && b[k].first < hi && lo < hi; k++) {
      if (b[k].first > lo) out.push_back({lo, b[k].first});
      lo = std::max(lo, b[k].second);
    }
    if (lo < hi) out.push_back({lo, hi});
  }
  return out;
}

FlatRangeList merge_ranges(const FlatRangeList& a, const FlatRangeList& b) {
  FlatRangeList out(a);
  out.insert(out.end(), b.begin(), b.end());
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); i++) RATCHET_ASSERT(out[i - 1].second <= out[i].first);
  return out;
}

size_t ranges_elems(const FlatRangeList& r) {
  size_t n = 0;
  for (const auto& [lo, hi] : r) n += hi - lo;
  return n;
}

}  // namespace ratchet

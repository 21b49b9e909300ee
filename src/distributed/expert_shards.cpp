// See expert_shards.h.
#include "distributed/expert_shards.h"

#include <algorithm>

#include "backend/backend.h"
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

FlatRangeList all_but_other_experts(size_t total, const FlatRangeList& all, const FlatRangeList& own) {
  return merge_ranges(subtract_ranges({{0, total}}, all), own);
}

size_t ranges_elems(const FlatRangeList& r) {
  size_t n = 0;
  for (const auto& [lo, hi] : r) n += hi - lo;
  return n;
}

// Per layer and tensor the group's blocks are consecutive in rank order, so
// one all-gather of each rank's block, in place, fills the layer's E experts.
// Every rank of the group takes the same path: the master is kept alike on
// all of them (the strategy's, the same settings everywhere).
void gather_expert_weights(const ExpertShards& x, const GPTConfig& cfg, Backend& be,
                           void* params, int step) {
  if (x.n <= 1) return;
  const size_t sb = be.storage_bytes();
  RATCHET_ASSERT(sb == 4 || sb == 2);
  const ParamLayout layout(cfg);
  const int L = cfg.num_layers;
  const DType t = sb == 2 ? DType::BF16 : DType::F32;
  for (int tensor : {P_EXPW1, P_EXPW2}) {
    const size_t per = layout.per_layer(tensor, L), block = per / (size_t)x.n;
    for (int l = 0; l < L; l++) {
      char* layer = static_cast<char*>(params) + (layout.offsets[tensor] + (size_t)l * per) * sb;
      float* master = sb == 2 ? be.master_of(layer, per) : nullptr;
      if (!master) {
        x.group_comm->all_gather(layer + (size_t)x.index * block * sb, layer, block, t);
        continue;
      }
      x.group_comm->all_gather(master + (size_t)x.index * block, master, block, DType::F32);
      // As AdamW rounded the owner's piece: its place in the tensor and the
      // tensor's seed (optim/adamw.cpp).
      for (int q = 0; q < x.n; q++)
        if (q != x.index)
          be.round_from_master(layer + (size_t)q * block * sb, block, step,
                               (size_t)l * per + (size_t)q * block, layout.offsets[tensor]);
    }
  }
}

}  // namespace ratchet

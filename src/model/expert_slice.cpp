// See expert_slice.h.
#include "model/expert_slice.h"

#include <algorithm>

#include "core/error.h"
#include "model/param_layout.h"

namespace ratchet {

std::vector<FlatSegment> local_segments(const GPTConfig& cfg, ExpertSlice x) {
  if (x.index < 0 || x.index >= x.shards)
    fail("expert slice ", x.index, " of ", x.shards, ": the index must be in [0, ", x.shards, ")");
  const ParamLayout g(cfg), l(cfg, x.shards);  // l checks that shards divides E
  const size_t L = (size_t)cfg.num_layers, E = cfg.moe() ? (size_t)cfg.num_experts : 1;
  std::vector<FlatSegment> out;
  auto add = [&](size_t loc, size_t glob, size_t len) {
    if (len == 0) return;
    if (!out.empty() && out.back().local + out.back().len == loc &&
        out.back().global + out.back().len == glob) {
      out.back().len += len;  // continues the last run
    } else {
      out.push_back({loc, glob, len});
    }
  };
  for (int t = 0; t < kNumParamTensors; t++) {
    if (t != P_EXPW1 && t != P_EXPW2) {
      add(l.offsets[t], g.offsets[t], l.sizes[t]);
      continue;
    }
    // Per layer: the held experts' rows, one block of E/N experts.
    const size_t per_l = l.per_layer(t, (int)L), per_g = g.per_layer(t, (int)L);
    const size_t per_expert = per_g / E;
    for (size_t layer = 0; layer < L && per_l > 0; layer++)
      add(l.offsets[t] + layer * per_l,
          g.offsets[t] + layer * per_g + (size_t)x.first((int)E) * per_expert, per_l);
  }
  return out;
}

void slice_experts(const GPTConfig& cfg, ExpertSlice x, const float* global, float* local) {
  for (const FlatSegment& s : local_segments(cfg, x))
    std::copy(global + s.global, global + s.global + s.len, local + s.local);
}

std::vector<std::pair<size_t, size_t>> global_ranges(const GPTConfig& cfg, ExpertSlice x) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const FlatSegment& s : local_segments(cfg, x)) {
    if (!out.empty() && out.back().second == s.global)
      out.back().second += s.len;
    else
      out.push_back({s.global, s.global + s.len});
  }
  return out;
}

size_t local_offset(const std::vector<FlatSegment>& segments, size_t g) {
  for (const FlatSegment& s : segments)
    if (g >= s.global && g < s.global + s.len) return s.local + (g - s.global);
  fail("element ", g, " of the whole model is not in this expert slice");
}

void check_slice_place(ExpertSlice x, int ranks, int rank) {
  if (ranks % x.shards != 0 || rank % x.shards != x.index)
    fail("an expert slice ", x.index, " of ", x.shards, " is held by ranks q with q % ", x.shards,
         " == ", x.index, " of a world that ", x.shards, " divides (rank ", rank, " of ", ranks,
         ")");
}

std::vector<std::pair<size_t, size_t>> global_ranges_of(
    const std::vector<FlatSegment>& segments, const std::vector<std::pair<size_t, size_t>>& local) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const auto& [lo, hi] : local)
    for (const FlatSegment& s : segments) {
      const size_t a = std::max(lo, s.local), b = std::min(hi, s.local + s.len);
      if (a >= b) continue;
      const size_t ga = s.global + (a - s.local), gb = ga + (b - a);
      if (!out.empty() && out.back().second == ga)
        out.back().second = gb;
      else
        out.push_back({ga, gb});
    }
  return out;
}

std::vector<std::pair<size_t, size_t>> local_ranges(
    const std::vector<FlatSegment>& segments, const std::vector<std::pair<size_t, size_t>>& global) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const auto& [lo, hi] : global) {
    size_t held = 0;
    for (const FlatSegment& s : segments) {
      const size_t a = std::max(lo, s.global), b = std::min(hi, s.global + s.len);
      if (a >= b) continue;
      const size_t la = s.local + (a - s.global), lb = la + (b - a);
      if (!out.empty() && out.back().second == la)
        out.back().second = lb;
      else
        out.push_back({la, lb});
      held += b - a;
    }
    if (held != hi - lo)
      fail("elements ", lo, "..", hi, " of the whole model are not all in this expert slice");
  }
  return out;
}

void place_experts(const GPTConfig& cfg, ExpertSlice x, const float* local, float* global) {
  for (const FlatSegment& s : local_segments(cfg, x))
    std::copy(local + s.local, local + s.local + s.len, global + s.global);
}

}  // namespace ratchet

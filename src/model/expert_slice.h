// Expert slices: a model that holds only E/N of every MoE layer's experts
// (--expert-parallel N at ZeRO 0 and 1: E/N experts' weights and gradients
// per rank; docs/moe.md "What each rank keeps").
// Rank q of an expert-parallel group of N holds
// experts [q·E/N, (q+1)·E/N) of expw1 and expw2 in ParamLayout(cfg, N) (the
// "local" layout); every other tensor is whole. The whole model's layout,
// ParamLayout(cfg), is the "global" one: checkpoints, exports and the
// one-process model use it. This file maps between the two.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "model/config.h"

namespace ratchet {

struct ExpertSlice {
  int shards = 1;  // N (1: every expert here, the global layout)
  int index = 0;   // q: experts [q·E/N, (q+1)·E/N)
  bool partial() const { return shards > 1; }
  int first(int E) const { return index * (E / shards); }  // the first expert held
};

// One run of consecutive elements: [local, local + len) of the local layout
// is [global, global + len) of the global one.
struct FlatSegment {
  size_t local = 0, global = 0, len = 0;
};
// The local layout as segments of the global one, in local order, merged
// where consecutive; they cover every local element once. An Error when x is
// not a valid slice of cfg (index outside [0, shards), shards not dividing E).
std::vector<FlatSegment> local_segments(const GPTConfig& cfg, ExpertSlice x);
// local (ParamLayout(cfg, x.shards).total floats) = this slice of global
// (ParamLayout(cfg).total floats).
void slice_experts(const GPTConfig& cfg, ExpertSlice x, const float* global, float* local);
// The inverse: writes the local elements into their places in global (the
// other slices' experts there are left as they are).
void place_experts(const GPTConfig& cfg, ExpertSlice x, const float* local, float* global);
// The global [lo, hi) ranges the slice holds, ascending (the segments'
// global places are ascending in local order too, so a buffer holding
// them back to back is the local layout: a strategy's owned ranges).
std::vector<std::pair<size_t, size_t>> global_ranges(const GPTConfig& cfg, ExpertSlice x);
// An Error unless rank `rank` of `ranks` holds slice x: N = x.shards divides
// `ranks` and rank % N == x.index (expert-parallel groups are consecutive ranks).
void check_slice_place(ExpertSlice x, int ranks, int rank);
// Where global element `g` sits in the local layout; an Error when the slice
// does not hold it.
size_t local_offset(const std::vector<FlatSegment>& segments, size_t g);
// Local [lo, hi) ranges (ascending) at their global places, ascending and
// merged where adjacent: a strategy's local pieces as its owned ranges.
std::vector<std::pair<size_t, size_t>> global_ranges_of(
    const std::vector<FlatSegment>& segments, const std::vector<std::pair<size_t, size_t>>& local);
// Global [lo, hi) ranges (ascending, each inside the slice) as ranges of the
// local layout, ascending and merged where adjacent: a strategy's owned
// ranges as the FP32 master ranges of the model's local buffer.
std::vector<std::pair<size_t, size_t>> local_ranges(
    const std::vector<FlatSegment>& segments, const std::vector<std::pair<size_t, size_t>>& global);

}  // namespace ratchet

// Which experts a rank holds under --expert-parallel N (issue 39 item 4;
// docs/moe.md "What each rank keeps"). Rank q of an expert-parallel group
// computes experts [q·E/N, (q+1)·E/N) of every MoE layer, so only it has
// their gradient. At ZeRO-0 the model holds only those experts' weights,
// gradients and moments (model/expert_slice.h; replicated.h reduces them over
// the ranks holding the same slice). The router (routerw) is replicated like
// any tensor. ZeRO 1-2 hold the slice too, its experts' state sharded over
// those ranks (flat_shards.h, bucket_domains.h); ZeRO-3 keeps every
// expert's weights and shard the experts' state as the rest
// (sharded_optimizer.h).
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "distributed/communicator.h"
#include "model/param_layout.h"

namespace ratchet {

class Backend;
struct GPTConfig;

using FlatRangeList = std::vector<std::pair<size_t, size_t>>;

struct ExpertShards {
  int n = 1;                         // --expert-parallel
  int index = 0;                     // this rank's place in its group: its experts
  int group = 0;                     // its group (group 0 writes the experts into checkpoints)
  FlatRangeList all;                 // every expert slice of expw1 and expw2, ascending
  FlatRangeList own;                 // this rank's experts' slices, ascending
  // For a model holding only its expert slice (model/expert_slice.h, the
  // ZeRO-0 strategy; replicated.cpp): the group on host memory (the norm's
  // sum of squares, the FP32 gathers of params_f32) and the world/N ranks
  // holding the same slice (one per group: its gradient's all-reduce, on the
  // backend's memory). `cfg`: the model's config.
  Communicator* group_host = nullptr;
  Communicator* replicas = nullptr;
  const GPTConfig* cfg = nullptr;
};

// The flat ranges of experts [q·E/n, (q+1)·E/n) of expw1 and expw2 over all
// layers (one per layer and tensor), ascending; q < 0: all experts.
FlatRangeList expert_ranges(const GPTConfig& cfg, int n, int q);
// a minus b (both ascending and disjoint), ascending.
FlatRangeList subtract_ranges(const FlatRangeList& a, const FlatRangeList& b);
// The ascending union of two disjoint ascending lists.
FlatRangeList merge_ranges(const FlatRangeList& a, const FlatRangeList& b);
// The total length of ranges.
size_t ranges_elems(const FlatRangeList& r);
}  // namespace ratchet

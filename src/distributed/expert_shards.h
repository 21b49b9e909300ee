// Which experts' optimizer state a rank keeps under --expert-parallel N
// (issue 39 item 4; docs/moe.md "What each rank keeps"). Rank q of an
// expert-parallel group computes experts [q·E/N, (q+1)·E/N) of every MoE
// layer, so only it has their gradient: the ZeRO-0 strategy gives it the
// AdamW moments of those slices of expw1 and expw2 and none of the other
// experts', and after each update the group all-gathers the updated expert
// weights (every rank keeps every expert's weights, for evaluation, samples
// and checkpoints). The router (routerw) is replicated like any tensor.
// ZeRO 1-3 shard the experts' state as the rest (sharded_optimizer.h).
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
  Communicator* group_comm = nullptr;  // the N ranks of the group (weights all-gathered)
  FlatRangeList all;                 // every expert slice of expw1 and expw2, ascending
  FlatRangeList own;                 // this rank's experts' slices, ascending
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
// ZeRO-0's moments under --expert-parallel: [0, total) less every expert
// slice (`all`) plus this rank's own (`own`), ascending.
FlatRangeList all_but_other_experts(size_t total, const FlatRangeList& all, const FlatRangeList& own);
// Collective over the group: every expert slice of `params` (the full flat
// vector in `be`'s storage) from its owner, all-gathered in place on
// group_comm, so `params` is in the memory group_comm works on (device
// memory with the device communicator's split). `step`: the optimizer's
// steps taken (the stochastic rounding's step, BF16 storage).
// BF16 storage with a WHOLE FP32 master on every rank (ZeRO 0): the owners'
// master slices are all-gathered (FP32, in place in the master) and every
// rank rounds the other ranks' experts from them with the owner's seed
// (Backend::round_from_master), which gives the owner's BF16 bits exactly:
// every rank then holds the master and the weights one process would,
// for 4 bytes an element moved instead of 6 (the master and the BF16
// weights both all-gathered). Without a master (FP32 storage): the storage
// values.
void gather_expert_weights(const ExpertShards& x, const GPTConfig& cfg, Backend& be,
                           void* params, int step);

}  // namespace ratchet

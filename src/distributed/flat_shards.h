// ZeRO-1's flat layout (sharded_optimizer.h, without overlap) as reduction
// domains. A domain is a list of runs of the model's flat vector, packed back
// to back into one buffer of count·S elements (S = ceil(len / count), the
// tail past len zero) and reduce-scattered over `count` ranks: this rank gets
// the summed packed [index·S, index·S + S), updates it, and the domain's
// ranks all-gather the updated packs back into the runs.
//   one domain   every element, over the shard group (or the world): the
//                layout ZeRO-1 has always had, one range per rank
//   two domains  an expert slice (--expert-parallel N; model/expert_slice.h):
//                the model holds E/N experts in its local layout
//                ParamLayout(cfg, N). Everything but the slice's experts is
//                sharded over the world; the slice's experts (expw1, expw2:
//                one run, [e0, e1) of the local layout) over the world/N
//                ranks holding the same slice (ExpertShards::replicas, in
//                group order), as torchtitan shards its experts over
//                dp_shard_mod_ep. Every expert element is in exactly one
//                rank's shard, so the shards still tile the whole model.
// The rank's owned ranges are global (the whole model's coordinates), so a
// checkpoint does not depend on N; its AdamW pieces and its FP32 master are
// in the local layout.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "distributed/strategy.h"
#include "model/expert_slice.h"
#include "optim/adamw.h"

namespace ratchet {

struct FlatDomain {
  std::vector<std::pair<size_t, size_t>> runs;  // local [lo, hi), ascending, packed in this order
  size_t len = 0;                               // the runs' total
  int count = 1, index = 0;                     // ranks sharding it; this rank's shard
  size_t grad = 0;  // where this domain's shard starts in the rank's gradient shard
  // This rank's packed [lo, hi) and every rank's padded length S.
  ShardRange shard() const { return shard_range(len, count, index); }
};

class FlatShards {
 public:
  // Rank `rank` of `ranks` (the shard group, or the world with a slice).
  // x.partial(): the two domains above (rank % N must be x.index); else one.
  FlatShards(const GPTConfig& cfg, ExpertSlice x, int ranks, int rank);
  // One domain: P elements over `ranks`.
  FlatShards(size_t P, int ranks, int rank);

  const std::vector<FlatDomain>& domains() const { return domains_; }
  // The gradient shard: every domain's S, back to back (at least 1 element).
  size_t shard_elems() const;
  // The rank's owned pieces for AdamW, local and ascending, their gradients
  // at their places in the gradient shard.
  std::vector<AdamWPiece> pieces() const;
  // The same as owned ranges of the whole model (global, ascending, merged
  // where adjacent): what the moments hold back to back, and a checkpoint.
  OwnedRanges owned() const;
  // A strategy's owned_ranges(): owned(), or one domain's one range, kept
  // even when empty (its place: ZeRO-1 has always had one range per rank).
  OwnedRanges owned_ranges() const;
  // The same in the local layout: the FP32 master the model keeps.
  OwnedRanges owned_local() const;
  size_t owned_elems() const;
  // The allocations' elements: every domain's count·S pack, then the
  // gradient shard.
  std::vector<size_t> buffer_elems() const;

 private:
  std::vector<FlatSegment> segments_;  // local runs in the global layout (a slice only)
  std::vector<FlatDomain> domains_;
};

}  // namespace ratchet

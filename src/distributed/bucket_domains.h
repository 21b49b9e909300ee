// The gradient buckets of ZeRO-2 and of ZeRO-1's bucketed layout
// (--overlap-comm) in one or two reduction domains, as flat_shards.h does
// for ZeRO-1's flat layout:
//   one domain   every tensor, bucketed over the shard group (buckets.h):
//                the layout the bucketed stages have always had
//   two domains  an expert slice (--expert-parallel N; model/expert_slice.h):
//                every tensor but expw1/expw2 bucketed over the world, and
//                the slice's experts (expw1, expw2 of each block) bucketed
//                over the world/N ranks holding the same slice
//                (ExpertShards::replicas, in group order)
// Block l's two buckets are final at once: the hook starts both
// reduce-scatters. The rank's gradient shard is the domains' shards back to
// back; its owned ranges are global (the whole model's places), so a
// checkpoint does not depend on N, and its AdamW pieces and FP32 master are
// in the model's local layout.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "distributed/buckets.h"
#include "distributed/grad_buckets.h"
#include "distributed/shard_collectives.h"
#include "distributed/strategy.h"
#include "model/expert_slice.h"
#include "optim/adamw.h"

namespace ratchet {

struct ExpertShards;

// Which buckets rank `rank` of `ranks` owns pieces of: a pure function of the
// config, the slice and the rank (every rank can compute any other's).
class BucketPlan {
 public:
  // One domain: every tensor of `layout` over `ranks`.
  BucketPlan(const ParamLayout& layout, int ranks, int rank);
  // x.partial(): the two domains above (`ranks` the world, rank % N ==
  // x.index); else one, of ParamLayout(cfg).
  BucketPlan(const GPTConfig& cfg, ExpertSlice x, int ranks, int rank);

  struct Part {
    BucketLayout layout;  // its W: the ranks of the domain
    int index = 0;        // this rank's piece of every bucket
    size_t grad = 0;      // where its shard starts in the rank's gradient shard
  };
  const std::vector<Part>& parts() const { return parts_; }
  // The domains' shards back to back (at least 1 element).
  size_t shard_elems() const;
  // The rank's AdamW pieces (local, ascending; gradients in the shard).
  std::vector<AdamWPiece> pieces() const;
  // Its owned ranges, global, ascending, merged where adjacent.
  OwnedRanges owned() const;
  size_t owned_elems() const;
  // What BucketDomains allocates, in bytes (Backend::alloc_size-rounded).
  size_t buffer_bytes(const BackendMemoryModel& be, bool accumulate) const;

 private:
  std::vector<FlatSegment> segments_;  // a slice's local runs in the global layout
  std::vector<Part> parts_;
};

// Rank q's owned ranges (global) of N ranks: under BucketPlan(layout, N, q),
// or, when `experts` is given (a model holding expert slices), of the slice
// rank q holds (q % experts->n).
OwnedRanges bucket_owned_ranges(const ParamLayout& layout, const ExpertShards* experts, int N, int q);

// The buckets of a plan at run time: one GradBuckets per domain, on one
// gradient shard. The same calls as GradBuckets; each reaches every domain.
class BucketDomains {
 public:
  // colls[d]: domain d's collectives (colls.size() == plan.parts().size()).
  BucketDomains(Backend& be, const std::vector<ShardCollectives*>& colls, const BucketPlan& plan,
                bool accumulate, bool overlap);
  ~BucketDomains();
  BucketDomains(const BucketDomains&) = delete;
  BucketDomains& operator=(const BucketDomains&) = delete;

  const BucketPlan& plan() const { return plan_; }
  size_t count() const { return parts_[0]->count(); }  // buckets per domain (L + 1)
  dptr shard() { return shard_; }
  GradStore* store() { return store_.get(); }  // every domain's destinations
  void reduce(int layer, bool add);
  void pack_and_reduce(int layer, const char* flat_grads);
  // The summed shards' sum of squares over the domains.
  double complete();
  void gather_into(dptr params);

 private:
  struct Store;
  Backend& be_;
  BucketPlan plan_;
  void* shard_ = nullptr;
  std::vector<std::unique_ptr<GradBuckets>> parts_;
  std::unique_ptr<GradStore> store_;
};

}  // namespace ratchet

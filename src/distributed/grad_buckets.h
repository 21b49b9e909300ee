// The bucketed gradient reduction shared by stages 1 (with overlap), 2 and 3:
// the rank's gradient shard, the reused bucket buffers, and the reductions in
// flight. A bucket (buckets.h) is one block's twelve gradient slices, or the
// rest's; as soon as the backward has finished one, its reduce-scatter into
// the rank's piece of the shard starts while the block below computes, and it
// is waited for before its buffer is reused two blocks later (block l uses
// buffer l % 2; the rest its own). Hybrid groups: once a piece's
// reduce-scatter is done, its all-reduce across the groups starts and stays
// in flight until that piece is next read. After the step the updated pieces
// are all-gathered bucket by bucket into the flat parameters.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "distributed/buckets.h"
#include "distributed/communicator.h"
#include "distributed/shard_collectives.h"
#include "model/grad_store.h"
#include "model/param_layout.h"

namespace ratchet {

class GradBuckets {
 public:
  // accumulate: micro-batches are summed in the shard (stages 2-3: every
  // pass is reduced, a later pass's into a receive buffer then added);
  // otherwise only the last pass is reduced, from the flat gradient (stage 1).
  // overlap false: every reduction is waited for as soon as it starts.
  GradBuckets(Backend& be, ShardCollectives& coll, const ParamLayout& layout, bool accumulate,
              bool overlap);
  // The buckets of `bk` (whose W is coll's count), and the rank's shard at
  // `shard` (bk.shard_elems() elements, owned by the caller: bucket_domains.h
  // puts two domains' shards back to back) or, null, allocated here.
  GradBuckets(Backend& be, ShardCollectives& coll, const BucketLayout& bk, bool accumulate,
              bool overlap, dptr shard = nullptr);
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  const BucketLayout& layout() const { return *layout_; }
  size_t count() const { return layout_->buckets().size(); }
  // The rank's shard of the summed gradient (shard_elems() storage elements).
  dptr shard() { return shard_; }
  // The model's gradient destinations (accumulate only): block l writes into
  // buffer l % 2, the rest into its own; each request first completes the
  // reduction still reading that buffer.
  GradStore* store() { return store_.get(); }

  // Block `layer`'s bucket (layer -1: the rest's) is final in its buffer:
  // its reduce-scatter starts, into the shard, or when `add` (a later
  // micro-batch) into the receive buffer, added to the shard once done.
  void reduce(int layer, bool add);
  // The same from the flat gradient (stage 1): the buffer's previous
  // reduction completed, the bucket's slices packed into it, started.
  void pack_and_reduce(int layer, const char* flat_grads);
  // Completes every reduction, and the all-reduces across the groups: the
  // shard is the step's summed gradient. Returns the shard's sum of squares
  // (the padding is zero: the owned elements').
  double complete();
  // This rank's updated pieces of every bucket, from the flat parameters,
  // all-gathered into every rank's flat parameters.
  void gather_into(dptr params);

  // Bytes the constructor allocates (Backend::alloc_size-rounded).
  // own_shard false: the shard is the caller's (not counted).
  static size_t buffer_bytes(const BackendMemoryModel& be, const BucketLayout& bk, bool accumulate,
                             bool own_shard = true);

 private:
  struct Store;
  struct InFlight {
    Communicator::Ticket ticket = 0;
    size_t bucket = 0;  // index in BucketLayout::buckets()
    bool add = false;   // into the shard from recv (a later pass), else it went there directly
    bool active = false;
  };
  struct Slot {  // a bucket buffer, its receive buffer and its reduction in flight
    void* buf = nullptr;   // W·S elements
    void* recv = nullptr;  // S elements (accumulate only)
    InFlight fl;
  };
  Slot& slot_of(size_t b) { return b + 1 == count() ? rest_ : blocks_[b % 2]; }
  size_t bucket_of(int layer) const { return layer >= 0 ? (size_t)layer : layout_->buckets().size() - 1; }
  void slots_for(size_t b, dptr* slots);  // the model's destinations: buf zeroed
  void start(size_t b, bool add);
  void finish(Slot& s);
  void wait_replicas(size_t b);

  Backend& be_;
  ShardCollectives& coll_;
  std::unique_ptr<BucketLayout> layout_;
  bool overlap_;
  void* shard_ = nullptr;
  bool own_shard_ = true;  // shard_ allocated here
  Slot blocks_[2], rest_;
  std::vector<Communicator::Ticket> replicas_;  // per bucket; 0: none in flight
  std::unique_ptr<GradStore> store_;
};

}  // namespace ratchet

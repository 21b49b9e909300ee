// Stage 3 (--zero 3): the parameters sharded too. The gradients are stage 2's
// (grad_buckets.h); the storage-dtype parameters live only as the rank's
// pieces of every bucket, in the gradient shard's layout (param_shards.h),
// and the model reads them through a store that all-gathers each block
// before its use (the next one prefetched). AdamW updates the pieces in
// place; nothing is gathered after the step: the next forward gathers the
// new values. Equal to stage 2 bitwise at any rank and micro-batch count.
#pragma once
#include <memory>

#include "distributed/backward_hook.h"
#include "distributed/grad_buckets.h"
#include "distributed/param_shards.h"
#include "distributed/shard_collectives.h"
#include "distributed/strategy.h"

namespace ratchet {

class FullySharded final : public DistributedStrategy {
 public:
  FullySharded(const DistributedConfig& c, Backend& be, const ParamLayout& layout);
  ~FullySharded() override;

  void attach(GPT& model, int micro_batches) override;
  float step(GPT& model, float lr) override;
  AdamW& optimizer() override { return *opt_; }
  int zero_stage() const override { return 3; }
  OwnedRanges owned_ranges() const override { return buckets_.layout().owned_ranges(coll_.index()); }
  bool shard_writer() const override { return coll_.comms().writer; }
  int shard_count() const override { return coll_.count(); }
  int shard_index() const override { return coll_.index(); }
  bool overlapping() const override { return model_ != nullptr && config_.overlap; }
  // From the rank's parameter shard (the range must be its own).
  void download_params(float* dst, GPT& model, size_t lo, size_t n) const override;
  // Collective through the model's parameter store.
  void params_f32(GPT& model, float* host) override;
  void sync_master(GPT&) override {}  // each rank's master is its shard's own
  void restore_params(GPT& model) override;
  std::string describe() const override;

  static StrategyNeeds needs(const BackendMemoryModel& be, const GPTConfig& cfg,
                             bool reshard_after_forward, int shards, int index);

 private:
  void grad_ready(int layer);

  Backend& be_;
  ShardCollectives coll_;
  ParamLayout layout_;
  GradBuckets buckets_;
  std::unique_ptr<AdamW> opt_;
  std::unique_ptr<ParamShards> params_;
  GPT* model_ = nullptr;
  int pass_ = 0;  // backward passes seen this step
  BackwardHook hook_;
};

}  // namespace ratchet

// Stage 2 (--zero 2): the summed gradient sharded too. The model has no flat
// gradient buffer: it writes each block's gradients into reused bucket
// buffers (grad_buckets.h), and every backward pass reduce-scatters each
// bucket into the rank's gradient shard as soon as the block is done; the
// micro-batches are summed in the shard. AdamW updates the rank's pieces of
// the flat parameters, which are then all-gathered bucket by bucket.
// --expert-parallel N without --shard-group: the model holds its own
// experts alone (model/expert_slice.h) and the buckets form two reduction
// domains (bucket_domains.h): each block's expert slices are reduce-scattered
// over the world/N ranks holding the same slice, the rest over the world.
#pragma once
#include <memory>

#include "distributed/backward_hook.h"
#include "distributed/bucket_domains.h"
#include "distributed/grad_buckets.h"
#include "distributed/shard_collectives.h"
#include "distributed/strategy.h"

namespace ratchet {

class ShardedGradients final : public DistributedStrategy {
 public:
  ShardedGradients(const DistributedConfig& c, Backend& be, const ParamLayout& layout);
  ~ShardedGradients() override;

  void attach(GPT& model, int micro_batches) override;
  float step(GPT& model, float lr) override;
  AdamW& optimizer() override { return *opt_; }
  int zero_stage() const override { return 2; }
  OwnedRanges owned_ranges() const override { return buckets_->plan().owned(); }
  bool shard_writer() const override { return coll_.comms().writer; }
  int shard_count() const override { return coll_.count(); }
  int shard_index() const override { return coll_.index(); }
  bool overlapping() const override { return model_ != nullptr && config_.overlap; }
  void download_params(float* dst, GPT& model, size_t lo, size_t n) const override;
  void params_f32(GPT& model, float* host) override;
  void sync_master(GPT& model) override;
  void restore_params(GPT& model) override;
  std::string describe() const override;

  // x: the slice the model holds (DistributedConfig::expert_slice()).
  static StrategyNeeds needs(const BackendMemoryModel& be, const GPTConfig& cfg, int shards,
                             int index, ExpertSlice x = ExpertSlice{});

 private:
  void grad_ready(int layer);

  Backend& be_;
  ShardCollectives coll_;
  ParamLayout layout_;
  std::unique_ptr<ShardCollectives> expert_coll_;  // a slice's experts: its replicas
  std::unique_ptr<BucketDomains> buckets_;
  std::unique_ptr<AdamW> opt_;
  GPT* model_ = nullptr;
  int pass_ = 0;  // backward passes seen this step
  BackwardHook hook_;
};

}  // namespace ratchet

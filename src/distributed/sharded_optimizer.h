// Stage 1 (--zero 1): the AdamW state (moments, and the FP32 master with BF16
// storage) sharded over the shard group; parameters and gradients whole on
// every rank. Each rank gets the summed gradient of its shard
// (reduce-scatter), updates its shard, and the updated shards are
// all-gathered into everyone's parameters. Two layouts:
//   flat      (no overlap, or one shard) shard_range(): one range per rank;
//             the reduce-scatter runs after the backward on the whole buffer
//   bucketed  (overlap on more than one shard) the buckets of stage 2
//             (grad_buckets.h): each block's reduce-scatter starts during
//             the last micro-batch's backward
// --expert-parallel N (distributed/expert_shards.h), without --shard-group:
// the model holds its own experts alone (model/expert_slice.h, as at ZeRO-0)
// and either layout has two reduction domains (flat_shards.h,
// bucket_domains.h): the slice's experts are reduce-scattered and sharded
// over the world/N ranks holding the same slice, the rest over the world.
// With --shard-group every expert's weights are kept: a rank adds gradient
// only to its own experts, so the reduce-scatter's sum (the owners'
// gradients plus zeros) is each expert's whole gradient, and the experts'
// state is sharded as the rest.
#pragma once
#include <memory>
#include <vector>

#include "distributed/backward_hook.h"
#include "distributed/bucket_domains.h"
#include "distributed/flat_shards.h"
#include "distributed/grad_buckets.h"
#include "distributed/shard_collectives.h"
#include "distributed/strategy.h"

namespace ratchet {

class ShardedOptimizer final : public DistributedStrategy {
 public:
  ShardedOptimizer(const DistributedConfig& c, Backend& be, const ParamLayout& layout);
  ~ShardedOptimizer() override;

  void attach(GPT& model, int micro_batches) override;
  float step(GPT& model, float lr) override;
  AdamW& optimizer() override { return *opt_; }
  int zero_stage() const override { return 1; }
  OwnedRanges owned_ranges() const override;
  bool shard_writer() const override { return coll_.comms().writer; }
  int shard_count() const override { return coll_.count(); }
  int shard_index() const override { return coll_.index(); }
  bool overlapping() const override { return model_ != nullptr; }
  void download_params(float* dst, GPT& model, size_t lo, size_t n) const override;
  void params_f32(GPT& model, float* host) override;
  void sync_master(GPT& model) override;
  void restore_params(GPT& model) override;
  std::string describe() const override;

  // Whether the shards are bucket-aligned on `shards` shards.
  static bool bucketed(bool overlap, int shards) { return overlap && shards > 1; }
  // x: the slice the model holds (DistributedConfig::expert_slice()),
  // `shards` then the world.
  static StrategyNeeds needs(const BackendMemoryModel& be, const GPTConfig& cfg, bool overlap,
                             int shards, int index, ExpertSlice x = ExpertSlice{});

 private:
  void grad_ready(int layer);
  void gather_params(dptr params);  // flat: the shards all-gathered into params
  // The collectives of flat domain d (0: coll_; 1: an expert slice's replicas).
  ShardCollectives& domain_coll(size_t d) { return d == 0 ? coll_ : *expert_coll_; }
  template <class Fn>
  static void for_runs(const FlatDomain& d, size_t a, size_t b, Fn fn);

  Backend& be_;
  ShardCollectives coll_;
  ParamLayout layout_;
  std::unique_ptr<AdamW> opt_;
  // Flat layout.
  std::unique_ptr<FlatShards> flat_;
  std::unique_ptr<ShardCollectives> expert_coll_;  // a slice's experts: its replicas
  std::vector<void*> pads_;  // per domain: count·S elements
  void* gshard_ = nullptr;   // flat_->shard_elems()
  // Bucketed layout.
  std::unique_ptr<BucketDomains> buckets_;
  GPT* model_ = nullptr;  // attached (bucketed only)
  int micro_batches_ = 1;
  int pass_ = 0;      // backward passes seen this step
  int launched_ = 0;  // buckets whose reduce-scatter was started
  BackwardHook hook_;
};

}  // namespace ratchet

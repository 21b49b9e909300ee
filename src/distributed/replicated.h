// Stage 0 (--zero 0): plain data parallelism. Every rank holds all the
// parameters, gradients and AdamW state; the gradients are all-reduced (sum)
// and every rank runs the same AdamW on everything. With overlap, the last
// micro-batch's all-reduce starts layer by layer during its backward
// (docs/distributed.md).
#pragma once
#include <memory>

#include "distributed/backward_hook.h"
#include "distributed/shard_collectives.h"
#include "distributed/strategy.h"

namespace ratchet {

class Replicated final : public DistributedStrategy {
 public:
  Replicated(const DistributedConfig& c, Backend& be, const ParamLayout& layout);

  void attach(GPT& model, int micro_batches) override;
  float step(GPT& model, float lr) override;
  AdamW& optimizer() override { return *opt_; }
  int zero_stage() const override { return 0; }
  // With --expert-parallel (DistributedConfig::experts): everything but the
  // other ranks' experts (distributed/expert_shards.h).
  OwnedRanges owned_ranges() const override;
  // Everything everywhere: the checkpoint writer splits it over all ranks.
  bool shard_writer() const override { return true; }
  int shard_count() const override { return 1; }
  int shard_index() const override { return 0; }
  bool overlapping() const override { return model_ != nullptr; }
  void download_params(float* dst, GPT& model, size_t lo, size_t n) const override;
  void params_f32(GPT& model, float* host) override;
  void sync_master(GPT&) override {}  // every rank's master is whole and the same
  void restore_params(GPT& model) override;
  std::string describe() const override;

  static StrategyNeeds needs(const GPTConfig& cfg);

 private:
  void grad_ready(int layer);

  Backend& be_;
  ShardComms comms_;
  ParamLayout layout_;
  std::unique_ptr<AdamW> opt_;
  // Overlap: the model whose hook starts the all-reduces (null: none).
  GPT* model_ = nullptr;
  int micro_batches_ = 1;
  int pass_ = 0;      // backward passes seen this step
  int launched_ = 0;  // groups (layers, then the rest) whose all-reduce was started
  BackwardHook hook_;
};

}  // namespace ratchet

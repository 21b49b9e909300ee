// Stage 0 (--zero 0): plain data parallelism. Every rank holds all the
// parameters, gradients and AdamW state; the gradients are all-reduced (sum)
// and every rank runs the same AdamW on everything. With overlap, the last
// micro-batch's all-reduce starts layer by layer during its backward
// (docs/distributed.md).
// A model holding only its expert slice (--expert-parallel N with E/N
// experts' weights per rank, model/expert_slice.h; `layout` is then
// ParamLayout(cfg, N)) has two reduction domains: everything but expw1/expw2
// is all-reduced over the world as above, the slice's experts over the
// world/N ranks holding the same slice (ExpertShards::replicas), as
// torchtitan reduces its experts over dp_shard_mod_ep. The norm adds the
// group's sums of squares of the experts; AdamW runs on the whole local
// layout, its rounding keyed by the global places (AdamW::use_expert_slice),
// and no weights are gathered after the step: each rank updates the only
// copy of its experts in its group.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "model/expert_slice.h"

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
  // Everything; an expert slice: its global ranges (everything but the
  // other slices' experts), which its local layout holds back to back.
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
  // The slice's expw1..expw2 range of the flat vector ([0, 0) without a slice).
  std::pair<size_t, size_t> expert_span() const;
  // The slice's gradient sum (both domains, blocking) and global norm.
  void all_reduce_slice(dptr grads);
  double slice_norm(cdptr grads) const;

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

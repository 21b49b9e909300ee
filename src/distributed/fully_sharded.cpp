// See fully_sharded.h.
#include "distributed/fully_sharded.h"

#include <vector>

#include "core/error.h"
#include "model/gpt.h"

namespace ratchet {

FullySharded::FullySharded(const DistributedConfig& c, Backend& be, const ParamLayout& layout)
    : DistributedStrategy(c),
      be_(be),
      coll_(be, ShardComms::of(c)),
      layout_(layout),
      buckets_(be_, coll_, layout_, true, c.overlap) {
  // The parameters are at the same shard offset as the gradient (param_shards.h).
  std::vector<AdamWPiece> pieces;
  for (const OwnedPiece& p : buckets_.layout().pieces(coll_.index()))
    pieces.push_back({p.lo, p.n, p.shard, p.shard});
  opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, std::move(pieces));
  // Gathered over the shard group, with its host communicator for get_host.
  const int N = coll_.count();
  params_ = std::make_unique<ParamShards>(be_, N > 1 ? coll_.comms().shard : nullptr, layout_,
                                          buckets_.layout(), coll_.index(), c.reshard_after_forward,
                                          N > 1 ? coll_.comms().shard_host : nullptr);
}

FullySharded::~FullySharded() {
  if (model_ && model_->param_store() == params_.get()) model_->set_param_store(nullptr);
  params_.reset();
  if (model_ && model_->grad_store() == buckets_.store()) model_->set_grad_store(nullptr);
}

StrategyNeeds FullySharded::needs(const BackendMemoryModel& be, const GPTConfig& cfg,
                                  bool reshard_after_forward, int shards, int index) {
  const ParamLayout layout(cfg);
  const BucketLayout bk(layout, cfg.num_layers, shards);
  StrategyNeeds n;
  n.flat_grads = false;
  n.flat_params = false;
  n.owned = bk.owned_ranges(index);
  n.moment_elems = bk.owned_elems(index);
  n.buffer_bytes = GradBuckets::buffer_bytes(be, bk, true) +
                   ParamShards::buffer_bytes(be, layout, cfg.num_layers, shards, reshard_after_forward);
  return n;
}

void FullySharded::attach(GPT& model, int micro_batches) {
  RATCHET_ASSERT(model.num_params() == layout_.total);
  RATCHET_ASSERT(model.grads() == nullptr && model.params() == nullptr);  // strategy_needs()
  (void)micro_batches;  // every pass is reduced
  model_ = &model;
  pass_ = 0;
  hook_.install(model, [this](int layer) { grad_ready(layer); });
  model.set_grad_store(buckets_.store());
  model.set_param_store(params_.get());
}

std::string FullySharded::describe() const {
  return std::string("ZeRO-3: parameters, gradients and optimizer state sharded, each block's "
                     "parameters all-gathered before use (the next one prefetched), its gradient "
                     "reduce-scattered ") +
         (config_.overlap ? "during the backward" : "after its backward (--overlap-comm off)");
}

// Every pass: the bucket's reduce-scatter, added to the shard after the first.
void FullySharded::grad_ready(int layer) {
  buckets_.reduce(layer, pass_ > 0);
  coll_.progress();  // MPI moves nonblocking collectives only inside its calls
  if (layer < 0) pass_++;
}

// The shard is the parameters: updated in place, and the next forward
// gathers the new values.
float FullySharded::step(GPT& model, float lr) {
  RATCHET_ASSERT(&model == model_);
  if (pass_ == 0)
    fail("data parallel: ZeRO-3 step without a backward pass this step (the gradient shard is "
         "written by the passes' reductions)");
  const double norm = coll_.norm(buckets_.complete());
  opt_->step_shard(params_->shard(), buckets_.shard(), lr, norm);
  params_->invalidate();
  pass_ = 0;
  return (float)norm;
}

void FullySharded::download_params(float* dst, GPT&, size_t lo, size_t n) const {
  params_->download_range(dst, lo, n);
}

void FullySharded::params_f32(GPT& model, float* host) {
  RATCHET_ASSERT(model.num_params() == layout_.total);
  model.get_params(host);
}

// The model's set_params() has put each rank's FP32 pieces into the shard
// (and its master); the storage values are rebuilt as the last step rounded
// them, in the shard. Nothing to gather: the next use gathers.
void FullySharded::restore_params(GPT&) {
  opt_->restore_rounding(params_->shard());
  params_->invalidate();
  be_.synchronize();
}

}  // namespace ratchet

// See sharded_gradients.h.
#include "distributed/sharded_gradients.h"

#include <vector>

#include "core/error.h"
#include "distributed/expert_shards.h"
#include "distributed/gather_ranges.h"
#include "model/gpt.h"

namespace ratchet {

ShardedGradients::ShardedGradients(const DistributedConfig& c, Backend& be, const ParamLayout& layout)
    : DistributedStrategy(c), be_(be), coll_(be, ShardComms::of(c)), layout_(layout) {
  const ExpertSlice x = c.expert_slice();
  hold_slice("ZeRO-2", layout_);
  std::vector<ShardCollectives*> colls{&coll_};
  if (slice()) {
    expert_coll_ = std::make_unique<ShardCollectives>(be_, ShardComms::experts_of(c));
    colls.push_back(expert_coll_.get());
  }
  const BucketPlan plan = slice() ? BucketPlan(*experts_->cfg, x, coll_.count(), coll_.index())
                                  : BucketPlan(layout_, coll_.count(), coll_.index());
  buckets_ = std::make_unique<BucketDomains>(be_, colls, plan, true, c.overlap);
  opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, plan.pieces());
  if (slice()) opt_->use_expert_slice(*experts_->cfg, x);  // rounds as the whole model would
}

ShardedGradients::~ShardedGradients() {
  if (model_ && model_->grad_store() == buckets_->store()) model_->set_grad_store(nullptr);
}

StrategyNeeds ShardedGradients::needs(const BackendMemoryModel& be, const GPTConfig& cfg, int shards,
                                      int index, ExpertSlice x) {
  const BucketPlan plan(cfg, x, shards, index);
  StrategyNeeds n;
  n.flat_grads = false;
  n.master_sharded = shards > 1;
  n.expert_shards = x.shards;
  n.owned = plan.owned();
  n.moment_elems = plan.owned_elems();
  n.buffer_bytes = plan.buffer_bytes(be, true);
  return n;
}

void ShardedGradients::attach(GPT& model, int micro_batches) {
  RATCHET_ASSERT(model.num_params() == layout_.total);
  RATCHET_ASSERT(model.grads() == nullptr && model.params() != nullptr);  // strategy_needs()
  (void)micro_batches;  // every pass is reduced
  model_ = &model;
  pass_ = 0;
  hook_.install(model, [this](int layer) { grad_ready(layer); });
  model.set_grad_store(buckets_->store());
}

std::string ShardedGradients::describe() const {
  return std::string("ZeRO-2: gradients and optimizer state sharded, each block's gradient "
                     "reduce-scattered ") +
         (config_.overlap ? "during the backward" : "after its backward (--overlap-comm off)") +
         slice_line("their gradients and state", expert_coll_ ? expert_coll_->count() : 0);
}

// Every pass: the bucket's reduce-scatter, added to the shard after the first.
void ShardedGradients::grad_ready(int layer) {
  buckets_->reduce(layer, pass_ > 0);
  coll_.progress();  // MPI moves nonblocking collectives only inside its calls
  if (expert_coll_) expert_coll_->progress();
  if (layer < 0) pass_++;
}

float ShardedGradients::step(GPT& model, float lr) {
  RATCHET_ASSERT(&model == model_);
  if (pass_ == 0)
    fail("data parallel: ZeRO-2 step without a backward pass this step (the gradient shard is "
         "written by the passes' reductions)");
  const double norm = coll_.norm(buckets_->complete());
  opt_->step_shard(model.params(), buckets_->shard(), lr, norm);
  buckets_->gather_into(model.params());
  pass_ = 0;
  return (float)norm;
}

void ShardedGradients::download_params(float* dst, GPT& model, size_t lo, size_t n) const {
  download_flat(be_, dst, model, lo, n);
}

// With a sharded master (BF16 storage, several shards) each range from its
// owner's master; otherwise every rank's own master has them all. An expert
// slice holds its own experts alone: every owner's ranges, in any storage.
void ShardedGradients::params_f32(GPT& model, float* host) {
  RATCHET_ASSERT(model.num_params() == layout_.total);
  const int N = coll_.count();
  if (!slice() && (N == 1 || be_.storage_bytes() == sizeof(float))) return model.get_params(host);
  gather_ranges_f32(coll_.comms().shard_host, N, coll_.index(),
                    [&](int q) { return bucket_owned_ranges(layout_, experts_, N, q); },
                    [&](float* dst, size_t lo, size_t n) { download_params(dst, model, lo, n); },
                    host);
}

// As ShardedOptimizer::sync_master.
void ShardedGradients::sync_master(GPT& model) { sync_master_from_owners(be_, model, coll_.count()); }

void ShardedGradients::restore_params(GPT& model) {
  opt_->restore_rounding(model.params());
  buckets_->gather_into(model.params());
  be_.synchronize();
}

}  // namespace ratchet

// See sharded_gradients.h.
#include "distributed/sharded_gradients.h"

#include <vector>

#include "core/error.h"
#include "distributed/gather_ranges.h"
#include "model/gpt.h"

namespace ratchet {

ShardedGradients::ShardedGradients(const DistributedConfig& c, Backend& be, const ParamLayout& layout)
    : DistributedStrategy(c),
      be_(be),
      coll_(be, ShardComms::of(c)),
      layout_(layout),
      buckets_(be_, coll_, layout_, true, c.overlap) {
  std::vector<AdamWPiece> pieces;
  for (const OwnedPiece& p : buckets_.layout().pieces(coll_.index()))
    pieces.push_back({p.lo, p.n, p.shard, AdamWPiece::kAtLo});
  opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, std::move(pieces));
}

ShardedGradients::~ShardedGradients() {
  if (model_ && model_->grad_store() == buckets_.store()) model_->set_grad_store(nullptr);
}

StrategyNeeds ShardedGradients::needs(const BackendMemoryModel& be, const GPTConfig& cfg, int shards,
                                      int index) {
  const BucketLayout bk(ParamLayout(cfg), cfg.num_layers, shards);
  StrategyNeeds n;
  n.flat_grads = false;
  n.master_sharded = shards > 1;
  n.owned = bk.owned_ranges(index);
  n.moment_elems = bk.owned_elems(index);
  n.buffer_bytes = GradBuckets::buffer_bytes(be, bk, true);
  return n;
}

void ShardedGradients::attach(GPT& model, int micro_batches) {
  RATCHET_ASSERT(model.num_params() == layout_.total);
  RATCHET_ASSERT(model.grads() == nullptr && model.params() != nullptr);  // strategy_needs()
  (void)micro_batches;  // every pass is reduced
  model_ = &model;
  pass_ = 0;
  hook_.install(model, [this](int layer) { grad_ready(layer); });
  model.set_grad_store(buckets_.store());
}

std::string ShardedGradients::describe() const {
  return std::string("ZeRO-2: gradients and optimizer state sharded, each block's gradient "
                     "reduce-scattered ") +
         (config_.overlap ? "during the backward" : "after its backward (--overlap-comm off)");
}

// Every pass: the bucket's reduce-scatter, added to the shard after the first.
void ShardedGradients::grad_ready(int layer) {
  buckets_.reduce(layer, pass_ > 0);
  coll_.progress();  // MPI moves nonblocking collectives only inside its calls
  if (layer < 0) pass_++;
}

float ShardedGradients::step(GPT& model, float lr) {
  RATCHET_ASSERT(&model == model_);
  if (pass_ == 0)
    fail("data parallel: ZeRO-2 step without a backward pass this step (the gradient shard is "
         "written by the passes' reductions)");
  const double norm = coll_.norm(buckets_.complete());
  opt_->step_shard(model.params(), buckets_.shard(), lr, norm);
  buckets_.gather_into(model.params());
  pass_ = 0;
  return (float)norm;
}

void ShardedGradients::download_params(float* dst, GPT& model, size_t lo, size_t n) const {
  be_.download_f32(dst, static_cast<const char*>(model.params()) + lo * be_.storage_bytes(), n);
}

// With a sharded master (BF16 storage, several shards) each range from its
// owner's master; otherwise every rank's own master has them all.
void ShardedGradients::params_f32(GPT& model, float* host) {
  RATCHET_ASSERT(model.num_params() == layout_.total);
  const int N = coll_.count();
  if (N == 1 || be_.storage_bytes() == sizeof(float)) return model.get_params(host);
  const size_t sb = be_.storage_bytes();
  const char* p = static_cast<const char*>(model.params());
  gather_ranges_f32(coll_.comms().shard_host, N, coll_.index(),
                    [&](int q) { return buckets_.layout().owned_ranges(q); },
                    [&](float* dst, size_t lo, size_t n) { be_.download_f32(dst, p + lo * sb, n); },
                    host);
}

// As ShardedOptimizer::sync_master: every owner's FP32 values as the whole
// master, the storage values kept.
void ShardedGradients::sync_master(GPT& model) {
  const int N = coll_.count();
  if (N == 1 || be_.storage_bytes() == sizeof(float)) return;
  std::vector<float> flat(layout_.total);
  params_f32(model, flat.data());
  set_whole_master(be_, model.params(), flat.data(), layout_.total);
}

void ShardedGradients::restore_params(GPT& model) {
  opt_->restore_rounding(model.params());
  buckets_.gather_into(model.params());
  be_.synchronize();
}

}  // namespace ratchet

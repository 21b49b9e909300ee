// See sharded_optimizer.h.
#include "distributed/sharded_optimizer.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "distributed/expert_shards.h"
#include "distributed/gather_ranges.h"
#include "model/gpt.h"

namespace ratchet {

ShardedOptimizer::ShardedOptimizer(const DistributedConfig& c, Backend& be, const ParamLayout& layout)
    : DistributedStrategy(c), be_(be), coll_(be, ShardComms::of(c)), layout_(layout) {
  const int W = coll_.count();
  const ExpertSlice x = c.expert_slice();
  hold_slice("ZeRO-1", layout_);
  if (x.partial()) expert_coll_ = std::make_unique<ShardCollectives>(be_, ShardComms::experts_of(c));
  if (bucketed(c.overlap, W)) {
    const BucketPlan plan = x.partial() ? BucketPlan(*c.experts->cfg, x, W, coll_.index())
                                        : BucketPlan(layout_, W, coll_.index());
    std::vector<ShardCollectives*> colls{&coll_};
    if (x.partial()) colls.push_back(expert_coll_.get());
    buckets_ = std::make_unique<BucketDomains>(be_, colls, plan, false, true);
    opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, plan.pieces());
    if (x.partial()) opt_->use_expert_slice(*c.experts->cfg, x);  // rounds as the whole model would
    return;
  }
  if (x.partial()) {
    flat_ = std::make_unique<FlatShards>(*c.experts->cfg, x, W, coll_.index());
  } else {
    flat_ = std::make_unique<FlatShards>(layout_.total, W, coll_.index());
  }
  const size_t sb = be_.storage_bytes();
  const std::vector<size_t> n = flat_->buffer_elems();
  // Zero-filled: the packs' tails past their lengths stay zero.
  for (size_t d = 0; d + 1 < n.size(); d++) pads_.push_back(be_.alloc(n[d] * sb));
  gshard_ = be_.alloc(n.back() * sb);
  if (x.partial()) {
    opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, flat_->pieces());
    opt_->use_expert_slice(*c.experts->cfg, x);  // rounds as the whole model would
  } else {
    const ShardRange r = flat_->domains()[0].shard();
    opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, r.lo, r.hi);
  }
}

ShardedOptimizer::~ShardedOptimizer() {
  for (void* p : pads_) be_.release(p);
  be_.release(gshard_);
}

StrategyNeeds ShardedOptimizer::needs(const BackendMemoryModel& be, const GPTConfig& cfg,
                                      bool overlap, int shards, int index, ExpertSlice x) {
  StrategyNeeds n;
  n.master_sharded = shards > 1;
  n.expert_shards = x.shards;
  if (bucketed(overlap, shards)) {
    const BucketPlan plan(cfg, x, shards, index);
    n.owned = plan.owned();
    n.moment_elems = plan.owned_elems();
    n.buffer_bytes = plan.buffer_bytes(be, false);
    return n;
  }
  const FlatShards f(cfg, x, shards, index);
  n.owned = f.owned_ranges();
  n.moment_elems = f.owned_elems();
  for (size_t e : f.buffer_elems()) n.buffer_bytes += be.alloc_size(e * be.storage_bytes);
  return n;
}

OwnedRanges ShardedOptimizer::owned_ranges() const {
  if (buckets_) return buckets_->plan().owned();
  return flat_->owned_ranges();
}

// The flat layout reduces after the backward: nothing to install. The
// bucketed one packs and reduces each block during the last backward.
void ShardedOptimizer::attach(GPT& model, int micro_batches) {
  RATCHET_ASSERT(model.num_params() == layout_.total);
  if (!buckets_) return;
  RATCHET_ASSERT(model.grads() != nullptr && model.params() != nullptr);
  model_ = &model;
  micro_batches_ = micro_batches;
  pass_ = launched_ = 0;
  hook_.install(model, [this](int layer) { grad_ready(layer); });
}

std::string ShardedOptimizer::describe() const {
  const std::string experts = slice_line("their state", expert_coll_ ? expert_coll_->count() : 0);
  if (buckets_)
    return "ZeRO-1: optimizer state sharded by gradient buckets, each block's gradient "
           "reduce-scattered during the last backward (--overlap-comm on)" + experts;
  return "ZeRO-1: optimizer state sharded" + experts;
}

void ShardedOptimizer::grad_ready(int layer) {
  if (pass_ == micro_batches_ - 1) {
    buckets_->pack_and_reduce(layer, static_cast<const char*>(model_->grads()));
    launched_++;
    coll_.progress();  // MPI moves nonblocking collectives only inside its calls
    if (expert_coll_) expert_coll_->progress();
  }
  if (layer < 0) pass_++;
}

float ShardedOptimizer::step(GPT& model, float lr) {
  dptr params = model.params();
  const char* grads = static_cast<const char*>(model.grads());
  RATCHET_ASSERT(params != nullptr && grads != nullptr);
  if (buckets_) {
    const size_t nb = buckets_->count();
    if (!(model_ && launched_ == (int)nb && pass_ == micro_batches_)) {
      // No overlap this step (no model attached, or another number of backward
      // passes than announced): every bucket now, none may have started.
      if (launched_ != 0)
        fail("data parallel: ", pass_, " backward pass(es) this step but attach() was told ",
             micro_batches_, " (", launched_, " of ", nb, " gradient buckets started)");
      for (size_t b = 0; b < nb; b++) buckets_->pack_and_reduce(b + 1 == nb ? -1 : (int)b, grads);
    }
    const double norm = coll_.norm(buckets_->complete());
    pass_ = launched_ = 0;
    opt_->step_shard(params, buckets_->shard(), lr, norm);
    buckets_->gather_into(params);
    return (float)norm;
  }
  pass_ = launched_ = 0;
  // Each domain's runs packed and reduce-scattered over its ranks (the
  // shard group's, or a slice's experts over their replicas).
  const size_t sb = be_.storage_bytes();
  double ssq = 0;
  for (size_t d = 0; d < flat_->domains().size(); d++) {
    const FlatDomain& dom = flat_->domains()[d];
    const ShardRange s = dom.shard();
    char* pad = static_cast<char*>(pads_[d]);
    for_runs(dom, 0, dom.len, [&](size_t at, size_t pos, size_t n) {
      be_.copy(pad + pos * sb, grads + at * sb, n * sb);
    });
    const size_t tail = s.padded * (size_t)dom.count - dom.len;
    if (tail > 0) be_.zero(pad + dom.len * sb, tail * sb);  // padding adds nothing
    char* shard = static_cast<char*>(gshard_) + dom.grad * sb;
    domain_coll(d).reduce_scatter(pad, shard, s.padded);
    if (s.hi > s.lo) ssq += be_.sum_squares(shard, s.hi - s.lo);
  }
  // Over the shards of one copy: every group holds the same ones (a slice's
  // shards, both domains, tile the model over the world: no groups there).
  const double norm = coll_.norm(ssq);
  opt_->step_shard(params, gshard_, lr, norm);
  gather_params(params);
  return (float)norm;
}

// Calls fn(flat offset, packed offset, n) for each run of `d` inside packed [a, b).
template <class Fn>
void ShardedOptimizer::for_runs(const FlatDomain& d, size_t a, size_t b, Fn fn) {
  size_t pos = 0;
  for (const auto& [lo, hi] : d.runs) {
    const size_t x = std::max(a, pos), y = std::min(b, pos + (hi - lo));
    if (x < y) fn(lo + (x - pos), x, y - x);
    pos += hi - lo;
  }
}

// Every rank's updated shard of params to every rank, domain by domain,
// through its pack: slot r holds rank r's shard (the tail of the last slot,
// past the domain's length, is padding).
void ShardedOptimizer::gather_params(dptr params) {
  const size_t sb = be_.storage_bytes();
  char* flat = static_cast<char*>(params);
  for (size_t d = 0; d < flat_->domains().size(); d++) {
    const FlatDomain& dom = flat_->domains()[d];
    const ShardRange s = dom.shard();
    char* pad = static_cast<char*>(pads_[d]);
    char* own = pad + (size_t)dom.index * s.padded * sb;
    for_runs(dom, s.lo, s.hi, [&](size_t at, size_t pos, size_t n) {
      be_.copy(own + (pos - s.lo) * sb, flat + at * sb, n * sb);
    });
    if (s.padded > s.hi - s.lo) be_.zero(own + (s.hi - s.lo) * sb, (s.padded - (s.hi - s.lo)) * sb);
    domain_coll(d).all_gather(own, pad, s.padded);
    for_runs(dom, 0, dom.len, [&](size_t at, size_t pos, size_t n) {
      be_.copy(flat + at * sb, pad + pos * sb, n * sb);
    });
  }
}

void ShardedOptimizer::download_params(float* dst, GPT& model, size_t lo, size_t n) const {
  download_flat(be_, dst, model, lo, n);
}

// With a sharded master (BF16 storage, several shards) each range from its
// owner's master; otherwise every rank's own master has them all. An expert
// slice holds its own experts alone: every owner's ranges, in any storage.
void ShardedOptimizer::params_f32(GPT& model, float* host) {
  RATCHET_ASSERT(model.num_params() == layout_.total);
  const int N = coll_.count();
  if (!slice() && (N == 1 || be_.storage_bytes() == sizeof(float))) return model.get_params(host);
  gather_ranges_f32(coll_.comms().shard_host, N, coll_.index(),
                    [&](int q) {
                      if (buckets_) return bucket_owned_ranges(layout_, experts_, N, q);
                      const ExpertSlice x = slice() ? ExpertSlice{experts_->n, q % experts_->n}
                                                    : ExpertSlice{};
                      if (slice()) return FlatShards(*experts_->cfg, x, N, q).owned_ranges();
                      return FlatShards(layout_.total, N, q).owned_ranges();
                    },
                    [&](float* dst, size_t lo, size_t n) { download_params(dst, model, lo, n); },
                    host);
}

// A model with a WHOLE master (no master ranges) beside the sharded ones:
// every range's FP32 value from its owner, set as the whole master, keeping
// the stochastically rounded storage values the owners computed
// (upload_f32 alone would round them to nearest).
void ShardedOptimizer::sync_master(GPT& model) { sync_master_from_owners(be_, model, coll_.count()); }

void ShardedOptimizer::restore_params(GPT& model) {
  dptr params = model.params();
  opt_->restore_rounding(params);
  if (buckets_)
    buckets_->gather_into(params);
  else if (coll_.count() > 1)
    gather_params(params);
  be_.synchronize();
}

}  // namespace ratchet

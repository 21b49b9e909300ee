// See sharded_optimizer.h.
#include "distributed/sharded_optimizer.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "distributed/gather_ranges.h"
#include "model/gpt.h"

namespace ratchet {

namespace {
// The flat layout's allocations, in elements: pad (W·S) and gshard (S, at least 1).
std::vector<size_t> flat_elems(size_t P, int W) {
  const size_t S = shard_range(P, W, 0).padded;
  return {S * (size_t)W, std::max<size_t>(1, S)};
}

std::vector<AdamWPiece> pieces_at_lo(const BucketLayout& bk, int r) {
  std::vector<AdamWPiece> pieces;
  for (const OwnedPiece& p : bk.pieces(r)) pieces.push_back({p.lo, p.n, p.shard, AdamWPiece::kAtLo});
  return pieces;
}
}  // namespace

ShardedOptimizer::ShardedOptimizer(const DistributedConfig& c, Backend& be, const ParamLayout& layout)
    : DistributedStrategy(c), be_(be), coll_(be, ShardComms::of(c)), layout_(layout) {
  const int W = coll_.count();
  std::vector<AdamWPiece> pieces;
  if (bucketed(c.overlap, W)) {
    buckets_ = std::make_unique<GradBuckets>(be_, coll_, layout_, false, true);
    pieces = pieces_at_lo(buckets_->layout(), coll_.index());
  } else {
    range_ = shard_range(layout_.total, W, coll_.index());
    pieces = {{range_.lo, range_.hi - range_.lo, 0}};
    const size_t sb = be_.storage_bytes();
    const std::vector<size_t> n = flat_elems(layout_.total, W);
    pad_ = be_.alloc(n[0] * sb);  // zero-filled: the tail [P, W·S) stays zero
    gshard_ = be_.alloc(n[1] * sb);
  }
  if (buckets_) {
    opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, std::move(pieces));
  } else {
    opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, range_.lo, range_.hi);
  }
}

ShardedOptimizer::~ShardedOptimizer() {
  be_.release(pad_);
  be_.release(gshard_);
}

StrategyNeeds ShardedOptimizer::needs(const BackendMemoryModel& be, const GPTConfig& cfg,
                                      bool overlap, int shards, int index) {
  const ParamLayout layout(cfg);
  StrategyNeeds n;
  n.master_sharded = shards > 1;
  if (bucketed(overlap, shards)) {
    const BucketLayout bk(layout, cfg.num_layers, shards);
    n.owned = bk.owned_ranges(index);
    n.moment_elems = bk.owned_elems(index);
    n.buffer_bytes = GradBuckets::buffer_bytes(be, bk, false);
    return n;
  }
  const ShardRange s = shard_range(layout.total, shards, index);
  n.owned = {{s.lo, s.hi}};
  n.moment_elems = s.hi - s.lo;
  for (size_t e : flat_elems(layout.total, shards)) n.buffer_bytes += be.alloc_size(e * be.storage_bytes);
  return n;
}

OwnedRanges ShardedOptimizer::owned_ranges() const {
  if (buckets_) return buckets_->layout().owned_ranges(coll_.index());
  return {{range_.lo, range_.hi}};
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
  if (buckets_)
    return "ZeRO-1: optimizer state sharded by gradient buckets, each block's gradient "
           "reduce-scattered during the last backward (--overlap-comm on)";
  return "ZeRO-1: optimizer state sharded";
}

void ShardedOptimizer::grad_ready(int layer) {
  if (pass_ == micro_batches_ - 1) {
    buckets_->pack_and_reduce(layer, static_cast<const char*>(model_->grads()));
    launched_++;
    coll_.progress();  // MPI moves nonblocking collectives only inside its calls
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
  const size_t P = layout_.total, S = range_.padded, n = range_.hi - range_.lo;
  const int Ws = coll_.count();  // W, or the group's size with --shard-group
  const size_t sb = be_.storage_bytes();
  char* pad = static_cast<char*>(pad_);
  be_.copy(pad, grads, P * sb);
  if (S * Ws > P) be_.zero(pad + P * sb, (S * Ws - P) * sb);  // padding adds nothing
  coll_.reduce_scatter(pad, gshard_, S);
  const double ssq = n ? be_.sum_squares(gshard_, n) : 0.0;
  // Over the shards of one copy: every group holds the same ones.
  const double norm = coll_.norm(ssq);
  opt_->step_shard(params, gshard_, lr, norm);
  gather_params(params);
  return (float)norm;
}

// Every rank's updated shard of params to every rank, through pad: slot r
// holds rank r's shard (the tail of the last slot, past P, is padding).
void ShardedOptimizer::gather_params(dptr params) {
  const size_t S = range_.padded, n = range_.hi - range_.lo, sb = be_.storage_bytes();
  char* pad = static_cast<char*>(pad_);
  char* own = pad + (size_t)coll_.index() * S * sb;
  be_.copy(own, static_cast<const char*>(params) + range_.lo * sb, n * sb);
  if (S > n) be_.zero(own + n * sb, (S - n) * sb);
  coll_.all_gather(own, pad, S);
  be_.copy(params, pad, layout_.total * sb);
}

void ShardedOptimizer::download_params(float* dst, GPT& model, size_t lo, size_t n) const {
  be_.download_f32(dst, static_cast<const char*>(model.params()) + lo * be_.storage_bytes(), n);
}

// With a sharded master (BF16 storage, several shards) each range from its
// owner's master; otherwise every rank's own master has them all.
void ShardedOptimizer::params_f32(GPT& model, float* host) {
  RATCHET_ASSERT(model.num_params() == layout_.total);
  const int N = coll_.count();
  if (N == 1 || be_.storage_bytes() == sizeof(float)) return model.get_params(host);
  const size_t sb = be_.storage_bytes();
  const char* p = static_cast<const char*>(model.params());
  gather_ranges_f32(coll_.comms().shard_host, N, coll_.index(),
                    [&](int q) {
                      if (buckets_) return buckets_->layout().owned_ranges(q);
                      const ShardRange s = shard_range(layout_.total, N, q);
                      return OwnedRanges{{s.lo, s.hi}};
                    },
                    [&](float* dst, size_t lo, size_t n) { be_.download_f32(dst, p + lo * sb, n); },
                    host);
}

// A model with a WHOLE master (no master ranges) beside the sharded ones:
// every range's FP32 value from its owner, set as the whole master, keeping
// the stochastically rounded storage values the owners computed
// (upload_f32 alone would round them to nearest).
void ShardedOptimizer::sync_master(GPT& model) {
  const int N = coll_.count();
  if (N == 1 || be_.storage_bytes() == sizeof(float)) return;
  std::vector<float> flat(layout_.total);
  params_f32(model, flat.data());
  set_whole_master(be_, model.params(), flat.data(), layout_.total);
}

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

// See sharded_optimizer.h.
#include "distributed/sharded_optimizer.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "distributed/expert_shards.h"
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

namespace {
// --expert-parallel: the pieces less every expert (their gradient where it
// was), and this rank's experts' slices, whose gradient is in the `extra`
// buffer (the model's whole gradient, at their own offsets; own_elems on
// return), sorted by lo.
std::vector<AdamWPiece> with_own_experts(const std::vector<AdamWPiece>& shard,
                                         const ExpertShards& x, size_t* own_elems) {
  std::vector<AdamWPiece> out;
  for (const AdamWPiece& p : shard)
    for (const auto& [lo, hi] : subtract_ranges({{p.lo, p.lo + p.n}}, x.all))
      out.push_back({lo, hi - lo, p.grad + (lo - p.lo)});
  *own_elems = 0;
  for (const auto& [lo, hi] : x.own) {
    out.push_back({lo, hi - lo, lo, AdamWPiece::kAtLo, true});
    *own_elems += hi - lo;
  }
  std::sort(out.begin(), out.end(),
            [](const AdamWPiece& a, const AdamWPiece& b) { return a.lo < b.lo; });
  return out;
}
}  // namespace

ShardedOptimizer::ShardedOptimizer(const DistributedConfig& c, Backend& be, const ParamLayout& layout)
    : DistributedStrategy(c), be_(be), coll_(be, ShardComms::of(c)), layout_(layout) {
  const int W = coll_.count();
  // --expert-parallel (not with --shard-group: its replicas are another
  // split): this rank's experts' moments instead of its shard's part of
  // every expert's (distributed/expert_shards.h).
  if (c.experts && c.experts->n > 1 && !c.groups) experts_ = c.experts;
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
  if (experts_) {
    pieces = with_own_experts(pieces, *experts_, &own_elems_);
    stash_ = be_.alloc(std::max<size_t>(1, own_elems_) * be_.storage_bytes());
    opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, std::move(pieces));
  } else if (buckets_) {
    opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, std::move(pieces));
  } else {
    opt_ = std::make_unique<AdamW>(be_, layout_, c.adamw, range_.lo, range_.hi);
  }
}

ShardedOptimizer::~ShardedOptimizer() {
  be_.release(pad_);
  be_.release(gshard_);
  if (stash_) be_.release(stash_);
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
  if (experts_) {
    OwnedRanges out;
    for (const AdamWPiece& p : opt_->pieces()) out.push_back({p.lo, p.lo + p.n});
    return out;
  }
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
    if (experts_) {
      step_with_experts(model, buckets_->shard(), lr, norm);
      return (float)norm;
    }
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
  if (experts_) {
    step_with_experts(model, gshard_, lr, norm);
    return (float)norm;
  }
  opt_->step_shard(params, gshard_, lr, norm);
  gather_params(params);
  return (float)norm;
}

// --expert-parallel: the shard's sum covered every expert (its owners'
// gradients plus zeros), so `norm` is whole; this rank's experts' gradient
// is its own (its group's rows all came to it) summed over the replicas.
// The shards' all-gather then brings each expert's weights as the shard's
// rank had them: this rank's updated ones are kept across it, and every
// expert comes from its owner after.
void ShardedOptimizer::step_with_experts(GPT& model, cdptr shard, float lr, double norm) {
  // Backend memory throughout (device memory on cuda): the replicas'
  // communicator works on it (expert_parallel.cpp), and copies go through
  // the backend.
  const size_t sb = be_.storage_bytes();
  const DType t = sb == 2 ? DType::BF16 : DType::F32;
  char* g = static_cast<char*>(model.grads());
  char* p = static_cast<char*>(model.params());
  if (experts_->replicas->world() > 1)
    for (const auto& [lo, hi] : experts_->own)
      experts_->replicas->all_reduce(g + lo * sb, hi - lo, t, ReduceOp::Sum);
  opt_->step_shard(p, shard, lr, norm, 1.0f, g);
  gather_with_experts(model);
}

// The shards' all-gather (each range as its shard's rank holds it), this
// rank's experts kept across it, then every expert from its owner: BF16
// storage keeps the master of the owned ranges only here (no other expert's
// master to go stale), so the owners' rounded weights are all-gathered.
void ShardedOptimizer::gather_with_experts(GPT& model) {
  const size_t sb = be_.storage_bytes();
  char* p = static_cast<char*>(model.params());
  char* stash = static_cast<char*>(stash_);
  size_t at = 0;
  for (const auto& [lo, hi] : experts_->own) {
    be_.copy(stash + at * sb, p + lo * sb, (hi - lo) * sb);
    at += hi - lo;
  }
  if (buckets_)
    buckets_->gather_into(p);
  else
    gather_params(p);
  at = 0;
  for (const auto& [lo, hi] : experts_->own) {
    be_.copy(p + lo * sb, stash + at * sb, (hi - lo) * sb);
    at += hi - lo;
  }
  gather_expert_weights(*experts_, model.config(), be_, p, opt_->steps_taken());
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
  // --expert-parallel: shard q's ranges less every expert, and for the ranks
  // of the first group (q < n; shard q is world rank q) their experts, whose
  // master they keep (the other groups' replicas hold the same values).
  const GPTConfig& cfg = model.config();
  gather_ranges_f32(coll_.comms().shard_host, N, coll_.index(),
                    [&](int q) {
                      OwnedRanges r = buckets_ ? buckets_->layout().owned_ranges(q)
                                               : OwnedRanges{{shard_range(layout_.total, N, q).lo,
                                                              shard_range(layout_.total, N, q).hi}};
                      if (!experts_) return r;
                      r = subtract_ranges(r, experts_->all);
                      if (q < experts_->n) r = merge_ranges(r, expert_ranges(cfg, experts_->n, q));
                      return r;
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
  // --expert-parallel: a shard's rank rounded only its own experts, so the
  // others come from their owners as after a step.
  if (experts_)
    gather_with_experts(model);
  else if (buckets_)
    buckets_->gather_into(params);
  else if (coll_.count() > 1)
    gather_params(params);
  be_.synchronize();
}

}  // namespace ratchet

// ZeRO-2 (distributed/zero.h, "stage 2"): the model's gradients go into reused
// bucket buffers (model/grad_store.h), each bucket is reduce-scattered into
// this rank's gradient shard as soon as the backward has produced it, and
// AdamW updates the rank's pieces of every bucket (distributed/buckets.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "distributed/zero.h"
#include "distributed/zero_params.h"
#include "model/gpt.h"

namespace ratchet {

// The GradStore the model asks (distributed/zero.h: block l writes into buffer l % 2,
// the rest into its own buffer). Each request first completes the reduction
// still reading that buffer (from block l + 2, or the previous pass's rest).
struct DataParallel::Store final : GradStore {
  explicit Store(DataParallel& d) : dp(d) {}
  void non_block(dptr* slots) override {
    const size_t b = dp.bk_->buckets().size() - 1;
    dp.finish(&dp.rest_fl_, static_cast<char*>(dp.rest_recv_));
    dp.bucket_slots(b, static_cast<char*>(dp.rest_buf_), slots);
  }
  void block(int layer, dptr* slots) override {
    const int k = layer % 2;
    dp.finish(&dp.block_fl_[k], static_cast<char*>(dp.block_recv_[k]));
    dp.bucket_slots((size_t)layer, static_cast<char*>(dp.block_buf_[k]), slots);
  }
  DataParallel& dp;
};

void DataParallel::init_buckets(const AdamWConfig& cfg) {
  const int N = shard_count(), r = shard_index();
  // ln1w is (L, C) and lnfw (C), in both architectures.
  RATCHET_ASSERT(layout_.sizes[P_LNFW] > 0 && layout_.sizes[P_LN1W] % layout_.sizes[P_LNFW] == 0);
  const int L = (int)(layout_.sizes[P_LN1W] / layout_.sizes[P_LNFW]);
  bk_ = std::make_unique<BucketLayout>(layout_, L, N);
  inter_.assign(bk_->buckets().size(), 0);
  std::vector<AdamWPiece> pieces;
  // Stage 3: the parameters are at the same shard offset (distributed/zero_params.h).
  for (const OwnedPiece& p : bk_->pieces(r))
    pieces.push_back({p.lo, p.n, p.shard, stage_ == 3 ? p.shard : AdamWPiece::kAtLo});
  opt_ = std::make_unique<AdamW>(be_, layout_, cfg, std::move(pieces));
  const size_t sb = be_.storage_bytes();
  gshard_ = be_.alloc(std::max<size_t>(1, bk_->shard_elems()) * sb);
  for (int k = 0; k < 2; k++) block_buf_[k] = be_.alloc(bk_->block_buffer_elems() * sb);
  rest_buf_ = be_.alloc(bk_->rest_buffer_elems() * sb);
  if (stage_ >= 2) {  // accumulation over micro-batches happens in the shard
    for (int k = 0; k < 2; k++) block_recv_[k] = be_.alloc(bk_->block(0).S * sb);
    rest_recv_ = be_.alloc(bk_->rest().S * sb);
  }
  store_ = std::make_unique<Store>(*this);
}

void DataParallel::release_buckets() {
  if (!bk_) return;
  if (model_ && model_->grad_store() == store_.get()) model_->set_grad_store(nullptr);
  for (int k = 0; k < 2; k++) {
    be_.release(block_buf_[k]);
    be_.release(block_recv_[k]);
  }
  be_.release(rest_buf_);
  be_.release(rest_recv_);
}

// The model's destinations for bucket b's slices: its packed places in buf,
// zeroed (the backward accumulates).
void DataParallel::bucket_slots(size_t b, char* buf, dptr* slots) {
  const Bucket& bk = bk_->buckets()[b];
  const size_t sb = be_.storage_bytes();
  be_.zero(buf, bk.len * sb);  // the padding past len is never written: zero since alloc
  for (const BucketSlice& s : bk.slices) slots[s.tensor] = buf + s.pos * sb;
}

// Bucket b is final in buf: its reduce-scatter starts, into the shard on the
// first pass of a step, else into recv (added to the shard by finish()).
void DataParallel::bucket_ready(size_t b, char* buf, char* recv, InFlight* f) {
  RATCHET_ASSERT(!f->active);
  const Bucket& bk = bk_->buckets()[b];
  const size_t sb = be_.storage_bytes();
  char* shard = static_cast<char*>(gshard_) + bk_->shard_offset(b) * sb;
  f->bucket = b;
  f->add = stage_ >= 2 && pass_ > 0;  // stage 1 reduces once, after its accumulation
  f->active = true;
  f->ticket = reduce_scatter_start(buf, f->add ? recv : shard, bk.S);
  if (!overlap_) finish(f, recv);
}

void DataParallel::finish(InFlight* f, char* recv) {
  if (!f->active) return;
  const Bucket& bk = bk_->buckets()[f->bucket];
  const size_t sb = be_.storage_bytes();
  char* shard = static_cast<char*>(gshard_) + bk_->shard_offset(f->bucket) * sb;
  if (shard_count() > 1) sintra_->wait(f->ticket);
  // Hybrid sharding: the piece's all-reduce across the groups, after the
  // group's reduce-scatter (as reduce_scatter(): the same sums). Into recv,
  // which the next bucket of this parity reuses: completed now. Into the
  // shard, which nothing reads before the next pass adds to it or the step:
  // left in flight (wait_inter) while the layers below compute.
  if (hybrid() && f->add) sinter_->wait(sinter_->all_reduce_start(recv, bk.S, dtype(), ReduceOp::Sum));
  if (hybrid() && !f->add) {
    wait_inter(f->bucket);  // (none in flight: a step waits for them all)
    inter_[f->bucket] = sinter_->all_reduce_start(shard, bk.S, dtype(), ReduceOp::Sum);
  }
  // shard += recv: the summed gradient of this micro-batch added to the
  // earlier ones' (one rounding per add in the storage dtype), once the
  // shard's own all-reduce is complete.
  if (f->add) {
    wait_inter(f->bucket);
    be_.residual_forward(shard, shard, recv, bk.S);
  }
  f->active = false;
}

// In the order they were started: the older block first, then the rest.
void DataParallel::finish_all() {
  InFlight* order[2] = {&block_fl_[0], &block_fl_[1]};
  if (block_fl_[1].active && block_fl_[0].active && block_fl_[1].bucket > block_fl_[0].bucket)
    std::swap(order[0], order[1]);  // higher layers finish their backward first
  for (InFlight* f : order) finish(f, static_cast<char*>(block_recv_[f == &block_fl_[0] ? 0 : 1]));
  finish(&rest_fl_, static_cast<char*>(rest_recv_));
}

// Stage 1: bucket b's slices of the flat gradient, packed.
void DataParallel::pack_bucket(size_t b, const char* grads, char* buf) {
  const size_t sb = be_.storage_bytes();
  for (const BucketSlice& s : bk_->buckets()[b].slices)
    be_.copy(buf + s.pos * sb, grads + s.flat * sb, s.n * sb);
}

float DataParallel::step_buckets(dptr params, dptr grads, float lr) {
  if (stage_ >= 2 && pass_ == 0)
    fail("data parallel: ZeRO-", stage_, " step without a backward pass this step (the gradient shard is "
         "written by the passes' reductions)");
  const size_t nb = bk_->buckets().size();
  if (stage_ == 1 && !(model_ && launched_ == (int)nb && pass_ == micro_batches_)) {
    // No overlap this step (no model attached, or another number of backward
    // passes than announced): every bucket now, none may have started.
    if (launched_ != 0)
      fail("data parallel: ", pass_, " backward pass(es) this step but attach() was told ",
           micro_batches_, " (", launched_, " of ", nb, " gradient buckets started)");
    for (size_t b = 0; b < nb; b++) {
      char* buf = static_cast<char*>(b + 1 == nb ? rest_buf_ : block_buf_[b % 2]);
      InFlight* f = b + 1 == nb ? &rest_fl_ : &block_fl_[b % 2];
      finish(f, nullptr);
      pack_bucket(b, static_cast<const char*>(grads), buf);
      bucket_ready(b, buf, nullptr, f);
    }
  }
  finish_all();
  for (size_t b = 0; b < nb; b++) wait_inter(b);  // hybrid: the shard complete before it is read
  const size_t n = bk_->shard_elems();
  // The padding of every piece is zero (a reduce-scatter of zeros), so the
  // shard's squares are the owned elements'.
  const double ssq = n ? be_.sum_squares(gshard_, n) : 0.0;
  // Over the shards of one copy (every group of --shard-group holds them all).
  const double norm = std::sqrt(scomm_->all_reduce_sum(ssq));
  if (ps_) {  // stage 3: the shard is the parameters; the next forward gathers them
    opt_->step_shard(ps_->shard(), gshard_, lr, norm);
    ps_->invalidate();
  } else {
    opt_->step_shard(params, gshard_, lr, norm);
    gather_buckets(params);
  }
  pass_ = launched_ = 0;
  return (float)norm;
}

// Every bucket in turn through its buffer: this rank's updated piece copied
// into slot r (from the flat params), all-gathered, and every slice copied
// back into the flat params.
void DataParallel::gather_buckets(dptr params) {
  const int r = shard_index();
  const size_t sb = be_.storage_bytes();
  char* p = static_cast<char*>(params);
  for (size_t b = 0; b < bk_->buckets().size(); b++) {
    const Bucket& bk = bk_->buckets()[b];
    char* buf = static_cast<char*>(b + 1 == bk_->buckets().size() ? rest_buf_ : block_buf_[b % 2]);
    const size_t p0 = (size_t)r * bk.S, p1 = p0 + bk.S;
    for (const BucketSlice& s : bk.slices) {
      const size_t a = std::max(p0, s.pos), e = std::min(p1, s.pos + s.n);
      if (a < e) be_.copy(buf + a * sb, p + (s.flat + (a - s.pos)) * sb, (e - a) * sb);
    }
    all_gather(buf + p0 * sb, buf, bk.S);
    for (const BucketSlice& s : bk.slices) {
      // This rank's own elements are already in place.
      const size_t a = std::max(p0, s.pos), e = std::min(p1, s.pos + s.n);
      if (a >= e) {
        be_.copy(p + s.flat * sb, buf + s.pos * sb, s.n * sb);
        continue;
      }
      if (a > s.pos) be_.copy(p + s.flat * sb, buf + s.pos * sb, (a - s.pos) * sb);
      if (e < s.pos + s.n)
        be_.copy(p + (s.flat + (e - s.pos)) * sb, buf + e * sb, (s.pos + s.n - e) * sb);
    }
  }
}

// The FP32 master values of every rank's pieces, gathered on the host: each
// rank's owned elements packed (padded to the largest count), all-gathered,
// and unpacked by every rank's ranges.
void DataParallel::sync_master_buckets(dptr params) {
  const int N = shard_count(), r = shard_index();
  const size_t sb = be_.storage_bytes();
  size_t most = 0;
  for (int q = 0; q < N; q++) most = std::max(most, bk_->owned_elems(q));
  std::vector<float> all((size_t)N * most, 0.0f);
  float* mine = all.data() + (size_t)r * most;
  for (const auto& [lo, hi] : bk_->owned_ranges(r)) {
    be_.download_f32(mine, static_cast<const char*>(params) + lo * sb, hi - lo);
    mine += hi - lo;
  }
  if (N > 1) scomm_->all_gather(all.data() + (size_t)r * most, all.data(), most, DType::F32);
  std::vector<float> flat(P_);
  for (int q = 0; q < N; q++) {
    const float* src = all.data() + (size_t)q * most;
    for (const auto& [lo, hi] : bk_->owned_ranges(q)) {
      std::copy(src, src + (hi - lo), flat.begin() + (long)lo);
      src += hi - lo;
    }
  }
  // upload_f32 sets the master copy and rounds the values to nearest; keep the
  // stochastically rounded ones the owners computed (on the host meanwhile).
  std::vector<char> kept(P_ * sb);
  be_.download_bytes(kept.data(), params, kept.size());
  be_.upload_f32(params, flat.data(), P_);
  be_.upload_bytes(params, kept.data(), kept.size());
  be_.synchronize();
}

}  // namespace ratchet

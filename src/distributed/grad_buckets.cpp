// See grad_buckets.h.
#include "distributed/grad_buckets.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace ratchet {

struct GradBuckets::Store final : GradStore {
  explicit Store(GradBuckets& g) : gb(g) {}
  void non_block(dptr* slots) override {
    const size_t b = gb.count() - 1;
    gb.finish(gb.rest_);
    gb.slots_for(b, slots);
  }
  void block(int layer, dptr* slots) override {
    gb.finish(gb.blocks_[layer % 2]);
    gb.slots_for((size_t)layer, slots);
  }
  GradBuckets& gb;
};

namespace {
// The block count L of a layout.
int layers_of(const ParamLayout& layout) {
  RATCHET_ASSERT(layout.layers > 0);
  return layout.layers;
}
}  // namespace

GradBuckets::GradBuckets(Backend& be, ShardCollectives& coll, const ParamLayout& layout,
                         bool accumulate, bool overlap)
    : GradBuckets(be, coll, BucketLayout(layout, layers_of(layout), coll.count()), accumulate,
                  overlap) {}

GradBuckets::GradBuckets(Backend& be, ShardCollectives& coll, const BucketLayout& bk,
                         bool accumulate, bool overlap, dptr shard)
    : be_(be), coll_(coll), layout_(std::make_unique<BucketLayout>(bk)), overlap_(overlap) {
  RATCHET_ASSERT(bk.world() == coll.count());
  replicas_.assign(count(), 0);
  const size_t sb = be_.storage_bytes();
  own_shard_ = shard == nullptr;
  shard_ = own_shard_ ? be_.alloc(std::max<size_t>(1, layout_->shard_elems()) * sb) : shard;
  for (Slot& s : blocks_) s.buf = be_.alloc(layout_->block_buffer_elems() * sb);
  rest_.buf = be_.alloc(layout_->rest_buffer_elems() * sb);
  if (accumulate) {  // accumulation over micro-batches happens in the shard
    for (Slot& s : blocks_) s.recv = be_.alloc(layout_->block(0).S * sb);
    rest_.recv = be_.alloc(layout_->rest().S * sb);
  }
  store_ = std::make_unique<Store>(*this);
}

GradBuckets::~GradBuckets() {
  for (Slot* s : {&blocks_[0], &blocks_[1], &rest_}) {
    be_.release(s->buf);
    be_.release(s->recv);
  }
  if (own_shard_) be_.release(shard_);
}

size_t GradBuckets::buffer_bytes(const BackendMemoryModel& be, const BucketLayout& bk,
                                 bool accumulate, bool own_shard) {
  const size_t sb = be.storage_bytes;
  size_t b = (own_shard ? be.alloc_size(std::max<size_t>(1, bk.shard_elems()) * sb) : 0) +
             2 * be.alloc_size(bk.block_buffer_elems() * sb) + be.alloc_size(bk.rest_buffer_elems() * sb);
  if (accumulate) b += 2 * be.alloc_size(bk.block(0).S * sb) + be.alloc_size(bk.rest().S * sb);
  return b;
}

// The model's destinations for bucket b's slices: its packed places in the
// buffer, zeroed (the backward accumulates).
void GradBuckets::slots_for(size_t b, dptr* slots) {
  const Bucket& bk = layout_->buckets()[b];
  const size_t sb = be_.storage_bytes();
  char* buf = static_cast<char*>(slot_of(b).buf);
  be_.zero(buf, bk.len * sb);  // the padding past len is never written: zero since alloc
  for (const BucketSlice& s : bk.slices) slots[s.tensor] = buf + s.pos * sb;
}

void GradBuckets::reduce(int layer, bool add) { start(bucket_of(layer), add); }

void GradBuckets::pack_and_reduce(int layer, const char* flat_grads) {
  const size_t b = bucket_of(layer);
  Slot& s = slot_of(b);
  finish(s);  // the buffer's previous bucket (two layers up)
  const size_t sb = be_.storage_bytes();
  char* buf = static_cast<char*>(s.buf);
  for (const BucketSlice& sl : layout_->buckets()[b].slices)
    be_.copy(buf + sl.pos * sb, flat_grads + sl.flat * sb, sl.n * sb);
  start(b, false);
}

// Bucket b is final in its buffer: its reduce-scatter starts, into the shard
// on the first pass of a step, else into recv (added to the shard by finish()).
void GradBuckets::start(size_t b, bool add) {
  Slot& s = slot_of(b);
  InFlight& f = s.fl;
  RATCHET_ASSERT(!f.active);
  RATCHET_ASSERT(!add || s.recv);
  const Bucket& bk = layout_->buckets()[b];
  const size_t sb = be_.storage_bytes();
  char* shard = static_cast<char*>(shard_) + layout_->shard_offset(b) * sb;
  f.bucket = b;
  f.add = add;
  f.active = true;
  f.ticket = coll_.reduce_scatter_start(s.buf, add ? s.recv : shard, bk.S);
  if (!overlap_) finish(s);
}

void GradBuckets::finish(Slot& s) {
  InFlight& f = s.fl;
  if (!f.active) return;
  const Bucket& bk = layout_->buckets()[f.bucket];
  const size_t sb = be_.storage_bytes();
  char* shard = static_cast<char*>(shard_) + layout_->shard_offset(f.bucket) * sb;
  char* recv = static_cast<char*>(s.recv);
  coll_.wait_shard(f.ticket);
  // Hybrid sharding: the piece's all-reduce across the groups, after the
  // group's reduce-scatter (as ShardCollectives::reduce_scatter: the same
  // sums). Into recv, which the next bucket of this parity reuses: completed
  // now. Into the shard, which nothing reads before the next pass adds to it
  // or the step: left in flight (wait_replicas) while the layers below compute.
  if (coll_.hybrid() && f.add) coll_.wait_replicas(coll_.replicas_all_reduce_start(recv, bk.S));
  if (coll_.hybrid() && !f.add) {
    wait_replicas(f.bucket);  // (none in flight: a step waits for them all)
    replicas_[f.bucket] = coll_.replicas_all_reduce_start(shard, bk.S);
  }
  // shard += recv: the summed gradient of this micro-batch added to the
  // earlier ones' (one rounding per add in the storage dtype), once the
  // shard's own all-reduce is complete.
  if (f.add) {
    wait_replicas(f.bucket);
    be_.residual_forward(shard, shard, recv, bk.S);
  }
  f.active = false;
}

void GradBuckets::wait_replicas(size_t b) {
  if (b < replicas_.size() && replicas_[b] != 0) coll_.wait_replicas(replicas_[b]);
  if (b < replicas_.size()) replicas_[b] = 0;
}

double GradBuckets::complete() {
  // In the order they were started: the older block first, then the rest.
  Slot* order[2] = {&blocks_[0], &blocks_[1]};
  if (blocks_[1].fl.active && blocks_[0].fl.active && blocks_[1].fl.bucket > blocks_[0].fl.bucket)
    std::swap(order[0], order[1]);  // higher layers finish their backward first
  for (Slot* s : order) finish(*s);
  finish(rest_);
  for (size_t b = 0; b < count(); b++) wait_replicas(b);  // the shard complete before it is read
  const size_t n = layout_->shard_elems();
  return n ? be_.sum_squares(shard_, n) : 0.0;
}

// Every bucket in turn through its buffer: this rank's updated piece copied
// into slot r (from the flat params), all-gathered, and every slice copied
// back into the flat params.
void GradBuckets::gather_into(dptr params) {
  const int r = coll_.index();
  const size_t sb = be_.storage_bytes();
  char* p = static_cast<char*>(params);
  for (size_t b = 0; b < count(); b++) {
    const Bucket& bk = layout_->buckets()[b];
    char* buf = static_cast<char*>(slot_of(b).buf);
    const size_t p0 = (size_t)r * bk.S, p1 = p0 + bk.S;
    for (const BucketSlice& s : bk.slices) {
      const size_t a = std::max(p0, s.pos), e = std::min(p1, s.pos + s.n);
      if (a < e) be_.copy(buf + a * sb, p + (s.flat + (a - s.pos)) * sb, (e - a) * sb);
    }
    coll_.all_gather(buf + p0 * sb, buf, bk.S);
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

}  // namespace ratchet

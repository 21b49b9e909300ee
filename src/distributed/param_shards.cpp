// See param_shards.h.
#include "distributed/param_shards.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "core/fault.h"
#include "distributed/gather_ranges.h"

namespace ratchet {

ParamShards::ParamShards(Backend& be, Communicator* comm, const ParamLayout& layout,
                         const BucketLayout& bk, int r, bool reshard_after_forward,
                         Communicator* host_comm)
    : be_(be),
      comm_(comm),
      hcomm_(host_comm),
      layout_(layout),
      bk_(bk),
      r_(r),
      reshard_(reshard_after_forward),
      sb_(be.storage_bytes()) {
  RATCHET_ASSERT(r >= 0 && r < bk.world());
  RATCHET_ASSERT(bk.world() == 1 || (comm && comm->world() == bk.world() && comm->rank() == r));
  shard_ = be_.alloc(std::max<size_t>(1, bk_.shard_elems()) * sb_);  // zero: the padding stays 0
  be_.keep_master_copy(shard_);  // BF16 storage: the FP32 master of the pieces only (4·S)
  const int L = bk_.num_layers();
  blocks_.resize(L == 0 ? 0 : reshard_ ? std::min(2, L) : (size_t)L);
  for (Buf& b : blocks_) b.mem = be_.alloc(bk_.block_buffer_elems() * sb_);
  rest_.mem = be_.alloc(bk_.rest_buffer_elems() * sb_);
  pos_.assign(bk_.buckets().size(), std::vector<size_t>(kNumParamTensors, 0));
  for (size_t b = 0; b < bk_.buckets().size(); b++)
    for (const BucketSlice& s : bk_.buckets()[b].slices) pos_[b][(size_t)s.tensor] = s.pos;
}

ParamShards::~ParamShards() {
  invalidate();  // completes any gather still arriving
  for (Buf& b : blocks_) be_.release(b.mem);
  be_.release(rest_.mem);
  be_.release(shard_);
}

size_t ParamShards::buffer_bytes(const BackendMemoryModel& be, const ParamLayout& layout, int L,
                                 int W, bool reshard_after_forward) {
  const BucketLayout bk(layout, L, W);
  const size_t sb = be.storage_bytes;
  const size_t nblocks = L == 0 ? 0 : reshard_after_forward ? (size_t)std::min(2, L) : (size_t)L;
  size_t b = be.alloc_size(std::max<size_t>(1, bk.shard_elems()) * sb);
  b += nblocks * be.alloc_size(bk.block_buffer_elems() * sb) + be.alloc_size(bk.rest_buffer_elems() * sb);
  // The master copy of the shard (BF16 storage): extra_bytes_per_param per
  // element of the allocation as rounded (as the model's, model/memory.cpp).
  if (be.extra_bytes_per_param > 0)
    b += be.alloc_size(be.alloc_size(std::max<size_t>(1, bk.shard_elems()) * sb) / sb *
                       be.extra_bytes_per_param);
  return b;
}

void ParamShards::set_from_host(const float* host) {
  invalidate();
  for (const OwnedPiece& p : bk_.pieces(r_))
    be_.upload_f32(static_cast<char*>(shard_) + p.shard * sb_, host + p.lo, p.n);
  be_.synchronize();
}

void ParamShards::set_from_flat(cdptr flat) {
  invalidate();
  for (const OwnedPiece& p : bk_.pieces(r_))
    be_.copy(static_cast<char*>(shard_) + p.shard * sb_, static_cast<const char*>(flat) + p.lo * sb_,
             p.n * sb_);
}

// Every rank's pieces, from their owners' shards (gather_ranges.h).
void ParamShards::get_host(float* host, Communicator& host_comm) {
  const int W = bk_.world();
  gather_ranges_f32(W > 1 ? &host_comm : nullptr, W, r_,
                    [&](int q) { return bk_.owned_ranges(q); },
                    [&](float* dst, size_t lo, size_t n) { download_range(dst, lo, n); }, host);
}

bool ParamShards::get_host(float* host) {
  if (bk_.world() > 1 && !hcomm_) return false;
  std::unique_ptr<Communicator> one;
  if (!hcomm_) one = make_single_communicator();
  get_host(host, hcomm_ ? *hcomm_ : *one);
  return true;
}

void ParamShards::download_range(float* dst, size_t lo, size_t n) const {
  const size_t hi = lo + n;
  size_t done = 0;
  for (const OwnedPiece& p : bk_.pieces(r_)) {
    const size_t a = std::max(lo, p.lo), b = std::min(hi, p.lo + p.n);
    if (a >= b) continue;
    be_.download_f32(dst + (a - lo), static_cast<const char*>(shard_) + (p.shard + (a - p.lo)) * sb_,
                     b - a);
    done += b - a;
  }
  if (done != n)
    fail("ZeRO-3: parameters [", lo, ", ", hi, ") are not all this rank's (", done, " of ", n,
         " elements in its shard)");
}

void ParamShards::invalidate() {
  for (Buf* b : {&rest_}) {
    if (b->arriving && comm_ && bk_.world() > 1) comm_->wait(b->ticket);
    b->arriving = false;
    b->bucket = -1;
  }
  for (Buf& b : blocks_) {
    if (b.arriving && comm_ && bk_.world() > 1) comm_->wait(b.ticket);
    b.arriving = false;
    b.bucket = -1;
  }
}

ParamShards::Buf& ParamShards::buf_for(size_t b) {
  if (b + 1 == bk_.buckets().size()) return rest_;
  return blocks_[b % blocks_.size()];
}

void ParamShards::start(size_t b) {
  Buf& buf = buf_for(b);
  if (buf.bucket == (int)b) return;
  if (buf.arriving && comm_ && bk_.world() > 1) comm_->wait(buf.ticket);  // its older bucket
  const Bucket& bk = bk_.buckets()[b];
  char* mem = static_cast<char*>(buf.mem);
  char* own = mem + (size_t)r_ * bk.S * sb_;
  be_.copy(own, static_cast<const char*>(shard_) + bk_.shard_offset(b) * sb_, bk.S * sb_);
  buf.bucket = (int)b;
  buf.arriving = false;
  gathers_++;
  // scripts/chaos.sh: one rank dies as the others enter it (on one rank too,
  // as ShardCollectives::all_gather: every step reaches the point).
  fault_point("zero-all-gather");
  if (bk_.world() == 1) return;  // the piece is the whole bucket
  buf.ticket = comm_->all_gather_start(own, mem, bk.S, sb_ == 2 ? DType::BF16 : DType::F32);
  buf.arriving = true;
  comm_->progress();
}

void ParamShards::ready(size_t b) {
  start(b);
  Buf& buf = buf_for(b);
  if (buf.arriving) {
    comm_->wait(buf.ticket);
    buf.arriving = false;
  }
}

cdptr ParamShards::param(int tensor, int layer) {
  const bool block = is_block_tensor(tensor);
  const size_t b = block ? (size_t)layer : bk_.buckets().size() - 1;
  Buf& buf = buf_for(b);
  if (buf.bucket != (int)b || buf.arriving) {
    // The rest: gathered at its first read. A block must have been announced
    // (forward_block/backward_block) or be the next one's ln1 (prefetched).
    if (block && buf.bucket != (int)b)
      fail("ZeRO-3: block ", layer, " read before it was gathered (the model's parameter hints)");
    ready(b);
  }
  return static_cast<const char*>(buf.mem) + pos_[b][(size_t)tensor] * sb_;
}

void ParamShards::forward_block(int l) {
  ready((size_t)l);
  if (l + 1 < bk_.num_layers()) start((size_t)l + 1);  // its ln1 closes block l; its prefetch
}

void ParamShards::backward_block(int l) {
  ready((size_t)l);
  if (l > 0) start((size_t)l - 1);
}

}  // namespace ratchet


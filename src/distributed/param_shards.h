// ZeRO-3's parameter side (fully_sharded.h): each rank keeps only its pieces
// of the storage-dtype parameters, in the gradient shard's layout (piece of
// bucket b at shard_offset(b), buckets.h), and the model reads them through a
// ParamStore (model/param_store.h) that all-gathers each bucket before its
// use, the next block prefetched. The gather schedule and its memory:
// docs/distributed.md. A gathered bucket holds exactly the shards' bits, so
// the model computes bitwise what it computes from flat params.
#pragma once
#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "distributed/buckets.h"
#include "distributed/communicator.h"
#include "model/param_layout.h"
#include "model/param_store.h"

namespace ratchet {

class ParamShards final : public ParamStore {
 public:
  // comm: the shard group's communicator in backend memory (bk.world() ranks;
  // null for one rank); r: this rank's index in it.
  // host_comm: the same ranks on host memory (get_host(float*); null for one rank).
  ParamShards(Backend& be, Communicator* comm, const ParamLayout& layout, const BucketLayout& bk,
              int r, bool reshard_after_forward = true, Communicator* host_comm = nullptr);
  ~ParamShards() override;
  ParamShards(const ParamShards&) = delete;
  ParamShards& operator=(const ParamShards&) = delete;

  // This rank's pieces (shard_elems() elements, storage dtype; the padding of
  // each piece is zero).
  dptr shard() { return shard_; }
  size_t shard_elems() const { return bk_.shard_elems(); }
  // Sets this rank's pieces from the full FP32 parameters (host, P floats),
  // as GPT::set_params would (upload_f32: the master copy too). Invalidates.
  void set_from_host(const float* host);
  // Sets them from full storage-dtype parameters in backend memory. Invalidates.
  void set_from_flat(cdptr flat);
  // Collective: every parameter as FP32 on the host (P floats), each rank's
  // pieces from its owner's shard (download_f32: the master copy's values).
  // host_comm: the same ranks' communicator on host memory.
  void get_host(float* host, Communicator& host_comm);
  // This rank's FP32 values of the parameters [lo, lo+n) (host), which must
  // lie in its pieces (merged where adjacent): download_f32 piece by piece.
  void download_range(float* dst, size_t lo, size_t n) const;
  // The shard changed (an optimizer step): every gathered buffer is stale.
  void invalidate();

  // Bytes this object allocates for a model `layout` of L blocks on W ranks.
  static size_t buffer_bytes(const BackendMemoryModel& be, const ParamLayout& layout, int L, int W,
                             bool reshard_after_forward);

  // ParamStore.
  cdptr param(int tensor, int layer) override;
  void forward_block(int layer) override;
  void backward_block(int layer) override;
  bool set_host(const float* host) override {
    set_from_host(host);
    return true;
  }
  bool get_host(float* host) override;  // collective (host_comm)
  bool collective() const override { return bk_.world() > 1; }

  // Gathers started so far (tests: the schedule above).
  long gathers() const { return gathers_; }

 private:
  struct Buf {
    void* mem = nullptr;
    int bucket = -1;  // held (or arriving) bucket, -1: none
    bool arriving = false;
    Communicator::Ticket ticket = 0;
  };
  Buf& buf_for(size_t b);
  void start(size_t b);  // ensure bucket b is held or arriving in its buffer
  void ready(size_t b);  // ... and has arrived

  Backend& be_;
  Communicator* comm_;
  Communicator* hcomm_;
  ParamLayout layout_;
  BucketLayout bk_;
  int r_;
  bool reshard_;
  size_t sb_;
  void* shard_ = nullptr;
  std::vector<Buf> blocks_;  // 2, or L (reshard off)
  Buf rest_;
  // pos_[b][tensor]: the tensor's first element in bucket b's packed buffer.
  std::vector<std::vector<size_t>> pos_;
  long gathers_ = 0;
};

}  // namespace ratchet

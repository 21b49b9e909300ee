// Data-parallel optimizer step: gradient averaging, and ZeRO-1 sharding of
// the AdamW state.
//
// Every rank holds the full parameters (P) and, after its micro-batches, the
// gradient of ITS rows, already scaled so that the SUM over ranks is the
// gradient of the global batch's mean loss (loss scale 1/(accum·W)).
//
// Memory and dtype. params and grads are the model's buffers in BACKEND
// memory, in the backend's STORAGE dtype (FP32 on cpu; BF16 or FP32 on
// cuda/simt): collectives run on them in that dtype (DType::F32 or
// DType::BF16), staging buffers come from Backend::alloc and are moved with
// Backend::copy/zero. The gradient communicator must work in the backend's
// memory space: MPI for host memory (the cpu backend, and simt, whose "device"
// memory is host memory), NCCL for real device memory (the trainer passes it
// as grad_comm). Host scalars (the squared norm) always go through `comm`.
// One rank (W = 1, e.g. `mpirun -np 1`): the trainer makes no device
// communicator, and comm is the single-process one, which works on host
// memory: the collectives are then Backend::copy calls, never comm's.
//
// stage 0 (plain data parallel):
//   all_reduce(grads, P, sum) -> every rank runs the same AdamW on everything.
//   Overlap (overlap_with()): on the LAST micro-batch of a step, the model's
//   grad-ready hook starts an asynchronous all-reduce of each layer's twelve
//   gradient slices as soon as that layer's backward is done (then wte+wpe and
//   lnf), while the layers below are still computing; step() waits for them
//   before AdamW. The reduced values are the same as the blocking all-reduce's
//   (elementwise sums; for 2 ranks bitwise: a+b = b+a).
// stage 1 (ZeRO-1), shard size S = ceil(P / W), the padded length W·S:
//   pad (W·S) = grads, zero tail               (Backend::copy)
//   reduce_scatter(pad -> gshard (S))          rank r gets the summed gradient of
//                                              [r·S, r·S+S); elements >= P are padding
//   norm = sqrt(all_reduce_sum(||gshard||^2))  the global norm, for clipping
//                                              (Backend::sum_squares, FP64)
//   AdamW on params[lo, hi) with lo = r·S, hi = min(P, lo+S): moments are
//                                              (hi-lo) long: 1/W of the state per rank;
//                                              with BF16 storage the backend's FP32
//                                              master copy of params[lo, hi) is updated
//                                              and the BF16 values stochastically rounded
//   pad: own shard of params copied into slot r, all_gather(pad) -> params (P)
//   ZeRO-1 keeps this flat reduce-scatter after the whole backward (no overlap):
//   the reduce-scatter needs every gradient, and its shards cut across layers.
// Any P works: the last shard is padded (it may even be empty when W > P).
//
// Master weights with ZeRO-1 and BF16 storage: each rank's backend updates
// only its own shard of the FP32 master copy (the other shards arrive as BF16
// values). sync_master() gathers the FP32 shards so that reading the
// parameters as FP32 (checkpoints, --export) gives the true values on every
// rank; the trainer calls it before those reads.
//
// Bytes allocated (Backend::alloc, counted by buffer_bytes()):
//   stage 0: none (the all-reduce is in place)
//   stage 1: pad W·S·sb and gshard max(1,S)·sb (sb = storage bytes)
// plus AdamW's moments (2·(hi-lo)·4, AdamW's own allocations).
#pragma once
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "model/param_layout.h"
#include "optim/adamw.h"

namespace ratchet {

class GPT;

struct ShardRange {
  size_t lo = 0, hi = 0;  // [lo, hi) of the flat vector; hi - lo may be 0
  size_t padded = 0;      // S: every rank's shard length in collectives
};
// Rank r's shard of P elements over W ranks (see above).
ShardRange shard_range(size_t P, int W, int r);

class DataParallel {
 public:
  // zero_stage 0 or 1. Creates the optimizer (sharded for stage 1).
  // comm: the host communicator (norms, sync_master), and the gradients' too
  // unless grad_comm is given (the NCCL one for device memory). Both must
  // outlive this object.
  DataParallel(Communicator& comm, Backend& be, const ParamLayout& layout, const AdamWConfig& cfg,
               int zero_stage, Communicator* grad_comm = nullptr);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  AdamW& optimizer() { return *opt_; }
  int zero_stage() const { return stage_; }
  // The range of the optimizer state this rank owns (all of it for stage 0).
  ShardRange range() const { return range_; }
  // The flat [lo, hi) ranges of the parameter vector whose optimizer state
  // (moments, FP32 master) this rank owns, in increasing order; the moments
  // buffer (optimizer().m()/v()) holds them back to back in this order. One
  // range today ({lo, hi} of range(); all of [0, P) at stage 0); bucket-aligned
  // shards (ZeRO-2, overlapped ZeRO-1) own several. Checkpoint shards are
  // written and read by these ranges.
  std::vector<std::pair<size_t, size_t>> owned_ranges() const;
  // Whether this rank writes its owned ranges into a checkpoint. True on every
  // rank today; with hybrid sharding (--shard-group) the replicas of a shard
  // in the other groups do not write it again.
  bool shard_writer() const { return true; }

  // Stage 0 with more than one rank: installs the grad-ready hook on `model`
  // (whose grads step() will be given) so that the all-reduce of the last of
  // `micro_batches` backward passes per step overlaps that backward. Returns
  // whether overlap is on (false, and nothing installed, for ZeRO-1 or 1 rank).
  bool overlap_with(GPT& model, int micro_batches);
  bool overlapping() const { return model_ != nullptr; }

  // Averages the gradients over ranks and updates params as described above.
  // Returns the global gradient norm (before clipping). Same params on every
  // rank afterwards.
  float step(dptr params, dptr grads, float lr);

  // Collective. Makes the backend's FP32 view of params (download_f32) the
  // same on every rank: a no-op except for ZeRO-1 on more than one rank with
  // a non-FP32 storage (the backend keeps FP32 master weights).
  void sync_master(dptr params);

  // Collective. After a resume (params set from the checkpoint's FP32 values,
  // the optimizer's moments and step restored): rebuilds the storage-dtype
  // params as the last step rounded them (AdamW::restore_rounding; ZeRO-1:
  // each rank its shard, then all-gathered), so a resumed BF16 run continues
  // bit for bit. A no-op for FP32 storage and before the first step.
  void restore_params(dptr params);

  // Bytes this object allocates from `be` for P parameters on W ranks at this
  // stage (as Backend::alloc_size rounds them); AdamW's moments not included.
  static size_t buffer_bytes(const BackendMemoryModel& be, size_t P, int W, int stage);
  static size_t buffer_bytes(const Backend& be, size_t P, int W, int stage) {
    return buffer_bytes(be.memory_model(), P, W, stage);
  }

 private:
  struct HookState;
  void grad_ready(int layer);
  void gather_params(dptr params);  // stage 1: all-gather the shards into params
  // Sum-reduce-scatter / all-gather of storage-dtype elements in backend
  // memory: gcomm_, or Backend::copy on one rank (never the host memmove of
  // the single-process communicator on device pointers).
  void reduce_scatter(const void* send, void* recv, size_t n);
  void all_gather(const void* send, void* recv, size_t n);
  DType dtype() const;

  Communicator& comm_;   // host: scalars
  Communicator& gcomm_;  // gradients and parameters, in backend memory
  Backend& be_;
  ParamLayout layout_;
  size_t P_;
  int stage_;
  ShardRange range_;
  std::unique_ptr<AdamW> opt_;
  void* pad_ = nullptr;     // stage 1: W·S elements
  void* gshard_ = nullptr;  // stage 1: S elements
  // Overlap (stage 0).
  GPT* model_ = nullptr;
  int micro_batches_ = 1;
  int pass_ = 0;      // backward passes seen this step
  int launched_ = 0;  // groups (layers, then the rest) whose all-reduce was started
  std::shared_ptr<HookState> hook_;
};

}  // namespace ratchet

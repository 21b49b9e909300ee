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
//   This flat layout is stage 1 WITHOUT overlap (the constructor's `overlap`
//   false, --overlap-comm off, or one shard): the reduce-scatter needs every
//   gradient, and its shards cut across layers.
//   Overlapped ZeRO-1 (`overlap` true, more than one shard): the shards are
//   bucket-aligned as stage 2's (below). The micro-batches accumulate in the
//   flat grads as at stage 0; on the LAST one, as soon as block l's backward
//   is done, its twelve slices are packed into a block bucket buffer and
//   reduce-scattered asynchronously into the rank's piece (then the rest's
//   bucket at grad-ready(-1)); step() waits for them. Norm, AdamW on the
//   pieces and the bucket-by-bucket all-gather as stage 2. Per element the
//   sum over ranks is the flat one's (each bucket's reduce-scatter adds the
//   same ranks' values).
//   Buffers: stage 2's without the receive buffers.
// Any P works: the last shard is padded (it may even be empty when W > P).
//
// Hybrid sharding (--shard-group N, distributed/shard_groups.h): the state of
// stages 1 and 2 is sharded over the N ranks of a group (the shard math above
// and below with N for W: shard_count(); a rank owns shard `member` of its
// group: shard_index()) and every group holds a copy. The collective helpers
// become two-level (stages 2, 3 and overlapped ZeRO-1: per bucket, the inter
// all-reduce started once the bucket's reduce-scatter is waited for, and left
// in flight while the layers below compute: waited for before the next pass
// adds to that piece of the shard, or at the step; a later pass's, whose
// receive buffer the next bucket reuses, at once):
//   reduce-scatter  inside the group (intra, over N ranks), then an all-reduce
//                   of the shard across the W/N groups (inter)
//   all-gather      inside the group
//   norm            the shards' squares summed inside the group (every group
//                   holds the same summed gradient)
// Reduction order, for a replay: element e of the summed gradient is
//   sum over groups g (inter's order) of ( sum over the members of g (intra's order) of grad_r[e] )
// with groups of consecutive ranks ([g·N, g·N+N)) for a number, the hosts'
// ranks for `node`. Each level adds in MPI's (NCCL's) order for its count; a
// level of 2 ranks adds once (a + b = b + a), so W = 4 in groups of 2 gives
// exactly (g0 + g1) + (g2 + g3), and W = 2 in groups of 1 or 2 gives g0 + g1,
// stage 0's sum (tests/mpi/test_mpi_shard_groups.cpp replays both, at
// stages 1 and 2).
// Replicas: a shard's copies in the other groups are bitwise equal (the same
// sums, the same AdamW); only the group of index 0 writes them to a
// checkpoint (shard_writer()).
//
// stage 2 (ZeRO-2), bucket-aligned shards (distributed/buckets.h): a bucket is one
// transformer block's twelve gradient slices, or the rest (wte, wpe, lnf,
// lmhead); each is cut into W pieces and rank r owns piece r of every bucket.
//   The model has NO flat gradient buffer (GPT(cfg, be, flat_grads = false),
//   flat_grads(2) == false): attach() gives it a GradStore (model/grad_store.h)
//   whose buffers are ONE block bucket used in turn by two blocks (block l
//   writes into buffer l % 2) and the rest's bucket, which lives through the
//   whole backward (the tied wte gets the lm-head's gradient first and the
//   embedding's last). On EVERY backward pass, as soon as block l's backward
//   is done (grad-ready hook), its bucket is reduce-scattered asynchronously
//   into the rank's gradient shard (W·S -> S) while block l-1 computes; before
//   block l-2 reuses the buffer, that reduce-scatter is waited for. The rest's
//   bucket goes at grad-ready(-1).
//   Accumulation over micro-batches happens in the SHARD: the first pass's
//   reduce-scatter writes it, a later pass's goes into a receive buffer that
//   is then added (Backend::residual_forward, one rounding per add).
//   Reduction order (for a replay): element e of the summed gradient is
//     g[e] = ((RS_1[e] + RS_2[e]) + RS_3[e]) + ...  over the micro-batches k
//     RS_k[e] = the reduce-scatter's sum over ranks of micro-batch k's gradient
//   whereas stage 0 (and ZeRO-1) accumulate the micro-batches inside each
//   rank's GEMMs first and sum over ranks once. With ONE micro-batch per rank
//   the two orders are the same sum (on 2 ranks a + b = b + a bitwise); with
//   more they differ in rounding, and a resume that crosses between the two
//   orders says so (settings key grad_accumulation, train/reproducibility).
//   Then, as stage 1: the norm from the shards' squares, AdamW on the owned
//   pieces (optim/adamw.h: AdamWPiece, each piece's gradient at its place in
//   the shard), and the updated pieces all-gathered bucket by bucket into the
//   full params (each bucket through its own buffer).
//   The FP32 master copy covers the owned pieces only, as stage 1's (below).
//   --overlap-comm off: the same reductions, each waited for at once.
//
// stage 3 (ZeRO-3, `train --zero 3`): the
//   gradients exactly as stage 2; the storage-dtype parameters sharded too
//   (distributed/zero_params.h, ParamShards): the model has no flat params
//   (flat_params(3) == false) and reads every parameter through the store
//   attach() installs, which all-gathers each bucket before its use (the
//   next block prefetched); rank r keeps only piece r of every bucket, in the
//   gradient shard's layout, and AdamW updates it there (AdamWPiece::param).
//   No all-gather after the step: the gathered copies are marked stale and
//   the next forward gathers the new values. The FP32 master (BF16 storage)
//   is the shard's own (4·S bytes). reshard_after_forward false keeps every
//   block gathered in forward for the backward (one buffer per block).
//   The summed gradients and the update are stage 2's, so stage 3 equals
//   stage 2 bitwise at any W and micro-batch count, and stage 0 bitwise at
//   2 ranks x 1 micro-batch (tests/mpi/test_mpi_zero3.cpp).
//
// Master weights with ZeRO-1/2 and BF16 storage on more than one shard
// (master_sharded()): each rank's backend updates only its own ranges of the
// FP32 master copy, so the model is built with them as its master ranges
// (GPT(cfg, be, flat_grads, true, &owned_ranges())): 4·(owned elements) bytes
// instead of 4P (the other ranges arrive as BF16 values). Checkpoints read
// each rank's owned ranges (download_f32: the master's values); params_f32()
// gathers every owner's FP32 values on the host for whatever needs them all
// (--export).
//
// Bytes allocated (Backend::alloc, counted by buffer_bytes()):
//   stage 0: none (the all-reduce is in place)
//   stage 1: pad W·S·sb and gshard max(1,S)·sb (sb = storage bytes)
//   stage 2: the gradient shard (sum of the buckets' S)·sb, two block buckets
//            W·S_block·sb each, the rest's bucket W·S_rest·sb, and receive
//            buffers for accumulation S_block·sb twice and S_rest·sb
//            (and NO flat P·sb gradient buffer in the model)
//   stage 3: stage 2's, plus ParamShards::buffer_bytes (the parameter shard,
//            its FP32 master with BF16 storage, two block buffers (or L) and
//            the rest's buffer; and NO flat params in the model)
// plus AdamW's moments (2·(hi-lo)·4, AdamW's own allocations).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "distributed/buckets.h"
#include "distributed/communicator.h"
#include "model/config.h"
#include "model/grad_store.h"
#include "model/param_layout.h"
#include "optim/adamw.h"

namespace ratchet {

class GPT;
class ParamShards;
struct ShardGroups;

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
  // groups: hybrid sharding (see above; null: one group of the world); it must
  // outlive this object, and hold device splits when grad_comm is given.
  DataParallel(Communicator& comm, Backend& be, const ParamLayout& layout, const AdamWConfig& cfg,
               int zero_stage, Communicator* grad_comm = nullptr,
               const ShardGroups* groups = nullptr, bool overlap = false,
               bool reshard_after_forward = true);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  AdamW& optimizer() { return *opt_; }
  int zero_stage() const { return stage_; }
  // The range of the optimizer state this rank owns (all of it for stage 0)
  // in the flat layout; empty when the shards are bucket-aligned (stage 2,
  // overlapped stage 1): use owned_ranges().
  ShardRange range() const { return range_; }
  // The flat [lo, hi) ranges of the parameter vector whose optimizer state
  // (moments, FP32 master) this rank owns, in increasing order; the moments
  // buffer (optimizer().m()/v()) holds them back to back in this order. One
  // range in the flat layout ({lo, hi} of range(); all of [0, P) at stage 0);
  // bucket-aligned shards (ZeRO-2, overlapped ZeRO-1: distributed/buckets.h) own
  // several, merged where adjacent. Checkpoint shards are
  // written and read by these ranges.
  std::vector<std::pair<size_t, size_t>> owned_ranges() const;
  // Whether this rank writes its owned ranges into a checkpoint. True on every
  // rank today; with hybrid sharding (--shard-group) the replicas of a shard
  // in the other groups do not write it again.
  bool shard_writer() const;
  // The ranks the state is sharded over (the number of shards of one copy),
  // and which shard this rank owns: the world and the rank, or with
  // --shard-group the group's size and this rank's index in its group.
  int shard_count() const;
  int shard_index() const;

  // Stage 0 with more than one rank: installs the grad-ready hook on `model`
  // (whose grads step() will be given) so that the all-reduce of the last of
  // `micro_batches` backward passes per step overlaps that backward. Returns
  // whether overlap is on (false, and nothing installed, for ZeRO-1 or 1 rank).
  bool overlap_with(GPT& model, int micro_batches);
  bool overlapping() const { return model_ != nullptr && overlap_; }
  // What the trainer calls once, for every stage: installs on `model` what
  // this stage needs (stage 2: the gradient store and hook, always; stage 0:
  // overlap_with() when `overlap`). `model` must outlive this object.
  void attach(GPT& model, int micro_batches, bool overlap);
  // Whether the model keeps its flat gradient buffer at this stage (build it
  // with GPT(cfg, be, flat_grads(stage))); false for stage 2.
  static bool flat_grads(int stage) { return stage < 2; }
  // Whether the model keeps its flat params (GPT(cfg, be, flat_grads(stage),
  // flat_params(stage))); false for stage 3 (distributed/zero_params.h: each rank
  // its pieces; attach() must come before the parameters are set).
  static bool flat_params(int stage) { return stage < 3; }
  // Whether the shards are bucket-aligned (distributed/buckets.h): stage 2, and
  // stage 1 with overlap on W > 1 shards (its per-block reduce-scatter).
  static bool bucketed(int stage, bool overlap, int W) {
    return stage >= 2 || (stage == 1 && overlap && W > 1);
  }
  // Whether the FP32 master (BF16 storage) covers only a rank's owned ranges
  // at this stage on W shards (shard_count()): ZeRO-1/2 on more than one.
  static bool master_sharded(int stage, int W) { return (stage == 1 || stage == 2) && W > 1; }
  // owned_ranges() of shard r of W at this stage, before any DataParallel
  // exists (the same ranges; model/memory.h counts them as moment_elems).
  static std::vector<std::pair<size_t, size_t>> owned_ranges(const GPTConfig& cfg, int W, int r,
                                                             int stage, bool overlap = false);
  // The log's line for the data-parallel mode ("ZeRO-1: optimizer state sharded", ...).
  std::string describe() const;
  // Stages train runs: 0, 1, 2 and 3 (ZeRO-3, distributed/zero_params.h).
  static bool implemented(int stage) { return stage >= 0 && stage <= 3; }

  // Averages the gradients over ranks and updates params as described above.
  // Returns the global gradient norm (before clipping). Same params on every
  // rank afterwards.
  float step(dptr params, dptr grads, float lr);

  // This rank's FP32 values of the parameters [lo, lo+n) (host, n floats):
  // from `params` (download_f32: the master copy where the backend keeps
  // one), or at stage 3 from the rank's parameter shard, where [lo, lo+n)
  // must lie in owned_ranges(). Not collective (checkpoint shards).
  void download_params(float* dst, cdptr params, size_t lo, size_t n) const;

  // Collective. Makes the backend's FP32 view of params (download_f32) the
  // same on every rank: a no-op except for ZeRO-1 on more than one rank with
  // a non-FP32 storage (the backend keeps FP32 master weights). Only for a
  // model with a WHOLE master (no master ranges): a sharded one has nowhere
  // to keep the other ranks' values; use params_f32().
  void sync_master(dptr params);
  // Collective (every rank calls it, each gets all P values). The FP32 value
  // of every parameter of `model` (attached, or built for this stage) into
  // host: with a sharded master (ZeRO-1/2, BF16, several shards) each range
  // from its owner's master, gathered on the host within the shard group;
  // otherwise model.get_params (stage 3: collective through its shards).
  void params_f32(GPT& model, float* host);

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
  // The same for any stage (stage 2 needs the buckets' shapes): W is the
  // number of ranks the state is sharded over (shard_count()).
  // overlap: as given to the constructor (stage 1's layout depends on it).
  static size_t buffer_bytes(const BackendMemoryModel& be, const GPTConfig& cfg, int W, int stage,
                             bool overlap = false, bool reshard_after_forward = true);
  // AdamW's m and v length on shard r of W at this stage.
  static size_t moment_elems(const GPTConfig& cfg, int W, int r, int stage, bool overlap = false);

 private:
  struct HookState;
  void grad_ready(int layer);
  void install_grad_hook(GPT& model);  // resets pass_/launched_, sets the model's hook
  void gather_params(dptr params);  // stage 1: all-gather the shards into params
  // Stage 2 (distributed/zero_buckets.cpp).
  struct Store;
  struct InFlight {
    Communicator::Ticket ticket = 0;
    size_t bucket = 0;  // index in BucketLayout::buckets()
    bool add = false;   // into the shard from recv (a later pass), else it went there directly
    bool active = false;
  };
  void init_buckets(const AdamWConfig& cfg);
  void release_buckets();
  void bucket_slots(size_t b, char* buf, dptr* slots);
  void bucket_ready(size_t b, char* buf, char* recv, InFlight* f);
  void pack_bucket(size_t b, const char* grads, char* buf);  // stage 1: flat -> bucket
  void finish(InFlight* f, char* recv);
  void finish_all();
  float step_buckets(dptr params, dptr grads, float lr);
  void gather_buckets(dptr params);
  void sync_master_buckets(dptr params);
  // Stage 3 (distributed/zero_params.cpp).
  void init_params3(bool reshard_after_forward);
  void restore_params3();
  // Asynchronous sum-reduce-scatter in backend memory (as reduce_scatter);
  // every stage-2 gradient reduction starts here and ends in finish().
  Communicator::Ticket reduce_scatter_start(const void* send, void* recv, size_t n);
  // Hybrid sharding: bucket b's shard piece all-reduced across the groups,
  // started in finish() and waited for only before the piece is next read
  // (the next pass adds to it, or the step): it overlaps the layers below.
  bool hybrid() const { return sinter_ && sinter_->world() > 1; }
  void wait_inter(size_t b);
  std::vector<Communicator::Ticket> inter_;  // per bucket; 0: none in flight
  // Sum-reduce-scatter / all-gather of storage-dtype elements in backend
  // memory: gcomm_, or Backend::copy on one rank (never the host memmove of
  // the single-process communicator on device pointers).
  void reduce_scatter(const void* send, void* recv, size_t n);
  void all_gather(const void* send, void* recv, size_t n);
  DType dtype() const;

  Communicator& comm_;   // host: scalars
  Communicator& gcomm_;  // gradients and parameters, in backend memory
  // Hybrid sharding: the group's (intra) and across groups (inter), host and
  // backend memory; without groups scomm_ = &comm_, sintra_ = &gcomm_, sinter_ = null.
  const ShardGroups* groups_ = nullptr;
  Communicator* scomm_ = nullptr;   // host: the shards' norm, sync_master
  Communicator* sintra_ = nullptr;  // backend memory: reduce-scatter, all-gather
  Communicator* sinter_ = nullptr;  // backend memory: the shard's all-reduce across groups
  Backend& be_;
  ParamLayout layout_;
  size_t P_;
  int stage_;
  ShardRange range_;
  std::unique_ptr<AdamW> opt_;
  void* pad_ = nullptr;     // stage 1: W·S elements
  void* gshard_ = nullptr;  // stage 1: S elements
  // Stage 2.
  std::unique_ptr<BucketLayout> bk_;
  std::unique_ptr<GradStore> store_;  // a Store
  std::unique_ptr<ParamShards> ps_;   // stage 3: this rank's parameter pieces and gathers
  void* block_buf_[2] = {nullptr, nullptr};  // W·S_block each
  void* rest_buf_ = nullptr;                 // W·S_rest
  void* block_recv_[2] = {nullptr, nullptr};  // S_block each
  void* rest_recv_ = nullptr;                 // S_rest
  InFlight block_fl_[2], rest_fl_;
  bool overlap_ = true;
  // Overlap (stage 0).
  GPT* model_ = nullptr;
  int micro_batches_ = 1;
  int pass_ = 0;      // backward passes seen this step
  int launched_ = 0;  // groups (layers, then the rest) whose all-reduce was started
  std::shared_ptr<HookState> hook_;
};

}  // namespace ratchet

#include "distributed/zero.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/fault.h"
#include "distributed/shard_groups.h"
#include "distributed/zero_params.h"
#include "model/gpt.h"

namespace ratchet {

ShardRange shard_range(size_t P, int W, int r) {
  ShardRange s;
  s.padded = (P + W - 1) / W;
  s.lo = std::min(P, (size_t)r * s.padded);
  s.hi = std::min(P, s.lo + s.padded);
  return s;
}

// What the model's hook holds: the hook may outlive this object (it stays
// installed on the model), so it reaches us through a pointer we clear.
struct DataParallel::HookState {
  DataParallel* dp = nullptr;
};

namespace {
// The allocations of stage 1, in elements: pad (W·S) and gshard (S, at least 1).
std::vector<size_t> stage1_elems(size_t P, int W) {
  const size_t S = shard_range(P, W, 0).padded;
  return {S * (size_t)W, std::max<size_t>(1, S)};
}
}  // namespace

size_t DataParallel::buffer_bytes(const BackendMemoryModel& be, size_t P, int W, int stage) {
  if (stage != 1) return 0;
  size_t b = 0;
  for (size_t n : stage1_elems(P, W)) b += be.alloc_size(n * be.storage_bytes);
  return b;
}

DataParallel::DataParallel(Communicator& comm, Backend& be, const ParamLayout& layout,
                           const AdamWConfig& cfg, int zero_stage, Communicator* grad_comm,
                           const ShardGroups* groups, bool overlap, bool reshard_after_forward)
    : comm_(comm),
      gcomm_(grad_comm ? *grad_comm : comm),
      groups_(groups),
      scomm_(groups ? groups->intra.get() : &comm),
      sintra_(!groups ? &gcomm_ : grad_comm ? groups->intra_dev.get() : groups->intra.get()),
      sinter_(!groups ? nullptr : grad_comm ? groups->inter_dev.get() : groups->inter.get()),
      be_(be),
      layout_(layout),
      P_(layout.total),
      stage_(zero_stage) {
  if (!implemented(stage_)) fail("--zero must be 0, 1, 2 or 3 (got ", stage_, ")");
  const size_t sb = be_.storage_bytes();
  if (sb != 4 && sb != 2)
    fail("data parallel: backend ", be_.name(), " stores ", sb,
         "-byte elements; only FP32 and BF16 storage can be reduced");
  RATCHET_ASSERT(gcomm_.world() == comm_.world() && gcomm_.rank() == comm_.rank());
  RATCHET_ASSERT(scomm_ && sintra_ && (!groups_ || sinter_));
  RATCHET_ASSERT(!groups_ || groups_->size * groups_->count == comm_.world());
  overlap_ = overlap;
  if (bucketed(stage_, overlap, shard_count())) {
    init_buckets(cfg);  // distributed/zero_buckets.cpp
    if (stage_ == 3) init_params3(reshard_after_forward);  // distributed/zero_params.cpp
  } else if (stage_ == 1) {
    const int W = shard_count();
    range_ = shard_range(P_, W, shard_index());
    opt_ = std::make_unique<AdamW>(be_, layout, cfg, range_.lo, range_.hi);
    const std::vector<size_t> n = stage1_elems(P_, W);
    pad_ = be_.alloc(n[0] * sb);  // zero-filled: the tail [P, W·S) stays zero
    gshard_ = be_.alloc(n[1] * sb);
  } else {
    range_.lo = 0;
    range_.hi = range_.padded = P_;
    opt_ = std::make_unique<AdamW>(be_, layout, cfg);
  }
}

DataParallel::~DataParallel() {
  if (hook_) hook_->dp = nullptr;
  if (ps_ && model_ && model_->param_store() == ps_.get()) model_->set_param_store(nullptr);
  ps_.reset();
  release_buckets();
  be_.release(pad_);
  be_.release(gshard_);
}

DType DataParallel::dtype() const {
  return be_.storage_bytes() == 2 ? DType::BF16 : DType::F32;
}

size_t DataParallel::buffer_bytes(const BackendMemoryModel& be, const GPTConfig& cfg, int W,
                                  int stage, bool overlap, bool reshard_after_forward) {
  const ParamLayout layout(cfg);
  if (!bucketed(stage, overlap, W)) return buffer_bytes(be, layout.total, W, stage);
  // zero_buckets.cpp's init_buckets(), allocation by allocation.
  const BucketLayout bk(layout, cfg.num_layers, W);
  const size_t sb = be.storage_bytes;
  size_t b = be.alloc_size(std::max<size_t>(1, bk.shard_elems()) * sb) +
             2 * be.alloc_size(bk.block_buffer_elems() * sb) + be.alloc_size(bk.rest_buffer_elems() * sb);
  if (stage >= 2) b += 2 * be.alloc_size(bk.block(0).S * sb) + be.alloc_size(bk.rest().S * sb);
  if (stage == 3)
    b += ParamShards::buffer_bytes(be, layout, cfg.num_layers, W, reshard_after_forward);
  return b;
}

size_t DataParallel::moment_elems(const GPTConfig& cfg, int W, int r, int stage, bool overlap) {
  const ParamLayout layout(cfg);
  if (bucketed(stage, overlap, W)) return BucketLayout(layout, cfg.num_layers, W).owned_elems(r);
  if (stage == 1) {
    const ShardRange s = shard_range(layout.total, W, r);
    return s.hi - s.lo;
  }
  return layout.total;
}

void DataParallel::attach(GPT& model, int micro_batches, bool overlap) {
  RATCHET_ASSERT(model.num_params() == P_);
  if (!bk_) {
    overlap_ = overlap;
    if (overlap) overlap_with(model, micro_batches);
    return;
  }
  // The layout was chosen with the constructor's `overlap` (stage 1).
  if (stage_ == 1 && overlap != overlap_)
    fail("data parallel: ZeRO-1 was built ", overlap_ ? "with" : "without",
         " overlap but attach() says ", overlap ? "on" : "off");
  overlap_ = overlap;
  RATCHET_ASSERT((model.grads() == nullptr) == (stage_ >= 2));  // flat_grads(stage)
  RATCHET_ASSERT((model.params() == nullptr) == (stage_ == 3));  // flat_params(stage)
  model_ = &model;
  micro_batches_ = micro_batches;
  install_grad_hook(model);
  if (stage_ >= 2) model.set_grad_store(store_.get());
  if (stage_ == 3) model.set_param_store(ps_.get());
}

// The model's grad-ready hook calls grad_ready() for this step's passes (a
// fresh HookState: a hook left on a model by an earlier DataParallel calls nothing).
void DataParallel::install_grad_hook(GPT& model) {
  pass_ = launched_ = 0;
  if (hook_) hook_->dp = nullptr;
  hook_ = std::make_shared<HookState>();
  hook_->dp = this;
  std::shared_ptr<HookState> st = hook_;
  model.set_grad_ready_hook([st](int layer) {
    if (st->dp) st->dp->grad_ready(layer);
  });
}

std::string DataParallel::describe() const {
  if (stage_ == 3)
    return std::string("ZeRO-3: parameters, gradients and optimizer state sharded, each block's "
                       "parameters all-gathered before use (the next one prefetched), its gradient "
                       "reduce-scattered ") + (overlap_ ? "during the backward" : "after its backward (--overlap-comm off)");
  if (stage_ == 2)
    return std::string("ZeRO-2: gradients and optimizer state sharded, each block's gradient "
                       "reduce-scattered ") + (overlap_ ? "during the backward" : "after its backward (--overlap-comm off)");
  if (stage_ == 1 && bk_)
    return "ZeRO-1: optimizer state sharded by gradient buckets, each block's gradient "
           "reduce-scattered during the last backward (--overlap-comm on)";
  if (stage_ == 1) return "ZeRO-1: optimizer state sharded";
  return overlapping() ? "gradients all-reduced during the backward (--overlap-comm on)"
                       : "gradients all-reduced";
}

bool DataParallel::overlap_with(GPT& model, int micro_batches) {
  if (stage_ != 0 || comm_.world() == 1) return false;
  RATCHET_ASSERT(micro_batches >= 1);
  RATCHET_ASSERT(model.num_params() == P_);
  model_ = &model;
  overlap_ = true;
  micro_batches_ = micro_batches;
  install_grad_hook(model);
  return true;
}

// Called by the model's backward: layer l's twelve tensors are final (l >= 0),
// or wte, wpe, lnfw, lnfb, lmhead (l = -1, the last call of a backward pass).
void DataParallel::grad_ready(int layer) {
  if (bk_) {  // the bucket's reduce-scatter (zero_buckets.cpp): every pass at stage 2,
              // the last one at stage 1 (packed from the flat grads first)
    if (stage_ >= 2 || pass_ == micro_batches_ - 1) {
      const size_t b = layer >= 0 ? (size_t)layer : bk_->buckets().size() - 1;
      const int k = layer >= 0 ? layer % 2 : 0;
      char* buf = static_cast<char*>(layer >= 0 ? block_buf_[k] : rest_buf_);
      char* recv = static_cast<char*>(layer >= 0 ? block_recv_[k] : rest_recv_);
      InFlight* f = layer >= 0 ? &block_fl_[k] : &rest_fl_;
      if (stage_ == 1) {
        finish(f, recv);  // the buffer's previous bucket (two layers up)
        pack_bucket(b, static_cast<const char*>(model_->grads()), buf);
      }
      bucket_ready(b, buf, recv, f);
      launched_++;
      sintra_->progress();  // MPI moves nonblocking collectives only inside its calls
    }
    if (layer < 0) pass_++;
    return;
  }
  if (pass_ == micro_batches_ - 1) {
    const size_t sb = be_.storage_bytes();
    char* g = static_cast<char*>(model_->grads());
    const DType t = dtype();
    if (layer >= 0) {
      // One group per layer: NCCL fuses the twelve all-reduces into one launch
      // behind one event (ncclGroupStart/End); MPI starts them one by one.
      const int L = model_->config().num_layers;
      gcomm_.group_start();
      for (int i = P_LN1W; i <= P_FCPROJB; i++) {
        const size_t n = layout_.per_layer(i, L);
        gcomm_.all_reduce_start(g + (layout_.offsets[i] + (size_t)layer * n) * sb, n, t,
                                ReduceOp::Sum);
      }
      gcomm_.group_end();
    } else {
      // wte and wpe are adjacent (the start of the buffer), and so are lnfw,
      // lnfb and lmhead (its end; lmhead has size 0 unless a llama is untied).
      RATCHET_ASSERT(layout_.offsets[P_WPE] == layout_.offsets[P_WTE] + layout_.sizes[P_WTE]);
      RATCHET_ASSERT(layout_.offsets[P_LMHEAD] + layout_.sizes[P_LMHEAD] == layout_.total);
      gcomm_.all_reduce_start(g + layout_.offsets[P_WTE] * sb,
                              layout_.sizes[P_WTE] + layout_.sizes[P_WPE], t, ReduceOp::Sum);
      gcomm_.all_reduce_start(g + layout_.offsets[P_LNFW] * sb,
                              layout_.total - layout_.offsets[P_LNFW], t, ReduceOp::Sum);
    }
    launched_++;
    gcomm_.progress();
  }
  if (layer < 0) pass_++;
}

float DataParallel::step(dptr params, dptr grads, float lr) {
  const int W = comm_.world();
  const size_t sb = be_.storage_bytes();
  const DType t = dtype();
  if (bk_) return step_buckets(params, grads, lr);  // zero_buckets.cpp
  if (stage_ == 0) {
    if (W > 1) {
      const int groups = model_ ? model_->config().num_layers + 1 : 0;
      if (model_ && launched_ == groups && pass_ == micro_batches_) {
        RATCHET_ASSERT(grads == model_->grads());
        gcomm_.wait_all();  // every slice was started during the last backward
      } else {
        // No overlap this step (none installed, or another number of backward
        // passes than announced): a partly started reduction cannot be mixed
        // with a whole one.
        if (launched_ != 0)
          fail("data parallel: ", pass_, " backward pass(es) this step but overlap_with() was told ",
               micro_batches_, " (", launched_, " of ", groups, " gradient groups started)");
        gcomm_.all_reduce(grads, P_, t, ReduceOp::Sum);
      }
    }
    pass_ = launched_ = 0;
    return opt_->step(params, grads, lr);
  }
  pass_ = launched_ = 0;
  const size_t S = range_.padded, n = range_.hi - range_.lo;
  const int Ws = shard_count();  // W, or the group's size with --shard-group
  char* pad = static_cast<char*>(pad_);
  be_.copy(pad, grads, P_ * sb);
  if (S * Ws > P_) be_.zero(pad + P_ * sb, (S * Ws - P_) * sb);  // padding adds nothing
  reduce_scatter(pad, gshard_, S);
  const double ssq = n ? be_.sum_squares(gshard_, n) : 0.0;
  // Over the shards of one copy: every group holds the same ones.
  const double norm = std::sqrt(scomm_->all_reduce_sum(ssq));
  opt_->step_shard(params, gshard_, lr, norm);
  gather_params(params);
  return (float)norm;
}

// Every rank's updated shard of params to every rank, through pad: slot r
// holds rank r's shard (the tail of the last slot, past P, is padding).
void DataParallel::gather_params(dptr params) {
  const size_t S = range_.padded, n = range_.hi - range_.lo, sb = be_.storage_bytes();
  char* pad = static_cast<char*>(pad_);
  char* own = pad + (size_t)shard_index() * S * sb;
  be_.copy(own, static_cast<const char*>(params) + range_.lo * sb, n * sb);
  if (S > n) be_.zero(own + n * sb, (S - n) * sb);
  all_gather(own, pad, S);
  be_.copy(params, pad, P_ * sb);
}

// One rank: the collectives are copies, done by the backend. The communicator
// of a single process (distributed/communicator.cpp) works on HOST memory: its
// memmove of the cuda backend's device pointers was the segfault of
// `mpirun -np 1 ratchet train --device cuda --zero 1` (issue 24), since the
// trainer makes a device communicator only for more than one rank.
// Hybrid sharding: the group's reduce-scatter (a copy for groups of one),
// then the shard's all-reduce across the groups (zero.h's reduction order).
void DataParallel::reduce_scatter(const void* send, void* recv, size_t n) {
  fault_point("zero-reduce-scatter");  // scripts/chaos.sh: one rank dies as the others enter it
  if (shard_count() == 1) {
    if (send != recv) be_.copy(recv, send, n * be_.storage_bytes());
  } else {
    sintra_->reduce_scatter(send, recv, n, dtype(), ReduceOp::Sum);
  }
  if (sinter_ && sinter_->world() > 1) sinter_->all_reduce(recv, n, dtype(), ReduceOp::Sum);
}

// Stage 2's reductions: as reduce_scatter(), started now and completed by
// finish() (one rank: the copy, at once).
Communicator::Ticket DataParallel::reduce_scatter_start(const void* send, void* recv, size_t n) {
  fault_point("zero-reduce-scatter");
  if (shard_count() == 1) {
    if (send != recv) be_.copy(recv, send, n * be_.storage_bytes());
    return 0;
  }
  return sintra_->reduce_scatter_start(send, recv, n, dtype(), ReduceOp::Sum);
}

void DataParallel::wait_inter(size_t b) {
  if (b < inter_.size() && inter_[b] != 0) sinter_->wait(inter_[b]);
  if (b < inter_.size()) inter_[b] = 0;
}

void DataParallel::all_gather(const void* send, void* recv, size_t n) {
  fault_point("zero-all-gather");  // scripts/chaos.sh: one rank dies as the others enter it
  if (shard_count() == 1) {
    if (send != recv) be_.copy(recv, send, n * be_.storage_bytes());
    return;
  }
  sintra_->all_gather(send, recv, n, dtype());
}

int DataParallel::shard_count() const {
  if (stage_ == 0) return 1;
  return groups_ ? groups_->size : comm_.world();
}

int DataParallel::shard_index() const {
  if (stage_ == 0) return 0;
  return groups_ ? groups_->member : comm_.rank();
}

// A shard's replicas in the other groups are not written again. Stage 0 keeps
// everything everywhere: the checkpoint writer splits it over all ranks.
bool DataParallel::shard_writer() const {
  return stage_ == 0 || !groups_ || groups_->index == 0;
}

void DataParallel::restore_params(dptr params) {
  if (ps_) return restore_params3();  // distributed/zero_params.cpp
  opt_->restore_rounding(params);
  if (bk_)
    gather_buckets(params);
  else if (stage_ == 1 && shard_count() > 1)
    gather_params(params);
  be_.synchronize();
}

void DataParallel::sync_master(dptr params) {
  const int W = shard_count();
  // Stage 3: each rank's master is its shard's own; ParamShards::get_host reads them.
  if (stage_ == 0 || stage_ == 3 || W == 1 || be_.storage_bytes() == sizeof(float)) return;
  if (bk_) return sync_master_buckets(params);  // zero_buckets.cpp
  const size_t S = range_.padded, n = range_.hi - range_.lo, sb = be_.storage_bytes();
  // The FP32 values of every shard, from their owners (download_f32 reads the
  // master copy), gathered on the host (within the group: each holds them all).
  std::vector<float> all(S * W, 0.0f);
  float* mine = all.data() + (size_t)shard_index() * S;
  be_.download_f32(mine, static_cast<const char*>(params) + range_.lo * sb, n);
  scomm_->all_gather(mine, all.data(), S, DType::F32);
  // upload_f32 sets the master copy and rounds the values to nearest; keep the
  // stochastically rounded ones the owners computed (in pad, a scratch here).
  be_.copy(pad_, params, P_ * sb);
  be_.upload_f32(params, all.data(), P_);
  be_.copy(params, pad_, P_ * sb);
  be_.synchronize();
}

std::vector<std::pair<size_t, size_t>> DataParallel::owned_ranges() const {
  if (bk_) return bk_->owned_ranges(shard_index());
  return {{range_.lo, range_.hi}};
}

std::vector<std::pair<size_t, size_t>> DataParallel::owned_ranges(const GPTConfig& cfg, int W, int r,
                                                                  int stage, bool overlap) {
  const ParamLayout layout(cfg);
  if (bucketed(stage, overlap, W)) return BucketLayout(layout, cfg.num_layers, W).owned_ranges(r);
  if (stage == 1) {
    const ShardRange s = shard_range(layout.total, W, r);
    return {{s.lo, s.hi}};
  }
  return {{0, layout.total}};
}

// Each shard's owned FP32 values packed (padded to the largest count),
// all-gathered on the host within the group, unpacked by every shard's ranges.
void DataParallel::params_f32(GPT& model, float* host) {
  const int N = shard_count(), r = shard_index();
  RATCHET_ASSERT(model.num_params() == P_);
  if (stage_ == 0 || stage_ == 3 || N == 1 || be_.storage_bytes() == sizeof(float))
    return model.get_params(host);
  std::vector<std::vector<std::pair<size_t, size_t>>> of(N);
  size_t most = 0;
  for (int q = 0; q < N; q++) {
    if (bk_) {
      of[q] = bk_->owned_ranges(q);
    } else {
      const ShardRange s = shard_range(P_, N, q);
      of[q] = {{s.lo, s.hi}};
    }
    size_t n = 0;
    for (const auto& [lo, hi] : of[q]) n += hi - lo;
    most = std::max(most, n);
  }
  std::vector<float> all((size_t)N * most, 0.0f);
  float* mine = all.data() + (size_t)r * most;
  const size_t sb = be_.storage_bytes();
  for (const auto& [lo, hi] : of[r]) {
    be_.download_f32(mine, static_cast<const char*>(model.params()) + lo * sb, hi - lo);
    mine += hi - lo;
  }
  scomm_->all_gather(all.data() + (size_t)r * most, all.data(), most, DType::F32);
  for (int q = 0; q < N; q++) {
    const float* src = all.data() + (size_t)q * most;
    for (const auto& [lo, hi] : of[q]) {
      std::copy(src, src + (hi - lo), host + lo);
      src += hi - lo;
    }
  }
}

}  // namespace ratchet

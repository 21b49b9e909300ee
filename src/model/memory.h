// The exact memory of a training step on one rank, as the backend will hold
// it: the one accounting that `--batch-size auto` searches with, that sizes
// the cuda backend's arena (Backend::use_arena), and that tests compare with
// the backend's own count (bytes_in_use / peak_bytes_in_use) byte for byte.
//
// It needs no backend, only its description (backend/memory_model.h:
// Backend::memory_model() for a live one; `ratchet plan` builds one for a
// device it cannot create). Every figure is what Backend::alloc() is asked
// for, rounded as the backend rounds it (BackendMemoryModel::alloc_size):
//   params, grads   P elements each, storage dtype          (GPT; grads 0 at
//                   ZeRO-2, which has no flat gradient buffer)
//   activations     GPT::activation_bytes(B, T, policy)      (GPT, one alloc)
//   workspace       workspace_bytes(op_shapes)               (the ops' scratch)
//   moments         AdamW m and v, FP32, n elements each (n = P, or the ZeRO-1
//                   shard), at least 1 element each          (AdamW)
//   master          FP32 master copy of the parameter allocation when the
//                   storage is not FP32 (extra_bytes_per_param); with
//                   sharded_master (ZeRO-1/2 on several shards) of the
//                   rank's owned elements only: moment_elems of them
//   dp_buffers      data-parallel staging buffers (StrategyNeeds::buffer_bytes, distributed/strategy.h)
//   moe             the MoE layers' states (Backend::moe_state) where the
//                   backend allocates them (BackendMemoryModel::moe_state_bytes:
//                   cuda's device buffers, the cpu's host vectors, which its
//                   bytes_in_use counts), one per MoE layer the policy keeps and one shared
//                   by the layers blocks:k recomputes (GPT::moe_state), plus the
//                   scratch all of them share, once (moe_scratch_bytes: cuda)
// plus overhead: what the backend holds from construction (reduction results,
// GEMM workspace), outside the arena.
#pragma once
#include <cstddef>

#include "backend/backend.h"
#include "backend/memory_model.h"
#include "model/config.h"
#include "model/recompute.h"

namespace ratchet {

struct StepMemory {
  size_t params = 0, grads = 0, activations = 0, workspace = 0, moments = 0, master = 0,
         dp_buffers = 0, moe = 0;
  size_t overhead = 0;
  // Everything allocated once the backend exists: what an arena must hold.
  size_t arena() const {
    return params + grads + activations + workspace + moments + master + dp_buffers + moe;
  }
  size_t total() const { return arena() + overhead; }  // bytes_in_use at its peak
};

// Device memory the arena leaves free, for what is allocated after it is
// sized and outside the accounting: CUDA modules loaded lazily at a kernel's
// first launch (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2),
// cuBLASLt's kernels and its per-handle state, NCCL buffers for an algorithm
// first used after the warm-up collective (distributed/nccl_communicator.h), and the
// context's own growth. max(1 GiB, 5% of the memory free when the arena is
// sized; after the NCCL warm-up). `ratchet train` (explicit --batch-size and
// auto) and `ratchet plan` both subtract it and print it; 0 for host memory.
size_t device_memory_reserve(size_t free_bytes);

// Sizes are counted in 64-bit bytes (size_t): a step at micro-batch B whose
// bytes would not fit is refused (Error), in floating point, before any exact
// count could wrap around. The config's own sizes are bounded by finalize().
void check_step_in_range(const GPTConfig& cfg, long B, int T);

// moment_elems: the length of the optimizer's m and v (P, or a ZeRO shard).
// flat_grads: whether the model holds its flat P-element gradient buffer
// (false at ZeRO-2: StrategyNeeds::flat_grads; its buckets and shard are then
// in dp_buffer_bytes).
// flat_params: whether it holds its flat params (false at ZeRO-3: the shard,
// its master and the gather buffers are then in dp_buffer_bytes).
// sharded_master: the master covers the rank's owned elements only, as many
// as its moments (StrategyNeeds::master_sharded: GPT built with
// the owned ranges as master_ranges).
// expert_shards N > 1: the model holds E/N experts (model/expert_slice.h),
// its parameters and gradients ParamLayout(cfg, N).
StepMemory step_memory(const GPTConfig& cfg, int B, int T, const Recompute& policy,
                       const BackendMemoryModel& be, size_t moment_elems,
                       size_t dp_buffer_bytes, bool flat_grads = true, bool flat_params = true,
                       bool sharded_master = false, int expert_shards = 1);
// The same for a live backend (its own description).
inline StepMemory step_memory(const GPTConfig& cfg, int B, int T, const Recompute& policy,
                              const Backend& be, size_t moment_elems, size_t dp_buffer_bytes,
                              bool flat_grads = true, bool flat_params = true,
                              bool sharded_master = false) {
  return step_memory(cfg, B, T, policy, be.memory_model(), moment_elems, dp_buffer_bytes,
                     flat_grads, flat_params, sharded_master);
}

}  // namespace ratchet

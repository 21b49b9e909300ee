// The Mixture-of-Experts layer on the cuda backend: the CUDA counterpart of
// src/moe/moe_ops.h's moe_forward / moe_backward / aux_stats (same math,
// same buffer shapes, same accumulation: see the top comment there), so that
// the model calls one overload per backend. FP32 or BF16 storage (T of the
// CudaBackend); probabilities, routing weights and their gradients are FP32
// whatever T is (the router's softmax is FP32, as in transformers).
//
// Steps, forward: the gate GEMM (backend matmul) -> kernels/moe_router.cuh
// (softmax, top-k) -> kernels/moe_dispatch.cuh (histogram, stable
// permutation, gather) -> per expert with rows: GEMM, SwiGLU kernel, GEMM ->
// combine. Backward: combine' -> per expert GEMMs and SwiGLU' -> router' ->
// the gate's GEMMs (dx overwritten) -> gather' adds the experts' rows into dx.
//
// Expert GEMMs: one cuBLASLt call per expert that has rows, through the
// backend's matmul (its CPU stand-in under simt); experts with no rows are
// skipped (no call, no gradient). The host needs the rows per expert for
// that loop, so the forward copies the (E+1) counts and offsets to the host
// once (a stream synchronisation) and the backward reuses them.
// cuBLASLt's grouped matmul (cublasLtMatmul with grouped matrix layouts,
// CUDA 13.1 and later) would take all experts in one call without the
// copy; the issue reports that groups of size zero (an expert with no
// tokens) are mishandled before cuBLAS 13.3. This build's toolkit is CUDA
// 13.0 (nvcc V13.0.88, checked with nvcc --version), which has no grouped
// matmul, so the per-expert loop is the only path for now.
//
// Expert parallelism (an exchange, moe_ops.h's expert_parallel_forward for
// the math and the order): the same bookkeeping (moe::plan_expert_shard: the
// counts exchanged over the host, where the forward has them already), the
// rows moved by MoeExchange::device_rows (device buffers: NCCL's grouped
// send/recv), the received rows put in expert order and back by
// kernels::moe_gather with k = 1 on uploaded permutations, this rank's El
// experts computed by the same per-expert loop on slices me·El.. of w1, w2.
// The exchange's buffers are reserved for moe_ep_received_rows(N, k, P, F)
// received rows (--moe-ep-capacity F; at most the P·N·k a rank can receive),
// once, as the others (BackendMemoryModel::moe_state_bytes with
// expert_parallel P and ep_capacity F). A step that receives more grows
// them (routing stays dropless) and logs the growth: beside the device
// arena, which the accounting sized without them and whose free blocks the
// step's later allocations need (CudaBackend::alloc_beyond_arena: the
// memory the arena leaves free). When the device cannot hold them the
// Error names --moe-ep-capacity and the factor that step needed.
//
// Requirements (refused with a message naming the value): C and I multiples
// of 16 / sizeof(T) (each expert's slice of the packed (N*k, C), (N*k, 2I)
// and (N*k, I) buffers must start 16-byte aligned for cuBLASLt), E <= 1024
// (the router keeps a bitmask of 32 experts per lane), N*k < 2^31.
//
// Pointers: x, gate, w1, w2, out, dout, dx, dgate, dw1, dw2 are device
// tensors in storage T (dptr/cdptr, as Backend ops); aux_dprob (E) and
// dw_route (N*k) are device FP32; aux_stats' counts and prob_sums (E) are
// device FP64. The cache's buffers come from the backend's alloc() and are
// released by the cache's destructor (the shared scratch's by the last
// cache holding it): the backend must outlive the cache.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "moe/moe_ops.h"

namespace ratchet::moe {

// Device buffers from one backend's alloc(), each grown (released and
// allocated again) when a call needs more, released with their holder.
class CudaBuffers {
 public:
  CudaBuffers() = default;
  CudaBuffers(const CudaBuffers&) = delete;
  CudaBuffers& operator=(const CudaBuffers&) = delete;

  struct Buf {
    void* p = nullptr;
    size_t bytes = 0;
  };
  // alloc: where a new block comes from (null: be.alloc()). const: the
  // backward grows its scratch through a const cache.
  using Alloc = void* (*)(Backend&, size_t);
  void* need(Backend& be, Buf& b, size_t bytes, Alloc alloc = nullptr) const;

 protected:
  ~CudaBuffers() = default;
  void release(std::initializer_list<Buf*> bufs);

 private:
  mutable Backend* be_ = nullptr;  // the backend the buffers came from
};

// What a MoE layer's calls use only while they run: the router's logits
// (N,E) T in the forward; the backward's dy, dxp (N*k,C) T, dw (N*k) FP32,
// dlogits (N,E) T and one expert's da (rows,I), dh (rows,2I) T; the
// exchange's two (R,C) buffers xr, ye (forward and backward). The layers of
// a model run one at a time on one stream, so one scratch serves all of
// them (GPT::moe_state, Backend::moe_state_beside), sized by the largest
// call: BackendMemoryModel::moe_scratch_bytes once per model, not per layer.
class CudaMoeScratch : public CudaBuffers {
 public:
  CudaMoeScratch() = default;
  ~CudaMoeScratch();
  mutable Buf logits, dy, dxp, dw, dlogits, da, dh, xr, ye;
};

// What the CUDA forward keeps for the backward (device memory unless noted).
// Sized by the first call and grown when a later call needs more. Its
// scratch (above) is its own unless shared with another cache's.
class CudaMoeCache : public CudaBuffers {
 public:
  CudaMoeCache() = default;
  ~CudaMoeCache();

  // The scratch, made on first use; shared with `other`'s from now on.
  CudaMoeScratch& scratch() const;
  void share_scratch(const CudaMoeCache& other);

  MoeShape shape;                  // of the last forward
  Buf probs, w;                    // (N,E) (N,k) FP32
  Buf idx;                         // (N,k) int
  Buf counts_dev, offsets_dev;     // (E+1) (E+1) int; counts[E]: out-of-range slots
  Buf row_of, slot_of;             // (N*k) int
  Buf dispatch_scratch;            // kernels::moe_dispatch_scratch_bytes
  Buf xp, h, a, y;                 // (N*k,C) (N*k,2I) (N*k,I) (N*k,C) T
  std::vector<int> counts;         // host (E): rows per expert
  std::vector<int> offsets;        // host (E+1): first packed row of each expert
  // Expert parallelism: the bookkeeping (host) and, for R received rows,
  // perm (R) received -> expert order and its inverse, xe (R,C) the rows in
  // expert order, he (R,2I), ae (R,I) the local experts' hidden states (the
  // exchange's two (R,C) buffers are scratch).
  bool sharded = false;
  ExpertShard shard;
  Buf perm, inv, xe, he, ae;
  size_t ep_rows = 0;  // the received rows the exchange's buffers hold room for
  bool hidden_in_ep = false;  // the last forward's h, a live in he, ae (cuda_moe.cpp)

 private:
  mutable std::shared_ptr<CudaMoeScratch> scratch_;
};

// Throws Error naming the value when the cuda path cannot take s (the
// requirements above), after check_shape(s). storage_bytes: sizeof(T).
void check_cuda_shape(const MoeShape& s, size_t storage_bytes);

// out (N,C) overwritten. bias (E, device FP32) or null: the selection bias
// (the top k chosen on probs + bias, the weights the unbiased probs; no
// gradient). s.n_group / s.topk_group: group-limited selection (n_group <= 32).
// ex: the experts sharded over its ranks (null: every expert here).
template <class T>
void moe_forward(cuda::CudaBackend<T>& be, const MoeShape& s, cdptr x, cdptr gate, cdptr w1,
                 cdptr w2, dptr out, CudaMoeCache& cache, const float* bias = nullptr,
                 MoeExchange* ex = nullptr);
// The device buffers the exchange needs for R received rows of N tokens over
// P ranks (and the backward's per-expert scratch for moe_ep_expert_rows),
// allocated now (from alloc, null: be.alloc()); cache.ep_rows becomes R.
// Buffers already large enough stay.
void reserve_expert_parallel(Backend& be, const MoeShape& s, int P, size_t storage_bytes,
                             CudaMoeCache& cache, size_t R,
                             CudaMoeCache::Alloc alloc = nullptr);

// dx (N,C) overwritten; dgate, dw1, dw2 accumulated; aux_dprob (E, device
// FP32) or null; dw_route (N*k, device FP32) or null: the routing weights'
// gradient (tests).
template <class T>
void moe_backward(cuda::CudaBackend<T>& be, const MoeShape& s, cdptr x, cdptr gate, cdptr w1,
                  cdptr w2, cdptr dout, const CudaMoeCache& cache, const float* aux_dprob,
                  dptr dx, dptr dgate, dptr dw1, dptr dw2, float* dw_route = nullptr,
                  MoeExchange* ex = nullptr);

// counts (E) += top-k selections per expert, prob_sums (E) += column sums of
// probs (N,E): device FP64 (kernels/moe_router.cuh, fixed summation order).
template <class T>
void aux_stats(cuda::CudaBackend<T>& be, const MoeShape& s, const float* probs, const int* idx,
               double* counts, double* prob_sums);

}  // namespace ratchet::moe

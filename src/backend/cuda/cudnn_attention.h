// cuDNN's fused scaled-dot-product attention (flash attention), forward and
// backward, causal, BF16 in and out with FP32 softmax statistics: a thin layer
// over cuDNN's C graph API (cudnn_graph.h backend descriptors; no frontend
// library is packaged). Built only into the real cuda backend, and only when
// CMake finds cuDNN (RATCHET_CUDNN=1); the simt build never links it.
//
// Math (per batch b, query head h, query row i, key rows j <= i; g = h / (NH/KV)):
//   s_ij  = (q_i . k_j) / sqrt(HS)                   (FP32)
//   lse_i = log sum_{j<=i} exp(s_ij)                 stats (B,NH,T) FP32, kept
//   out_i = sum_{j<=i} exp(s_ij - lse_i) v_j         (B,T,NH*HS) BF16
// Backward recomputes the probabilities from lse (nothing T x T is stored):
//   D_i   = dout_i . out_i ;  ds_ij = p_ij (dout_i . v_j - D_i) / sqrt(HS)
//   dq_i  = sum_j ds_ij k_j ;  dk_j = sum_i ds_ij q_i ;  dv_j = sum_i p_ij dout_i
// (dk, dv summed over the NH/KV query heads of a group).
//
// Layout: qkv (B,T,(NH+2KV)*HS) is q heads | k heads | v heads along the last
// axis; cuDNN sees strided (B,H,T,HS) views into it (no permute copies), and
// the same views into dqkv for dq, dk, dv. out/dout (B,T,NH*HS).
//
// Plans: one forward and one backward plan per shape (B, T, NH, KV, HS),
// built on first use and cached. The engine is the first of cuDNN's
// heuristic list (mode A) that finalizes and whose workspace fits
// kCudnnAttentionWorkspaceBytes (backend/memory_model.h), the figure the
// memory accounting reserves, so the arena stays exact.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/common.cuh"  // cudaStream_t

namespace ratchet::cuda {

struct SdpaShape {
  int B = 0, T = 0, NH = 0, KV = 0, HS = 0;
  auto key() const { return std::make_tuple(B, T, NH, KV, HS); }
};

// Why cuDNN's fused attention cannot take this shape ("" when it can): head
// size a multiple of 8 up to 128, KV dividing NH (cuDNN's documented SDPA
// support surface).
const char* cudnn_attention_unsupported(const SdpaShape& s);

// Without a GPU: builds the forward or backward graph's tensor and operation
// descriptors, each finalized (cuDNN validates their attributes on the host;
// a wrong type, mode or missing input fails there), and returns how many
// operations the graph has. The operation graph itself, the heuristics and
// the plan need a device. Tests and `bench_attention --check-graph` use it.
int cudnn_attention_graph_ops(const SdpaShape& s, bool backward);

class CudnnAttention {
 public:
  // Creates the cuDNN handle on `stream`. Needs a device: without one, fails
  // (ratchet::Error) saying --attention cudnn needs a GPU.
  explicit CudnnAttention(cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // out (B,T,NH*HS) and stats (B,NH,T) FP32 from qkv (B,T,(NH+2KV)*HS), all BF16
  // except stats. scratch: cuda_scratch::attention_forward(cudnn, ...) bytes
  // (backend/memory_model.h), 256-byte aligned: the engine workspace.
  void forward(void* out, float* stats, const void* qkv, const SdpaShape& s, void* scratch);
  // dqkv (B,T,(NH+2KV)*HS) overwritten from dout (B,T,NH*HS), qkv, forward's out
  // and stats. scratch: cuda_scratch::attention_backward(cudnn, ...) bytes:
  // dQ's FP32 accumulator (B,NH,T,HS), then the engine workspace.
  void backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                const float* stats, const SdpaShape& s, void* scratch);

  struct Plan;  // an execution plan and the unique ids of its variant pack

 private:
  const Plan& plan(bool backward, const SdpaShape& s);
  void* handle_ = nullptr;  // cudnnHandle_t
  cudaStream_t stream_;
  std::map<std::tuple<bool, int, int, int, int, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace ratchet::cuda

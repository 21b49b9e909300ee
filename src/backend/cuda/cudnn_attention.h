// cuDNN's fused scaled-dot-product attention (flash attention), forward and
// backward, causal, BF16 in and out with FP32 softmax statistics: a thin layer
// over cuDNN's C graph API (cudnn_graph.h backend descriptors; no frontend
// library is packaged). Built only into the real cuda backend, and only when
// CMake finds cuDNN (RATCHET_CUDNN=1); the simt build never links it.
//
// Math (per batch b, query head h, query row i, key rows j <= i; g = h / (NH/KV)):
//   s_ij  = (q_i . k_j) / sqrt(HS)                   (FP32; or a given scale)
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
// Determinism (--deterministic, on by default): on, the backward graph is
// cudnn-frontend's deterministic lowering (sdpa_backward with
// set_deterministic_algorithm(true): its "dP workspace" graph, dQ = dS @ K
// written straight into dQ, no FP32 accumulator that the key blocks add into
// atomically), and only engines without CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
// are taken (forward and backward). Off, the faster backward: dQ accumulated
// in an FP32 (B,NH,T,HS) buffer it is given (zeroed before each call), and
// any engine. The same command then gives different weights run to run.
//
// Plans: one forward and one backward plan per shape (B, T, NH, KV, HS),
// built when first asked (the memory accounting asks for workspace() at
// setup, before step 1) and cached. The engine is the first of cuDNN's
// heuristic list (mode A) that finalizes, is deterministic when asked, and
// whose workspace (CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) fits the free
// device memory (when none does, the one with the smallest workspace: the
// memory accounting, which counts it, then refuses the step naming the
// sizes, and --batch-size auto tries smaller batches); the accounting
// reserves exactly that workspace, so the arena stays exact.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/common.cuh"  // cudaStream_t

namespace ratchet::cuda {

struct SdpaShape {
  int B = 0, T = 0, NH = 0, KV = 0, HS = 0;
  // A sliding window (issue 38; kernels/attn_mask.h): key j is seen from query i
  // iff i - W < j <= i. 0, or W >= T, is plain causal attention.
  int window = 0;
  int band() const { return window > 0 && window < T ? window : 0; }  // the W the graph masks
  auto key() const { return std::make_tuple(B, T, NH, KV, HS, band()); }
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
int cudnn_attention_graph_ops(const SdpaShape& s, bool backward, bool deterministic = true);

class CudnnAttention {
 public:
  // Creates the cuDNN handle on `stream`. Needs a device: without one, fails
  // (ratchet::Error) saying --attention cudnn needs a GPU.
  // deterministic: see the top comment.
  CudnnAttention(cudaStream_t stream, bool deterministic);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // The chosen engine's workspace for this shape (builds the plan if needed).
  size_t workspace(const SdpaShape& s, bool backward);
  // One line per plan built: pass, shape, engine index, workspace, determinism.
  std::string describe_plans() const;
  bool deterministic() const { return deterministic_; }

  // out (B,T,NH*HS) and stats (B,NH,T) FP32 from qkv (B,T,(NH+2KV)*HS), all BF16
  // except stats. scratch: BackendMemoryModel::attention_forward_scratch bytes
  // (backend/memory_model.h), 256-byte aligned: the engine workspace.
  // scale: the score scale (1/sqrt(HS) by default; issue 38's AttnOpts::scale),
  // a runtime scalar of the graph (the plans do not depend on it).
  void forward(void* out, float* stats, const void* qkv, const SdpaShape& s, float scale,
               void* scratch);
  // dqkv (B,T,(NH+2KV)*HS) overwritten from dout (B,T,NH*HS), qkv, forward's out
  // and stats. scratch: BackendMemoryModel::attention_backward_scratch bytes:
  // when not deterministic dQ's FP32 accumulator (B,NH,T,HS), then the engine workspace.
  void backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                const float* stats, const SdpaShape& s, float scale, void* scratch);

  struct Plan;  // an execution plan and the unique ids of its variant pack

 private:
  const Plan& plan(bool backward, const SdpaShape& s);
  void* handle_ = nullptr;  // cudnnHandle_t
  cudaStream_t stream_;
  bool deterministic_;
  std::map<std::tuple<bool, int, int, int, int, int, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace ratchet::cuda

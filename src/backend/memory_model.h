// How a backend allocates memory, as a description that needs no backend:
// allocation rounding, the op scratch (workspace) for a model's shapes, the
// bytes it keeps per parameter besides the storage (an FP32 master copy), and
// what it holds from construction. model/memory.h's step_memory computes a
// step's memory from it; the backends implement alloc()/bytes_in_use() from
// the same description (Backend::memory_model()), and `ratchet plan` uses it
// for devices it cannot create (a100, h100: the cuda description). So the
// plan, the arena size, --batch-size auto and the allocations are one figure.
#pragma once
#include <cstddef>

#include "backend/attention_impl.h"

namespace ratchet {

// Shapes of one micro-batch of a GPT-2 or Llama model, for the scratch its ops need.
// KV: key/value heads (grouped-query attention; 0: NH). H: the Llama SwiGLU
// hidden size (the fc layer is 2H wide; 0: a GPT-2 MLP, 4C). HS: the
// attention head size (0: C/NH); Qwen3's and Gemma 3's head_dim make the
// attention's width NH·HS differ from the model channels C.
struct OpShapes {
  int B = 0, T = 0, C = 0, NH = 0, Vp = 0;
  int KV = 0, H = 0;
  int HS = 0;
  // Issue 38's ops with scratch: the q/k/v bias width (Qwen2.5; 0: none) and
  // the q / k RMSNorm weight lengths (hs each per head, NH·hs and KV·hs full
  // width; 0: no q/k norm).
  int QKVB = 0, QN = 0, KN = 0;
  int head_size() const { return HS > 0 ? HS : NH > 0 ? C / NH : 0; }
  // The attention's q and output width, NH·HS (C when there are no heads).
  int attn_channels() const { return NH > 0 ? NH * head_size() : C; }
};

// The workspace cuDNN's fused attention engines need (--attention cudnn), as
// the execution plans a backend built report it (CUDNN_ATTR_EXECUTION_PLAN_
// WORKSPACE_SIZE). The real cuda backend provides one (its plans are built
// when asked, at setup: the first memory accounting asks); without one (`ratchet
// plan`, no device) the memory model uses cuda_scratch::cudnn_workspace_formula.
class CudnnWorkspaceSource {
 public:
  virtual ~CudnnWorkspaceSource() = default;
  // Bytes of the chosen engine's workspace for the model's shapes s.
  virtual size_t workspace(const OpShapes& s, bool backward) const = 0;
};

struct BackendMemoryModel {
  enum class Workspace { kNone, kCudaOps };
  size_t storage_bytes = 4;          // one storage-dtype element: 4 FP32, 2 BF16
  size_t alloc_align = 64;           // alloc(n) takes round_up(max(n, 1), alloc_align)
  size_t extra_bytes_per_param = 0;  // FP32 master copy of BF16 parameters: 4
  size_t overhead_bytes = 0;         // held from construction (reductions, GEMM workspace)
  Workspace workspace = Workspace::kNone;
  // What attention keeps per layer (activations) and its scratch (workspace).
  AttentionImpl attention = AttentionImpl::flash;
  // --deterministic (cudnn only; every other op is deterministic): on, cuDNN's
  // deterministic backward (dQ written without an FP32 accumulator shared by
  // the key blocks, no accumulator counted); off, the faster backward that
  // accumulates dQ atomically in an FP32 (B,NH,T,HS) buffer it is given.
  bool deterministic = true;
  // cudnn: the engines' real workspace (a device's plans); null: the formula.
  // Not part of ==: the description is the same, the source only measures it.
  const CudnnWorkspaceSource* cudnn_source = nullptr;

  // Whether a MoE layer's state (Backend::moe_state) takes its buffers from
  // alloc() (cuda: device buffers, inside the arena); false: memory of its
  // own (the cpu backend's vectors: moe_state_host below).
  bool moe_state_in_alloc = false;
  // The cpu backend: a MoE state's buffers are host vectors of its own
  // (moe::MoeCache), not alloc() blocks, but bytes_in_use counts what they
  // hold (cpu_moe.cpp), so the step's accounting includes them.
  bool moe_state_host = false;
  // --expert-parallel P (the trainer sets it on its copy): with
  // moe_state_in_alloc, the exchange's buffers for the rows of P ranks
  // (cuda_moe.h's reserve_expert_parallel) and the backward's per-expert
  // scratch for P·N rows. A run's setting, not the backend's: not in ==.
  int expert_parallel = 1;
  // --moe-ep-capacity F (with expert_parallel > 1): the exchange's buffers
  // for the rows one rank receives are reserved for moe_ep_received_rows(N,
  // k, P, F) rows, not the worst case P·N·k. A run's setting, not in ==.
  double ep_capacity = 2.0;
  // Bytes one MoE layer's state takes for N tokens, C channels, E experts,
  // top k, expert hidden size I (0 unless moe_state_in_alloc or
  // moe_state_host). moe_state_host: what moe::MoeCache holds after a forward
  // (the backward's scratch is freed before the step ends); with
  // expert_parallel P > 1 the local experts' rows (xe, h, a, perm) at
  // moe_ep_received_rows and the exchange's bookkeeping. moe_state_in_alloc,
  // from alloc(): every buffer of cuda_moe.h's CudaMoeCache as reserved (the
  // exchange's for moe_ep_received_rows) and the backend's aux-loss buffers,
  // each rounded as alloc() rounds it. A step whose routing needs more than
  // the reservation grows them (docs/moe.md).
  size_t moe_state_bytes(long N, int C, int E, int k, int I) const;
  // The scratch the MoE states of one model share (cuda_moe.h's
  // CudaMoeScratch, from alloc(): the router's logits, the backward's dy,
  // dxp, dw, dlogits and per-expert da, dh for N rows, with P > 1
  // moe_ep_expert_rows, and the exchange's xr, ye for moe_ep_received_rows),
  // counted once per model (step_memory). 0 without moe_state_in_alloc.
  size_t moe_scratch_bytes(long N, int C, int E, int k, int I) const;
  // Bytes one alloc(bytes) really takes.
  size_t alloc_size(size_t bytes) const;
  // Bytes of scratch the ops need at most for these shapes (0: none).
  size_t workspace_bytes(const OpShapes& s) const;
  // The attention ops' scratch (backend/cuda: what attention_forward/backward
  // ask for): cuda_scratch::attention_* for flash and materialized; for cudnn
  // the engine workspace forward, and backward the dQ accumulator (only when
  // not deterministic) then the engine workspace, each rounded to 256 bytes.
  size_t attention_forward_scratch(const OpShapes& s) const;
  size_t attention_backward_scratch(const OpShapes& s) const;
  // cudnn: the engine workspace (the source's, else the formula's).
  size_t cudnn_workspace(const OpShapes& s, bool backward) const;
  bool operator==(const BackendMemoryModel& o) const;
};

// --moe-ep-capacity (docs/moe.md): the received rows one rank's exchange
// buffers are reserved for, per MoE layer: ceil(F·N·k) (computed in double)
// for N tokens per rank, k experts per token, P ranks sharing the experts,
// never more than the P·N·k a rank can receive at most; N·k for P <= 1.
// Balanced routing sends each rank about N·k rows, so F = 2 leaves room for
// twice the balanced load; a step that receives more grows the buffers.
size_t moe_ep_received_rows(long N, int k, int P, double F);
// The most rows one of the rank's experts needs scratch for (the backward's
// per-expert da, dh): one per token of each of the P ranks, and never more
// than the received rows R.
size_t moe_ep_expert_rows(long N, int P, size_t R);

// The cpu backend: FP32, 64-byte aligned blocks, no scratch, no extras.
BackendMemoryModel cpu_memory_model();

// cudaMalloc's alignment, and the cuda backend's accounting unit.
constexpr size_t kCudaAllocAlign = 256;
// What the cuBLASLt wrapper allocates for its GEMMs (llm.c's choice for
// Hopper; plenty for Ampere). 0 under simt, whose GEMMs run on the CPU.
constexpr size_t kCublasLtWorkspaceBytes = 32u << 20;
// The cuda backend with storage_bytes 2 (bf16) or 4 (f32); gemm_workspace is
// kCublasLtWorkspaceBytes on a GPU, 0 under simt.
BackendMemoryModel cuda_memory_model(size_t storage_bytes, size_t gemm_workspace_bytes,
                                     AttentionImpl attention = AttentionImpl::flash,
                                     bool deterministic = true);

// The cuda backend's op scratch, one function per op: each op asks for its
// own figure, and workspace_bytes (kCudaOps) is their maximum over a GPT's shapes.
namespace cuda_scratch {
size_t encoder_backward(int B, int T);
size_t layernorm_backward(int N, int C);
size_t rmsnorm_backward(int N, int C);
// The bias gradient's: the BGRADB epilogue's temporary (OC), or, when
// cuBLASLt lacks that epilogue, the bias_grad kernel's partial sums.
size_t matmul_backward(int N, int OC, bool has_dbias, size_t storage_bytes);
// Flash: none forward (qkv read in place), D (B,NH,T) FP32 backward;
// materialized: the permuted copies and the (B,NH,T,T) probabilities' gradient.
// Grouped-query attention needs the same: the materialized path copies k, v
// out per query head (B,NH,T,HS), flash reads them in place. (cudnn's depends
// on the engine: BackendMemoryModel::attention_*_scratch.)
size_t attention_forward(AttentionImpl a, int B, int T, int C, size_t storage_bytes);
size_t attention_backward(AttentionImpl a, int B, int T, int C, int NH, size_t storage_bytes);
// cuDNN's dQ accumulator (B,NH,T,HS) FP32 (NH*HS = C), rounded to kCudaAllocAlign;
// used only by the nondeterministic backward.
size_t cudnn_dq_accumulator(int B, int T, int C);
// The workspace a cuDNN fused-attention engine is predicted to need, without
// a device (`ratchet plan`; the real backend asks its plans). Fitted to the
// real plans' sizes on an H200 (bench/gpu/results/2026-11-30-h200: 24 sizes,
// 6 shapes, both modes, every one reproduced to the byte; the unit test
// PlanMemoryModel.CudnnWorkspaceFormulaMatchesTheH200Plans holds them), and
// checked on each GPU by CudnnAttentionGpu.WorkspaceFormulaMatchesThePlans:
//   forward                      256 (a 256-byte block, the fprop engines keep
//                                nothing else beyond the stats output)
//   backward                     256 + 4·B·NH·T (an FP32 (B,NH,T) row sum)
//     + grouped-query (KV < NH)  4·B·NH·T·HS: an FP32 (B,NH,T,HS) dQ buffer
//     + deterministic            2·B·NH·ceil64(T)·ceil128(T): the (B,NH,T,T)
//                                BF16 dP workspace of the deterministic
//                                lowering (the query length rounded to 64 and
//                                the key length to 128 on Hopper).
// The H100 record of issue 24 (smollm-135m, NH 9, KV 3, HS 64, B=16, T=1024,
// nondeterministic: "38.3 MB") is 38,338,816 bytes by this formula.
size_t cudnn_workspace_formula(int B, int T, int NH, int KV, int HS, bool backward,
                               bool deterministic);
size_t sum_squares();
size_t max_over_ops(const OpShapes& s, const BackendMemoryModel& m);
}  // namespace cuda_scratch

}  // namespace ratchet

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
// hidden size (the fc layer is 2H wide; 0: a GPT-2 MLP, 4C).
struct OpShapes {
  int B = 0, T = 0, C = 0, NH = 0, Vp = 0;
  int KV = 0, H = 0;
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

  // Bytes one alloc(bytes) really takes.
  size_t alloc_size(size_t bytes) const;
  // Bytes of scratch the ops need at most for these shapes (0: none).
  size_t workspace_bytes(const OpShapes& s) const;
  bool operator==(const BackendMemoryModel& o) const;
};

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
                                     AttentionImpl attention = AttentionImpl::flash);

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
// out per query head (B,NH,T,HS), and flash reads them in place.
size_t attention_forward(AttentionImpl a, int B, int T, int C, size_t storage_bytes);
size_t attention_backward(AttentionImpl a, int B, int T, int C, int NH, size_t storage_bytes);
size_t sum_squares();
size_t max_over_ops(const OpShapes& s, size_t storage_bytes, AttentionImpl a);
}  // namespace cuda_scratch

}  // namespace ratchet

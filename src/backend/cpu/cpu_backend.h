// CpuBackend: the FP32 reference backend (OpenBLAS sgemm + OpenMP).
//
// Storage dtype is FP32, so dptr/cdptr are float* and storage_bytes() == 4.
// Memory is ordinary host memory, 64-byte aligned and zero-filled.
//
// One op family per file, each with a top comment stating its math:
//   cpu_backend.cpp     construction, threads, memory, scratch, the sgemm helper
//   cpu_encoder.cpp     token + position embedding, forward and backward
//   cpu_layernorm.cpp   layernorm, forward and backward
//   cpu_rmsnorm.cpp     RMSNorm (and fused with the residual add), forward and backward
//   cpu_rope.cpp        rotary position embedding on q and k, forward and backward
//   cpu_matmul.cpp      affine layers (bias, GELU epilogue), forward and backward
//   cpu_attention.cpp   causal grouped-query self-attention, blocked (online softmax)
//   cpu_elementwise.cpp GELU, SwiGLU (forward, backward) and the residual add
//   cpu_classifier.cpp  fused softmax + cross-entropy (+ its gradient)
//   cpu_moe.cpp         the Mixture-of-Experts layer (src/moe's ops)
//   cpu_optim.cpp       AdamW and the sum of squares (gradient norm)
//   cpu_math.h          vectorisable exp and GELU shared by the above
//   cpu_norm_grads.h    the weight/bias gradient loop of layernorm and RMSNorm
//
// Threads: every parallel region runs on at most `threads()` OpenMP threads
// with schedule(static), and every reduction has a fixed order, so each op is
// bit-identical run to run for a fixed thread count. OpenBLAS is used
// single-threaded inside OpenMP regions (one thread pool, no oversubscription
// of the cores by two spinning pools); see gemm() in cpu_backend.cpp.
#pragma once
#include <cstddef>
#include <unordered_map>

#include "backend/backend.h"

namespace ratchet {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int threads);  // threads <= 0: all cores
  ~CpuBackend() override;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  std::string name() const override { return "cpu"; }
  const BackendMemoryModel& memory_model() const override { return model_; }
  int threads() const { return threads_; }

  size_t bytes_in_use() const override { return bytes_in_use_; }

  // Backend's memory functions (cpu_backend.cpp) and ops (backend.h), one op
  // family per file as listed above.
#include "backend/backend_ops.inc"
  // Issue 38's and 39's ops are in the list too: cpu_elementwise.cpp,
  // cpu_rmsnorm.cpp, cpu_moe.cpp (src/moe's ops).
  // Qwen2-MoE's gated shared expert (cpu_moe.cpp).
  void shared_gate_forward(dptr out, cdptr x, cdptr g, cdptr y, int N, int C) override;
  void shared_gate_backward(dptr dys, dptr dx, dptr dg, cdptr dy, cdptr x, cdptr g, cdptr y, int N,
                            int C) override;

  // Host bytes the MoE states hold beyond alloc()'s blocks (cpu_moe.cpp),
  // counted in bytes_in_use: a state adds what it grew by, and its end what
  // it held.
  void count_moe_state_bytes(long delta) { bytes_in_use_ = (size_t)((long)bytes_in_use_ + delta); }

 private:
  // C (M,N) = alpha * op(A) @ op(B) + beta * C, row-major, as cblas_sgemm;
  // the M or N range is split across the OpenMP threads, each running a
  // single-threaded sgemm on its block (deterministic: every element of C is
  // reduced over K by one sgemm call).
  void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc);
  // Makes OpenBLAS run each call on its calling thread (set in the
  // constructor; re-asserted before our parallel regions in case other code in
  // the process changed it, which would nest two thread pools).
  static void blas_single_thread();
  // Per-thread scratch of at least `floats_per_thread` floats each, 64-byte
  // aligned; grown (never shrunk) on demand, so hot paths do not allocate.
  float* scratch(size_t floats_per_thread);
  size_t scratch_stride() const { return scratch_stride_; }

  int threads_;
  float* scratch_ = nullptr;
  size_t scratch_stride_ = 0;  // floats per thread in scratch_
  const BackendMemoryModel model_ = cpu_memory_model();  // 64-byte blocks, FP32
  std::unordered_map<void*, size_t> alloc_sizes_;  // live alloc() blocks -> bytes
  size_t bytes_in_use_ = 0;  // sum of alloc_sizes_ and of the MoE states' host bytes
};

}  // namespace ratchet

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
//   cpu_optim.cpp       AdamW and the sum of squares (gradient norm)
//   cpu_math.h          vectorisable exp and GELU shared by the above
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

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  size_t bytes_in_use() const override { return bytes_in_use_; }
  void zero(void* p, size_t bytes) override;
  void upload_f32(dptr dst, const float* src, size_t n) override;
  void download_f32(float* dst, cdptr src, size_t n) override;
  void upload_bytes(void* dst, const void* src, size_t bytes) override;
  void download_bytes(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;

  void encoder_forward(dptr out, const int* inp, cdptr wte, cdptr wpe, int B, int T,
                       int C) override;
  void encoder_backward(dptr dwte, dptr dwpe, cdptr dout, const int* inp, int B, int T,
                        int C) override;
  void layernorm_forward(dptr out, float* mean, float* rstd, cdptr inp, cdptr w, cdptr b, int N,
                         int C) override;
  void layernorm_backward(dptr dinp, dptr dw, dptr db, cdptr dout, cdptr inp, cdptr w,
                          const float* mean, const float* rstd, int N, int C) override;
  void matmul_forward(dptr out, dptr pre_gelu, cdptr inp, cdptr w, cdptr bias, int N, int C,
                      int OC) override;
  void matmul_backward(dptr dinp, dptr dw, dptr dbias, cdptr dout, cdptr inp, cdptr w, int N, int C,
                       int OC) override;
  void attention_forward(dptr out, void* lse, cdptr qkv, int B, int T, int C, int NH,
                         int KV) override;
  void attention_backward(dptr dqkv, cdptr dout, cdptr qkv, cdptr out, const void* lse, int B,
                          int T, int C, int NH, int KV) override;
  void rmsnorm_forward(dptr out, float* rstd, cdptr inp, cdptr w, int N, int C,
                       float eps) override;
  void rmsnorm_backward(dptr dinp, dptr dw, cdptr dout, cdptr inp, cdptr w, const float* rstd,
                        int N, int C) override;
  void residual_rmsnorm_forward(dptr resid, dptr out, float* rstd, cdptr a, cdptr b, cdptr w,
                                int N, int C, float eps) override;
  void rope_forward(dptr qkv, const float* cos_sin, int B, int T, int NH, int KV, int hs,
                    int maxT) override;
  void rope_backward(dptr dqkv, const float* cos_sin, int B, int T, int NH, int KV, int hs,
                     int maxT) override;
  void swiglu_forward(dptr out, cdptr inp, int N, int H) override;
  void swiglu_backward(dptr dinp, cdptr inp, cdptr dout, int N, int H) override;
  void gelu_forward(dptr out, cdptr inp, size_t n) override;
  void gelu_backward(dptr dinp, cdptr inp, cdptr dout, size_t n) override;
  void residual_forward(dptr out, cdptr a, cdptr b, size_t n) override;
  void classifier(dptr logits, float* losses, const int* targets, int BT, int V, int Vp,
                  float dloss) override;
  double sum_squares(cdptr x, size_t n) override;
  void adamw(dptr params, float* master, cdptr grads, float* m, float* v, size_t n,
             const AdamWArgs& a) override;

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
  size_t bytes_in_use_ = 0;                          // sum of alloc_sizes_
};

}  // namespace ratchet

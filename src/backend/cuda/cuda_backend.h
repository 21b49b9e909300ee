// The cuda backend: every Backend op on device memory, GEMMs through the
// matmul wrapper (cuBLASLt, or its CPU stand-in under simt), everything else a
// kernel of kernels/. Templated on the storage type T: bf16 (the training
// configuration: BF16 parameters, activations, gradients) or float (FP32
// storage: the same code path, used to check it tightly against the cpu
// backend). FP32 always: layernorm statistics, losses, AdamW moments, master
// weights.
//
// Master weights: the model's AdamW passes master == nullptr. For BF16
// storage the backend then keeps an FP32 master copy of the allocation that
// holds the parameters (created on the first adamw() from the BF16 values,
// 4 bytes per parameter, counted in bytes_in_use()); adamw() updates it and
// writes the parameters back by stochastic rounding (kernels/adamw.cu) with a
// seed that depends on the step and the tensor's offset. upload_f32() into
// such an allocation also sets the master copy, and download_f32() from it
// returns the master copy, so that checkpoints save and restore FP32 weights.
//
// Scratch: attention's permuted q/k/v and their gradients, the backward
// kernels' reduction scratch, the bias gradient of the GEMM epilogue, live in
// one growable scratch buffer (scratch_bytes()).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/device.h"
#include "backend/cuda/matmul.h"

namespace ratchet::cuda {

template <class T>
class CudaBackend final : public Backend {
 public:
  CudaBackend();
  ~CudaBackend() override;

  std::string name() const override;
  size_t storage_bytes() const override { return sizeof(T); }

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  size_t bytes_in_use() const override { return bytes_in_use_; }
  size_t peak_bytes_in_use() const { return peak_bytes_; }
  size_t scratch_bytes() const { return scratch_bytes_; }
  void zero(void* p, size_t bytes) override;
  void upload_f32(dptr dst, const float* src, size_t n) override;
  void download_f32(float* dst, cdptr src, size_t n) override;
  void upload_bytes(void* dst, const void* src, size_t bytes) override;
  void download_bytes(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;

  void encoder_forward(dptr out, const int* inp, cdptr wte, cdptr wpe, int B, int T_,
                       int C) override;
  void encoder_backward(dptr dwte, dptr dwpe, cdptr dout, const int* inp, int B, int T_,
                        int C) override;
  void layernorm_forward(dptr out, float* mean, float* rstd, cdptr inp, cdptr w, cdptr b, int N,
                         int C) override;
  void layernorm_backward(dptr dinp, dptr dw, dptr db, cdptr dout, cdptr inp, cdptr w,
                          const float* mean, const float* rstd, int N, int C) override;
  void matmul_forward(dptr out, dptr pre_gelu, cdptr inp, cdptr w, cdptr bias, int N, int C,
                      int OC) override;
  void matmul_backward(dptr dinp, dptr dw, dptr dbias, cdptr dout, cdptr inp, cdptr w, int N,
                       int C, int OC) override;
  void attention_forward(dptr out, dptr att, cdptr qkv, int B, int T_, int C, int NH) override;
  void attention_backward(dptr dqkv, cdptr dout, cdptr qkv, cdptr att, int B, int T_, int C,
                          int NH) override;
  void gelu_forward(dptr out, cdptr inp, size_t n) override;
  void gelu_backward(dptr dinp, cdptr inp, cdptr dout, size_t n) override;
  void residual_forward(dptr out, cdptr a, cdptr b, size_t n) override;
  void classifier(dptr logits, float* losses, const int* targets, int BT, int V, int Vp,
                  float dloss) override;
  double sum_squares(cdptr x, size_t n) override;
  void adamw(dptr params, float* master, cdptr grads, float* m, float* v, size_t n,
             const AdamWArgs& a) override;

  size_t free_memory_bytes() const override { return device_info().free_bytes; }
  size_t extra_bytes_per_param() const override { return sizeof(T) == 2 ? sizeof(float) : 0; }
  double peak_tflops() const override;

  Matmul& matmul() { return mm_; }
  // Whether matmul_backward got its bias gradient from the GEMM epilogue
  // (BGRADB) the last time, or from the bias_grad kernel.
  bool last_dbias_by_epilogue() const { return last_dbias_epilogue_; }

 private:
  void* scratch(size_t bytes);
  // The allocation holding p: (base, bytes), or (nullptr, 0).
  std::pair<char*, size_t> owner(const void* p) const;
  float* master_for(const void* params, size_t n);  // FP32 master of params[0, n)

  cudaStream_t stream_ = nullptr;
  Matmul mm_;
  std::map<char*, size_t> allocs_;     // base -> bytes as allocated
  std::map<char*, float*> masters_;    // allocation base -> its FP32 master copy
  size_t bytes_in_use_ = 0, peak_bytes_ = 0;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  double* norm_out_ = nullptr;  // device FP64 result of sum_squares
  bool last_dbias_epilogue_ = false;
};

}  // namespace ratchet::cuda

namespace ratchet {
// storage: "bf16" (default training configuration) or "f32".
std::unique_ptr<Backend> make_cuda_backend(const std::string& storage);
}  // namespace ratchet

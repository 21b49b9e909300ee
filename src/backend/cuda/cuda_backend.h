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
// keep_master_copy(p, ranges) keeps the master of some element ranges of the
// allocation only (ZeRO-1/2: the rank's owned ranges), packed back to back in
// one block of round_up(4·covered, 256) bytes; reads outside them return the
// BF16 values, and adamw()/round_from_master() must stay inside one range.
//
// Attention (--attention): flash keeps lse (B,NH,T) per layer and runs
// kernels/flash_attention.cuh (no permutes, scratch D (B,NH,T) in backward);
// cudnn keeps cuDNN's softmax stats (B,NH,T) FP32 (the same lse) and runs
// cudnn_attention.h (scratch: the engine workspace its plan reports, and with
// --deterministic off dQ's FP32 accumulator in backward); materialized keeps
// att (B,NH,T,T) and runs the cuBLAS path below.
//
// GELU forward (matmul_forward with pre_gelu): BF16 storage through cuBLASLt's
// GELU_AUX(_BIAS) epilogue; FP32 storage as a bias GEMM into pre_gelu, then
// kernels/gelu.cu: the recompute policies recompute GELU with that kernel, so
// the recomputed values are the forward's bit for bit (cuBLASLt's epilogue
// GELU differs from the kernel's in the last bit on a GPU).
//
// Scratch: attention's permuted q/k/v and their gradients, the backward
// kernels' reduction scratch, the bias gradient of the GEMM epilogue, live in
// one scratch buffer (scratch_bytes()). Each op's need is one static function
// (*_scratch below) that both the op and workspace_bytes() call, so that the
// reservation the model makes (reserve_workspace(workspace_bytes(shapes)))
// is exactly what the ops then ask for; an op that needs more still grows the
// buffer (a caller that did not reserve), but a model that reserved never
// grows it.
//
// Memory: bytes_in_use() is everything the backend holds on the device:
//   overhead_bytes()   from construction: sum_squares' FP64 result, and the
//                      cuBLASLt workspace of the matmul wrapper (0 under simt)
//   alloc()s           each rounded up to alloc_size() (256 bytes)
//   master copies      FP32, one per parameter allocation (BF16 storage), rounded;
//                      of its kept ranges only when keep_master_copy named some
//   scratch            scratch_bytes(), rounded
// With use_arena(bytes) every later alloc, master copy and scratch comes out
// of one device block of that size (arena.h); overhead and allocations made
// before stay where they are. bytes_in_use() still counts allocations (not the
// arena's free space): an arena sized bytes_in_use() - overhead_bytes() at
// the end of a step holds that step exactly.
//
// NVTX: range_push/range_pop (the model's op scopes) and a range around each
// GEMM of the matmul wrapper. Under simt there is no profiler: the ranges are
// counted (range_depth(), ranges_opened(), Matmul::ranges_opened()) so that
// tests can check that they are opened and closed.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/attention_choice.h"
#include "backend/backend.h"
#include "backend/cuda/arena.h"
#include "backend/cuda/device.h"
#include "backend/cuda/matmul.h"

namespace ratchet::cuda {

class CudnnAttention;  // cudnn_attention.h (nvcc build with cuDNN only)

template <class T>
class CudaBackend final : public Backend {
 public:
  // attention: --attention (flash: kernels/flash_attention.cuh; materialized:
  // cuBLAS GEMMs around a (B,NH,T,T) softmax; cudnn: cuDNN's fused attention,
  // cudnn_attention.h, BF16 storage on a GPU only: refused with a message under
  // simt, in a build without cuDNN, with FP32 storage, or without a device).
  // deterministic: --deterministic (cudnn's backward; every other op is deterministic).
  explicit CudaBackend(AttentionImpl attention = AttentionImpl::flash, bool deterministic = true);
  ~CudaBackend() override;

  std::string name() const override;
  // cuda_memory_model(sizeof(T), the matmul wrapper's cuBLASLt workspace).
  const BackendMemoryModel& memory_model() const override { return model_; }

  size_t bytes_in_use() const override { return bytes_in_use_; }
  size_t peak_bytes_in_use() const override { return peak_bytes_; }
  void reserve_workspace(size_t bytes) override;
  void use_arena(size_t bytes) override;
  size_t arena_bytes() const { return arena_.size(); }  // 0: no arena
  // A zero-filled block beside the arena, from the device memory it leaves
  // free (the reserve), counted in bytes_in_use and freed by release(): for
  // buffers that outgrow the accounting by design, the MoE exchange's when
  // a step's routing exceeds --moe-ep-capacity (cuda_moe.h). Without an
  // arena: alloc(). Throws Error when the device has no room.
  void* alloc_beyond_arena(size_t bytes);
  size_t scratch_bytes() const { return scratch_bytes_; }
  void keep_master_copy(void* p,
                        const std::vector<std::pair<size_t, size_t>>* ranges = nullptr) override;
  void round_from_master(dptr params, size_t n, int step, size_t round_offset = 0,
                         size_t tensor_offset = (size_t)-1) override;
  float* master_of(cdptr params, size_t n) override;
  void synchronize() override;
  // The --ckpt-async snapshot (ckpt/host_snapshot.h): cudaHostAlloc'ed host
  // memory (simt: plain host memory) and device-to-host copies enqueued on
  // the backend's stream, in order after the ops before them.
  void* alloc_host_pinned(size_t bytes) override { return host_pinned_malloc(bytes); }
  void free_host_pinned(void* p) override { host_pinned_free(p); }
  bool host_memory_pinned() const override { return !RATCHET_SIMT; }
  void download_bytes_async(void* dst, const void* src, size_t bytes) override;
  // One kernel (kernels/layernorm.cuh) instead of the default's two.
  void residual_layernorm_forward(dptr resid, dptr out, float* mean, float* rstd, cdptr a, cdptr b,
                                  cdptr w, cdptr bias, int N, int C) override;
  // Issue 38's ops (in backend_ops.inc): kernels/rmsnorm.cuh (qk_norm),
  // kernels/softcap.cuh (scale, softcap_forward, clip), kernels/geglu.cuh;
  // issue 39's MoE layer: cuda_moe_ops.cpp over cuda_moe.h (its buffers from
  // alloc(), counted by BackendMemoryModel::moe_state_bytes).
  // Backend's memory functions and ops (backend.h), and the fused GEMM + GELU
  // backward (DGELU epilogue).
#include "backend/backend_ops.inc"
  // MoE layers of one model share the scratch (cuda_moe_ops.cpp).
  std::unique_ptr<MoeState> moe_state_beside(const MoeState& sibling) override;
  // Qwen2-MoE's gated shared expert: kernels/moe_router.cuh's
  // moe_shared_gate_*; the backward's scratch is rmsnorm_backward's at the
  // same (N, C), so the op scratch the memory model counts already holds it.
  void shared_gate_forward(dptr out, cdptr x, cdptr g, cdptr y, int N, int C) override;
  void shared_gate_backward(dptr dys, dptr dx, dptr dg, cdptr dy, cdptr x, cdptr g, cdptr y, int N,
                            int C) override;
  void matmul_backward_gelu(dptr dinp, dptr dw, dptr dbias, cdptr dout, cdptr inp, cdptr w,
                            cdptr pre_gelu, int N, int C, int OC) override;
  // BF16 through the GELU epilogue: the GEMM again (bitwise with the forward);
  // otherwise the kernel, as the forward ran it.
  void gelu_recompute(dptr out, dptr pre_gelu, cdptr inp, cdptr w, cdptr bias, int N, int C,
                      int OC) override;
  bool gelu_recompute_reruns_gemm() const override { return last_gelu_epilogue_; }

  size_t free_memory_bytes() const override { return device_info().free_bytes; }
  std::string setup_report(const OpShapes& s) override;
  double peak_tflops() const override;
  double peak_gbps() const override;

  void range_push(const char* name) override;
  void range_pop() override;
  int range_depth() const { return range_depth_; }         // open ranges now
  long ranges_opened() const { return ranges_opened_; }    // range_push calls so far

  Matmul& matmul() { return mm_; }
  // The stream every op is enqueued on (ops outside the class, e.g. cuda_moe.h, launch on it).
  cudaStream_t stream() const { return stream_; }
  // Whether matmul_backward got its bias gradient from the GEMM epilogue
  // (BGRADB) the last time, or from the bias_grad kernel.
  bool last_dbias_by_epilogue() const { return last_dbias_epilogue_; }
  // Whether matmul_backward_gelu got gelu' from the GEMM epilogue (DGELU) the
  // last time, or from the gelu_backward kernel.
  bool last_dgelu_by_epilogue() const { return last_dgelu_epilogue_; }
  // Whether matmul_forward with pre_gelu got GELU from the GEMM epilogue
  // (GELU_AUX_BIAS) the last time, or from the gelu_forward kernel.
  bool last_gelu_by_epilogue() const { return last_gelu_epilogue_; }

  // ---- op scratch (bytes each op asks scratch() for; workspace_bytes is their max) --------
  // The figures are backend/memory_model.h's cuda_scratch functions.
  static size_t encoder_backward_scratch(int B, int T_);
  static size_t layernorm_backward_scratch(int N, int C);
  static size_t rmsnorm_backward_scratch(int N, int C);
  // The bias gradient's: the BGRADB epilogue's temporary (OC), or, when
  // cuBLASLt lacks that epilogue, the bias_grad kernel's partial sums.
  static size_t matmul_backward_scratch(int N, int OC, bool has_dbias);
  static size_t attention_forward_scratch(AttentionImpl a, int B, int T_, int C);
  static size_t attention_backward_scratch(AttentionImpl a, int B, int T_, int C, int NH);
  static size_t sum_squares_scratch();

 private:
  void* scratch(size_t bytes);
  // Device memory for the backend's own bookkeeping: from the arena when there
  // is one, else device_malloc; `rounded` is a multiple of kAllocAlign and is
  // added to bytes_in_use. `what` and `asked` name the request in the error.
  void* take(size_t rounded, const char* what, size_t asked);
  void give(void* p, size_t rounded);
  // Bytes of the FP32 master copy of an allocation of alloc_bytes (as
  // allocated): it covers the whole allocation, rounding included
  // (model/memory.cpp counts it so).
  static size_t master_bytes(size_t alloc_bytes);
  // The two halves of matmul_backward, shared by matmul_backward_gelu:
  // dinp (N,C) = dout @ w [* gelu'(pre_gelu) when pre_gelu is non-null]
  void matmul_backward_dinp(dptr dinp, cdptr dout, cdptr w, cdptr pre_gelu, int N, int C, int OC);
  // dw (OC,C) += dout^T @ inp; dbias (OC) += column sums of dout (if non-null)
  void matmul_backward_dw(dptr dw, dptr dbias, cdptr dout, cdptr inp, int N, int C, int OC);
  // The allocation holding p: (base, bytes), or (nullptr, 0).
  std::pair<char*, size_t> owner(const void* p) const;
  uint32_t rounding_seed(const void* params, int step) const;  // stochastic rounding's seed
  // FP32 master of params[0, n): created (whole) on first use; with kept
  // ranges, [0, n) must lie inside one of them.
  float* master_for(const void* params, size_t n);

  cudaStream_t stream_ = nullptr;
  AttentionImpl attention_;
  // --attention cudnn (RATCHET_CUDNN builds; shared_ptr: its deleter is bound where the type is
  // complete, so the simt build never needs CudnnAttention's definition)
  std::shared_ptr<CudnnAttention> cudnn_;
  std::shared_ptr<CudnnWorkspaceSource> cudnn_ws_;  // cudnn_'s plans, for model_.cudnn_source
  Matmul mm_;
  std::map<char*, size_t> allocs_;     // base -> bytes as allocated
  // An allocation's FP32 master copy: `ranges` (element [lo, hi) of the
  // allocation, sorted, non-empty) packed back to back, range i from
  // data + packed[i]; the whole allocation is the one range [0, elems).
  struct Master {
    float* data = nullptr;
    size_t bytes = 0;  // as taken (rounded)
    std::vector<std::pair<size_t, size_t>> ranges;
    std::vector<size_t> packed;
    // The master of elements [off, off+n) when one range holds them all; null otherwise.
    float* find(size_t off, size_t n) const;
  };
  std::map<char*, Master> masters_;    // allocation base -> its FP32 master copy
  Master& make_master(char* base, size_t bytes, const std::vector<std::pair<size_t, size_t>>* ranges);
  BackendMemoryModel model_;
  size_t bytes_in_use_ = 0, peak_bytes_ = 0;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  double* norm_out_ = nullptr;  // device FP64 result of sum_squares
  char* arena_base_ = nullptr;  // use_arena's block; arena_ keeps its free ranges
  Arena arena_;
  bool last_dbias_epilogue_ = false, last_dgelu_epilogue_ = false, last_gelu_epilogue_ = false;
  int range_depth_ = 0;
  long ranges_opened_ = 0;
};

}  // namespace ratchet::cuda

namespace ratchet {
// storage: "bf16" (default training configuration) or "f32".
std::unique_ptr<Backend> make_cuda_backend(const std::string& storage,
                                           AttentionImpl attention = AttentionImpl::flash,
                                           bool deterministic = true);
// This device as `--attention auto` sees it (backend/attention_choice.h):
// cuda or simt, whether cuDNN is built in, the GPU's name and compute capability.
AttentionDevice cuda_attention_device();
}  // namespace ratchet

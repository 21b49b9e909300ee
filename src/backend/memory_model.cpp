#include "backend/memory_model.h"

#include <algorithm>

#include "kernels/scratch_bytes.h"

namespace ratchet {

namespace {
size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
}  // namespace

size_t BackendMemoryModel::alloc_size(size_t bytes) const {
  return round_up(std::max<size_t>(bytes, 1), alloc_align);
}

size_t BackendMemoryModel::workspace_bytes(const OpShapes& s) const {
  return workspace == Workspace::kCudaOps ? cuda_scratch::max_over_ops(s, storage_bytes, attention)
                                          : 0;
}

bool BackendMemoryModel::operator==(const BackendMemoryModel& o) const {
  return storage_bytes == o.storage_bytes && alloc_align == o.alloc_align &&
         extra_bytes_per_param == o.extra_bytes_per_param &&
         overhead_bytes == o.overhead_bytes && workspace == o.workspace &&
         attention == o.attention;
}

BackendMemoryModel cpu_memory_model() { return BackendMemoryModel{}; }

BackendMemoryModel cuda_memory_model(size_t storage_bytes, size_t gemm_workspace_bytes,
                                     AttentionImpl attention) {
  BackendMemoryModel m;
  m.attention = attention;
  m.storage_bytes = storage_bytes;
  m.alloc_align = kCudaAllocAlign;
  // BF16 storage: the backend keeps an FP32 master copy of the parameters.
  m.extra_bytes_per_param = storage_bytes == 2 ? sizeof(float) : 0;
  // The FP64 result of sum_squares (one cudaMalloc) and cuBLASLt's workspace.
  m.overhead_bytes = m.alloc_size(sizeof(double)) + gemm_workspace_bytes;
  m.workspace = BackendMemoryModel::Workspace::kCudaOps;
  return m;
}

namespace cuda_scratch {

size_t encoder_backward(int B, int T) { return kernels::encoder_backward_scratch_bytes(B, T); }

size_t layernorm_backward(int N, int C) { return kernels::layernorm_backward_scratch_bytes(N, C); }

size_t rmsnorm_backward(int N, int C) { return kernels::rmsnorm_backward_scratch_bytes(N, C); }

size_t matmul_backward(int N, int OC, bool has_dbias, size_t sb) {
  if (!has_dbias) return 0;
  // The epilogue's temporary (its output is overwritten, not accumulated), 16-byte
  // aligned for cuBLASLt; the bias_grad fallback runs after it is dead, so the max.
  return std::max(round_up((size_t)OC * sb, 16), kernels::bias_grad_scratch_bytes(N, OC));
}

size_t attention_forward(AttentionImpl a, int B, int T, int C, size_t sb) {
  if (a != AttentionImpl::materialized) return 0;  // flash reads qkv in place
  // q, k, v, y: (B,NH,T,HS) each, at 256-byte aligned offsets.
  return 4 * round_up((size_t)B * T * C * sb, kCudaAllocAlign);
}

size_t attention_backward(AttentionImpl a, int B, int T, int C, int NH, size_t sb) {
  if (a != AttentionImpl::materialized)
    return kernels::flash_attention_backward_scratch_bytes(B, T, NH);  // D (B,NH,T) FP32
  // q, k, v, dq, dk, dv, dy: (B,NH,T,HS) each; datt (B,NH,T,T).
  return 7 * round_up((size_t)B * T * C * sb, kCudaAllocAlign) +
         round_up((size_t)B * NH * T * T * sb, kCudaAllocAlign);
}

size_t sum_squares() { return kernels::global_norm_scratch_bytes(); }

size_t max_over_ops(const OpShapes& s, size_t sb, AttentionImpl a) {
  if (s.B <= 0 || s.T <= 0 || s.C <= 0) return 0;
  const int BT = s.B * s.T, C = s.C;
  size_t w = sum_squares();
  w = std::max(w, encoder_backward(s.B, s.T));
  w = std::max(w, layernorm_backward(BT, C));
  w = std::max(w, rmsnorm_backward(BT, C));
  w = std::max(w, attention_forward(a, s.B, s.T, C, sb));
  if (s.NH > 0) w = std::max(w, attention_backward(a, s.B, s.T, C, s.NH, sb));
  // matmul_backward (and _gelu) at the model's output widths: qkv 3C (Llama:
  // (NH+2KV)*hs, at most 3C), attproj C, fc 4C (Llama: 2H), fcproj C (the DGELU
  // one), and the lm head Vp. The model's lm head (and Llama's every matmul)
  // has no bias, but a bias is assumed for every width: an upper bound that
  // costs at most (B*T/rows per chunk)*Vp*4 bytes and keeps the reservation
  // valid for any caller of these shapes.
  for (int oc : {C, 3 * C, 4 * C, 2 * s.H, s.Vp})
    if (oc > 0) w = std::max(w, matmul_backward(BT, oc, true, sb));
  return w;
}

}  // namespace cuda_scratch

}  // namespace ratchet

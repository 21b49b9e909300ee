#include "backend/memory_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/scratch_bytes.h"

namespace ratchet {

namespace {
size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
}  // namespace

size_t BackendMemoryModel::alloc_size(size_t bytes) const {
  return round_up(std::max<size_t>(bytes, 1), alloc_align);
}

size_t BackendMemoryModel::workspace_bytes(const OpShapes& s) const {
  return workspace == Workspace::kCudaOps ? cuda_scratch::max_over_ops(s, *this) : 0;
}

size_t BackendMemoryModel::cudnn_workspace(const OpShapes& s, bool backward) const {
  if (cudnn_source) return cudnn_source->workspace(s, backward);
  const int KV = s.KV > 0 ? s.KV : s.NH;
  return cuda_scratch::cudnn_workspace_formula(s.B, s.T, s.NH, KV, s.head_size(), backward,
                                               deterministic);
}

size_t BackendMemoryModel::attention_forward_scratch(const OpShapes& s) const {
  if (attention != AttentionImpl::cudnn)
    return cuda_scratch::attention_forward(attention, s.B, s.T, s.attn_channels(), storage_bytes);
  return round_up(cudnn_workspace(s, false), kCudaAllocAlign);
}

size_t BackendMemoryModel::attention_backward_scratch(const OpShapes& s) const {
  if (attention != AttentionImpl::cudnn)
    return cuda_scratch::attention_backward(attention, s.B, s.T, s.attn_channels(), s.NH,
                                            storage_bytes);
  const size_t acc =
      deterministic ? 0 : cuda_scratch::cudnn_dq_accumulator(s.B, s.T, s.attn_channels());
  return acc + round_up(cudnn_workspace(s, true), kCudaAllocAlign);
}

bool BackendMemoryModel::operator==(const BackendMemoryModel& o) const {
  return storage_bytes == o.storage_bytes && alloc_align == o.alloc_align &&
         extra_bytes_per_param == o.extra_bytes_per_param &&
         overhead_bytes == o.overhead_bytes && workspace == o.workspace &&
         attention == o.attention && deterministic == o.deterministic &&
         moe_state_in_alloc == o.moe_state_in_alloc && moe_state_host == o.moe_state_host;
}

BackendMemoryModel cpu_memory_model() {
  BackendMemoryModel m;
  m.moe_state_host = true;
  return m;
}

size_t moe_ep_received_rows(long N, int k, int P, double F) {
  const size_t Nk = (size_t)std::max(N, 0L) * (size_t)std::max(k, 0);
  if (P <= 1) return Nk;
  const double cap = std::ceil(std::max(F, 1.0) * (double)Nk);
  return std::min((size_t)P * Nk, (size_t)cap);
}

size_t moe_ep_expert_rows(long N, int P, size_t R) {
  return std::min((size_t)std::max(P, 1) * (size_t)std::max(N, 0L), R);
}

size_t BackendMemoryModel::moe_state_bytes(long N, int C, int E, int k, int I) const {
  const int P = std::max(expert_parallel, 1);
  if (moe_state_host) {
    // moe::MoeCache's vectors, each sized exactly by its first forward:
    // logits, probs (N,E); w, idx (N,k); the dispatch's counts (E), offsets
    // (E+1), slot_of, row_of (N*k); xp, y (N*k,C), h (N*k,2I), a (N*k,I).
    const size_t n = (size_t)N, Nk = n * k, f = sizeof(float), i = sizeof(int);
    const size_t base = 2 * n * E * f + Nk * (f + i) + (size_t)(2 * E + 1) * i + 2 * Nk * i +
                        Nk * (size_t)2 * C * f;
    if (P <= 1) return base + Nk * 3 * (size_t)I * f;
    // --expert-parallel P (cpu_moe.cpp reserves them): h (R,2I), a (R,I),
    // the received rows xe (R,C) and perm (R) for R = moe_ep_received_rows;
    // the exchange's bookkeeping: recv_split (E ints), send_n and recv_n (P
    // size_t each), the local dispatch's counts (E/P) and offsets (E/P + 1).
    const size_t R = moe_ep_received_rows(N, k, P, ep_capacity), El = (size_t)E / P;
    return base + R * ((size_t)3 * I + C) * f + R * i + (size_t)E * i +
           2 * (size_t)P * sizeof(size_t) + (2 * El + 1) * i;
  }
  if (!moe_state_in_alloc) return 0;
  const size_t tb = storage_bytes, Nk = (size_t)N * k, n = (size_t)N;
  // CudaMoeCache::need asks for at least 16 bytes (never a null buffer).
  auto a = [&](size_t bytes) { return alloc_size(std::max<size_t>(bytes, 16)); };
  // kernels::moe_dispatch_scratch_bytes: one (E+1) row of int counts per
  // 256-slot chunk.
  const size_t chunks = std::max<size_t>(1, (Nk + 255) / 256);
  // --expert-parallel: the exchange holds perm and its inverse (R ints), xe
  // (R,C), he (R,2I), ae (R,I) for the R = moe_ep_received_rows rows
  // reserved (--moe-ep-capacity); its xr, ye are scratch (below).
  const size_t R = moe_ep_received_rows(N, k, P, ep_capacity);
  const size_t ep = P > 1 ? 2 * a(R * 4) + a(R * C * tb) + a(R * 2 * I * tb) + a(R * I * tb) : 0;
  return ep + a(n * E * 4) + a(Nk * 4) + a(Nk * 4)                     // probs w idx
         + 2 * a((size_t)(E + 1) * 4) + 2 * a(Nk * 4)                  // counts offsets row_of slot_of
         + a(chunks * (E + 1) * 4)                                     // dispatch scratch
         + a(Nk * C * tb) + a(Nk * C * tb)                             // xp y
         + (P > 1 ? 0 : a(Nk * 2 * I * tb) + a(Nk * I * tb))           // h a (P > 1: in he, ae)
         + a((size_t)E * 2 * 4) + a((size_t)E * 2 * 8);  // aux dprob | selection bias, statistics
}

size_t BackendMemoryModel::moe_scratch_bytes(long N, int C, int E, int k, int I) const {
  if (!moe_state_in_alloc) return 0;  // the cpu backend's scratch is freed inside each call
  const int P = std::max(expert_parallel, 1);
  const size_t tb = storage_bytes, Nk = (size_t)N * k, n = (size_t)N;
  auto a = [&](size_t bytes) { return alloc_size(std::max<size_t>(bytes, 16)); };
  // --expert-parallel: the exchange's xr, ye (R,C); one expert's rows (da,
  // dh) come from P ranks.
  const size_t R = moe_ep_received_rows(N, k, P, ep_capacity);
  const size_t ep = P > 1 ? 2 * a(R * C * tb) : 0;
  const size_t rows1 = P > 1 ? moe_ep_expert_rows(N, P, R) : n;
  return ep + a(n * E * tb)                                            // logits
         + 2 * a(Nk * C * tb) + a(Nk * 4) + a(n * E * tb)              // dy dxp dw dlogits
         + a(rows1 * I * tb) + a(rows1 * 2 * I * tb);                  // da dh
}

BackendMemoryModel cuda_memory_model(size_t storage_bytes, size_t gemm_workspace_bytes,
                                     AttentionImpl attention, bool deterministic) {
  BackendMemoryModel m;
  m.attention = attention;
  m.deterministic = deterministic;
  m.storage_bytes = storage_bytes;
  m.alloc_align = kCudaAllocAlign;
  // BF16 storage: the backend keeps an FP32 master copy of the parameters.
  m.extra_bytes_per_param = storage_bytes == 2 ? sizeof(float) : 0;
  // The FP64 result of sum_squares (one cudaMalloc) and cuBLASLt's workspace.
  m.overhead_bytes = m.alloc_size(sizeof(double)) + gemm_workspace_bytes;
  m.workspace = BackendMemoryModel::Workspace::kCudaOps;
  m.moe_state_in_alloc = true;
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

size_t cudnn_dq_accumulator(int B, int T, int C) {
  return round_up((size_t)B * T * C * sizeof(float), kCudaAllocAlign);
}

size_t cudnn_workspace_formula(int B, int T, int NH, int KV, int HS, bool backward,
                               bool deterministic) {
  constexpr size_t kBlock = 256;  // every plan's, forward and backward
  if (!backward) return kBlock;
  const size_t rows = (size_t)B * NH * T;  // one FP32 per query row: the dO.O row sums
  size_t ws = kBlock + 4 * rows;
  if (KV < NH) ws += 4 * rows * (size_t)HS;  // grouped-query: dQ in FP32
  if (deterministic) ws += 2 * (size_t)B * NH * round_up(T, 64) * round_up(T, 128);
  return ws;
}

size_t attention_forward(AttentionImpl a, int B, int T, int C, size_t sb) {
  if (a != AttentionImpl::materialized) return 0;  // flash reads qkv in place
  // q, k, v, y: (B,NH,T,HS) each, at 256-byte aligned offsets.
  return 4 * round_up((size_t)B * T * C * sb, kCudaAllocAlign);
}

size_t attention_backward(AttentionImpl a, int B, int T, int C, int NH, size_t sb) {
  if (a == AttentionImpl::flash)
    return kernels::flash_attention_backward_scratch_bytes(B, T, NH);  // D (B,NH,T) FP32
  // q, k, v, dq, dk, dv, dy: (B,NH,T,HS) each; datt (B,NH,T,T).
  return 7 * round_up((size_t)B * T * C * sb, kCudaAllocAlign) +
         round_up((size_t)B * NH * T * T * sb, kCudaAllocAlign);
}

size_t sum_squares() { return kernels::global_norm_scratch_bytes(); }

size_t max_over_ops(const OpShapes& s, const BackendMemoryModel& m) {
  if (s.B <= 0 || s.T <= 0 || s.C <= 0) return 0;
  const int BT = s.B * s.T, C = s.C;
  const size_t sb = m.storage_bytes;
  size_t w = sum_squares();
  w = std::max(w, encoder_backward(s.B, s.T));
  w = std::max(w, layernorm_backward(BT, C));
  w = std::max(w, rmsnorm_backward(BT, C));
  if (s.NH > 0 || m.attention != AttentionImpl::cudnn) w = std::max(w, m.attention_forward_scratch(s));
  if (s.NH > 0) w = std::max(w, m.attention_backward_scratch(s));
  // The bias gradients of matmul_backward (and _gelu), at the widths of the
  // matmuls that have a bias: GPT-2's qkv 3C, attproj C, fc 4C, fcproj C (the
  // DGELU one). The lm head has no bias, nor has any Llama matmul (H > 0)
  // but Qwen2.5's q/k/v projection (QKVB), so only that one is counted then.
  if (s.H <= 0)
    for (int oc : {C, 3 * C, 4 * C}) w = std::max(w, matmul_backward(BT, oc, true, sb));
  if (s.QKVB > 0) w = std::max(w, matmul_backward(BT, s.QKVB, true, sb));  // Qwen2.5's q/k/v bias
  if (s.QN > 0) w = std::max(w, kernels::qk_norm_backward_scratch_bytes(BT, s.QN, s.KN));
  return w;
}

}  // namespace cuda_scratch

}  // namespace ratchet

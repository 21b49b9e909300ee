// Attention implementations (`--attention`) and what each keeps per layer.
//
// Forward keeps, per layer, what its backward needs besides q, k, v and the
// output (which the model keeps anyway):
//   flash          FlashAttention-2 (kernels/flash_attention.cuh; the cpu
//                  backend's blocked attention is the same scheme):
//                  lse (B,NH,T) FP32, the log-sum-exp of each row of scores
//   cudnn          cuDNN's fused SDPA: its softmax stats, also (B,NH,T) FP32
//   materialized   the probabilities att (B,NH,T,T) in the storage dtype
// attention_saved_bytes() is the one formula for that size: the model's
// activation layout and `ratchet plan` both use it, so accounting is exact.
#pragma once
#include <cstddef>
#include <string>

namespace ratchet {

enum class AttentionImpl { flash = 0, cudnn = 1, materialized = 2 };

inline const char* attention_name(AttentionImpl a) {
  switch (a) {
    case AttentionImpl::flash: return "flash";
    case AttentionImpl::cudnn: return "cudnn";
    case AttentionImpl::materialized: return "materialized";
  }
  return "?";
}

// Bytes one layer keeps for attention backward (sb: storage bytes per element).
inline size_t attention_saved_bytes(AttentionImpl a, size_t B, size_t NH, size_t T, size_t sb) {
  if (a == AttentionImpl::materialized) return B * NH * T * T * sb;
  return B * NH * T * sizeof(float);
}

// "flash" | "cudnn" | "materialized"; throws Error naming --attention otherwise.
AttentionImpl parse_attention(const std::string& name);

}  // namespace ratchet

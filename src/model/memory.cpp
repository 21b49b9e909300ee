#include "model/memory.h"

#include <algorithm>

#include "core/error.h"
#include "model/gpt.h"
#include "model/param_layout.h"

namespace ratchet {

StepMemory step_memory(const GPTConfig& cfg, int B, int T, const Recompute& policy,
                       const BackendMemoryModel& be, size_t moment_elems,
                       size_t dp_buffer_bytes, bool flat_grads, bool flat_params,
                       bool sharded_master, int expert_shards) {
  const size_t P = ParamLayout(cfg, expert_shards).total, sb = be.storage_bytes;
  StepMemory m;
  m.params = flat_params ? be.alloc_size(P * sb) : 0;
  m.grads = flat_grads ? be.alloc_size(P * sb) : 0;
  m.activations = be.alloc_size(GPT::activation_bytes(cfg, B, T, sb, policy, be.attention));
  const size_t ws = be.workspace_bytes(op_shapes(cfg, B, T));
  m.workspace = ws ? be.alloc_size(ws) : 0;
  m.moments = 2 * be.alloc_size(std::max<size_t>(1, moment_elems) * sizeof(float));
  // The master copy covers the whole parameter allocation (as rounded), or
  // with sharded_master the owned elements packed (one allocation, at least
  // 1 element as the backend rounds it). None without flat params: ZeRO-3's
  // shard has its own, in dp_buffers.
  if (be.extra_bytes_per_param > 0 && m.params > 0)
    m.master = sharded_master
                   ? be.alloc_size(std::max<size_t>(1, moment_elems) * be.extra_bytes_per_param)
                   : be.alloc_size(m.params / sb * be.extra_bytes_per_param);
  m.dp_buffers = dp_buffer_bytes;
  if (cfg.moe()) {
    int states = 0, shared = 0;
    for (int l = 0; l < cfg.num_layers; l++) {
      if (!cfg.layer_is_moe(l)) continue;
      if (policy.recomputes_block(l))
        shared = 1;
      else
        states++;
    }
    // One state per layer the policy keeps, one for those it recomputes, and
    // the scratch they share (GPT::moe_state) once.
    const long N = (long)B * T;
    const int C = cfg.channels, E = cfg.num_experts, k = cfg.experts_per_tok,
              I = cfg.moe_ffn_hidden;
    if (states + shared > 0)
      m.moe = (size_t)(states + shared) * be.moe_state_bytes(N, C, E, k, I) +
              be.moe_scratch_bytes(N, C, E, k, I);
  }
  m.overhead = be.overhead_bytes;
  return m;
}

void check_step_in_range(const GPTConfig& c, long B, int T) {
  const double C = c.channels, L = c.num_layers, V = c.padded_vocab, NH = c.num_heads,
               H = std::max(c.ffn(), c.shared_ffn());  // the MLP buffers' width (gpt.cpp)
  // Everything a step holds is below ~40 bytes per parameter (FP32 params,
  // grads, master, m, v) plus the activations (< 40 values per token, layer
  // and channel, the attention matrix, the logits), at 4 bytes.
  const double params = c.param_count();
  const double acts = (double)B * T * (L * (40 * C + 4 * H + 2 * NH * T) + 2 * V) * 4;
  const double limit = 9.2e18;  // 2^63 bytes
  if (params * 40 > limit || acts > limit)
    fail("the model (", c.describe(), ") has ", params, " parameters, and a step at B=", B, " T=", T,
         " ", acts, " bytes of activations: out of range (byte counts must fit in 64 bits); choose a "
         "smaller model or batch (--batch-size, --seq-len)");
}

size_t device_memory_reserve(size_t free_bytes) {
  const size_t floor = (size_t)1 << 30;  // 1 GiB: NCCL's buffers for one more algorithm
                                         // (NVLS on H100 NVSwitch ~0.5 GiB) plus modules
  return std::max(floor, free_bytes / 20);
}

}  // namespace ratchet

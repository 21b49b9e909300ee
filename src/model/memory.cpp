#include "model/memory.h"

#include <algorithm>

#include "model/gpt.h"
#include "model/param_layout.h"

namespace ratchet {

StepMemory step_memory(const GPTConfig& cfg, int B, int T, const Recompute& policy,
                       const BackendMemoryModel& be, size_t moment_elems,
                       size_t dp_buffer_bytes) {
  const size_t P = ParamLayout(cfg).total, sb = be.storage_bytes;
  StepMemory m;
  m.params = be.alloc_size(P * sb);
  m.grads = be.alloc_size(P * sb);
  m.activations = be.alloc_size(GPT::activation_bytes(cfg, B, T, sb, policy));
  const size_t ws = be.workspace_bytes(op_shapes(cfg, B, T));
  m.workspace = ws ? be.alloc_size(ws) : 0;
  m.moments = 2 * be.alloc_size(std::max<size_t>(1, moment_elems) * sizeof(float));
  // The master copy covers the whole parameter allocation (as rounded).
  if (be.extra_bytes_per_param > 0)
    m.master = be.alloc_size(m.params / sb * be.extra_bytes_per_param);
  m.dp_buffers = dp_buffer_bytes;
  m.overhead = be.overhead_bytes;
  return m;
}

}  // namespace ratchet

// Every non-attention launcher of one training step, dry-run (kernels/
// common.cuh: checked and recorded, not run) at a given shape; and the
// largest shapes the tests and the ptxas launch check use
// (tests/simt/test_launch_limits.cpp, simt_launch_table).
#pragma once
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/adamw.cuh"
#include "kernels/bias_grad.cuh"
#include "kernels/cast.cuh"
#include "kernels/classifier.cuh"
#include "kernels/encoder.cuh"
#include "kernels/geglu.cuh"
#include "kernels/gelu.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/moe_dispatch.cuh"
#include "kernels/moe_router.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"
#include "kernels/softcap.cuh"
#include "kernels/swiglu.cuh"

namespace ratchet::testing::launch {

using namespace ratchet::kernels;

// A fake, 256-byte aligned, never dereferenced "device" pointer (dry runs).
template <class T>
inline T* fake() {
  return reinterpret_cast<T*>(uintptr_t(1) << 40);
}

struct Shape {
  const char* name;
  int B, T, C, Vp;
  size_t params;
};

// Every non-attention launcher of one training step at shape s, dry-run.
template <class T>
inline std::vector<LaunchRecord> dry_run_step(const Shape& s) {
  LaunchDryRun dry;
  const int BT = s.B * s.T, C = s.C;
  T* p = fake<T>();
  float* f = fake<float>();
  int* ids = fake<int>();
  encoder_forward<T>(p, ids, p, p, s.B, s.T, C, nullptr);
  encoder_backward<T>(p, p, f, p, ids, s.B, s.T, C, nullptr);
  layernorm_forward<T>(p, f, f, p, p, p, BT, C, nullptr);
  residual_layernorm_forward<T>(p, p + 1024, f, f, p, p, p, p, BT, C, nullptr);
  // dinp must not alias dout or inp (the backward kernels' __restrict__).
  // One warp per row at d12 in BF16 (C = 768), a team of warps otherwise.
  layernorm_backward<T>(p + 2048, p, p, f, p, p, p, f, f, BT, C, nullptr);
  residual_forward<T>(p, p, p, (size_t)BT * C, nullptr);
  gelu_forward<T>(p, p, (size_t)BT * 4 * C, nullptr);
  gelu_backward<T>(p, p, p, (size_t)BT * 4 * C, nullptr);
  bias_grad<T>(p, f, p, BT, 4 * C, nullptr);
  // Llama ops at the same width: head size 64 (KV = NH, the most rotated
  // pairs), SwiGLU hidden 4C (wider than any preset's 8/3 C).
  rmsnorm_forward<T>(p, f, p, p, BT, C, 1e-5f, nullptr);
  residual_rmsnorm_forward<T>(p, p + 1024, f, p, p, p, BT, C, 1e-5f, nullptr);
  rmsnorm_backward<T>(p + 2048, p, f, p, p, p, f, BT, C, nullptr);
  rope_forward<T>(p, f, s.B, s.T, C / 64, C / 64, 64, s.T, nullptr);
  rope_backward<T>(p, f, s.B, s.T, C / 64, C / 64, 64, s.T, nullptr);
  swiglu_forward<T>(p, p, BT, 4 * C, nullptr);
  swiglu_backward<T>(p, p, p, BT, 4 * C, nullptr);
  // Issue 38's ops at the same width: the (1+w) norms, q/k norms per head
  // (the most warps per row) and full width, GeGLU, the embedding scale and
  // the final soft-cap over the whole logits.
  rmsnorm_forward<T>(p, f, p, p, BT, C, 1e-6f, nullptr, 1.0f);
  rmsnorm_backward<T>(p + 2048, p, f, p, p, p, f, BT, C, nullptr, 1.0f);
  for (bool per_head : {true, false}) {
    qk_norm_forward<T>(p + 2048, f, p, p, p, BT, C / 64, C / 64, 64, per_head, 1e-6f, 1.0f,
                       nullptr);
    qk_norm_backward<T>(p + 2048, p, p, f, p, p, p, p, f, BT, C / 64, C / 64, 64, per_head,
                        1.0f, nullptr);
  }
  geglu_forward<T>(p, p, BT, 4 * C, nullptr);
  geglu_backward<T>(p, p, p, BT, 4 * C, nullptr);
  scale<T>(p, (size_t)BT * C, 40.0f, nullptr);
  softcap_forward<T>(p, (size_t)BT * s.Vp, 30.0f, nullptr);
  // OLMoE's clip_qkv on a projection of 3C.
  clip_forward<T>(p, p, (size_t)BT * 3 * C, 8.0f, nullptr);
  clip_backward<T>(p, p, (size_t)BT * 3 * C, 8.0f, nullptr);
  fused_classifier<T>(p, f, ids, BT, s.Vp - 47, s.Vp, 1.0f / BT, nullptr);
  fused_classifier<T>(p, f, ids, BT, s.Vp - 47, s.Vp, 1.0f / BT, nullptr, 30.0f);
  // Mixture-of-Experts at Qwen3-30B-A3B's routing (E 128, k 8) on every token.
  const int E = 128, k = 8;
  moe_router_forward<T>(f, ids, f, p, BT, E, k, true, nullptr);
  moe_router_backward<T>(p, f, ids, f, f, f, BT, E, k, true, nullptr);
  moe_aux_stats(fake<double>(), fake<double>(), f, ids, BT, E, k, nullptr);
  moe_dispatch(ids, ids, ids, ids, f, ids, BT * k, E, nullptr);
  moe_gather<T>(p, p, ids, BT * k, k, C, nullptr);
  moe_gather_backward<T>(p, p, ids, BT, k, C, nullptr);
  moe_combine<T>(p, f, p, ids, BT, k, C, nullptr);
  moe_combine_backward<T>(p, f, p, f, p, ids, BT, k, C, nullptr);
  // Qwen2-MoE's shared-expert gate on every token.
  moe_shared_gate_forward<T>(p, p, p, p, BT, C, nullptr);
  moe_shared_gate_backward<T>(p, p, p, f, p, p, p, p, BT, C, nullptr);
  AdamWHyper h;
  adamw_update<T>(p, std::is_same<T, float>::value ? nullptr : f, p, f, f, s.params, h, 1,
                  nullptr);
  global_norm_squared<T>(fake<double>(), f, p, s.params, nullptr);
  cast<float, T>(f, p, s.params, nullptr);
  return dry.launches;
}

// The largest shapes: d48 (C 1600, 1.56e9 parameters) at B=64, T=1024 (what
// an H200 holds with recompute blocks); d12 at B=512, T=1024 (B*T = 2^19
// rows, the MLP's B*T*4C = 1.6e9 elements, B*T*Vp = 2.6e10).
inline const Shape kShapes[] = {{"d48 B64 T1024", 64, 1024, 1600, 50304, 1557611200},
                         {"d12 B512 T1024", 512, 1024, 768, 50304, 124475904}};

}  // namespace ratchet::testing::launch

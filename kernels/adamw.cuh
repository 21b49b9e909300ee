// AdamW with FP32 master weights; BF16 parameters by stochastic rounding.
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

struct AdamWHyper {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int step = 1;             // 1-based, for bias correction
  float grad_scale = 1.0f;  // multiplies the gradient first (clipping, averaging)
  size_t index_base = 0;    // the rounding's index of params[0] (its place in its tensor)
};

// params (n) storage, master (n) FP32 or null, grads (n), m, v (n) FP32.
// m, v, master, params updated in place. master may be null only for FP32
// params (params are then the master copy). BF16 params are the master value
// stochastically rounded with random bits hash(index_base + i, seed).
template <class T>
void adamw_update(T* params, float* master, const T* grads, float* m, float* v, size_t n,
                  const AdamWHyper& h, uint32_t seed, cudaStream_t stream);

// params (n) = master (n) rounded exactly as adamw_update with this seed
// rounds it (stochastic rounding for BF16, a copy for FP32): rebuilds the
// storage-dtype parameters of a resumed run from its FP32 master weights.
template <class T>
void round_from_master(T* params, const float* master, size_t n, uint32_t seed,
                       cudaStream_t stream, size_t index_base = 0);

// Bytes a call must move at least: grads, m, v and master read; m, v, master
// and params written (without master, FP32 params read and written instead).
// bench/kernels reports GB/s against it.
inline double adamw_bytes(size_t n, size_t s, bool master) {
  return (double)n * (master ? 2.0 * s + 24.0 : 3.0 * s + 16.0);
}

}  // namespace ratchet::kernels

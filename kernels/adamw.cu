// AdamW, element-wise in FP32 (t = step, 1-based):
//   g = grad_scale * grad
//   m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2                 m, v overwritten
//   p = master (or params when master is null)
//   p -= lr * ((m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + weight_decay * p)
//   master = p ; params = round(p)                               overwritten
// round is the identity for FP32 params and stochastic rounding to BF16
// otherwise (unbiased: E[params] = master), with random bits hash(i, seed) so
// that a given (seed, i) always rounds the same way.
#include <cmath>

#include "adamw.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

template <class T>
__device__ __forceinline__ T round_param(float p, size_t i, uint32_t seed);
template <>
__device__ __forceinline__ float round_param<float>(float p, size_t, uint32_t) {
  return p;
}
template <>
__device__ __forceinline__ bf16 round_param<bf16>(float p, size_t i, uint32_t seed) {
  return stochastic_round_bf16(p, hash_u32((uint32_t)i ^ (uint32_t)(i >> 32) * 0x27d4eb2fu, seed));
}

template <class T>
__global__ void adamw_kernel(T* params, float* master, const T* grads, float* m, float* v,
                             size_t n, float lr, float beta1, float beta2, float bc1, float bc2,
                             float eps, float wd, float grad_scale, uint32_t seed) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float g = grad_scale * to_f32(grads[i]);
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = master ? master[i] : to_f32(params[i]);
    p -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p);
    if (master) master[i] = p;
    params[i] = round_param<T>(p, i, seed);
  }
}

template <class T>
__global__ void round_from_master_kernel(T* params, const float* master, size_t n,
                                         uint32_t seed) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    params[i] = round_param<T>(master[i], i, seed);
}

// ==== launchers ==================================================================================

template <class T>
void adamw_update(T* params, float* master, const T* grads, float* m, float* v, size_t n,
                  const AdamWHyper& h, uint32_t seed, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("adamw_update");
  if (n == 0) return;
  RATCHET_REQUIRE(h.step >= 1, "adamw_update: step is 1-based");
  RATCHET_REQUIRE(master != nullptr || (std::is_same<T, float>::value),
                  "adamw_update: BF16 parameters need FP32 master weights");
  const float bc1 = (float)(1.0 - std::pow((double)h.beta1, h.step));
  const float bc2 = (float)(1.0 - std::pow((double)h.beta2, h.step));
  const int block = 256;
  unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(n, block), 65536);
  RATCHET_LAUNCH((adamw_kernel<T>), grid, block, 0, stream, params, master, grads, m, v, n, h.lr,
                 h.beta1, h.beta2, bc1, bc2, h.eps, h.weight_decay, h.grad_scale, seed);
  RATCHET_CHECK_LAUNCH();
}

template void adamw_update<float>(float*, float*, const float*, float*, float*, size_t,
                                  const AdamWHyper&, uint32_t, cudaStream_t);
template void adamw_update<bf16>(bf16*, float*, const bf16*, float*, float*, size_t,
                                 const AdamWHyper&, uint32_t, cudaStream_t);

template <class T>
void round_from_master(T* params, const float* master, size_t n, uint32_t seed,
                       cudaStream_t stream) {
  RATCHET_NVTX_RANGE("round_from_master");
  if (n == 0) return;
  const int block = 256;
  unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(n, block), 65536);
  RATCHET_LAUNCH((round_from_master_kernel<T>), grid, block, 0, stream, params, master, n, seed);
  RATCHET_CHECK_LAUNCH();
}

template void round_from_master<float>(float*, const float*, size_t, uint32_t, cudaStream_t);
template void round_from_master<bf16>(bf16*, const float*, size_t, uint32_t, cudaStream_t);

}  // namespace ratchet::kernels

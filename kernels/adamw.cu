// AdamW, element-wise in FP32 (t = step, 1-based):
//   g = grad_scale * grad
//   m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2                 m, v overwritten
//   p = master (or params when master is null)
//   p -= lr * ((m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + weight_decay * p)
//   master = p ; params = round(p)                               overwritten
// One pass: each array is read (grads, m, v, master) or written (m, v, master,
// params) once, 4 elements per thread (16-byte FP32 accesses) when aligned.
// Bytes per call: adamw_bytes (adamw.cuh).
// round is the identity for FP32 params and stochastic rounding to BF16
// otherwise (unbiased: E[params] = master), with random bits hash(i, seed) so
// that a given (seed, i) always rounds the same way; i = index_base + the
// element's index in the call (index_base: where a piece starts in its tensor,
// so that a tensor updated in pieces rounds as when updated whole).
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

// kVec elements per thread and step, each array accessed as one vector of kVec
// (16 bytes for the FP32 arrays at kVec = 4): every byte is read or written
// once, in as few accesses as the types allow. The update of element i is the
// same arithmetic whatever kVec (the same bits as kVec = 1).
template <class U, int N>
struct alignas(N * sizeof(U)) VecN {
  U v[N];
};
template <class T, int kVec>
__global__ void adamw_kernel(T* __restrict__ params, float* __restrict__ master,
                             const T* __restrict__ grads, float* __restrict__ m,
                             float* __restrict__ v, size_t n_vec, float lr, float beta1,
                             float beta2, float bc1, float bc2, float eps, float wd,
                             float grad_scale, uint32_t seed, size_t base) {
  using VF = VecN<float, kVec>;
  using VT = VecN<T, kVec>;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n_vec; j += stride) {
    const VT gv = reinterpret_cast<const VT*>(grads)[j];
    VF mv = reinterpret_cast<const VF*>(m)[j], vv = reinterpret_cast<const VF*>(v)[j], pv;
    VT out;
    if (master) pv = reinterpret_cast<const VF*>(master)[j];
    else {
      const VT cur = reinterpret_cast<const VT*>(params)[j];
      for (int k = 0; k < kVec; k++) pv.v[k] = to_f32(cur.v[k]);
    }
    for (int k = 0; k < kVec; k++) {
      const float g = grad_scale * to_f32(gv.v[k]);
      const float mi = beta1 * mv.v[k] + (1.0f - beta1) * g;
      const float vi = beta2 * vv.v[k] + (1.0f - beta2) * g * g;
      mv.v[k] = mi;
      vv.v[k] = vi;
      float p = pv.v[k];
      p -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p);
      pv.v[k] = p;
      out.v[k] = round_param<T>(p, base + j * kVec + k, seed);
    }
    reinterpret_cast<VF*>(m)[j] = mv;
    reinterpret_cast<VF*>(v)[j] = vv;
    if (master) reinterpret_cast<VF*>(master)[j] = pv;
    reinterpret_cast<VT*>(params)[j] = out;
  }
}

template <class T>
__global__ void round_from_master_kernel(T* params, const float* master, size_t n,
                                         uint32_t seed, size_t base) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    params[i] = round_param<T>(master[i], base + i, seed);
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
  // 4 elements per thread when every array allows it (n % 4 == 0, 16-byte
  // aligned FP32 arrays, 4-element aligned params and grads), else 1.
  constexpr size_t kV = 4;
  const auto al = [](const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  const bool vec = n % kV == 0 && al(m, 16) && al(v, 16) && (!master || al(master, 16)) &&
                   al(params, kV * sizeof(T)) && al(grads, kV * sizeof(T));
  const size_t n_vec = vec ? n / kV : n;
  unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(n_vec, block), 65536);
  if (vec)
    RATCHET_LAUNCH((adamw_kernel<T, 4>), grid, block, 0, stream, params, master, grads, m, v,
                   n_vec, h.lr, h.beta1, h.beta2, bc1, bc2, h.eps, h.weight_decay, h.grad_scale,
                   seed, h.index_base);
  else
    RATCHET_LAUNCH((adamw_kernel<T, 1>), grid, block, 0, stream, params, master, grads, m, v,
                   n_vec, h.lr, h.beta1, h.beta2, bc1, bc2, h.eps, h.weight_decay, h.grad_scale,
                   seed, h.index_base);
  RATCHET_CHECK_LAUNCH();
}

template void adamw_update<float>(float*, float*, const float*, float*, float*, size_t,
                                  const AdamWHyper&, uint32_t, cudaStream_t);
template void adamw_update<bf16>(bf16*, float*, const bf16*, float*, float*, size_t,
                                 const AdamWHyper&, uint32_t, cudaStream_t);

template <class T>
void round_from_master(T* params, const float* master, size_t n, uint32_t seed,
                       cudaStream_t stream, size_t index_base) {
  RATCHET_NVTX_RANGE("round_from_master");
  if (n == 0) return;
  const int block = 256;
  unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(n, block), 65536);
  RATCHET_LAUNCH((round_from_master_kernel<T>), grid, block, 0, stream, params, master, n, seed,
                 index_base);
  RATCHET_CHECK_LAUNCH();
}

template void round_from_master<float>(float*, const float*, size_t, uint32_t, cudaStream_t,
                                       size_t);
template void round_from_master<bf16>(bf16*, const float*, size_t, uint32_t, cudaStream_t, size_t);

}  // namespace ratchet::kernels

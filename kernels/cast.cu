// Casts between storage types.
//   out[i] = (Tout) inp[i], i < n        (out overwritten)
// FP32 -> BF16 rounds to nearest even (__float2bfloat16), BF16 -> FP32 is exact.
// Layout: flat arrays, any n, no alignment requirement.
#include "cast.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

template <class Tout, class Tin>
__global__ void cast_kernel(Tout* out, const Tin* inp, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_f32<Tout>(to_f32(inp[i]));
}

// ==== launchers ==================================================================================

template <class Tout, class Tin>
void cast(Tout* out, const Tin* inp, size_t n, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("cast");
  if (n == 0) return;
  RATCHET_REQUIRE(out != nullptr && inp != nullptr, "cast: null pointer");
  const int block = 256;
  const size_t grid = std::min<size_t>(ceil_div<size_t>(n, block), 65536);
  RATCHET_LAUNCH((cast_kernel<Tout, Tin>), (unsigned)grid, block, 0, stream, out, inp, n);
  RATCHET_CHECK_LAUNCH();
}

template void cast<bf16, float>(bf16*, const float*, size_t, cudaStream_t);
template void cast<float, bf16>(float*, const bf16*, size_t, cudaStream_t);
template void cast<float, float>(float*, const float*, size_t, cudaStream_t);
template void cast<bf16, bf16>(bf16*, const bf16*, size_t, cudaStream_t);

}  // namespace ratchet::kernels

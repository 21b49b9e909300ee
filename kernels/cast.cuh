// Casts between storage types (FP32 <-> BF16).
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// out (n) = (Tout) inp (n); FP32 -> BF16 rounds to nearest even. Overwrites out.
template <class Tout, class Tin>
void cast(Tout* out, const Tin* inp, size_t n, cudaStream_t stream);

// Bytes a call must move at least (bench/kernels): inp read, out written.
inline double cast_bytes(size_t n, size_t s_out, size_t s_in) { return (double)n * (s_out + s_in); }

}  // namespace ratchet::kernels

// Token + position embedding.
//   forward:  out[b,t,c] = wte[inp[b,t], c] + wpe[t, c]         out (B,T,C) overwritten
//   backward: dwte[v,c] += sum_{(b,t): inp[b,t]=v} dout[b,t,c]  dwte (Vp,C) accumulated
//             dwpe[t,c] += sum_b dout[b,t,c]                    dwpe (maxT,C) accumulated
// The dwte scatter is deterministic without atomics: the (token, position)
// pairs are sorted by a bitonic network (keys token<<32 | position, so ties
// keep position order), then one thread per (run of equal tokens, channel)
// sums its run in position order. All sums are FP32, stored in T once.
#include "encoder.cuh"

namespace ratchet::kernels {

// ==== kernels ====================================================================================

template <class T>
__global__ void encoder_forward_kernel(T* out, const int* inp, const T* wte, const T* wpe, int Tn,
                                       int C, size_t total) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    size_t bt = i / C;
    int c = (int)(i % C);
    int t = (int)(bt % Tn);
    int tok = inp[bt];
    out[i] = from_f32<T>(to_f32(wte[(size_t)tok * C + c]) + to_f32(wpe[(size_t)t * C + c]));
  }
}

// dwpe (T,C) += sum over b of dout (B,T,C); one thread per (t, c).
template <class T>
__global__ void encoder_dwpe_kernel(T* dwpe, const T* dout, int B, int Tn, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)Tn * C) return;
  float acc = 0.0f;
  for (int b = 0; b < B; b++) acc += to_f32(dout[(size_t)b * Tn * C + i]);
  dwpe[i] = from_f32<T>(to_f32(dwpe[i]) + acc);
}

// keys (n): token << 32 | position for positions < BT, all ones after (sort last).
__global__ void encoder_keys_kernel(unsigned long long* keys, const int* inp, int BT, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  keys[i] = i < BT ? ((unsigned long long)(unsigned)inp[i] << 32) | (unsigned)i : ~0ull;
}

// One compare-exchange stage (k, j) of a bitonic sort of n (power of two) keys.
__global__ void bitonic_step_kernel(unsigned long long* keys, int n, int j, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int l = i ^ j;
  if (l <= i) return;
  unsigned long long a = keys[i], b = keys[l];
  bool ascending = (i & k) == 0;
  if (ascending ? a > b : a < b) {
    keys[i] = b;
    keys[l] = a;
  }
}

// grid.x = sorted index s (BT), grid.y * blockDim.x covers C. The thread at the
// first key of a run of equal tokens sums the run's dout rows, in position order.
template <class T>
__global__ void encoder_dwte_kernel(T* dwte, const T* dout, const unsigned long long* keys, int BT,
                                    int C) {
  int s = blockIdx.x;
  int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  unsigned tok = (unsigned)(keys[s] >> 32);
  if (s > 0 && (unsigned)(keys[s - 1] >> 32) == tok) return;  // not the run's first
  float acc = 0.0f;
  for (int r = s; r < BT && (unsigned)(keys[r] >> 32) == tok; r++) {
    unsigned pos = (unsigned)(keys[r] & 0xffffffffu);
    acc += to_f32(dout[(size_t)pos * C + c]);
  }
  T* dst = dwte + (size_t)tok * C + c;
  *dst = from_f32<T>(to_f32(*dst) + acc);
}

// ==== launchers ==================================================================================

template <class T>
void encoder_forward(T* out, const int* inp, const T* wte, const T* wpe, int B, int Tn, int C,
                     cudaStream_t stream) {
  RATCHET_NVTX_RANGE("encoder_forward");
  RATCHET_REQUIRE(B > 0 && Tn > 0 && C > 0, "encoder_forward: B, T, C must be positive");
  size_t total = (size_t)B * Tn * C;
  const int block = 256;
  unsigned grid = (unsigned)std::min<size_t>(ceil_div<size_t>(total, block), 65536);
  RATCHET_LAUNCH((encoder_forward_kernel<T>), grid, block, 0, stream, out, inp, wte, wpe, Tn, C,
                 total);
  RATCHET_CHECK_LAUNCH();
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, void* scratch, const T* dout, const int* inp, int B,
                      int Tn, int C, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("encoder_backward");
  RATCHET_REQUIRE(B > 0 && Tn > 0 && C > 0, "encoder_backward: B, T, C must be positive");
  RATCHET_REQUIRE((size_t)B * Tn < (1u << 30), "encoder_backward: B*T must be < 2^30");
  RATCHET_REQUIRE(scratch != nullptr, "encoder_backward: needs encoder_backward_scratch_bytes");
  const int block = 256;
  RATCHET_LAUNCH((encoder_dwpe_kernel<T>), (unsigned)ceil_div<size_t>((size_t)Tn * C, block),
                 block, 0, stream, dwpe, dout, B, Tn, C);
  RATCHET_CHECK_LAUNCH();

  int BT = B * Tn;
  int n = (int)next_pow2((size_t)BT);
  auto* keys = static_cast<unsigned long long*>(scratch);
  unsigned grid = (unsigned)ceil_div(n, block);
  RATCHET_LAUNCH(encoder_keys_kernel, grid, block, 0, stream, keys, inp, BT, n);
  RATCHET_CHECK_LAUNCH();
  for (int k = 2; k <= n; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      RATCHET_LAUNCH(bitonic_step_kernel, grid, block, 0, stream, keys, n, j, k);
      RATCHET_CHECK_LAUNCH();
    }
  const int cblock = std::min(256, ceil_div(C, 32) * 32);
  dim3 dgrid((unsigned)BT, (unsigned)ceil_div(C, cblock));
  RATCHET_LAUNCH((encoder_dwte_kernel<T>), dgrid, cblock, 0, stream, dwte, dout, keys, BT, C);
  RATCHET_CHECK_LAUNCH();
}

#define RATCHET_INSTANTIATE(T)                                                                 \
  template void encoder_forward<T>(T*, const int*, const T*, const T*, int, int, int,          \
                                   cudaStream_t);                                              \
  template void encoder_backward<T>(T*, T*, void*, const T*, const int*, int, int, int,        \
                                    cudaStream_t);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::kernels

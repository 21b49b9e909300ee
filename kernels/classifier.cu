// Fused classifier, one block per row of logits (BT, Vp), FP32 math:
//   M = max_{j<V} x_j,  S = sum_{j<V} exp(x_j - M)
//   loss = M + log S - x_target                                  losses (BT) overwritten
//   if dloss != 0:  x_j <- dloss * (exp(x_j - M) / S - [j == target])   j < V
//                   x_j <- 0                                            V <= j < Vp
// (logits overwritten in place).
// softcap c > 0: the logits hold y = c tanh(x/c) (softcap_forward ran) and the
// gradient written is x's: each column's times 1 - (y_j/c)^2, y_j read in pass 2
// before the thread overwrites it. Probabilities are never materialised: pass 1
// keeps an online (max, sum) per thread over 128-bit packs (one rescale per
// pack), combined over the block in a fixed order (deterministic); pass 2
// re-reads the row (from L2: the rows in flight fit there) and writes the
// gradient, one exponential per element.
// Bytes per call: BT*V*s read (pass 1), and with dloss != 0 BT*V*s read again
// and BT*Vp*s written: 2*BT*Vp*s from DRAM when pass 2 hits L2 (s = sizeof(T)).
// Issue 41 tried a variant reading each row once (every thread's packs held
// in registers, pass 2 from them): slower on the H200 at d12 B=16 T=1024
// (1701.6 against 1674.7 us/call; 2061 against 2101 GB/s in bench_kernels),
// so deleted (bench/gpu/README.md).
#include "classifier.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kBlock = 1024;
}

// ==== kernels ====================================================================================

// One block per row; threads stride the row in 128-bit packs (element-wise
// without kVec: Vp not a multiple of the pack, or logits not 16-byte aligned).
template <class T, bool kVec>
__global__ void __launch_bounds__(kBlock)
    fused_classifier_kernel(T* logits, float* __restrict__ losses,
                            const int* __restrict__ targets, int V, int Vp, float dloss,
                            float softcap) {
  constexpr int P = Packed128<T>::size;
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  T* x = logits + (size_t)row * Vp;
  const int target = targets[row];
  // Read before any thread can overwrite it in pass 2 (block_sum has barriers).
  const float x_target = to_f32(x[target]);

  // Pass 1: an online (max, sum) per thread, rescaled once per pack, so that
  // a pack costs P + 1 exponentials.
  float m = -INFINITY, s = 0.0f;
  const int real_packs = ceil_div(V, P);
  for (int p = threadIdx.x; p < real_packs; p += blockDim.x) {
    const int c0 = p * P;
    const Packed128<T> v = load_pack<kVec>(x + c0, V - c0);
    float pm = -INFINITY;
    for (int k = 0; k < P; k++)
      if (c0 + k < V) pm = fmaxf(pm, pack_f32(v, k));
    const float m_new = fmaxf(m, pm);
    float e = 0.0f;
    for (int k = 0; k < P; k++)
      if (c0 + k < V) e += expf(pack_f32(v, k) - m_new);
    s = s * expf(m - m_new) + e;
    m = m_new;
  }
  // Block max, then the block sum of each thread's sum rescaled to it (fixed order).
  float bm = warp_max(m);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = bm;
  __syncthreads();
  bm = (int)threadIdx.x % 32 < (int)blockDim.x / 32 ? scratch[threadIdx.x % 32] : -INFINITY;
  const float M = warp_max(bm);
  const float S = block_sum(m == -INFINITY ? 0.0f : s * expf(m - M), scratch);

  if (threadIdx.x == 0) losses[row] = M + logf(S) - x_target;
  if (dloss == 0.0f) return;  // uniform over the block: no barrier follows
  // Pass 2: one exponential per element; the row's last read (evict-first).
  const float inv_s = 1.0f / S, inv_c = softcap > 0.0f ? 1.0f / softcap : 0.0f;
  const int packs = ceil_div(Vp, P);
  for (int p = threadIdx.x; p < packs; p += blockDim.x) {
    const int c0 = p * P;
    Packed128<T> g;
    if (c0 < V) {
      const Packed128<T> v = load_pack<kVec, true>(x + c0, Vp - c0);
      for (int k = 0; k < P; k++) {
        const int c = c0 + k;
        float gv =
            c < V ? dloss * (expf(pack_f32(v, k) - M) * inv_s - (c == target ? 1.0f : 0.0f))
                  : 0.0f;
        if (softcap > 0.0f) {  // uniform branch: softcap 0 keeps the old bits
          const float yc = pack_f32(v, k) * inv_c;
          gv *= 1.0f - yc * yc;
        }
        g[k] = from_f32<T>(gv);
      }
    } else {
      for (int k = 0; k < P; k++) g[k] = from_f32<T>(0.0f);  // padded columns
    }
    store_pack<kVec>(x + c0, g, Vp - c0);
  }
}

// ==== launchers ==================================================================================

template <class T>
void fused_classifier(T* logits, float* losses, const int* targets, int BT, int V, int Vp,
                      float dloss, cudaStream_t stream, float softcap) {
  RATCHET_NVTX_RANGE("fused_classifier");
  RATCHET_REQUIRE(BT > 0 && V > 0 && V <= Vp, "fused_classifier: need BT > 0, 0 < V <= Vp");
  RATCHET_REQUIRE(softcap >= 0.0f, "fused_classifier: softcap must be >= 0 (0: none)");
  if (packs_fit<T>(Vp, {logits}))
    RATCHET_LAUNCH((fused_classifier_kernel<T, true>), (unsigned)BT, kBlock, 0, stream, logits,
                   losses, targets, V, Vp, dloss, softcap);
  else
    RATCHET_LAUNCH((fused_classifier_kernel<T, false>), (unsigned)BT, kBlock, 0, stream, logits,
                   losses, targets, V, Vp, dloss, softcap);
  RATCHET_CHECK_LAUNCH();
}

template void fused_classifier<float>(float*, float*, const int*, int, int, int, float,
                                      cudaStream_t, float);
template void fused_classifier<bf16>(bf16*, float*, const int*, int, int, int, float,
                                     cudaStream_t, float);

}  // namespace ratchet::kernels

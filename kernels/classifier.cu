// Fused classifier, one block per row of logits (BT, Vp), FP32 math:
//   M = max_{j<V} x_j,  S = sum_{j<V} exp(x_j - M)
//   loss = M + log S - x_target                                  losses (BT) overwritten
//   if dloss != 0:  x_j <- dloss * (exp(x_j - M) / S - [j == target])   j < V
//                   x_j <- 0                                            V <= j < Vp
// (logits overwritten in place). Probabilities are never materialised: pass 1
// keeps an online (max, sum) per thread, combined over the block in a fixed
// order (deterministic); pass 2 writes the gradient.
#include "classifier.cuh"

namespace ratchet::kernels {

namespace {
constexpr int kBlock = 512;
}

// ==== kernels ====================================================================================

template <class T>
__global__ void fused_classifier_kernel(T* logits, float* losses, const int* targets, int V,
                                        int Vp, float dloss) {
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  T* x = logits + (size_t)row * Vp;
  const int target = targets[row];
  // Read before any thread can overwrite it in pass 2 (block_sum has barriers).
  const float x_target = to_f32(x[target]);

  float m = -INFINITY, s = 0.0f;  // online softmax over this thread's columns
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float v = to_f32(x[j]);
    float m_new = fmaxf(m, v);
    s = s * expf(m - m_new) + expf(v - m_new);
    m = m_new;
  }
  // Block max: as a sum of one-hot contributions is awkward, use max via warps.
  float bm = warp_max(m);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = bm;
  __syncthreads();
  bm = (int)threadIdx.x % 32 < (int)blockDim.x / 32 ? scratch[threadIdx.x % 32] : -INFINITY;
  const float M = warp_max(bm);
  const float S = block_sum(m == -INFINITY ? 0.0f : s * expf(m - M), scratch);

  if (threadIdx.x == 0) losses[row] = M + logf(S) - x_target;
  if (dloss == 0.0f) return;  // uniform over the block: no barrier follows
  const float inv_s = 1.0f / S;
  for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
    float g = 0.0f;
    if (j < V) g = dloss * (expf(to_f32(x[j]) - M) * inv_s - (j == target ? 1.0f : 0.0f));
    x[j] = from_f32<T>(g);
  }
}

// ==== launchers ==================================================================================

template <class T>
void fused_classifier(T* logits, float* losses, const int* targets, int BT, int V, int Vp,
                      float dloss, cudaStream_t stream) {
  RATCHET_NVTX_RANGE("fused_classifier");
  RATCHET_REQUIRE(BT > 0 && V > 0 && V <= Vp, "fused_classifier: need BT > 0, 0 < V <= Vp");
  RATCHET_LAUNCH((fused_classifier_kernel<T>), (unsigned)BT, kBlock, 0, stream, logits, losses,
                 targets, V, Vp, dloss);
  RATCHET_CHECK_LAUNCH();
}

template void fused_classifier<float>(float*, float*, const int*, int, int, int, float,
                                      cudaStream_t);
template void fused_classifier<bf16>(bf16*, float*, const int*, int, int, int, float,
                                     cudaStream_t);

}  // namespace ratchet::kernels

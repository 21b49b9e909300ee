// Fused classifier: softmax + cross-entropy + logits gradient in one pass.
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// logits (BT,Vp), targets (BT) each in [0, V), losses (BT) FP32 overwritten:
//   losses[i] = -log softmax(logits[i, :V])[targets[i]]
// If dloss != 0, logits is OVERWRITTEN with its gradient
//   dloss * (softmax - onehot(target)) on columns < V, 0 on columns V..Vp-1.
// softcap c > 0: logits hold y = c tanh(x/c) and the gradient written is x's,
// each column's times 1 - (y/c)^2 (0: no cap).
template <class T>
void fused_classifier(T* logits, float* losses, const int* targets, int BT, int V, int Vp,
                      float dloss, cudaStream_t stream, float softcap = 0.0f);

// Bytes a call must move at least (s = sizeof(T)): the logits read once and,
// with a gradient, written once; targets and losses. bench/kernels reports
// GB/s against it (pass 2's re-read of a row is served by L2, not counted).
inline double fused_classifier_bytes(int BT, int V, int Vp, bool grad, size_t s) {
  return (grad ? 2.0 * BT * Vp : (double)BT * V) * s + 8.0 * BT;
}

}  // namespace ratchet::kernels

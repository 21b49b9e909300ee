// Fused classifier: softmax + cross-entropy + logits gradient in one pass.
#pragma once
#include "common.cuh"

namespace ratchet::kernels {

// logits (BT,Vp), targets (BT) each in [0, V), losses (BT) FP32 overwritten:
//   losses[i] = -log softmax(logits[i, :V])[targets[i]]
// If dloss != 0, logits is OVERWRITTEN with its gradient
//   dloss * (softmax - onehot(target)) on columns < V, 0 on columns V..Vp-1.
template <class T>
void fused_classifier(T* logits, float* losses, const int* targets, int BT, int V, int Vp,
                      float dloss, cudaStream_t stream);

}  // namespace ratchet::kernels

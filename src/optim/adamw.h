// AdamW with global-norm gradient clipping over the model's flat buffers.
//
// Moments m, v are FP32 (P) in backend memory. Weight decay is applied only
// to the tensors ParamLayout::decayed() names (2-D matrices), decoupled from
// the gradient (Loshchilov & Hutter): p -= lr·(mhat/(sqrt(vhat)+eps) + wd·p).
// Clipping: with n = ||grad_scale · g||_2, the gradient is multiplied by
// min(1, grad_clip / n) (no clipping when grad_clip <= 0).
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "model/param_layout.h"

namespace ratchet {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;
};

class AdamW {
 public:
  AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of params from grads. grad_scale multiplies the gradient
  // before anything else (e.g. 1/world for averaging). Returns the global
  // gradient norm before clipping (after grad_scale).
  float step(dptr params, cdptr grads, float lr, float grad_scale = 1.0f);
  // Norm only (used to report before stepping, or by tests).
  double grad_norm(cdptr grads, float grad_scale = 1.0f) const;

  int steps_taken() const { return t_; }
  void set_steps_taken(int t) { t_ = t; }
  float* m() { return m_; }
  float* v() { return v_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  Backend& be_;
  ParamLayout layout_;
  AdamWConfig cfg_;
  float* m_ = nullptr;
  float* v_ = nullptr;
  int t_ = 0;
};

}  // namespace ratchet

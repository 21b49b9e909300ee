// AdamW with global-norm gradient clipping over the model's flat buffers.
//
// Moments m, v are FP32 (P) in backend memory. Weight decay is applied only
// to the tensors ParamLayout::decayed() names (2-D matrices), decoupled from
// the gradient (Loshchilov & Hutter): p -= lr·(mhat/(sqrt(vhat)+eps) + wd·p).
// Clipping: with n = ||grad_scale · g||_2, the gradient is multiplied by
// min(1, grad_clip / n) (no clipping when grad_clip <= 0).
//
// ZeRO-1 (dist/zero.h): an optimizer may own only the elements [lo, hi) of
// the flat parameter vector; its moments are then (hi - lo) long, and
// step_shard() updates params[lo, hi) from that range's gradient, with the
// global norm computed by the caller across ranks.
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
  // Moments for [lo, hi) only (ZeRO-1 shard; lo <= hi <= layout.total).
  AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg, size_t lo, size_t hi);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of params from grads. grad_scale multiplies the gradient
  // before anything else (e.g. 1/world for averaging). Returns the global
  // gradient norm before clipping (after grad_scale).
  float step(dptr params, cdptr grads, float lr, float grad_scale = 1.0f);
  // Norm only (used to report before stepping, or by tests).
  double grad_norm(cdptr grads, float grad_scale = 1.0f) const;
  // Updates params[lo, hi) (params: the full vector) from grad_shard (the
  // gradient of [lo, hi), hi - lo elements). `norm` is the global norm of
  // grad_scale·g (for clipping); returned as is.
  float step_shard(dptr params, cdptr grad_shard, float lr, double norm, float grad_scale = 1.0f);
  // After a resume (params uploaded from FP32, moments and steps_taken()
  // restored): rewrites the storage-dtype params[lo, hi) from the backend's
  // FP32 master copy as the last step rounded them (Backend::round_from_master).
  void restore_rounding(dptr params);
  size_t shard_begin() const { return lo_; }
  size_t shard_end() const { return hi_; }

  int steps_taken() const { return t_; }
  void set_steps_taken(int t) { t_ = t; }
  float* m() { return m_; }  // (hi - lo) FP32, element i is parameter lo + i
  float* v() { return v_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  // Calls fn(tensor index, first element a0, count) for every tensor's part
  // of [lo, hi): the pieces step_shard() updates one backend call each.
  template <class Fn>
  void for_each_piece(Fn fn) const;

  Backend& be_;
  ParamLayout layout_;
  AdamWConfig cfg_;
  size_t lo_ = 0, hi_ = 0;  // the elements this optimizer owns
  float* m_ = nullptr;
  float* v_ = nullptr;
  int t_ = 0;
};

}  // namespace ratchet

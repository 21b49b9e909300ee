// AdamW with global-norm gradient clipping over the model's flat buffers.
//
// Moments m, v are FP32 (P) in backend memory. Weight decay is applied only
// to the tensors ParamLayout::decayed() names (2-D matrices), decoupled from
// the gradient (Loshchilov & Hutter): p -= lr·(mhat/(sqrt(vhat)+eps) + wd·p).
// Clipping: with n = ||grad_scale · g||_2, the gradient is multiplied by
// min(1, grad_clip / n) (no clipping when grad_clip <= 0).
//
// ZeRO (distributed/strategy.h): an optimizer may own only some pieces of the flat
// parameter vector: ZeRO-1 one range [lo, hi), ZeRO-2 a piece of every
// gradient bucket (distributed/buckets.h). Its moments then hold the owned elements
// back to back in piece order, and step_shard() updates those params from the
// rank's gradient shard (each piece says where its gradient is), with the
// global norm computed by the caller across ranks.
// Stochastic rounding (BF16 storage) draws its random bits by an element's
// position in its TENSOR (AdamWArgs::round_offset), so an update split into
// pieces at any boundary rounds exactly as the whole tensor's update: every
// ZeRO stage and world size gives the same BF16 parameters.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/expert_slice.h"
#include "model/param_layout.h"

namespace ratchet {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;
};

// Flat elements [lo, lo + n) updated from the gradient at element `grad` of
// the gradient buffer step_shard() is given. Their parameters are at element
// lo of the params step_shard() is given (the full vector), or, when `param`
// is set (ZeRO-3's parameter shard, distributed/param_shards.h), at element `param`.
struct AdamWPiece {
  static constexpr size_t kAtLo = (size_t)-1;
  size_t lo = 0, n = 0, grad = 0;
  size_t param = kAtLo;
};

class AdamW {
 public:
  AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg);
  // Moments for [lo, hi) only (ZeRO-1 shard; lo <= hi <= layout.total).
  AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg, size_t lo, size_t hi);
  // Moments for these pieces (sorted by lo, disjoint), back to back.
  AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg,
        std::vector<AdamWPiece> pieces);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of params from grads. grad_scale multiplies the gradient
  // before anything else (e.g. 1/world for averaging). Returns the global
  // gradient norm before clipping (after grad_scale).
  float step(dptr params, cdptr grads, float lr, float grad_scale = 1.0f);
  // Norm only (used to report before stepping, or by tests).
  double grad_norm(cdptr grads, float grad_scale = 1.0f) const;
  // Updates the owned params (params: the full vector) from grad_shard (for
  // [lo, hi): the gradient of [lo, hi), hi - lo elements; for pieces: each at
  // its `grad` offset). `norm` is the global norm of grad_scale·g (for
  // clipping); returned as is.
  float step_shard(dptr params, cdptr grad_shard, float lr, double norm, float grad_scale = 1.0f);
  // After a resume (params uploaded from FP32, moments and steps_taken()
  // restored): rewrites the storage-dtype params[lo, hi) from the backend's
  // FP32 master copy as the last step rounded them (Backend::round_from_master).
  void restore_rounding(dptr params);
  size_t shard_begin() const { return lo_; }  // the first owned element
  size_t shard_end() const { return hi_; }    // past the last owned element
  size_t moment_elems() const { return n_; }  // m and v length (owned elements)

  // A model holding an expert slice (model/expert_slice.h; `layout` is then
  // ParamLayout(cfg, x.shards)): the stochastic rounding keys each element
  // by its place in the WHOLE model's tensor (the global layout), so the
  // slice's BF16 parameters round as one process's. Call before stepping.
  void use_expert_slice(const GPTConfig& cfg, ExpertSlice x);

  int steps_taken() const { return t_; }
  void set_steps_taken(int t) { t_ = t; }
  float* m() { return m_; }  // moment_elems() FP32: the pieces back to back
  float* v() { return v_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  // Calls fn(tensor index, first element a0, count, gradient offset, moment
  // offset, parameter offset, round offset, tensor offset) for every
  // tensor's part of every piece (split further where an expert slice's
  // global places break): one backend call each. The last two key the
  // stochastic rounding (AdamWArgs): the part's place in its tensor and the
  // tensor's offset, both in the global layout.
  template <class Fn>
  void for_each_piece(Fn fn) const;

  Backend& be_;
  ParamLayout layout_;
  AdamWConfig cfg_;
  size_t lo_ = 0, hi_ = 0;  // the first owned element, past the last
  std::vector<AdamWPiece> pieces_;
  size_t n_ = 0;            // owned elements
  float* m_ = nullptr;
  float* v_ = nullptr;
  int t_ = 0;
  // use_expert_slice(): the local layout's runs in the global one and the
  // global layout (empty: the layout is the global one).
  std::vector<FlatSegment> global_;
  std::vector<size_t> global_offsets_;
};

}  // namespace ratchet

#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ratchet {

AdamW::AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg)
    : AdamW(be, layout, cfg, 0, layout.total) {}

AdamW::AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg, size_t lo,
             size_t hi)
    : be_(be), layout_(layout), cfg_(cfg), lo_(lo), hi_(hi) {
  RATCHET_ASSERT(lo <= hi && hi <= layout_.total);
  // At least one element, so that an empty shard still has valid pointers.
  m_ = (float*)be_.alloc(std::max<size_t>(1, hi_ - lo_) * sizeof(float));
  v_ = (float*)be_.alloc(std::max<size_t>(1, hi_ - lo_) * sizeof(float));
}

AdamW::~AdamW() {
  be_.release(m_);
  be_.release(v_);
}

double AdamW::grad_norm(cdptr grads, float grad_scale) const {
  return std::sqrt(be_.sum_squares(grads, layout_.total)) * std::fabs(grad_scale);
}

float AdamW::step(dptr params, cdptr grads, float lr, float grad_scale) {
  RATCHET_ASSERT(lo_ == 0 && hi_ == layout_.total);  // a shard steps with step_shard()
  return step_shard(params, grads, lr, grad_norm(grads, grad_scale), grad_scale);
}

template <class Fn>
void AdamW::for_each_piece(Fn fn) const {
  for (int i = 0; i < kNumParamTensors; i++) {
    // This tensor's part of [lo, hi): params indexed absolutely, the rest from lo.
    const size_t a0 = std::max<size_t>(layout_.offsets[i], lo_);
    const size_t a1 = std::min<size_t>(layout_.offsets[i] + layout_.sizes[i], hi_);
    if (a0 < a1) fn(i, a0, a1 - a0);
  }
}

void AdamW::restore_rounding(dptr params) {
  const size_t sb = be_.storage_bytes();
  for_each_piece([&](int, size_t a0, size_t n) {
    be_.round_from_master((char*)params + a0 * sb, n, t_);
  });
}

float AdamW::step_shard(dptr params, cdptr grads, float lr, double norm, float grad_scale) {
  double clip = 1.0;
  if (cfg_.grad_clip > 0 && norm > cfg_.grad_clip) clip = cfg_.grad_clip / norm;
  t_++;
  const size_t sb = be_.storage_bytes();
  for_each_piece([&](int i, size_t a0, size_t n) {
    AdamWArgs a;
    a.lr = lr;
    a.beta1 = cfg_.beta1;
    a.beta2 = cfg_.beta2;
    a.eps = cfg_.eps;
    a.weight_decay = ParamLayout::decayed(i) ? cfg_.weight_decay : 0.0f;
    a.step = t_;
    a.grad_scale = (float)(grad_scale * clip);
    const size_t r = a0 - lo_;
    be_.adamw((char*)params + a0 * sb, nullptr, (const char*)grads + r * sb, m_ + r, v_ + r, n,
              a);
  });
  return (float)norm;
}

}  // namespace ratchet

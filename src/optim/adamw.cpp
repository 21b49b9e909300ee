#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ratchet {

AdamW::AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg)
    : AdamW(be, layout, cfg, 0, layout.total) {}

AdamW::AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg, size_t lo,
             size_t hi)
    : AdamW(be, layout, cfg, std::vector<AdamWPiece>{{lo, hi - lo, 0}}) {
  RATCHET_ASSERT(lo <= hi);
  lo_ = lo;  // an empty range keeps its position
  hi_ = hi;
}

AdamW::AdamW(Backend& be, const ParamLayout& layout, const AdamWConfig& cfg,
             std::vector<AdamWPiece> pieces)
    : be_(be), layout_(layout), cfg_(cfg), pieces_(std::move(pieces)) {
  size_t end = 0;
  for (const AdamWPiece& p : pieces_) {
    RATCHET_ASSERT(p.lo >= end && p.lo + p.n <= layout_.total);
    end = p.lo + p.n;
    n_ += p.n;
  }
  lo_ = pieces_.empty() ? 0 : pieces_.front().lo;
  hi_ = end;
  // At least one element, so that an empty shard still has valid pointers.
  m_ = (float*)be_.alloc(std::max<size_t>(1, n_) * sizeof(float));
  v_ = (float*)be_.alloc(std::max<size_t>(1, n_) * sizeof(float));
}

AdamW::~AdamW() {
  be_.release(m_);
  be_.release(v_);
}

double AdamW::grad_norm(cdptr grads, float grad_scale) const {
  return std::sqrt(be_.sum_squares(grads, layout_.total)) * std::fabs(grad_scale);
}

float AdamW::step(dptr params, cdptr grads, float lr, float grad_scale) {
  RATCHET_ASSERT(n_ == layout_.total);  // a shard steps with step_shard()
  return step_shard(params, grads, lr, grad_norm(grads, grad_scale), grad_scale);
}

template <class Fn>
void AdamW::for_each_piece(Fn fn) const {
  size_t moff = 0;
  for (const AdamWPiece& p : pieces_) {
    for (int i = 0; i < kNumParamTensors; i++) {
      // This tensor's part of the piece.
      const size_t a0 = std::max<size_t>(layout_.offsets[i], p.lo);
      const size_t a1 = std::min<size_t>(layout_.offsets[i] + layout_.sizes[i], p.lo + p.n);
      const size_t at = p.param == AdamWPiece::kAtLo ? a0 : p.param + (a0 - p.lo);
      if (a0 < a1) fn(i, a0, a1 - a0, p.grad + (a0 - p.lo), moff + (a0 - p.lo), at);
    }
    moff += p.n;
  }
}

void AdamW::restore_rounding(dptr params) {
  const size_t sb = be_.storage_bytes();
  for_each_piece([&](int i, size_t a0, size_t n, size_t, size_t, size_t at) {
    be_.round_from_master((char*)params + at * sb, n, t_, a0 - layout_.offsets[i], layout_.offsets[i]);
  });
}

float AdamW::step_shard(dptr params, cdptr grads, float lr, double norm, float grad_scale) {
  double clip = 1.0;
  if (cfg_.grad_clip > 0 && norm > cfg_.grad_clip) clip = cfg_.grad_clip / norm;
  t_++;
  const size_t sb = be_.storage_bytes();
  for_each_piece([&](int i, size_t a0, size_t n, size_t g, size_t r, size_t at) {
    AdamWArgs a;
    a.lr = lr;
    a.beta1 = cfg_.beta1;
    a.beta2 = cfg_.beta2;
    a.eps = cfg_.eps;
    a.weight_decay = ParamLayout::decayed(i) ? cfg_.weight_decay : 0.0f;
    a.step = t_;
    a.grad_scale = (float)(grad_scale * clip);
    a.round_offset = a0 - layout_.offsets[i];
    a.tensor_offset = layout_.offsets[i];  // the seed's key, wherever the piece is held
    be_.adamw((char*)params + at * sb, nullptr, (const char*)grads + g * sb, m_ + r, v_ + r, n,
              a);
  });
  return (float)norm;
}

}  // namespace ratchet

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

void AdamW::use_expert_slice(const GPTConfig& cfg, ExpertSlice x) {
  RATCHET_ASSERT(layout_.expert_shards == x.shards);
  global_ = local_segments(cfg, x);
  const ParamLayout g(cfg);
  global_offsets_.assign(g.offsets.begin(), g.offsets.end());
}

template <class Fn>
void AdamW::for_each_piece(Fn fn) const {
  size_t moff = 0;
  for (const AdamWPiece& p : pieces_) {
    for (int i = 0; i < kNumParamTensors; i++) {
      // This tensor's part of the piece.
      const size_t a0 = std::max<size_t>(layout_.offsets[i], p.lo);
      const size_t a1 = std::min<size_t>(layout_.offsets[i] + layout_.sizes[i], p.lo + p.n);
      if (a0 >= a1) continue;
      auto part = [&](size_t b0, size_t b1, size_t global_b0, size_t tensor_offset) {
        const size_t at = p.param == AdamWPiece::kAtLo ? b0 : p.param + (b0 - p.lo);
        fn(i, b0, b1 - b0, p.grad + (b0 - p.lo), moff + (b0 - p.lo), at,
           global_b0 - tensor_offset, tensor_offset);
      };
      if (global_.empty()) {
        part(a0, a1, a0, layout_.offsets[i]);
        continue;
      }
      // An expert slice: each run of the part at its global place (the runs
      // are in local order; only expw1/expw2 have more than one per tensor).
      for (const FlatSegment& s : global_) {
        const size_t b0 = std::max(a0, s.local), b1 = std::min(a1, s.local + s.len);
        if (b0 < b1) part(b0, b1, s.global + (b0 - s.local), global_offsets_[i]);
      }
    }
    moff += p.n;
  }
}

void AdamW::restore_rounding(dptr params) {
  const size_t sb = be_.storage_bytes();
  for_each_piece([&](int, size_t, size_t n, size_t, size_t, size_t at, size_t ro, size_t to) {
    be_.round_from_master((char*)params + at * sb, n, t_, ro, to);
  });
}

float AdamW::step_shard(dptr params, cdptr grads, float lr, double norm, float grad_scale) {
  double clip = 1.0;
  if (cfg_.grad_clip > 0 && norm > cfg_.grad_clip) clip = cfg_.grad_clip / norm;
  t_++;
  const size_t sb = be_.storage_bytes();
  for_each_piece([&](int i, size_t, size_t n, size_t g, size_t r, size_t at, size_t ro,
                     size_t to) {
    AdamWArgs a;
    a.lr = lr;
    a.beta1 = cfg_.beta1;
    a.beta2 = cfg_.beta2;
    a.eps = cfg_.eps;
    a.weight_decay = ParamLayout::decayed(i) ? cfg_.weight_decay : 0.0f;
    a.step = t_;
    a.grad_scale = (float)(grad_scale * clip);
    a.round_offset = ro;
    a.tensor_offset = to;  // the seed's key, wherever the piece is held
    be_.adamw((char*)params + at * sb, nullptr, (const char*)grads + g * sb, m_ + r, v_ + r, n,
              a);
  });
  return (float)norm;
}

}  // namespace ratchet

#include "distributed/buckets.h"

#include <algorithm>

#include "core/error.h"

namespace ratchet {

BucketLayout::BucketLayout(const ParamLayout& layout, int num_layers, int W, BucketTensors which)
    : L_(num_layers), W_(W) {
  RATCHET_ASSERT(W >= 1 && num_layers >= 0);
  auto add = [which](Bucket& b, int i, size_t flat, size_t n) {
    const bool expert = i == P_EXPW1 || i == P_EXPW2;
    if (n == 0 || (which == BucketTensors::Experts && !expert) ||
        (which == BucketTensors::NotExperts && expert))
      return;
    b.slices.push_back({i, flat, n, b.len});
    b.len += n;
  };
  for (int l = 0; l < L_; l++) {
    Bucket b;
    for (int i : kBlockTensors) {
      const size_t n = layout.per_layer(i, L_);
      add(b, i, layout.offsets[i] + (size_t)l * n, n);
    }
    buckets_.push_back(b);
  }
  Bucket rest;
  for (int i : {P_WTE, P_WPE, P_LNFW, P_LNFB, P_LMHEAD}) add(rest, i, layout.offsets[i], layout.sizes[i]);
  buckets_.push_back(rest);
  shard_off_.push_back(0);
  for (Bucket& b : buckets_) {
    b.S = std::max<size_t>(1, (b.len + W - 1) / W);
    shard_off_.push_back(shard_off_.back() + b.S);
  }
}

std::vector<OwnedPiece> BucketLayout::pieces(int r) const {
  RATCHET_ASSERT(r >= 0 && r < W_);
  std::vector<OwnedPiece> out;
  for (size_t b = 0; b < buckets_.size(); b++) {
    const Bucket& bk = buckets_[b];
    const size_t p0 = (size_t)r * bk.S, p1 = p0 + bk.S;
    for (const BucketSlice& s : bk.slices) {
      const size_t a = std::max(p0, s.pos), e = std::min(p1, s.pos + s.n);
      if (a >= e) continue;
      out.push_back({s.tensor, s.flat + (a - s.pos), e - a, shard_off_[b] + (a - p0)});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const OwnedPiece& x, const OwnedPiece& y) { return x.lo < y.lo; });
  return out;
}

std::vector<std::pair<size_t, size_t>> BucketLayout::owned_ranges(int r) const {
  std::vector<std::pair<size_t, size_t>> out;
  for (const OwnedPiece& p : pieces(r)) {
    if (!out.empty() && out.back().second == p.lo)
      out.back().second += p.n;
    else
      out.push_back({p.lo, p.lo + p.n});
  }
  return out;
}

size_t BucketLayout::owned_elems(int r) const {
  size_t n = 0;
  for (const OwnedPiece& p : pieces(r)) n += p.n;
  return n;
}

}  // namespace ratchet

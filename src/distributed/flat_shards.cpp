// See flat_shards.h.
#include "distributed/flat_shards.h"

#include <algorithm>

#include "core/error.h"
#include "model/param_layout.h"

namespace ratchet {

namespace {
// Appends [lo, hi) to r, merged with the last range where adjacent.
void append(OwnedRanges& r, size_t lo, size_t hi) {
  if (lo >= hi) return;
  if (!r.empty() && r.back().second == lo)
    r.back().second = hi;
  else
    r.push_back({lo, hi});
}
}  // namespace

FlatShards::FlatShards(size_t P, int ranks, int rank) {
  RATCHET_ASSERT(ranks >= 1 && rank >= 0 && rank < ranks);
  domains_.push_back({{{0, P}}, P, ranks, rank, 0});
}

FlatShards::FlatShards(const GPTConfig& cfg, ExpertSlice x, int ranks, int rank) {
  RATCHET_ASSERT(ranks >= 1 && rank >= 0 && rank < ranks);
  const ParamLayout layout(cfg, x.shards);
  if (!x.partial()) {
    *this = FlatShards(layout.total, ranks, rank);
    return;
  }
  check_slice_place(x, ranks, rank);
  segments_ = local_segments(cfg, x);
  // expw1 and expw2 are adjacent in the layout (param_layout.h): one run.
  RATCHET_ASSERT(layout.offsets[P_EXPW2] == layout.offsets[P_EXPW1] + layout.sizes[P_EXPW1]);
  const size_t e0 = layout.offsets[P_EXPW1], e1 = layout.offsets[P_EXPW2] + layout.sizes[P_EXPW2];
  FlatDomain rest, experts;
  for (auto [lo, hi] : {std::pair<size_t, size_t>{0, e0}, {e1, layout.total}})
    if (hi > lo) rest.runs.push_back({lo, hi});
  rest.len = layout.total - (e1 - e0);
  rest.count = ranks;
  rest.index = rank;
  if (e1 > e0) experts.runs.push_back({e0, e1});
  experts.len = e1 - e0;
  experts.count = ranks / x.shards;  // one rank per group holds this slice
  experts.index = rank / x.shards;   // its group
  experts.grad = rest.shard().padded;
  domains_ = {rest, experts};
}

size_t FlatShards::shard_elems() const {
  const FlatDomain& d = domains_.back();
  return std::max<size_t>(1, d.grad + d.shard().padded);
}

std::vector<AdamWPiece> FlatShards::pieces() const {
  std::vector<AdamWPiece> out;
  for (const FlatDomain& d : domains_) {
    const ShardRange s = d.shard();
    size_t pos = 0;  // the run's first element in the pack
    for (const auto& [lo, hi] : d.runs) {
      const size_t a = std::max(pos, s.lo), b = std::min(pos + (hi - lo), s.hi);
      if (a < b) out.push_back({lo + (a - pos), b - a, d.grad + (a - s.lo)});
      pos += hi - lo;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const AdamWPiece& p, const AdamWPiece& q) { return p.lo < q.lo; });
  return out;
}

OwnedRanges FlatShards::owned_local() const {
  OwnedRanges r;
  for (const AdamWPiece& p : pieces()) append(r, p.lo, p.lo + p.n);
  return r;
}

OwnedRanges FlatShards::owned() const {
  return segments_.empty() ? owned_local() : global_ranges_of(segments_, owned_local());
}

OwnedRanges FlatShards::owned_ranges() const {
  if (domains_.size() > 1) return owned();
  const ShardRange s = domains_[0].shard();
  return {{s.lo, s.hi}};
}

size_t FlatShards::owned_elems() const {
  size_t n = 0;
  for (const AdamWPiece& p : pieces()) n += p.n;
  return n;
}

std::vector<size_t> FlatShards::buffer_elems() const {
  std::vector<size_t> n;
  for (const FlatDomain& d : domains_) n.push_back(d.shard().padded * (size_t)d.count);
  n.push_back(shard_elems());
  return n;
}

}  // namespace ratchet

// See bucket_domains.h.
#include "distributed/bucket_domains.h"

#include <algorithm>

#include "core/error.h"
#include "distributed/expert_shards.h"
#include "model/param_layout.h"

namespace ratchet {

BucketPlan::BucketPlan(const ParamLayout& layout, int ranks, int rank) {
  RATCHET_ASSERT(ranks >= 1 && rank >= 0 && rank < ranks);
  parts_.push_back({BucketLayout(layout, layout.layers, ranks), rank, 0});
}

BucketPlan::BucketPlan(const GPTConfig& cfg, ExpertSlice x, int ranks, int rank) {
  RATCHET_ASSERT(ranks >= 1 && rank >= 0 && rank < ranks);
  const ParamLayout layout(cfg, x.shards);
  if (!x.partial()) {
    parts_.push_back({BucketLayout(layout, layout.layers, ranks), rank, 0});
    return;
  }
  check_slice_place(x, ranks, rank);
  segments_ = local_segments(cfg, x);
  Part rest{BucketLayout(layout, layout.layers, ranks, BucketTensors::NotExperts), rank, 0};
  const size_t at = rest.layout.shard_elems();
  parts_.push_back(std::move(rest));
  parts_.push_back({BucketLayout(layout, layout.layers, ranks / x.shards, BucketTensors::Experts),
                    rank / x.shards, at});
}

size_t BucketPlan::shard_elems() const {
  const Part& p = parts_.back();
  return std::max<size_t>(1, p.grad + p.layout.shard_elems());
}

std::vector<AdamWPiece> BucketPlan::pieces() const {
  std::vector<AdamWPiece> out;
  for (const Part& p : parts_)
    for (const OwnedPiece& o : p.layout.pieces(p.index)) out.push_back({o.lo, o.n, p.grad + o.shard});
  std::sort(out.begin(), out.end(),
            [](const AdamWPiece& a, const AdamWPiece& b) { return a.lo < b.lo; });
  return out;
}

OwnedRanges BucketPlan::owned() const {
  OwnedRanges local;
  for (const AdamWPiece& p : pieces()) {
    if (!local.empty() && local.back().second == p.lo)
      local.back().second += p.n;
    else
      local.push_back({p.lo, p.lo + p.n});
  }
  return segments_.empty() ? local : global_ranges_of(segments_, local);
}

size_t BucketPlan::owned_elems() const {
  size_t n = 0;
  for (const Part& p : parts_) n += p.layout.owned_elems(p.index);
  return n;
}

size_t BucketPlan::buffer_bytes(const BackendMemoryModel& be, bool accumulate) const {
  if (parts_.size() == 1) return GradBuckets::buffer_bytes(be, parts_[0].layout, accumulate);
  size_t b = be.alloc_size(shard_elems() * be.storage_bytes);  // the shared shard
  for (const Part& p : parts_) b += GradBuckets::buffer_bytes(be, p.layout, accumulate, false);
  return b;
}

OwnedRanges bucket_owned_ranges(const ParamLayout& layout, const ExpertShards* experts, int N, int q) {
  if (!experts) return BucketPlan(layout, N, q).owned();
  return BucketPlan(*experts->cfg, ExpertSlice{experts->n, q % experts->n}, N, q).owned();
}

// Each domain's store fills its own tensors' slots.
struct BucketDomains::Store final : GradStore {
  explicit Store(BucketDomains& d) : bd(d) {}
  void non_block(dptr* slots) override {
    for (auto& p : bd.parts_) p->store()->non_block(slots);
  }
  void block(int layer, dptr* slots) override {
    for (auto& p : bd.parts_) p->store()->block(layer, slots);
  }
  BucketDomains& bd;
};

BucketDomains::BucketDomains(Backend& be, const std::vector<ShardCollectives*>& colls,
                             const BucketPlan& plan, bool accumulate, bool overlap)
    : be_(be), plan_(plan) {
  const auto& parts = plan_.parts();
  RATCHET_ASSERT(colls.size() == parts.size());
  if (parts.size() == 1) {
    parts_.push_back(std::make_unique<GradBuckets>(be, *colls[0], parts[0].layout, accumulate, overlap));
    shard_ = parts_[0]->shard();
  } else {
    shard_ = be_.alloc(plan_.shard_elems() * be_.storage_bytes());
    for (size_t d = 0; d < parts.size(); d++) {
      RATCHET_ASSERT(colls[d]->index() == parts[d].index);
      char* at = static_cast<char*>(shard_) + parts[d].grad * be_.storage_bytes();
      parts_.push_back(
          std::make_unique<GradBuckets>(be, *colls[d], parts[d].layout, accumulate, overlap, at));
    }
  }
  store_ = std::make_unique<Store>(*this);
}

BucketDomains::~BucketDomains() {
  parts_.clear();
  if (plan_.parts().size() > 1) be_.release(shard_);
}

void BucketDomains::reduce(int layer, bool add) {
  for (auto& p : parts_) p->reduce(layer, add);
}

void BucketDomains::pack_and_reduce(int layer, const char* flat_grads) {
  for (auto& p : parts_) p->pack_and_reduce(layer, flat_grads);
}

double BucketDomains::complete() {
  double ssq = 0;
  for (auto& p : parts_) ssq += p->complete();
  return ssq;
}

void BucketDomains::gather_into(dptr params) {
  for (auto& p : parts_) p->gather_into(params);
}

}  // namespace ratchet

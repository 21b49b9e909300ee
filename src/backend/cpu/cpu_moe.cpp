// The Mixture-of-Experts layer on the cpu backend: Backend::moe_* (backend.h)
// over src/moe's ops (moe_ops.h has the math). The state is moe::MoeCache,
// host vectors sized by the shape of each forward, whose bytes the backend
// counts in bytes_in_use (CpuMoeState::recount).
#include <algorithm>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet {

namespace {
template <class V>
size_t held(const V& v) {
  return v.capacity() * sizeof(typename V::value_type);
}

// Every byte moe::MoeCache holds (vector capacities): what bytes_in_use counts.
size_t held_bytes(const moe::MoeCache& c) {
  const moe::Dispatch& d = c.dispatch;
  const moe::ExpertShard& sh = c.shard;
  return held(c.logits) + held(c.probs) + held(c.w) + held(c.idx) + held(d.counts) +
         held(d.offsets) + held(d.slot_of) + held(d.row_of) + held(c.xp) + held(c.h) + held(c.a) +
         held(c.y) + held(sh.recv_split) + held(sh.send_n) + held(sh.recv_n) + held(sh.local.counts) +
         held(sh.local.offsets) + held(sh.local.slot_of) + held(sh.local.row_of) + held(sh.perm) +
         held(sh.xe);
}

// The cache is host vectors, not alloc() blocks; the backend's bytes_in_use
// counts what they hold (BackendMemoryModel::moe_state_host), so the step's
// accounting (model/memory.h) and the check against the host's memory see it.
struct CpuMoeState : MoeState {
  explicit CpuMoeState(CpuBackend& b) : be(&b) {}
  ~CpuMoeState() override { be->count_moe_state_bytes(-(long)counted); }
  // After a forward: the growth of the cache since the last count.
  void recount() {
    const size_t now = held_bytes(cache);
    be->count_moe_state_bytes((long)now - (long)counted);
    counted = now;
  }
  CpuBackend* be;
  size_t counted = 0;
  moe::MoeCache cache;
};

moe::MoeShape shape_of(const MoeDims& d) {
  moe::MoeShape s;
  s.N = d.N;
  s.C = d.C;
  s.E = d.E;
  s.k = d.k;
  s.I = d.I;
  s.norm_topk_prob = d.norm_topk_prob;
  s.sigmoid = d.sigmoid;
  s.routed_scale = d.routed_scale;
  s.n_group = d.n_group;
  s.topk_group = d.topk_group;
  s.expert_parallel = std::max(d.expert_parallel, d.exchange ? d.exchange->size() : 1);
  s.ep_capacity = d.ep_capacity;
  s.layer = d.layer;
  return s;
}

const moe::MoeCache& cache_of(const MoeState& st) {
  const auto* c = dynamic_cast<const CpuMoeState*>(&st);
  RATCHET_ASSERT(c != nullptr);  // a state from another backend
  return c->cache;
}
}  // namespace

std::unique_ptr<MoeState> CpuBackend::moe_state() { return std::make_unique<CpuMoeState>(*this); }

void CpuBackend::moe_forward(const MoeDims& d, cdptr x, cdptr gate, cdptr w1, cdptr w2, dptr out,
                             MoeState& st) {
  moe::MoeExtra extra;  // the selection bias (the backward needs none: the cache has the choice)
  extra.bias = d.bias;
  moe::moe_forward(*this, shape_of(d), static_cast<const float*>(x),
                   static_cast<const float*>(gate), static_cast<const float*>(w1),
                   static_cast<const float*>(w2), static_cast<float*>(out),
                   const_cast<moe::MoeCache&>(cache_of(st)), d.exchange,
                   d.bias ? &extra : nullptr);
  static_cast<CpuMoeState&>(st).recount();
}

void CpuBackend::moe_backward(const MoeDims& d, cdptr x, cdptr gate, cdptr w1, cdptr w2,
                              cdptr dout, const MoeState& st, const float* aux_dprob, dptr dx,
                              dptr dgate, dptr dw1, dptr dw2) {
  moe::moe_backward(*this, shape_of(d), static_cast<const float*>(x),
                    static_cast<const float*>(gate), static_cast<const float*>(w1),
                    static_cast<const float*>(w2), static_cast<const float*>(dout), cache_of(st),
                    aux_dprob, static_cast<float*>(dx), static_cast<float*>(dgate),
                    static_cast<float*>(dw1), static_cast<float*>(dw2), nullptr, d.exchange);
}

void CpuBackend::moe_aux_stats(const MoeDims& d, const MoeState& st, double* counts,
                               double* prob_sums) {
  const moe::MoeCache& c = cache_of(st);
  moe::aux_stats(shape_of(d), c.probs.data(), c.idx.data(), counts, prob_sums);
}

}  // namespace ratchet

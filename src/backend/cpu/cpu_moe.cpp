// The Mixture-of-Experts layer on the cpu backend: Backend::moe_* (backend.h)
// over src/moe's ops (moe_ops.h has the math). The state is moe::MoeCache,
// host vectors: the cpu backend's memory is host memory anyway, and the
// cache is sized by the shape of each forward.
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet {

namespace {
struct CpuMoeState : MoeState {
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
  return s;
}

const moe::MoeCache& cache_of(const MoeState& st) {
  const auto* c = dynamic_cast<const CpuMoeState*>(&st);
  RATCHET_ASSERT(c != nullptr);  // a state from another backend
  return c->cache;
}
}  // namespace

std::unique_ptr<MoeState> CpuBackend::moe_state() { return std::make_unique<CpuMoeState>(); }

void CpuBackend::moe_forward(const MoeDims& d, cdptr x, cdptr gate, cdptr w1, cdptr w2, dptr out,
                             MoeState& st) {
  moe::MoeExtra extra;  // the selection bias (the backward needs none: the cache has the choice)
  extra.bias = d.bias;
  moe::moe_forward(*this, shape_of(d), static_cast<const float*>(x),
                   static_cast<const float*>(gate), static_cast<const float*>(w1),
                   static_cast<const float*>(w2), static_cast<float*>(out),
                   const_cast<moe::MoeCache&>(cache_of(st)), d.exchange,
                   d.bias ? &extra : nullptr);
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

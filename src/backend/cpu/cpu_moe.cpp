// The Mixture-of-Experts layer on the cpu backend: Backend::moe_* (backend.h)
// over src/moe's ops (moe_ops.h has the math). The state is moe::MoeCache,
// host vectors sized by the shape of each forward, whose bytes the backend
// counts in bytes_in_use (CpuMoeState::recount).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

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
  s.expert_slice = d.expert_slice;
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

// Qwen2-MoE's gated shared expert (backend.h has the math). Each token's dot
// products are summed in double in channel order, and dg's in token order
// per channel, so the bits do not depend on the thread count.
namespace {
double gate_dot(const float* a, const float* b, int C) {
  double z = 0;
  for (int c = 0; c < C; c++) z += (double)a[c] * b[c];
  return z;
}
float sigmoid_of(double z) { return (float)(1.0 / (1.0 + std::exp(-z))); }
}  // namespace

void CpuBackend::shared_gate_forward(dptr out_, cdptr x_, cdptr g_, cdptr y_, int N, int C) {
  float* out = static_cast<float*>(out_);
  const float *x = static_cast<const float*>(x_), *g = static_cast<const float*>(g_),
              *y = static_cast<const float*>(y_);
#pragma omp parallel for num_threads(threads_) schedule(static) if ((long)N * C >= (1 << 14))
  for (int t = 0; t < N; t++) {
    const float s = sigmoid_of(gate_dot(x + (size_t)t * C, g, C));
    float* o = out + (size_t)t * C;
    const float* yt = y + (size_t)t * C;
    for (int c = 0; c < C; c++) o[c] += s * yt[c];
  }
}

void CpuBackend::shared_gate_backward(dptr dys_, dptr dx_, dptr dg_, cdptr dy_, cdptr x_, cdptr g_,
                                      cdptr y_, int N, int C) {
  float *dys = static_cast<float*>(dys_), *dx = static_cast<float*>(dx_), *dg = static_cast<float*>(dg_);
  const float *dy = static_cast<const float*>(dy_), *x = static_cast<const float*>(x_),
              *g = static_cast<const float*>(g_), *y = static_cast<const float*>(y_);
  std::vector<float> dz(N);  // z'_t = ds_t s_t (1 - s_t), the gate logit's gradient
#pragma omp parallel for num_threads(threads_) schedule(static) if ((long)N * C >= (1 << 14))
  for (int t = 0; t < N; t++) {
    const size_t r = (size_t)t * C;
    const float s = sigmoid_of(gate_dot(x + r, g, C));
    const float ds = (float)gate_dot(dy + r, y + r, C);  // before dys (maybe y) is written
    const float d = ds * s * (1.0f - s);
    dz[t] = d;
    for (int c = 0; c < C; c++) dys[r + c] = s * dy[r + c];
    for (int c = 0; c < C; c++) dx[r + c] += d * g[c];
  }
#pragma omp parallel for num_threads(threads_) schedule(static) if ((long)N * C >= (1 << 14))
  for (int c = 0; c < C; c++) {
    double acc = 0;
    for (int t = 0; t < N; t++) acc += (double)dz[t] * x[(size_t)t * C + c];
    dg[c] += (float)acc;
  }
}

}  // namespace ratchet

// Backend::moe_* on the cuda backend (backend.h): the model's MoE layer
// through cuda_moe.h's moe_forward / moe_backward / aux_stats. The state is a
// CudaMoeCache plus two small device buffers: the aux loss's gradient per
// probability (uploaded from the host's E floats) and the statistics (FP64,
// downloaded and added to the host's sums). Every buffer comes from alloc()
// at its largest size on first use (the backward's per-expert scratch for N
// rows, the most one expert can get), so the arena holds exactly
// BackendMemoryModel::moe_state_bytes per state, plus moe_scratch_bytes once
// for the scratch the model's states share, and never sees one grow.
// With an exchange (--expert-parallel P) the expert side is sized for the
// rows of P ranks (cuda_moe.h).
#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_moe.h"
#include "core/error.h"

namespace ratchet::cuda {

namespace {
struct CudaMoeState : MoeState {
  moe::CudaMoeCache cache;
  mutable moe::CudaMoeCache::Buf aux_dprob, stats;  // (2E) FP32: aux dprob | bias; (2E) FP64
  mutable Backend* be = nullptr;
  ~CudaMoeState() override {
    if (!be) return;
    if (aux_dprob.p) be->release(aux_dprob.p);
    if (stats.p) be->release(stats.p);
  }
};

CudaMoeState& state_of(const MoeState& st) {
  const auto* c = dynamic_cast<const CudaMoeState*>(&st);
  RATCHET_ASSERT(c != nullptr);  // a state from another backend
  return const_cast<CudaMoeState&>(*c);
}

moe::MoeShape shape_of(const MoeDims& d) {
  moe::MoeShape s;
  s.N = d.N, s.C = d.C, s.E = d.E, s.k = d.k, s.I = d.I;
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

// The aux loss's gradient per probability (E FP32), then the selection bias
// (E FP32): one buffer (BackendMemoryModel::moe_state_bytes counts 2E floats).
size_t aux_bias_bytes(int E) { return (size_t)std::max(E, 2) * 2 * sizeof(float); }

// The state's own buffers (not the cache's), allocated once at their size.
void* own(Backend& be, CudaMoeState& s, moe::CudaMoeCache::Buf& b, size_t bytes) {
  s.be = &be;
  if (b.bytes < bytes) {
    if (b.p) be.release(b.p);
    b.p = be.alloc(bytes);
    b.bytes = bytes;
  }
  return b.p;
}
}  // namespace

template <class T>
std::unique_ptr<MoeState> CudaBackend<T>::moe_state() {
  return std::make_unique<CudaMoeState>();
}

// The scratch (cuda_moe.h's CudaMoeScratch: what a call uses only while it
// runs, about 40% of a layer's bytes) is the sibling's: the model's MoE
// layers run one after another on this backend's stream.
template <class T>
std::unique_ptr<MoeState> CudaBackend<T>::moe_state_beside(const MoeState& sibling) {
  auto s = std::make_unique<CudaMoeState>();
  s->cache.share_scratch(state_of(sibling).cache);
  return s;
}

template <class T>
void CudaBackend<T>::moe_forward(const MoeDims& d, cdptr x, cdptr gate, cdptr w1, cdptr w2,
                                 dptr out, MoeState& st) {
  CudaMoeState& s = state_of(st);
  moe::CudaMoeCache& c = s.cache;
  // The backward's scratch at its largest now (memory accounting: no growth later).
  const size_t n = (size_t)std::max(d.N, 0), tb = sizeof(T), Nk = n * std::max(d.k, 0);
  const moe::CudaMoeScratch& sc = c.scratch();
  sc.need(*this, sc.dy, Nk * d.C * tb);
  sc.need(*this, sc.dxp, Nk * d.C * tb);
  sc.need(*this, sc.dw, Nk * 4);
  sc.need(*this, sc.dlogits, n * d.E * tb);
  // One expert's rows: at most one per token of each rank whose rows come
  // here, and no more than the rows received. Sized for the exchange's
  // reservation (--moe-ep-capacity) on the first call even without it (an
  // evaluation before the first step): no buffer is reallocated later
  // unless a step's routing outgrows the reservation (cuda_moe.h).
  const moe::MoeShape ms = shape_of(d);
  const int P = ms.expert_parallel;
  if (P > 1) {
    moe::reserve_expert_parallel(*this, ms, P, tb, c,
                                 moe_ep_received_rows(d.N, d.k, P, d.ep_capacity));
  } else {
    sc.need(*this, sc.da, n * d.I * tb);
    sc.need(*this, sc.dh, n * 2 * d.I * tb);
  }
  float* small = static_cast<float*>(own(*this, s, s.aux_dprob, aux_bias_bytes(d.E)));
  own(*this, s, s.stats, (size_t)std::max(d.E, 1) * 2 * 8);
  // The selection bias (GPT::moe_bias) lives on the host: the trainer updates
  // it there after each optimizer step from the all-reduced counts
  // (moe::bias_update, double math, the same bits on every rank and on the
  // cpu backend), and it is saved from there. Uploading the layer's E floats
  // before each forward keeps one copy of the truth, needs no device update
  // kernel and no device-to-host copy at checkpoints, and costs E floats per
  // MoE layer per micro-batch (a synchronous upload; the forward synchronises
  // once anyway for the expert loop). It goes in the second half of the
  // aux_dprob buffer, so the state's bytes stay moe_state_bytes'.
  const float* bias_dev = nullptr;
  if (d.bias) {
    upload_bytes(small + d.E, d.bias, (size_t)d.E * sizeof(float));
    bias_dev = small + d.E;
  }
  moe::moe_forward(*this, ms, x, gate, w1, w2, out, c, bias_dev, d.exchange);
}

template <class T>
void CudaBackend<T>::moe_backward(const MoeDims& d, cdptr x, cdptr gate, cdptr w1, cdptr w2,
                                  cdptr dout, const MoeState& st, const float* aux_dprob, dptr dx,
                                  dptr dgate, dptr dw1, dptr dw2) {
  CudaMoeState& s = state_of(st);
  float* dev = nullptr;
  if (aux_dprob) {
    dev = static_cast<float*>(own(*this, s, s.aux_dprob, aux_bias_bytes(d.E)));
    upload_bytes(dev, aux_dprob, (size_t)d.E * sizeof(float));
  }
  moe::moe_backward(*this, shape_of(d), x, gate, w1, w2, dout, s.cache, dev, dx, dgate, dw1, dw2,
                    nullptr, d.exchange);
}

template <class T>
void CudaBackend<T>::moe_aux_stats(const MoeDims& d, const MoeState& st, double* counts,
                                   double* prob_sums) {
  CudaMoeState& s = state_of(st);
  const size_t E = d.E;
  double* dev = static_cast<double*>(own(*this, s, s.stats, std::max<size_t>(E, 1) * 2 * 8));
  zero(dev, E * 2 * sizeof(double));
  moe::aux_stats(*this, shape_of(d), static_cast<const float*>(s.cache.probs.p),
                 static_cast<const int*>(s.cache.idx.p), dev, dev + E);
  std::vector<double> host(2 * E);
  download_bytes(host.data(), dev, host.size() * sizeof(double));
  for (size_t e = 0; e < E; e++) {
    counts[e] += host[e];
    prob_sums[e] += host[E + e];
  }
}

// The members defined here, for both storage types (cuda_backend.cpp
// instantiates the class with the members it defines).
#define RATCHET_MOE_OPS(T)                                                                      \
  template std::unique_ptr<MoeState> CudaBackend<T>::moe_state();                               \
  template std::unique_ptr<MoeState> CudaBackend<T>::moe_state_beside(const MoeState&);         \
  template void CudaBackend<T>::moe_forward(const MoeDims&, cdptr, cdptr, cdptr, cdptr, dptr,   \
                                            MoeState&);                                         \
  template void CudaBackend<T>::moe_backward(const MoeDims&, cdptr, cdptr, cdptr, cdptr, cdptr, \
                                             const MoeState&, const float*, dptr, dptr, dptr,   \
                                             dptr);                                             \
  template void CudaBackend<T>::moe_aux_stats(const MoeDims&, const MoeState&, double*, double*);
RATCHET_MOE_OPS(float)
RATCHET_MOE_OPS(kernels::bf16)
#undef RATCHET_MOE_OPS

}  // namespace ratchet::cuda

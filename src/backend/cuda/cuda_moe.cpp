// The MoE layer on the cuda backend (cuda_moe.h; math in src/moe/moe_ops.h).
#include "backend/cuda/cuda_moe.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "backend/memory_model.h"

#include "core/error.h"
#include "kernels/moe_dispatch.cuh"
#include "kernels/moe_router.cuh"

namespace ratchet::moe {

using kernels::bf16;

void* CudaBuffers::need(Backend& be, Buf& b, size_t bytes, Alloc alloc) const {
  if (be_ && be_ != &be)
    fail("MoE (cuda): a CudaMoeCache (or the scratch it shares) is used with two backends; "
         "keep one per backend");
  be_ = &be;
  bytes = std::max<size_t>(bytes, 16);  // never a null buffer, even for N = 0
  if (bytes > b.bytes) {
    if (b.p) be.release(b.p);
    b = Buf{};  // an alloc that throws (a full device) leaves no dangling buffer
    b.p = alloc ? alloc(be, bytes) : be.alloc(bytes);
    b.bytes = bytes;
  }
  return b.p;
}

void CudaBuffers::release(std::initializer_list<Buf*> bufs) {
  if (!be_) return;
  for (Buf* b : bufs)
    if (b->p) be_->release(b->p);
}

CudaMoeScratch::~CudaMoeScratch() { release({&logits, &dy, &dxp, &dw, &dlogits, &da, &dh, &xr, &ye}); }

CudaMoeCache::~CudaMoeCache() {
  release({&probs, &w, &idx, &counts_dev, &offsets_dev, &row_of, &slot_of, &dispatch_scratch, &xp,
           &h, &a, &y, &perm, &inv, &xe, &he, &ae});
}

CudaMoeScratch& CudaMoeCache::scratch() const {
  if (!scratch_) scratch_ = std::make_shared<CudaMoeScratch>();
  return *scratch_;
}

void CudaMoeCache::share_scratch(const CudaMoeCache& other) {
  other.scratch();
  scratch_ = other.scratch_;
}

void check_cuda_shape(const MoeShape& s, size_t storage_bytes) {
  check_shape(s);
  const int pack = (int)(16 / storage_bytes);
  if (s.C % pack != 0 || s.I % pack != 0)
    fail("MoE layer (cuda, ", storage_bytes == 2 ? "bf16" : "f32", " storage): channels ", s.C,
         " and moe_intermediate_size ", s.I, " must be multiples of ", pack,
         " (each expert's rows of the packed buffers start 16-byte aligned for cuBLASLt); "
         "use --device cpu for this shape");
  if (s.Is != 0)
    fail("MoE layer (cuda): shared experts (n_shared_experts) run on the cpu ops only so far; "
         "use --device cpu");
  if (s.n_group > kernels::kMoeMaxGroups)
    fail("MoE layer (cuda): n_group (--moe-n-group) is ", s.n_group, "; the cuda router takes at "
         "most ", kernels::kMoeMaxGroups, " groups (one lane each); use --device cpu");
  if (s.E > kernels::kMoeMaxExperts)
    fail("MoE layer (cuda): num_experts is ", s.E, "; the cuda router takes at most ",
         kernels::kMoeMaxExperts, " experts; use --device cpu");
  if ((long long)s.N * s.k > INT_MAX)
    fail("MoE layer (cuda): ", s.N, " tokens x top-k ", s.k,
         " slots exceed 2^31 - 1; use a smaller batch");
}

namespace {
template <class T>
T* at(cdptr p, size_t elems) {
  return static_cast<T*>(const_cast<void*>(p)) + elems;
}

// This rank's experts (El of them, from expert me·El) on the rows the group
// routes to them, moe_ops.h's expert_parallel_forward on device buffers:
// xp (N*k,C) local packed order in, y (N*k,C) out in the same order.
template <class T>
void expert_parallel_forward(cuda::CudaBackend<T>& be, const MoeShape& s, CudaMoeCache& c,
                             MoeExchange& ex, cdptr w1, cdptr w2, const T* xp, T* y) {
  const int C = s.C, I = s.I, me = ex.rank();
  ExpertShard& sh = c.shard;
  plan_expert_shard(s, c.counts.data(), c.offsets.data(), ex, sh);
  const int El = sh.El, R = (int)sh.perm.size();
  if ((size_t)R > c.ep_rows) {
    // More rows than --moe-ep-capacity reserved: grow (dropless), beside the
    // arena (its free blocks belong to the step's later allocations); when
    // the device has no room, say what to do.
    const size_t had = c.ep_rows;
    try {
      reserve_expert_parallel(be, s, sh.P, sizeof(T), c, (size_t)R, [](Backend& b, size_t n) {
        return static_cast<cuda::CudaBackend<T>&>(b).alloc_beyond_arena(n);
      });
    } catch (const Error& e) {
      ep_growth_failed(s, (size_t)R, had, e.what());
    }
    if (had > 0) {
      std::printf("%s\n", ep_growth_note(s, (size_t)R, had).c_str());
      std::fflush(stdout);
    }
  }
  cudaStream_t st = be.stream();
  int* perm = static_cast<int*>(c.perm.p);
  int* inv = static_cast<int*>(c.inv.p);
  if (R > 0) {
    std::vector<int> back(R);
    for (int r = 0; r < R; r++) back[sh.perm[r]] = r;
    be.upload_bytes(perm, sh.perm.data(), (size_t)R * sizeof(int));
    be.upload_bytes(inv, back.data(), (size_t)R * sizeof(int));
  }
  const CudaMoeScratch& sc = c.scratch();
  T* xr = static_cast<T*>(sc.xr.p);
  T* xe = static_cast<T*>(c.xe.p);
  T* he = static_cast<T*>(c.he.p);
  T* ae = static_cast<T*>(c.ae.p);
  T* ye = static_cast<T*>(sc.ye.p);
  // Received grouped by (source rank, local expert, slot); xe[perm[r]] = xr[r].
  ex.device_rows(xp, sh.send_n.data(), xr, sh.recv_n.data(), (int)sizeof(T));
  if (R > 0) kernels::moe_gather<T>(xe, xr, inv, R, 1, C, st);
  for (int i = 0; i < El; i++) {
    const int rows = sh.local.counts[i];
    if (rows == 0) continue;  // no tokens on any rank: no call
    const size_t r0 = sh.local.offsets[i], e = (s.expert_slice ? 0 : (size_t)me * El) + i;
    be.matmul_forward(he + r0 * 2 * I, nullptr, xe + r0 * C, at<T>(w1, e * 2 * I * C), nullptr,
                      rows, C, 2 * I);
    be.swiglu_forward(ae + r0 * I, he + r0 * 2 * I, rows, I);
    be.matmul_forward(ye + r0 * C, nullptr, ae + r0 * I, at<T>(w2, e * C * I), nullptr, rows, I,
                      C);
  }
  // Back in the received order (xr[r] = ye[perm[r]]), then to the ranks the rows came from.
  if (R > 0) kernels::moe_gather<T>(xr, ye, perm, R, 1, C, st);
  ex.device_rows(xr, sh.recv_n.data(), y, sh.send_n.data(), (int)sizeof(T));
}

// Its backward: dy (N*k,C) local packed order in, dxp (N*k,C) out; dw1 and
// dw2 accumulated in this rank's experts' slices only.
template <class T>
void expert_parallel_backward(cuda::CudaBackend<T>& be, const MoeShape& s, const CudaMoeCache& c,
                              MoeExchange& ex, cdptr w1, cdptr w2, const T* dy, T* dxp, dptr dw1,
                              dptr dw2) {
  const int C = s.C, I = s.I, me = ex.rank();
  const ExpertShard& sh = c.shard;
  if (sh.P != ex.size())
    fail("MoE backward (cuda): the forward exchanged over ", sh.P, " ranks, this exchange has ",
         ex.size());
  const int El = sh.El, R = (int)sh.perm.size();
  cudaStream_t st = be.stream();
  const int* perm = static_cast<const int*>(c.perm.p);
  const int* inv = static_cast<const int*>(c.inv.p);
  const T* xe = static_cast<const T*>(c.xe.p);
  const T* he = static_cast<const T*>(c.he.p);
  const T* ae = static_cast<const T*>(c.ae.p);
  const CudaMoeScratch& sc = c.scratch();
  T* dr = static_cast<T*>(sc.xr.p);  // received dy, then the experts' dx
  T* de = static_cast<T*>(sc.ye.p);  // dy in expert order, then dx in received order
  T* da = static_cast<T*>(sc.da.p);
  T* dh = static_cast<T*>(sc.dh.p);
  ex.device_rows(dy, sh.send_n.data(), dr, sh.recv_n.data(), (int)sizeof(T));
  if (R > 0) kernels::moe_gather<T>(de, dr, inv, R, 1, C, st);
  for (int i = 0; i < El; i++) {
    const int rows = sh.local.counts[i];
    if (rows == 0) continue;  // no tokens: no gradient added
    const size_t r0 = sh.local.offsets[i], e = (s.expert_slice ? 0 : (size_t)me * El) + i;
    be.matmul_backward(da, at<T>(dw2, e * C * I), nullptr, de + r0 * C, ae + r0 * I,
                       at<T>(w2, e * C * I), rows, I, C);
    be.swiglu_backward(dh, he + r0 * 2 * I, da, rows, I);
    be.matmul_backward(dr + r0 * C, at<T>(dw1, e * 2 * I * C), nullptr, dh, xe + r0 * C,
                       at<T>(w1, e * 2 * I * C), rows, C, 2 * I);
  }
  if (R > 0) kernels::moe_gather<T>(de, dr, perm, R, 1, C, st);
  ex.device_rows(de, sh.recv_n.data(), dxp, sh.send_n.data(), (int)sizeof(T));
}
}  // namespace

void reserve_expert_parallel(Backend& be, const MoeShape& s, int P, size_t tb, CudaMoeCache& c,
                             size_t R, CudaMoeCache::Alloc al) {
  const size_t rows1 = moe_ep_expert_rows(s.N, P, R);
  const CudaMoeScratch& sc = c.scratch();
  sc.need(be, sc.da, rows1 * s.I * tb, al);
  sc.need(be, sc.dh, rows1 * 2 * s.I * tb, al);
  c.need(be, c.perm, R * sizeof(int), al);
  c.need(be, c.inv, R * sizeof(int), al);
  c.need(be, c.xe, R * s.C * tb, al);
  c.need(be, c.he, R * 2 * s.I * tb, al);
  c.need(be, c.ae, R * s.I * tb, al);
  sc.need(be, sc.xr, R * s.C * tb, al);
  sc.need(be, sc.ye, R * s.C * tb, al);
  c.ep_rows = std::max(c.ep_rows, R);
}

template <class T>
void moe_forward(cuda::CudaBackend<T>& be, const MoeShape& s, cdptr x, cdptr gate, cdptr w1,
                 cdptr w2, dptr out, CudaMoeCache& c, const float* bias, MoeExchange* ex) {
  check_cuda_shape(s, sizeof(T));
  const int N = s.N, C = s.C, E = s.E, k = s.k, I = s.I, slots = N * k;
  const size_t NE = (size_t)N * E, Nk = (size_t)slots, tb = sizeof(T);
  cudaStream_t st = be.stream();
  c.shape = s;
  const CudaMoeScratch& sc = c.scratch();
  T* logits = static_cast<T*>(sc.need(be, sc.logits, NE * tb));
  float* probs = static_cast<float*>(c.need(be, c.probs, NE * 4));
  float* w = static_cast<float*>(c.need(be, c.w, Nk * 4));
  int* idx = static_cast<int*>(c.need(be, c.idx, Nk * 4));
  int* counts = static_cast<int*>(c.need(be, c.counts_dev, (size_t)(E + 1) * 4));
  int* offsets = static_cast<int*>(c.need(be, c.offsets_dev, (size_t)(E + 1) * 4));
  int* row_of = static_cast<int*>(c.need(be, c.row_of, Nk * 4));
  int* slot_of = static_cast<int*>(c.need(be, c.slot_of, Nk * 4));
  void* dscratch = c.need(be, c.dispatch_scratch, kernels::moe_dispatch_scratch_bytes(slots, E));
  T* xp = static_cast<T*>(c.need(be, c.xp, Nk * C * tb));
  // With the exchange's buffers reserved for at least N·k rows (--expert-parallel:
  // F >= 1), a forward that computes every expert here (evaluation) keeps its
  // hidden states in he and ae: a sharded forward never uses h and a, so no
  // state holds both (BackendMemoryModel::moe_state_bytes counts one).
  const bool alias = c.ep_rows >= Nk && c.ep_rows > 0;
  T* h = static_cast<T*>(alias ? c.he.p : c.need(be, c.h, Nk * 2 * I * tb));
  T* a = static_cast<T*>(alias ? c.ae.p : c.need(be, c.a, Nk * I * tb));
  c.hidden_in_ep = alias;
  T* y = static_cast<T*>(c.need(be, c.y, Nk * C * tb));
  c.counts.assign(E, 0);
  c.offsets.assign(E + 1, 0);
  check_slice_exchange(s, ex);
  c.sharded = ex != nullptr;
  // With an exchange every rank takes part in it, whatever its N (the
  // trainer's N = B·T is never 0).
  if (N == 0 && !ex) return;

  be.matmul_forward(logits, nullptr, x, gate, nullptr, N, C, E);
  kernels::moe_router_forward<T>(probs, idx, w, logits, N, E, k, s.norm_topk_prob, st, s.sigmoid,
                                 s.routed_scale, bias, s.n_group, s.topk_group);
  kernels::moe_dispatch(counts, offsets, row_of, slot_of, dscratch, idx, slots, E, st);
  // The per-expert GEMM loop needs the rows per expert on the host.
  std::vector<int> host(2 * (E + 1));
  be.download_bytes(host.data(), counts, (size_t)(E + 1) * 4);
  be.download_bytes(host.data() + E + 1, offsets, (size_t)(E + 1) * 4);
  if (host[E] != 0)  // the router never writes one: a bug, not an input error
    fail("MoE dispatch (cuda): ", host[E], " of ", slots,
         " slots route to an expert outside [0, ", E, ")");
  std::copy(host.begin(), host.begin() + E, c.counts.begin());
  std::copy(host.begin() + E + 1, host.end(), c.offsets.begin());
  kernels::moe_gather<T>(xp, static_cast<const T*>(x), slot_of, slots, k, C, st);
  if (ex) {
    expert_parallel_forward(be, s, c, *ex, w1, w2, xp, y);
    kernels::moe_combine<T>(static_cast<T*>(out), w, y, row_of, N, k, C, st);
    return;
  }
  for (int e = 0; e < E; e++) {
    const int rows = c.counts[e];
    if (rows == 0) continue;  // no tokens: no call
    const size_t r0 = c.offsets[e];
    T* he = h + r0 * 2 * I;
    T* ae = a + r0 * I;
    be.matmul_forward(he, nullptr, xp + r0 * C, at<T>(w1, (size_t)e * 2 * I * C), nullptr, rows,
                      C, 2 * I);
    be.swiglu_forward(ae, he, rows, I);
    be.matmul_forward(y + r0 * C, nullptr, ae, at<T>(w2, (size_t)e * C * I), nullptr, rows, I, C);
  }
  kernels::moe_combine<T>(static_cast<T*>(out), w, y, row_of, N, k, C, st);
}

template <class T>
void moe_backward(cuda::CudaBackend<T>& be, const MoeShape& s, cdptr x, cdptr gate, cdptr w1,
                  cdptr w2, cdptr dout, const CudaMoeCache& c, const float* aux_dprob, dptr dx,
                  dptr dgate, dptr dw1, dptr dw2, float* dw_route, MoeExchange* ex) {
  check_cuda_shape(s, sizeof(T));
  check_slice_exchange(s, ex);
  if (c.sharded != (ex != nullptr))
    fail("MoE backward (cuda): the forward ran ", c.sharded ? "with" : "without",
         " expert parallelism but the backward ", ex ? "has" : "has no", " exchange");
  const MoeShape& f = c.shape;
  if (f.N != s.N || f.C != s.C || f.E != s.E || f.k != s.k || f.I != s.I ||
      f.norm_topk_prob != s.norm_topk_prob || f.sigmoid != s.sigmoid ||
      f.routed_scale != s.routed_scale || f.n_group != s.n_group || f.topk_group != s.topk_group)
    fail("MoE backward (cuda): the cache holds a forward of another shape (N ", f.N, ", C ", f.C,
         ", E ", f.E, ", k ", f.k, ", I ", f.I, "; this call N ", s.N, ", C ", s.C, ", E ", s.E,
         ", k ", s.k, ", I ", s.I, "): run moe_forward with this shape first");
  const int N = s.N, C = s.C, E = s.E, k = s.k, I = s.I, slots = N * k;
  const size_t Nk = (size_t)slots, tb = sizeof(T);
  if (N == 0 && !ex) return;
  cudaStream_t st = be.stream();
  int most = 0;
  if (ex)
    for (int n : c.shard.local.counts) most = std::max(most, n);
  else
    for (int e = 0; e < E; e++) most = std::max(most, c.counts[e]);
  const CudaMoeScratch& sc = c.scratch();
  T* dy = static_cast<T*>(sc.need(be, sc.dy, Nk * C * tb));
  T* dxp = static_cast<T*>(sc.need(be, sc.dxp, Nk * C * tb));
  float* dw = static_cast<float*>(sc.need(be, sc.dw, Nk * 4));
  T* dlogits = static_cast<T*>(sc.need(be, sc.dlogits, (size_t)N * E * tb));
  T* da = static_cast<T*>(sc.need(be, sc.da, (size_t)most * I * tb));
  T* dh = static_cast<T*>(sc.need(be, sc.dh, (size_t)most * 2 * I * tb));
  const T* xp = static_cast<const T*>(c.xp.p);
  const T* h = static_cast<const T*>(c.hidden_in_ep ? c.he.p : c.h.p);
  const T* a = static_cast<const T*>(c.hidden_in_ep ? c.ae.p : c.a.p);
  const int* row_of = static_cast<const int*>(c.row_of.p);
  const float* probs = static_cast<const float*>(c.probs.p);
  const float* w = static_cast<const float*>(c.w.p);
  const int* idx = static_cast<const int*>(c.idx.p);

  kernels::moe_combine_backward<T>(dy, dw, static_cast<const T*>(dout), w,
                                   static_cast<const T*>(c.y.p), row_of, N, k, C, st);
  if (dw_route) be.copy(dw_route, dw, Nk * 4);
  if (ex) expert_parallel_backward(be, s, c, *ex, w1, w2, dy, dxp, dw1, dw2);
  for (int e = 0; e < E && !ex; e++) {
    const int rows = c.counts[e];
    if (rows == 0) continue;  // no tokens: no gradient added
    const size_t r0 = c.offsets[e];
    be.matmul_backward(da, at<T>(dw2, (size_t)e * C * I), nullptr, dy + r0 * C, a + r0 * I,
                       at<T>(w2, (size_t)e * C * I), rows, I, C);
    be.swiglu_backward(dh, h + r0 * 2 * I, da, rows, I);
    be.matmul_backward(dxp + r0 * C, at<T>(dw1, (size_t)e * 2 * I * C), nullptr, dh, xp + r0 * C,
                       at<T>(w1, (size_t)e * 2 * I * C), rows, C, 2 * I);
  }
  kernels::moe_router_backward<T>(dlogits, probs, idx, w, dw, aux_dprob, N, E, k,
                                  s.norm_topk_prob, st, s.sigmoid, s.routed_scale);
  // The router's dx overwrites dx, then the experts' rows are added per token
  // in slot order (the CPU's order).
  be.matmul_backward(dx, dgate, nullptr, dlogits, x, gate, N, C, E);
  kernels::moe_gather_backward<T>(static_cast<T*>(dx), dxp, row_of, N, k, C, st);
}

template <class T>
void aux_stats(cuda::CudaBackend<T>& be, const MoeShape& s, const float* probs, const int* idx,
               double* counts, double* prob_sums) {
  check_shape(s);
  kernels::moe_aux_stats(counts, prob_sums, probs, idx, s.N, s.E, s.k, be.stream());
}

#define RATCHET_INSTANTIATE(T)                                                                   \
  template void moe_forward<T>(cuda::CudaBackend<T>&, const MoeShape&, cdptr, cdptr, cdptr,      \
                               cdptr, dptr, CudaMoeCache&, const float*, MoeExchange*);          \
  template void moe_backward<T>(cuda::CudaBackend<T>&, const MoeShape&, cdptr, cdptr, cdptr,     \
                                cdptr, cdptr, const CudaMoeCache&, const float*, dptr, dptr,     \
                                dptr, dptr, float*, MoeExchange*);                               \
  template void aux_stats<T>(cuda::CudaBackend<T>&, const MoeShape&, const float*, const int*,   \
                             double*, double*);
RATCHET_INSTANTIATE(float)
RATCHET_INSTANTIATE(bf16)
#undef RATCHET_INSTANTIATE

}  // namespace ratchet::moe

// Expert parallelism inside the MoE layer: the packed rows go to the rank
// holding their expert, that rank's experts run on every row routed to them,
// and the results come back in the local packed order (moe_ops.h). Two
// exchanges forward (counts, then rows; results back) and two backward (dy
// there, dx back), through a MoeExchange.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "backend/memory_model.h"
#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet {

void MoeExchange::device_rows(const void*, const size_t*, void*, const size_t*, int) {
  fail("this expert exchange moves host rows only (the cpu backend); the cuda backend needs one "
       "with a device path (distributed/expert_parallel.h): run --device cpu");
}

}  // namespace ratchet

namespace ratchet::moe {

void check_slice_exchange(const MoeShape& s, const MoeExchange* ex) {
  if (s.expert_slice && (!ex || ex->size() < 2))
    fail("a MoE layer holding an expert slice (E/P of its ", s.E,
         " experts) was called without the expert-parallel exchange over its P ranks: the "
         "other experts are on them (model/expert_slice.h)");
}

void check_expert_shards(const MoeShape& s, int P) {
  if (P < 1 || s.E % P != 0)
    fail("--expert-parallel ", P, " must divide num_experts ", s.E,
         ": each rank holds the same number of experts (choose a divisor of ", s.E, ")");
}

namespace {
// out[dst[r]] = in[r] for R rows of C floats (dst a permutation), or the
// inverse (out[r] = in[dst[r]]).
void scatter_rows(CpuBackend& be, const std::vector<int>& dst, const float* in, float* out, int C,
                  bool inverse) {
  const long R = (long)dst.size();
#pragma omp parallel for num_threads(be.threads()) schedule(static)
  for (long r = 0; r < R; r++) {
    const float* src = in + (size_t)(inverse ? dst[r] : r) * C;
    float* o = out + (size_t)(inverse ? r : dst[r]) * C;
    std::copy(src, src + C, o);
  }
}

template <class V>
void hold(V& v, size_t n) {
  if (v.capacity() < n) v.reserve(n);  // exactly n (the accounting's figure), not a doubling
}

std::string layer_name(const MoeShape& s) {
  return s.layer >= 0 ? "MoE layer " + std::to_string(s.layer) : std::string("a MoE layer");
}

std::string fmt(double x, const char* f = "%.3g") {
  char b[32];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

// The reservation's rows for one state, and the received rows' factor of N·k.
size_t reserved_rows(const MoeShape& s) {
  return moe_ep_received_rows(s.N, s.k, std::max(s.expert_parallel, 1), s.ep_capacity);
}
double factor_of(const MoeShape& s, size_t R) {
  const double Nk = (double)s.N * s.k;
  return Nk > 0 ? (double)R / Nk : 0;
}
}  // namespace

void reserve_expert_rows(const MoeShape& s, MoeCache& c) {
  if (s.expert_parallel <= 1 || c.shard.reserved >= reserved_rows(s)) return;
  const size_t R = reserved_rows(s);
  hold(c.shard.xe, R * s.C);
  hold(c.shard.perm, R);
  hold(c.h, R * 2 * s.I);
  hold(c.a, R * s.I);
  c.shard.reserved = R;
}

std::string ep_growth_note(const MoeShape& s, size_t R, size_t reserved) {
  return "rank " + std::to_string(log_rank()) + ": " + layer_name(s) + " received " +
         std::to_string(R) + " rows for this rank's experts, " + fmt(factor_of(s, R)) +
         " times its N*k = " + std::to_string((size_t)s.N * s.k) + "; its exchange buffers held " +
         std::to_string(reserved) + " (--moe-ep-capacity " + fmt(s.ep_capacity, "%g") +
         ") and grow to " + std::to_string(R) + " rows (routing stays dropless)";
}

void ep_growth_failed(const MoeShape& s, size_t R, size_t reserved, const std::string& why) {
  fail(layer_name(s), " received ", R, " rows for this rank's experts, ", fmt(factor_of(s, R)),
       " times its N*k = ", (size_t)s.N * s.k, ", more than the ", reserved,
       " its exchange buffers were reserved for (--moe-ep-capacity ", fmt(s.ep_capacity, "%g"),
       "), and this rank cannot hold the grown buffers (", why,
       "). This step needed --moe-ep-capacity ",
       fmt(std::ceil(factor_of(s, R) * 100 - 1e-9) / 100, "%.2f"),  // rounded up: enough
       " or more; rerun with at least that, or a smaller --batch-size (the memory accounting "
       "then reserves it before training). Nothing of this step was saved: the last checkpoint "
       "is intact");
}

void plan_expert_shard(const MoeShape& s, const int* counts, const int* offsets, MoeExchange& ex,
                       ExpertShard& sh) {
  const int P = ex.size(), C = s.C;
  check_expert_shards(s, P);
  const int El = s.E / P;
  sh.P = P;
  sh.El = El;
  // Counts: counts (E) is already P blocks of El (expert e lives on rank e / El).
  sh.recv_split.assign((size_t)P * El, 0);
  ex.counts(counts, sh.recv_split.data(), El);
  sh.send_n.assign(P, 0);
  sh.recv_n.assign(P, 0);
  std::vector<int> recv_rows(P, 0), recv_first(P + 1, 0);
  for (int q = 0; q < P; q++) {
    sh.send_n[q] = (size_t)(offsets[(q + 1) * El] - offsets[q * El]) * C;
    for (int i = 0; i < El; i++) recv_rows[q] += sh.recv_split[(size_t)q * El + i];
    sh.recv_n[q] = (size_t)recv_rows[q] * C;
    recv_first[q + 1] = recv_first[q] + recv_rows[q];
  }
  const int R = recv_first[P];
  // Expert order (local expert, source rank, slot): the one-process order.
  Dispatch& l = sh.local;
  l.counts.assign(El, 0);
  l.offsets.assign(El + 1, 0);
  for (int i = 0; i < El; i++) {
    for (int p = 0; p < P; p++) l.counts[i] += sh.recv_split[(size_t)p * El + i];
    l.offsets[i + 1] = l.offsets[i] + l.counts[i];
  }
  sh.perm.assign(R, 0);
  std::vector<int> next(l.offsets.begin(), l.offsets.end() - 1);
  for (int p = 0; p < P; p++) {
    int r = recv_first[p];
    for (int i = 0; i < El; i++)
      for (int n = 0; n < sh.recv_split[(size_t)p * El + i]; n++) sh.perm[r++] = next[i]++;
  }
}

void expert_parallel_forward(CpuBackend& be, const MoeShape& s, const Dispatch& d, MoeExchange& ex,
                             const float* w1, const float* w2, const float* xp,
                             std::vector<float>& h, std::vector<float>& a, float* y,
                             ExpertShard& sh) {
  const int me = ex.rank(), C = s.C, I = s.I;
  plan_expert_shard(s, d.counts.data(), d.offsets.data(), ex, sh);
  const int El = sh.El;
  const Dispatch& l = sh.local;
  const int R = (int)sh.perm.size();
  if ((size_t)R > sh.reserved) {
    // Dropless: more rows than --moe-ep-capacity reserved grow the buffers
    // (exactly to R: the accounting's figure for a later check stays exact).
    if (sh.reserved > 0) {
      std::printf("%s\n", ep_growth_note(s, R, sh.reserved).c_str());
      std::fflush(stdout);
    }
    const size_t had = sh.reserved;
    try {
      hold(sh.xe, (size_t)R * C);
      hold(sh.perm, (size_t)R);
      hold(h, (size_t)R * 2 * I);
      hold(a, (size_t)R * I);
    } catch (const std::bad_alloc&) {
      ep_growth_failed(s, R, had, "the host has no memory for them");
    }
    sh.reserved = R;
  }
  // Rows: received grouped by (source rank, local expert, slot).
  std::vector<float> xr((size_t)R * C);
  ex.rows(xp, sh.send_n.data(), xr.data(), sh.recv_n.data());
  sh.xe.resize((size_t)R * C);
  scatter_rows(be, sh.perm, xr.data(), sh.xe.data(), C, false);
  h.resize((size_t)R * 2 * I);
  a.resize((size_t)R * I);
  std::vector<float> ye((size_t)R * C);
  MoeShape ls = s;
  ls.E = El;
  const size_t first = s.expert_slice ? 0 : (size_t)me * El;  // this rank's experts in w1, w2
  experts_forward(be, ls, l, w1 + first * 2 * I * C, w2 + first * C * I, sh.xe.data(), h.data(),
                  a.data(), ye.data());
  // Back in the received order, then to the ranks the rows came from.
  scatter_rows(be, sh.perm, ye.data(), xr.data(), C, true);
  ex.rows(xr.data(), sh.recv_n.data(), y, sh.send_n.data());
}

void expert_parallel_backward(CpuBackend& be, const MoeShape& s, MoeExchange& ex, const float* w1,
                              const float* w2, const std::vector<float>& h,
                              const std::vector<float>& a, const ExpertShard& sh, const float* dy,
                              float* dxp, float* dw1, float* dw2) {
  const int P = sh.P, El = sh.El, me = ex.rank(), C = s.C, I = s.I;
  RATCHET_ASSERT(P == ex.size());
  const size_t R = sh.perm.size();
  std::vector<float> dr(R * C), de(R * C), dxe(R * C);
  ex.rows(dy, sh.send_n.data(), dr.data(), sh.recv_n.data());
  scatter_rows(be, sh.perm, dr.data(), de.data(), C, false);
  MoeShape ls = s;
  ls.E = El;
  const size_t first = s.expert_slice ? 0 : (size_t)me * El;  // this rank's experts in w1, w2
  const size_t w1e = first * 2 * I * C, w2e = first * C * I;
  experts_backward(be, ls, sh.local, w1 + w1e, w2 + w2e, sh.xe.data(), h.data(), a.data(),
                   de.data(), dxe.data(), dw1 + w1e, dw2 + w2e);
  scatter_rows(be, sh.perm, dxe.data(), dr.data(), C, true);
  ex.rows(dr.data(), sh.recv_n.data(), dxp, sh.send_n.data());
}

}  // namespace ratchet::moe

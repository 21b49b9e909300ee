// The whole MoE layer: router -> dispatch -> gather -> experts -> combine,
// and its backward (math in moe_ops.h).
#include <vector>

#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet::moe {

void moe_forward(CpuBackend& be, const MoeShape& s, const float* x, const float* gate,
                 const float* w1, const float* w2, float* out, MoeCache& c, MoeExchange* ex) {
  check_shape(s);
  const size_t NE = (size_t)s.N * s.E, Nk = (size_t)s.N * s.k;
  c.logits.resize(NE);
  c.probs.resize(NE);
  c.w.resize(Nk);
  c.idx.resize(Nk);
  c.xp.resize(Nk * s.C);
  c.h.resize(Nk * 2 * s.I);
  c.a.resize(Nk * s.I);
  c.y.resize(Nk * s.C);
  router_forward(be, s, x, gate, c.logits.data(), c.probs.data(), c.idx.data(), c.w.data());
  build_dispatch(s, c.idx.data(), c.dispatch);
  gather_rows(be, s, c.dispatch, x, c.xp.data());
  c.sharded = ex != nullptr;
  if (ex)
    expert_parallel_forward(be, s, c.dispatch, *ex, w1, w2, c.xp.data(), c.h, c.a, c.y.data(),
                            c.shard);
  else
    experts_forward(be, s, c.dispatch, w1, w2, c.xp.data(), c.h.data(), c.a.data(), c.y.data());
  combine(be, s, c.dispatch, c.w.data(), c.y.data(), out);
}

void moe_backward(CpuBackend& be, const MoeShape& s, const float* x, const float* gate,
                  const float* w1, const float* w2, const float* dout, const MoeCache& c,
                  const float* aux_dprob, float* dx, float* dgate, float* dw1, float* dw2,
                  float* dw_route, MoeExchange* ex) {
  check_shape(s);
  if (c.sharded != (ex != nullptr))
    fail("MoE backward: the forward ran ", c.sharded ? "with" : "without",
         " expert parallelism but the backward ", ex ? "has" : "has no", " exchange");
  const int N = s.N, C = s.C, k = s.k;
  const Dispatch& d = c.dispatch;
  const size_t Nk = (size_t)N * k;
  std::vector<float> dy(Nk * C), dxp(Nk * C), dw(Nk);
  // Un-combine: dy[(n,j)] = w[n,j] dout[n]; dw[n,j] = dout[n] . y[(n,j)].
#pragma omp parallel for num_threads(be.threads()) schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = dout + (size_t)n * C;
    for (int j = 0; j < k; j++) {
      const size_t slot = (size_t)n * k + j, r = d.row_of[slot];
      const float wj = c.w[slot];
      const float* yr = c.y.data() + r * C;
      float* dyr = dy.data() + r * C;
      float dot = 0.0f;
      for (int i = 0; i < C; i++) {
        dyr[i] = wj * g[i];
        dot += g[i] * yr[i];
      }
      dw[slot] = dot;
    }
  }
  if (dw_route)
    for (size_t i = 0; i < Nk; i++) dw_route[i] = dw[i];
  if (ex)
    expert_parallel_backward(be, s, *ex, w1, w2, c.h, c.a, c.shard, dy.data(), dxp.data(), dw1,
                             dw2);
  else
    experts_backward(be, s, d, w1, w2, c.xp.data(), c.h.data(), c.a.data(), dy.data(),
                     dxp.data(), dw1, dw2);
  // The router's dx into dy's first N*C floats (dy is spent), then the
  // experts' rows added per token in slot order.
  std::vector<float> dlogits((size_t)N * s.E);
  float* dx_router = dy.data();
  router_backward(be, s, x, gate, c.probs.data(), c.idx.data(), c.w.data(), dw.data(), aux_dprob,
                  dlogits.data(), dx_router, dgate);
#pragma omp parallel for num_threads(be.threads()) schedule(static)
  for (int n = 0; n < N; n++) {
    float* o = dx + (size_t)n * C;
    const float* rr = dx_router + (size_t)n * C;
    for (int i = 0; i < C; i++) o[i] = rr[i];
    for (int j = 0; j < k; j++) {
      const float* src = dxp.data() + (size_t)d.row_of[(size_t)n * k + j] * C;
      for (int i = 0; i < C; i++) o[i] += src[i];
    }
  }
}

}  // namespace ratchet::moe

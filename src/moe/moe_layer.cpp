// The whole MoE layer: router -> dispatch -> gather -> experts -> combine,
// plus DeepSeek-V3's shared expert, and its backward (math in moe_ops.h).
#include <vector>

#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet::moe {

namespace {
void check_extra(const MoeShape& s, const MoeExtra* extra) {
  if (s.Is < 0) fail("MoE layer: shared expert hidden size ", s.Is, " must be >= 0");
  if (s.Is > 0 && (!extra || !extra->sw1 || !extra->sw2))
    fail("MoE layer: n_shared_experts > 0 (shared hidden ", s.Is,
         ") but no shared expert weights were given");
}
}  // namespace

void moe_forward(CpuBackend& be, const MoeShape& s, const float* x, const float* gate,
                 const float* w1, const float* w2, float* out, MoeCache& c, MoeExchange* ex,
                 const MoeExtra* extra) {
  check_shape(s);
  check_extra(s, extra);
  check_slice_exchange(s, ex);
  const size_t NE = (size_t)s.N * s.E, Nk = (size_t)s.N * s.k;
  reserve_expert_rows(s, c);  // before h and a are sized below (their capacity is the reservation)
  c.logits.resize(NE);
  c.probs.resize(NE);
  c.w.resize(Nk);
  c.idx.resize(Nk);
  c.xp.resize(Nk * s.C);
  c.h.resize(Nk * 2 * s.I);
  c.a.resize(Nk * s.I);
  c.y.resize(Nk * s.C);
  router_forward(be, s, x, gate, c.logits.data(), c.probs.data(), c.idx.data(), c.w.data(),
                 extra ? extra->bias : nullptr);
  build_dispatch(s, c.idx.data(), c.dispatch);
  gather_rows(be, s, c.dispatch, x, c.xp.data());
  c.sharded = ex != nullptr;
  if (ex)
    expert_parallel_forward(be, s, c.dispatch, *ex, w1, w2, c.xp.data(), c.h, c.a, c.y.data(),
                            c.shard);
  else
    experts_forward(be, s, c.dispatch, w1, w2, c.xp.data(), c.h.data(), c.a.data(), c.y.data());
  combine(be, s, c.dispatch, c.w.data(), c.y.data(), out);
  if (s.Is > 0) {
    // DeepseekV3MoE: routed output + shared_experts(x), added per element
    // after the routed combine. h and a are kept for the backward; the
    // shared output is scratch.
    const int N = s.N, C = s.C, Is = s.Is;
    c.sh_h.resize((size_t)N * 2 * Is);
    c.sh_a.resize((size_t)N * Is);
    std::vector<float> sy((size_t)N * C);
    be.matmul_forward(c.sh_h.data(), nullptr, x, extra->sw1, nullptr, N, C, 2 * Is);
    be.swiglu_forward(c.sh_a.data(), c.sh_h.data(), N, Is);
    be.matmul_forward(sy.data(), nullptr, c.sh_a.data(), extra->sw2, nullptr, N, Is, C);
    for (size_t i = 0; i < (size_t)N * C; i++) out[i] += sy[i];
  } else {
    c.sh_h.clear();
    c.sh_a.clear();
  }
}

void moe_backward(CpuBackend& be, const MoeShape& s, const float* x, const float* gate,
                  const float* w1, const float* w2, const float* dout, const MoeCache& c,
                  const float* aux_dprob, float* dx, float* dgate, float* dw1, float* dw2,
                  float* dw_route, MoeExchange* ex, const MoeExtra* extra, float* dsw1,
                  float* dsw2) {
  check_shape(s);
  check_extra(s, extra);
  if (s.Is > 0 && (!dsw1 || !dsw2))
    fail("MoE backward: the shared expert (hidden ", s.Is, ") needs its gradient buffers");
  check_slice_exchange(s, ex);
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
  if (s.Is > 0) {
    // The shared expert: a dense SwiGLU MLP on all N tokens; its dx is added
    // after the routed and router terms.
    const int Is = s.Is;
    if (c.sh_h.size() != (size_t)N * 2 * Is)
      fail("MoE backward: the forward ran without the shared expert");
    std::vector<float> da((size_t)N * Is), dh((size_t)N * 2 * Is), dxs((size_t)N * C);
    be.matmul_backward(da.data(), dsw2, nullptr, dout, c.sh_a.data(), extra->sw2, N, Is, C);
    be.swiglu_backward(dh.data(), c.sh_h.data(), da.data(), N, Is);
    be.matmul_backward(dxs.data(), dsw1, nullptr, dh.data(), x, extra->sw1, N, C, 2 * Is);
    for (size_t i = 0; i < (size_t)N * C; i++) dx[i] += dxs[i];
  }
}

}  // namespace ratchet::moe

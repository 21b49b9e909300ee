// The Mixture-of-Experts kernels (kernels/moe_router.cuh, moe_dispatch.cuh)
// against the CPU ops of src/moe/moe_ops.h, as cases of kernel_cases.h (simt
// and tests/gpu alike). Included at the end of kernel_cases.h.
//
// What each case checks:
//   router_forward   probs and w (FP32 outputs: kF32 in both storages) and idx
//                    exactly. Logits are multiples of 1/64 (ties = 0) or of 1
//                    in [0, 3] (ties = 1): equal logits are exact ties (the
//                    lower index must win), and distinct ones are >= 1.5%
//                    apart in probability, so summation order cannot flip a
//                    choice. The CPU's router sees them through x = logits,
//                    gate = the identity (an exact sgemm).
//   router_select    the selection bias and group-limited selection (softmax or
//                    sigmoid): idx exactly, probs and w as router_forward. Each
//                    token's logits are drawn again until, in double, its
//                    choice scores (p + bias, masked) in the top k + 1 and its
//                    group scores at the kept/dropped boundary are 1e-5 apart
//                    or exactly equal (FP32 puts p within ~1e-7 of it on both
//                    sides), so no near-tie can flip a choice. The case also
//                    asserts that the bias / the groups change some token's
//                    choice against the plain top k.
//   router_backward  dlogits from the CPU's probs/idx/w, random dw and aux term.
//   aux_stats        counts exactly, prob_sums to 1e-12 relative (FP64 sums
//                    of at most a few thousand positive terms, grouped otherwise).
//   dispatch         counts, offsets, row_of, slot_of equal build_dispatch's.
//   gather, combine and their backward: the CPU op (or moe_backward's loop,
//                    transcribed) on the same dispatch.
//   shared_gate      Qwen2-MoE's shared-expert gate against CpuBackend's
//                    shared_gate_forward / _backward (double dots there, FP32
//                    here): out (+=); dys written over y (the alias the model
//                    uses), dx (+=), dg (+=). g ~ N(0, 1/C), so s = sigmoid(x·g)
//                    spreads over (0, 1). Shapes: C below, at and above the
//                    256 threads of a backward block, N across several 32-row
//                    blocks and not a multiple of 8 rows per forward block.
// Shapes include an expert with no tokens, k = 1, k = E, slot counts that
// are not a multiple of the 256-slot dispatch chunk, and N = 0.
#pragma once
#include <algorithm>
#include <cstdio>

#include "kernels/moe_dispatch.cuh"
#include "kernels/moe_router.cuh"
#include "moe/moe_ops.h"

namespace ratchet::testing::kcases {

// k distinct experts per token, uniformly among those allowed (expert
// `empty` never, when empty >= 0).
inline std::vector<int> moe_random_idx(Rng& rng, int N, int k, int E, int empty) {
  std::vector<int> idx((size_t)N * k), pool;
  for (int e = 0; e < E; e++)
    if (e != empty) pool.push_back(e);
  for (int n = 0; n < N; n++) {
    std::vector<int> p = pool;
    for (int j = 0; j < k; j++) {
      const int pick = j + (int)rng.below(p.size() - j);
      std::swap(p[j], p[pick]);
      idx[(size_t)n * k + j] = p[j];
    }
  }
  return idx;
}

template <class R>
struct MoeCases {
  R& r;
  using T = typename R::Storage;

  CpuBackend& cpu_be() { return dynamic_cast<CpuBackend&>(*r.cpu.be); }

  void exact(const std::string& what, const std::vector<int>& got, const std::vector<int>& ref) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < ref.size(); i++)
      if (got[i] != ref[i] && !bad++) first = i;
    if (bad)
      r.rep.fail(what + ": " + std::to_string(bad) + " of " + std::to_string(ref.size()) +
                 " differ (first at " + std::to_string(first) + ": " + std::to_string(got[first]) +
                 " vs " + std::to_string(ref[first]) + ")");
    else
      r.rep.lines.push_back(what + ": exact (" + std::to_string(ref.size()) + ")");
  }

  std::vector<float> logits(int N, int E, bool ties) {
    std::vector<float> l((size_t)N * E);
    for (auto& v : l)
      v = ties ? (float)r.rng.below(4) : std::round(r.rng.normal() * 64.0f) / 64.0f;
    return l;  // representable in BF16 too: |v| < 8 with 6 fraction bits
  }

  // The CPU router on logits: x = logits (N,E), gate = identity (E,E).
  void cpu_router(const moe::MoeShape& s, const std::vector<float>& l, std::vector<float>& probs,
                  std::vector<int>& idx, std::vector<float>& w) {
    std::vector<float> eye((size_t)s.E * s.E, 0.0f), lg((size_t)s.N * s.E);
    for (int e = 0; e < s.E; e++) eye[(size_t)e * s.E + e] = 1.0f;
    moe::MoeShape sc = s;
    sc.C = s.E;
    probs.assign((size_t)s.N * s.E, 0.0f);
    idx.assign((size_t)s.N * s.k, -1);
    w.assign((size_t)s.N * s.k, 0.0f);
    moe::router_forward(cpu_be(), sc, l.data(), eye.data(), lg.data(), probs.data(), idx.data(),
                        w.data());
  }

  void router_forward(int N, int E, int k, bool norm, bool ties) {
    moe::MoeShape s{N, 1, E, k, 1, norm};
    auto l = logits(N, E, ties);
    std::vector<float> probs, w;
    std::vector<int> idx;
    cpu_router(s, l, probs, idx, w);
    float* k_probs = r.mem.template alloc<float>((size_t)N * E);
    int* k_idx = r.mem.template alloc<int>((size_t)N * k);
    float* k_w = r.mem.template alloc<float>((size_t)N * k);
    kernels::moe_router_forward<T>(k_probs, k_idx, k_w, r.dev(l), N, E, k, norm, nullptr);
    exact("idx", r.get_raw(k_idx, (size_t)N * k), idx);
    r.rep.compare("probs", r.get_raw(k_probs, (size_t)N * E), probs, kF32);
    r.rep.compare("w", r.get_raw(k_w, (size_t)N * k), w, kF32);
  }

  // The choice scores of one row in double (moe_ops.h): p + bias, the groups
  // not kept set to 0; false when a near-tie could flip a choice.
  static bool wide_margins(const moe::MoeShape& s, const float* l, const float* bias) {
    const int E = s.E, G = E / s.n_group;
    std::vector<double> p(E), c(E);
    if (s.sigmoid) {
      for (int e = 0; e < E; e++) p[e] = 1.0 / (1.0 + std::exp(-(double)l[e]));
    } else {
      double mx = l[0], sum = 0;
      for (int e = 1; e < E; e++) mx = std::max(mx, (double)l[e]);
      for (int e = 0; e < E; e++) sum += (p[e] = std::exp((double)l[e] - mx));
      for (auto& v : p) v /= sum;
    }
    for (int e = 0; e < E; e++) c[e] = p[e] + (bias ? (double)bias[e] : 0.0);
    auto apart = [](const std::vector<double>& v, int upto) {  // sorted desc, first upto+1
      for (int i = 0; i + 1 < (int)v.size() && i < upto; i++)
        if (v[i] != v[i + 1] && v[i] - v[i + 1] < 1e-5) return false;
      return true;
    };
    if (s.n_group > 1) {
      std::vector<double> gs(s.n_group);
      for (int g = 0; g < s.n_group; g++) {
        std::vector<double> m(c.begin() + g * G, c.begin() + (g + 1) * G);
        std::sort(m.rbegin(), m.rend());
        gs[g] = G >= 2 ? m[0] + m[1] : m[0];
      }
      std::vector<double> sg = gs;
      std::sort(sg.rbegin(), sg.rend());
      if (s.topk_group < s.n_group && sg[s.topk_group - 1] != sg[s.topk_group] &&
          sg[s.topk_group - 1] - sg[s.topk_group] < 1e-5)
        return false;
      // Equal group scores at the boundary: the lower index is kept on both sides.
      std::vector<char> keep(s.n_group, 0);
      for (int j = 0; j < s.topk_group; j++) {
        int best = -1;
        for (int g = 0; g < s.n_group; g++)
          if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
        keep[best] = 1;
      }
      for (int e = 0; e < E; e++)
        if (!keep[e / G]) c[e] = 0.0;
    }
    std::sort(c.rbegin(), c.rend());
    return apart(c, s.k);
  }

  void router_select(int N, int E, int k, int n_group, int topk_group, bool sigmoid,
                     bool with_bias) {
    moe::MoeShape s{N, 1, E, k, 1, true};
    s.sigmoid = sigmoid;
    s.n_group = n_group, s.topk_group = topk_group;
    std::vector<float> bias(E);
    for (auto& b : bias) b = with_bias ? (float)((int)r.rng.below(9) - 4) / 16.0f : 0.0f;
    std::vector<float> l((size_t)N * E);
    for (int n = 0; n < N; n++) {
      float* row = l.data() + (size_t)n * E;
      int tries = 0;
      do {
        // Multiples of 1/64 below 4 in magnitude: at most 8 significant bits, exact in BF16.
        for (int e = 0; e < E; e++)
          row[e] = std::clamp(std::round(r.rng.normal() * 64.0f) / 64.0f, -255.0f / 64, 255.0f / 64);
        if (++tries > 200) {
          r.rep.fail("no logits with wide routing margins in 200 draws");
          return;
        }
      } while (!wide_margins(s, row, with_bias ? bias.data() : nullptr));
    }
    // The CPU's router with the bias (x = logits, gate = identity).
    std::vector<float> eye((size_t)E * E, 0.0f), lg((size_t)N * E), probs((size_t)N * E),
        w((size_t)N * k);
    std::vector<int> idx((size_t)N * k);
    for (int e = 0; e < E; e++) eye[(size_t)e * E + e] = 1.0f;
    moe::MoeShape sc = s;
    sc.C = E;
    moe::router_forward(cpu_be(), sc, l.data(), eye.data(), lg.data(), probs.data(), idx.data(),
                        w.data(), with_bias ? bias.data() : nullptr);
    // The same without the bias and the groups: some choice must differ.
    moe::MoeShape plain = sc;
    plain.n_group = plain.topk_group = 1;
    std::vector<float> p2((size_t)N * E), w2((size_t)N * k);
    std::vector<int> idx2((size_t)N * k);
    moe::router_forward(cpu_be(), plain, l.data(), eye.data(), lg.data(), p2.data(), idx2.data(),
                        w2.data());
    if (N > 8 && idx2 == idx) r.rep.fail("the bias / groups changed no token's choice");
    float* k_probs = r.mem.template alloc<float>((size_t)N * E);
    int* k_idx = r.mem.template alloc<int>((size_t)N * k);
    float* k_w = r.mem.template alloc<float>((size_t)N * k);
    kernels::moe_router_forward<T>(k_probs, k_idx, k_w, r.dev(l), N, E, k, true, nullptr, sigmoid,
                                   1.0f, with_bias ? r.dev_raw(bias) : nullptr, n_group,
                                   topk_group);
    exact("idx", r.get_raw(k_idx, (size_t)N * k), idx);
    r.rep.compare("probs", r.get_raw(k_probs, (size_t)N * E), probs, kF32);
    r.rep.compare("w", r.get_raw(k_w, (size_t)N * k), w, kF32);
  }

  void router_backward(int N, int E, int k, bool norm, bool aux) {
    moe::MoeShape s{N, 1, E, k, 1, norm};
    auto l = logits(N, E, false);
    std::vector<float> probs, w;
    std::vector<int> idx;
    cpu_router(s, l, probs, idx, w);
    auto dw = randn(r.rng, (size_t)N * k);
    auto aux_dprob = randn(r.rng, E, 0.1f);
    std::vector<float> dlogits((size_t)N * E), x(N, 1.0f), gate(E, 1.0f), dx(N), dgate(E, 0.0f);
    moe::router_backward(cpu_be(), s, x.data(), gate.data(), probs.data(), idx.data(), w.data(),
                         dw.data(), aux ? aux_dprob.data() : nullptr, dlogits.data(), dx.data(),
                         dgate.data());
    T* k_dl = r.mem.template alloc<T>((size_t)N * E);
    kernels::moe_router_backward<T>(k_dl, r.dev_raw(probs), r.dev_raw(idx), r.dev_raw(w),
                                    r.dev_raw(dw), aux ? r.dev_raw(aux_dprob) : nullptr, N, E, k,
                                    norm, nullptr);
    r.rep.compare("dlogits", r.get(k_dl, (size_t)N * E), dlogits, r.lim(kBf16));
  }

  void aux_stats(int N, int E, int k) {
    moe::MoeShape s{N, 1, E, k, 1, true};
    auto l = logits(N, E, false);
    std::vector<float> probs, w;
    std::vector<int> idx;
    cpu_router(s, l, probs, idx, w);
    std::vector<double> counts(E), sums(E);
    for (int e = 0; e < E; e++) counts[e] = (double)r.rng.below(5), sums[e] = r.rng.uniform();
    double* k_counts = r.dev_raw(counts);  // accumulated onto the same prefill
    double* k_sums = r.dev_raw(sums);
    moe::aux_stats(s, probs.data(), idx.data(), counts.data(), sums.data());
    kernels::moe_aux_stats(k_counts, k_sums, r.dev_raw(probs), r.dev_raw(idx), N, E, k, nullptr);
    auto gc = r.get_raw(k_counts, E), gs = r.get_raw(k_sums, E);
    std::vector<int> gci(E), rci(E);
    for (int e = 0; e < E; e++) gci[e] = (int)gc[e], rci[e] = (int)counts[e];
    exact("counts", gci, rci);
    double worst = 0;
    for (int e = 0; e < E; e++) worst = std::max(worst, std::fabs(gs[e] - sums[e]) / sums[e]);
    char line[96];
    std::snprintf(line, sizeof line, "prob_sums: relative error %.3g (limit 1e-12)", worst);
    if (worst > 1e-12) r.rep.fail(line);
    else r.rep.lines.push_back(line);
  }

  struct Disp {
    moe::MoeShape s;
    std::vector<int> idx;
    moe::Dispatch d;
  };
  Disp dispatch_of(int N, int k, int E, bool empty) {
    Disp x;
    x.s = moe::MoeShape{N, 1, E, k, 1, true};
    x.idx = moe_random_idx(r.rng, N, k, E, empty ? E / 2 : -1);
    moe::build_dispatch(x.s, x.idx.data(), x.d);
    return x;
  }

  void dispatch(int N, int k, int E, bool empty) {
    Disp x = dispatch_of(N, k, E, empty);
    const int slots = N * k;
    int* k_counts = r.mem.template alloc<int>(E + 1);
    int* k_offsets = r.mem.template alloc<int>(E + 1);
    int* k_row = r.mem.template alloc<int>(slots);
    int* k_slot = r.mem.template alloc<int>(slots);
    void* scratch = r.mem.template alloc<unsigned char>(kernels::moe_dispatch_scratch_bytes(slots, E));
    kernels::moe_dispatch(k_counts, k_offsets, k_row, k_slot, scratch, r.dev_raw(x.idx), slots, E,
                          nullptr);
    auto counts = x.d.counts;
    counts.push_back(0);  // no slot outside [0, E)
    exact("counts", r.get_raw(k_counts, E + 1), counts);
    exact("offsets", r.get_raw(k_offsets, E + 1), x.d.offsets);
    exact("row_of", r.get_raw(k_row, slots), x.d.row_of);
    exact("slot_of", r.get_raw(k_slot, slots), x.d.slot_of);
    if (empty && x.d.counts[E / 2] != 0) r.rep.fail("the case lost its empty expert");
  }

  void gather(int N, int k, int E, int C, bool backward) {
    Disp x = dispatch_of(N, k, E, true);
    const size_t S = (size_t)N * k;
    x.s.C = C;
    if (!backward) {
      auto in = r.q(randn(r.rng, (size_t)N * C));
      std::vector<float> xp(S * C);
      moe::gather_rows(cpu_be(), x.s, x.d, in.data(), xp.data());
      T* k_xp = r.mem.template alloc<T>(S * C);
      kernels::moe_gather<T>(k_xp, r.dev(in), r.dev_raw(x.d.slot_of), (int)S, k, C, nullptr);
      r.rep.compare("xp (a copy)", r.get(k_xp, S * C), xp, 0.0);
      return;
    }
    // moe_backward's dx loop: o = dx; o += dxp[row_of[n*k+j]], j in order.
    auto dx = r.q(randn(r.rng, (size_t)N * C)), dxp = r.q(randn(r.rng, S * C));
    std::vector<float> ref = dx;
    for (int n = 0; n < N; n++)
      for (int j = 0; j < k; j++)
        for (int c = 0; c < C; c++)
          ref[(size_t)n * C + c] += dxp[(size_t)x.d.row_of[(size_t)n * k + j] * C + c];
    T* k_dx = r.dev(dx);
    kernels::moe_gather_backward<T>(k_dx, r.dev(dxp), r.dev_raw(x.d.row_of), N, k, C, nullptr);
    r.rep.compare("dx (+=)", r.get(k_dx, (size_t)N * C), ref, r.lim(kBf16Acc));
  }

  void combine(int N, int k, int E, int C, bool backward) {
    Disp x = dispatch_of(N, k, E, true);
    const size_t S = (size_t)N * k;
    x.s.C = C;
    std::vector<float> w(S);
    for (auto& v : w) v = r.rng.uniform();
    auto y = r.q(randn(r.rng, S * C));
    if (!backward) {
      std::vector<float> out((size_t)N * C);
      moe::combine(cpu_be(), x.s, x.d, w.data(), y.data(), out.data());
      T* k_out = r.mem.template alloc<T>((size_t)N * C);
      kernels::moe_combine<T>(k_out, r.dev_raw(w), r.dev(y), r.dev_raw(x.d.row_of), N, k, C,
                              nullptr);
      r.rep.compare("out", r.get(k_out, (size_t)N * C), out, r.lim(kBf16));
      return;
    }
    // moe_backward's un-combine: dy[row] = w dout[n]; dw[slot] = dout[n] . y[row].
    auto dout = r.q(randn(r.rng, (size_t)N * C));
    std::vector<float> dy(S * C), dw(S);
    for (size_t i = 0; i < S; i++) {
      const size_t n = i / k, row = x.d.row_of[i];
      float dot = 0.0f;
      for (int c = 0; c < C; c++) {
        dy[row * C + c] = w[i] * dout[n * C + c];
        dot += dout[n * C + c] * y[row * C + c];
      }
      dw[i] = dot;
    }
    T* k_dy = r.mem.template alloc<T>(S * C);
    float* k_dw = r.mem.template alloc<float>(S);
    kernels::moe_combine_backward<T>(k_dy, k_dw, r.dev(dout), r.dev_raw(w), r.dev(y),
                                     r.dev_raw(x.d.row_of), N, k, C, nullptr);
    r.rep.compare("dy", r.get(k_dy, S * C), dy, r.lim(kBf16));
    r.rep.compare("dw (FP32 dot products)", r.get_raw(k_dw, S), dw, kF32);
  }

  void shared_gate(int N, int C, bool backward) {
    const size_t n = (size_t)N * C;
    auto x = r.q(randn(r.rng, n)), y = r.q(randn(r.rng, n));
    auto g = r.q(randn(r.rng, C, 1.0f / std::sqrt((float)C)));
    Backend& cpu = *r.cpu.be;
    float *r_x = r.cpu.f32(x), *r_g = r.cpu.f32(g), *r_y = r.cpu.f32(y);
    T *k_x = r.dev(x), *k_g = r.dev(g), *k_y = r.dev(y);
    if (!backward) {
      auto out = r.q(randn(r.rng, n));
      float* r_out = r.cpu.f32(out);
      T* k_out = r.dev(out);
      cpu.shared_gate_forward(r_out, r_x, r_g, r_y, N, C);
      kernels::moe_shared_gate_forward<T>(k_out, k_x, k_g, k_y, N, C, nullptr);
      r.rep.compare("out (+=)", r.get(k_out, n), r.cpu.get(r_out, n), r.lim(kBf16Acc));
      return;
    }
    auto dy = r.q(randn(r.rng, n)), dx = r.q(randn(r.rng, n)), dg = r.q(randn(r.rng, C));
    float *r_dx = r.cpu.f32(dx), *r_dg = r.cpu.f32(dg);
    T *k_dx = r.dev(dx), *k_dg = r.dev(dg);
    cpu.shared_gate_backward(r_y, r_dx, r_dg, r.cpu.f32(dy), r_x, r_g, r_y, N, C);
    void* scratch = r.mem.template alloc<unsigned char>(kernels::moe_shared_gate_backward_scratch_bytes(N, C));
    kernels::moe_shared_gate_backward<T>(k_y, k_dx, k_dg, scratch, r.dev(dy), k_x, k_g, k_y, N, C, nullptr);
    r.rep.compare("dys (over y)", r.get(k_y, n), r.cpu.get(r_y, n), r.lim(kBf16));
    r.rep.compare("dx (+=)", r.get(k_dx, n), r.cpu.get(r_dx, n), r.lim(kBf16Acc));
    r.rep.compare("dg (+=)", r.get(k_dg, C), r.cpu.get(r_dg, C), r.lim(kBf16Acc));
  }

  void run(const Case& c) {
    const auto& s = c.shape;
    if (c.op == "moe_router_forward") router_forward(s[0], s[1], s[2], s[3] != 0, s[4] != 0);
    else if (c.op == "moe_router_select")
      router_select(s[0], s[1], s[2], s[3], s[4], s[5] != 0, s[6] != 0);
    else if (c.op == "moe_router_backward") router_backward(s[0], s[1], s[2], s[3] != 0, s[4] != 0);
    else if (c.op == "moe_aux_stats") aux_stats(s[0], s[1], s[2]);
    else if (c.op == "moe_dispatch") dispatch(s[0], s[1], s[2], s[3] != 0);
    else if (c.op == "moe_gather") gather(s[0], s[1], s[2], s[3], false);
    else if (c.op == "moe_gather_backward") gather(s[0], s[1], s[2], s[3], true);
    else if (c.op == "moe_combine") combine(s[0], s[1], s[2], s[3], false);
    else if (c.op == "moe_combine_backward") combine(s[0], s[1], s[2], s[3], true);
    else if (c.op == "moe_shared_gate_forward") shared_gate(s[0], s[1], false);
    else if (c.op == "moe_shared_gate_backward") shared_gate(s[0], s[1], true);
    else r.rep.fail("unknown op " + c.op);
  }
};

template <class R>
void moe_case(R& r, const Case& c) {
  MoeCases<R>{r}.run(c);
}

inline std::vector<Case> moe_cases() {
  std::vector<std::pair<std::string, std::vector<std::vector<int>>>> ops = {
      // (N, E, k, norm_topk_prob, ties): k = 1, k = E, E not a multiple of 32,
      // E = 64 (two experts per lane), N not a multiple of the 8 rows per block.
      {"moe_router_forward", {{1, 1, 1, 1, 0}, {7, 4, 2, 1, 0}, {7, 4, 2, 0, 1}, {33, 5, 5, 1, 1},
                              {100, 8, 1, 0, 0}, {101, 60, 4, 1, 0}, {64, 64, 8, 1, 1},
                              {17, 128, 8, 0, 0}}},
      // (N, E, k, n_group, topk_group, sigmoid, bias): the bias alone (a
      // choice it flips), groups alone, both; a group per lane (E = 64 in
      // 32 groups of 2), groups of one, E = 256 in 8 groups (DeepSeek-V3's
      // shape), N not a multiple of the 8 rows per block.
      {"moe_router_select", {{33, 8, 2, 1, 1, 1, 1}, {33, 8, 2, 1, 1, 0, 1}, {50, 8, 2, 4, 2, 1, 0},
                             {50, 8, 2, 4, 2, 1, 1}, {17, 16, 3, 4, 2, 0, 1}, {41, 64, 4, 32, 3, 1, 1},
                             {20, 6, 2, 6, 3, 1, 1}, {9, 256, 8, 8, 4, 1, 1}}},
      // (N, E, k, norm_topk_prob, aux term)
      {"moe_router_backward", {{1, 1, 1, 1, 1}, {7, 4, 2, 1, 1}, {7, 4, 2, 0, 0}, {33, 5, 5, 1, 0},
                               {101, 60, 4, 1, 1}, {17, 128, 8, 0, 1}}},
      // (N, E, k): more rows than the 16 summing warps, E across two blocks of 32.
      {"moe_aux_stats", {{1, 1, 1}, {7, 4, 2}, {300, 60, 4}, {1000, 8, 8}}},
      // (N, k, E, expert E/2 empty): 1, 200, 257, 1200, 8000 slots (chunks of 256).
      {"moe_dispatch", {{0, 1, 3, 0}, {1, 1, 1, 0}, {5, 2, 3, 1}, {100, 2, 8, 1}, {257, 1, 4, 1},
                        {300, 4, 4, 0}, {1000, 8, 64, 1}, {171, 3, 7, 1}}},
      // (N, k, E, C)
      {"moe_gather", {{1, 1, 2, 1}, {7, 2, 4, 5}, {100, 3, 8, 33}, {65, 1, 3, 64}}},
      {"moe_gather_backward", {{1, 1, 2, 1}, {7, 2, 4, 5}, {100, 3, 8, 33}, {65, 4, 5, 64}}},
      {"moe_combine", {{1, 1, 2, 1}, {7, 2, 4, 5}, {100, 3, 8, 33}, {65, 4, 5, 64}}},
      {"moe_combine_backward", {{1, 1, 2, 1}, {7, 2, 4, 5}, {100, 3, 8, 33}, {65, 4, 5, 100}}},
      // (N, C): Qwen2-MoE's shared-expert gate.
      {"moe_shared_gate_forward", {{1, 1}, {7, 5}, {33, 64}, {100, 300}}},
      {"moe_shared_gate_backward", {{1, 1}, {7, 5}, {33, 256}, {100, 300}, {1100, 40}}},
  };
  std::vector<Case> cases;
  for (DType d : {DType::f32, DType::bf16})
    for (auto& [op, shapes] : ops)
      for (auto& s : shapes) cases.push_back({op, s, d});
  return cases;
}

}  // namespace ratchet::testing::kcases

// The router: gate projection, FP32 softmax over all experts (or DeepSeek-V3's
// sigmoid), deterministic top-k (optionally on biased scores), optional
// renormalisation and routed scaling, and their backward (math in moe_ops.h).
#include <cmath>
#include <vector>

#include "core/error.h"
#include "moe/moe_ops.h"

namespace ratchet::moe {

void check_shape(const MoeShape& s) {
  if (s.N < 0 || s.C < 1 || s.I < 1)
    fail("MoE layer: tokens ", s.N, ", channels ", s.C, ", moe_intermediate_size ", s.I,
         ": channels and moe_intermediate_size must be >= 1 and tokens >= 0");
  if (s.E < 1) fail("MoE layer: num_experts is ", s.E, "; it must be at least 1");
  if (s.k < 1 || s.k > s.E)
    fail("MoE layer: num_experts_per_tok (top-k) is ", s.k, " with ", s.E,
         " experts; it must be between 1 and num_experts");
  if (s.n_group < 1 || s.E % s.n_group != 0)
    fail("MoE layer: n_group (--moe-n-group) is ", s.n_group, " with ", s.E,
         " experts; it must be >= 1 and divide num_experts");
  if (s.topk_group < 1 || s.topk_group > s.n_group)
    fail("MoE layer: topk_group (--moe-topk-group) is ", s.topk_group, " with n_group ",
         s.n_group, "; it must be between 1 and n_group");
  if ((long long)s.k > (long long)s.topk_group * (s.E / s.n_group))
    fail("MoE layer: num_experts_per_tok (top-k) ", s.k, " exceeds the ", s.topk_group,
         " kept groups x ", s.E / s.n_group, " experts each (topk_group x num_experts / n_group); "
         "raise --moe-topk-group or lower --experts-per-tok");
}

void group_mask(const MoeShape& s, const float* choice, unsigned char* keep) {
  const int G = s.E / s.n_group;
  std::vector<float> gs(s.n_group);
  for (int g = 0; g < s.n_group; g++) {
    // The two largest of the group (a multiset: equal values count twice);
    // HF topk(2).sum(): v0 + v1, one FP32 add, the same in either order.
    float v0 = -INFINITY, v1 = -INFINITY;
    for (int e = g * G; e < (g + 1) * G; e++) {
      const float c = choice[e];
      if (c > v0) {
        v1 = v0;
        v0 = c;
      } else if (c > v1) {
        v1 = c;
      }
    }
    gs[g] = G >= 2 ? v0 + v1 : v0;
  }
  for (int g = 0; g < s.n_group; g++) keep[g] = 0;
  // topk_group passes, each the best group not yet kept; strict '>' keeps the
  // lower group index among equal scores (torch.topk leaves ties unspecified).
  for (int j = 0; j < s.topk_group; j++) {
    int best = -1;
    for (int g = 0; g < s.n_group; g++)
      if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
    keep[best] = 1;
  }
}

void router_forward(CpuBackend& be, const MoeShape& s, const float* x, const float* gate,
                    float* logits, float* probs, int* idx, float* w, const float* bias) {
  check_shape(s);
  const int N = s.N, E = s.E, k = s.k;
  be.matmul_forward(logits, nullptr, x, gate, nullptr, N, s.C, E);
  const bool grouped = s.n_group > 1;
  const int G = E / s.n_group;
#pragma omp parallel for num_threads(be.threads()) schedule(static)
  for (int n = 0; n < N; n++) {
    std::vector<float> choice(grouped ? E : 0);  // grouped: the (masked) choice scores
    std::vector<unsigned char> keep(grouped ? s.n_group : 0);
    const float* l = logits + (size_t)n * E;
    float* p = probs + (size_t)n * E;
    if (s.sigmoid) {
      // DeepSeek-V3: independent scores, logits.sigmoid() in FP32.
      for (int e = 0; e < E; e++) p[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
      float mx = l[0];
      for (int e = 1; e < E; e++) mx = std::fmax(mx, l[e]);
      float sum = 0.0f;
      for (int e = 0; e < E; e++) sum += (p[e] = std::exp(l[e] - mx));
      const float inv = 1.0f / sum;
      for (int e = 0; e < E; e++) p[e] *= inv;
    }
    // Top-k by selection: k passes, each the largest not yet taken; the strict
    // '>' keeps the lowest index among equal scores. With a bias the choice
    // is on p + bias (HF scores_for_choice), the weight the unbiased p.
    // Grouped: the choice scores of the groups not kept are 0.0 (moe_ops.h).
    if (grouped) {
      for (int e = 0; e < E; e++) choice[e] = bias ? p[e] + bias[e] : p[e];
      group_mask(s, choice.data(), keep.data());
      for (int e = 0; e < E; e++)
        if (!keep[e / G]) choice[e] = 0.0f;
    }
    int* ix = idx + (size_t)n * k;
    float* wr = w + (size_t)n * k;
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) {
      int best = -1;
      float best_score = 0.0f;
      for (int e = 0; e < E; e++) {
        bool taken = false;
        for (int t = 0; t < j; t++) taken |= ix[t] == e;
        const float sc = grouped ? choice[e] : bias ? p[e] + bias[e] : p[e];
        if (!taken && (best < 0 || sc > best_score)) {
          best = e;
          best_score = sc;
        }
      }
      ix[j] = best;
      wsum += (wr[j] = p[best]);
    }
    if (s.norm_topk_prob) {
      // DeepSeek-V3 divides by sum + 1e-20 (sigmoid scores need not sum to 1);
      // the softmax families by the plain sum.
      const float S = s.sigmoid ? wsum + 1e-20f : wsum;
      for (int j = 0; j < k; j++) wr[j] /= S;
    }
    // routed_scaling_factor; x * 1.0f is x, so the default changes no bit.
    for (int j = 0; j < k; j++) wr[j] *= s.routed_scale;
  }
}

void router_backward(CpuBackend& be, const MoeShape& s, const float* x, const float* gate,
                     const float* probs, const int* idx, const float* w, const float* dw,
                     const float* aux_dprob, float* dlogits, float* dx, float* dgate) {
  check_shape(s);
  (void)w;  // the unscaled weights are recomputed from probs, to the bit
  const int N = s.N, E = s.E, k = s.k;
#pragma omp parallel for num_threads(be.threads()) schedule(static)
  for (int n = 0; n < N; n++) {
    const float* p = probs + (size_t)n * E;
    const int* ix = idx + (size_t)n * k;
    const float* dwr = dw + (size_t)n * k;
    float* dl = dlogits + (size_t)n * E;  // holds dprobs first, then dlogits
    for (int e = 0; e < E; e++) dl[e] = aux_dprob ? aux_dprob[e] : 0.0f;
    // w_j = scale * p_j [/ S]: dw'_j = scale * dw_j is the gradient of the
    // unscaled weight w'_j = w_j / scale.
    const float sc = s.routed_scale;
    if (s.norm_topk_prob) {
      // w'_j = p_j / S: dp_j = (dw'_j - sum_l dw'_l w'_l) / S
      float S = 0.0f, dot = 0.0f;
      for (int j = 0; j < k; j++) S += p[ix[j]];
      if (s.sigmoid) S += 1e-20f;
      // p_j / S is the forward's w'_j to the bit (the same sum, the same
      // division), and sc * dw_j is dw_j when sc is 1: the default path
      // gives the bits it gave before these options.
      for (int j = 0; j < k; j++) dot += (sc * dwr[j]) * (p[ix[j]] / S);
      for (int j = 0; j < k; j++) dl[ix[j]] += (sc * dwr[j] - dot) / S;
    } else {
      for (int j = 0; j < k; j++) dl[ix[j]] += sc * dwr[j];
    }
    if (s.sigmoid) {
      // Element-wise: dlogit_e = dp_e * p_e * (1 - p_e).
      for (int e = 0; e < E; e++) dl[e] = dl[e] * p[e] * (1.0f - p[e]);
    } else {
      float pd = 0.0f;  // sum_e p_e dp_e
      for (int e = 0; e < E; e++) pd += p[e] * dl[e];
      for (int e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - pd);
    }
  }
  be.matmul_backward(dx, dgate, nullptr, dlogits, x, gate, N, s.C, E);
}

}  // namespace ratchet::moe

#include "train/sampler.h"

#include <algorithm>
#include <cmath>

namespace ratchet {

void generate(GPT& model, std::vector<int32_t>& tokens, int n, int max_context,
              float temperature, Rng& rng) {
  const int V = model.config().vocab_size;
  std::vector<float> logits(V);
  std::vector<double> p(V);
  std::vector<int32_t> ctx;
  for (int i = 0; i < n; i++) {
    const int t = std::min<int>((int)tokens.size(), max_context);
    // The forward runs on a length rounded up to a multiple of 8 (the cuda
    // backend's attention needs it; see CudaBackend::attention_forward), the
    // tail padded with token 0: attention is causal, so position t-1 does not
    // see the padding.
    const int tp = std::min(max_context, (t + 7) / 8 * 8);
    ctx.assign(tokens.end() - t, tokens.end());
    ctx.resize(std::max(tp, t), 0);
    model.forward(ctx.data(), nullptr, 1, (int)ctx.size());
    model.get_logits_row(t - 1, logits.data());
    int next = 0;
    if (temperature <= 0) {
      next = (int)(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      const float mx = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (int v = 0; v < V; v++) sum += p[v] = std::exp((logits[v] - mx) / temperature);
      double u = rng.uniform_double() * sum, c = 0;
      next = V - 1;
      for (int v = 0; v < V; v++) {
        c += p[v];
        if (u < c) {
          next = v;
          break;
        }
      }
    }
    tokens.push_back(next);
  }
}

}  // namespace ratchet

// The 2026 families' options in the llama block on the cpu backend (issue
// 38): finite-difference gradients of every tensor kind, bitwise-equal
// gradients under every recompute policy, and the window and NoPE options
// changing what they should. The float64 PyTorch oracle
// (tests/reference/) checks the same configs against transformers' math.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "testing/family_configs.h"
#include "testing/recompute_cases.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

constexpr int kB = 2, kT = 9;  // T > every tiny window, so windows mask something

// Central differences of the FP32 loss against the FP32 analytic gradient on
// a few elements of every non-empty tensor. h = 1e-3 and a 5% + 3e-4 bound:
// the loss (~3.6) carries ~4e-7 of FP32 rounding, ~2e-4 after dividing by
// 2h; a larger h lets the norms' curvature in (embedding rows are ~0.1 long,
// seen through RMSNorm). A missing term or a sign error is off by far more.
void expect_fd_gradients(const GPTConfig& cfg) {
  auto be = make_cpu_backend(1);
  GPT m(cfg, *be);
  m.init_random(7);
  std::vector<float> p(m.num_params());
  m.get_params(p.data());
  // Norm gains away from their init so that their gradients are generic.
  for (int i : {P_LN1W, P_LN2W, P_LNFW, P_QNORMW, P_KNORMW, P_ATTNPOSTW, P_MLPPOSTW, P_QKVB})
    for (size_t j = 0; j < m.layout().sizes[i]; j++)
      p[m.layout().offsets[i] + j] += 0.3f * std::sin(0.7f * (float)j + i);
  m.set_params(p.data());
  const auto in = random_tokens(kB * kT, cfg.vocab_size, 1), tg = random_tokens(kB * kT, cfg.vocab_size, 2);
  m.zero_grad();
  m.forward_backward(in.data(), tg.data(), kB, kT, 1.0f);
  std::vector<float> g(m.num_params());
  m.get_grads(g.data());
  for (int t = 0; t < kNumParamTensors; t++) {
    const size_t n = m.layout().sizes[t];
    if (n == 0) continue;
    for (size_t k = 0; k < 3; k++) {
      size_t i = m.layout().offsets[t] + (k * 7919 + 13) % n;
      if (t == P_WTE || t == P_LMHEAD) i = m.layout().offsets[t] + (size_t)in[k] * cfg.channels + k;
      const float keep = p[i], h = 1e-3f;
      p[i] = keep + h;
      m.set_params(p.data());
      const double lp = m.forward(in.data(), tg.data(), kB, kT);
      p[i] = keep - h;
      m.set_params(p.data());
      const double lm = m.forward(in.data(), tg.data(), kB, kT);
      p[i] = keep;
      m.set_params(p.data());
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(g[i], fd, 0.05 * std::fabs(fd) + 3e-4)
          << family_name(cfg.family) << " tensor " << ParamLayout::name(t) << " element "
          << i - m.layout().offsets[t];
    }
  }
}

TEST(ModelFamilies, GradientsMatchFiniteDifferences) {
  for (const auto& [name, f] : all_families()) {
    SCOPED_TRACE(name);
    expect_fd_gradients(tiny_family_config(f, /*tied=*/name != "qwen3"));
  }
}

TEST(ModelFamilies, CpuGradientsAreBitwiseTheSameUnderEveryPolicy) {
  auto be = make_cpu_backend(2);
  for (const auto& [name, f] : all_families()) {
    SCOPED_TRACE(name);
    expect_every_policy_bitwise_equal(*be, tiny_family_config(f, true, 3), 2, 9);
  }
}

// Each option changes the loss (it is wired in), and a window at least T long
// is full attention (the mask is exact at the boundary).
TEST(ModelFamilies, WindowAtLeastTIsFullAttention) {
  auto be = make_cpu_backend(1);
  GPTConfig full = tiny_family_config(Family::mistral);
  full.sliding_window = 0;
  full.layer_sliding.clear();
  auto loss_of = [&](const GPTConfig& c) {
    GPT m(c, *be);
    m.init_random(3);
    const auto in = random_tokens(kB * kT, c.vocab_size, 1), tg = random_tokens(kB * kT, c.vocab_size, 2);
    return m.forward(in.data(), tg.data(), kB, kT);
  };
  const float base = loss_of(full);
  GPTConfig w = tiny_family_config(Family::mistral);
  w.sliding_window = kT;  // query i sees i-T < j: every j
  EXPECT_EQ(loss_of(w), base);
  w.sliding_window = kT - 1;  // query T-1 loses key 0
  EXPECT_NE(loss_of(w), base);
  GPTConfig nope = full;
  nope.layer_rope.assign(full.num_layers, 0);
  EXPECT_NE(loss_of(nope), base);
}

}  // namespace

// Model-level tests on the CPU backend: parameter layout, gradient
// accumulation, determinism, AdamW and LR schedule semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

TEST(ParamLayout, Gpt2SmallMatchesLlmc) {
  // llm.c prints num_parameters: 124475904 for GPT-2 124M with Vp = 50304.
  GPTConfig c = preset_config("d12", 50257, 1024);
  EXPECT_EQ(c.padded_vocab, 50304);
  EXPECT_EQ(ParamLayout(c).total, 124475904u);
}

TEST(ParamLayout, Gpt2PresetSizes) {
  // GPT-2 medium/large/XL with Vp = 50304 (llm.c's counts).
  EXPECT_EQ(ParamLayout(preset_config("d24", 50257, 1024)).total, 354871296u);
  // Vp·C + maxT·C + L·(12C² + 13C) + 2C with C = 1280, L = 36
  EXPECT_EQ(ParamLayout(preset_config("d36", 50257, 1024)).total, 774090240u);
  EXPECT_EQ(ParamLayout(preset_config("d48", 50257, 1024)).total, 1557686400u);
  GPTConfig d6 = preset_config("d6", 257, 256);
  EXPECT_EQ(d6.channels, 384);
  EXPECT_EQ(d6.num_heads, 6);
}

TEST(ParamLayout, OffsetsAreContiguousInLlmcOrder) {
  ParamLayout lay(tiny_config());
  for (int i = 1; i < kNumParamTensors; i++)
    EXPECT_EQ(lay.offsets[i], lay.offsets[i - 1] + lay.sizes[i - 1]) << ParamLayout::name(i);
  EXPECT_STREQ(ParamLayout::name(P_QKVW), "qkvw");
  EXPECT_TRUE(ParamLayout::decayed(P_FCW));
  EXPECT_FALSE(ParamLayout::decayed(P_LN1B));
}

TEST(ModelConfig, BadShapesAreRefused) {
  EXPECT_THROW(preset_config("x12", 257, 64), Error);
  GPTConfig c = tiny_config();
  c.channels = 15;  // not a multiple of heads
  EXPECT_THROW(c.finalize(), Error);
}

TEST(Model, RandomInitIsGpt2Style) {
  auto be = make_cpu_backend(1);
  GPTConfig cfg = tiny_config();
  GPT m(cfg, *be);
  m.init_random(7);
  std::vector<float> p(m.num_params());
  m.get_params(p.data());
  const auto& lay = m.layout();
  // padded rows of wte are exactly zero, LayerNorm gains one, biases zero
  for (size_t i = (size_t)cfg.vocab_size * cfg.channels; i < lay.sizes[P_WTE]; i++)
    ASSERT_EQ(p[lay.offsets[P_WTE] + i], 0.0f);
  for (size_t i = 0; i < lay.sizes[P_LN1W]; i++) ASSERT_EQ(p[lay.offsets[P_LN1W] + i], 1.0f);
  for (size_t i = 0; i < lay.sizes[P_QKVB]; i++) ASSERT_EQ(p[lay.offsets[P_QKVB] + i], 0.0f);
  double ss = 0;
  for (size_t i = 0; i < lay.sizes[P_FCW]; i++) ss += p[lay.offsets[P_FCW] + i] * (double)p[lay.offsets[P_FCW] + i];
  // std 0.02 over 4096 samples: the estimate is within 10% with overwhelming probability
  EXPECT_NEAR(std::sqrt(ss / lay.sizes[P_FCW]), 0.02, 0.002);
}

TEST(Model, InitialLossIsNearUniform) {
  auto be = make_cpu_backend(1);
  GPTConfig cfg = tiny_config();
  GPT m(cfg, *be);
  m.init_random(1);
  const int B = 2, T = 8;
  auto x = random_tokens(B * T, cfg.vocab_size, 1), y = random_tokens(B * T, cfg.vocab_size, 2);
  // small random weights give near-uniform predictions: loss ~ ln V
  EXPECT_NEAR(m.forward(x.data(), y.data(), B, T), std::log((double)cfg.vocab_size), 0.1);
}

TEST(Model, GradientAccumulationEqualsOneBigBatch) {
  // One micro-batch of 2B rows vs two micro-batches of B with loss scale 1/2.
  auto be = make_cpu_backend(2);
  GPTConfig cfg = tiny_config();
  const int B = 2, T = 8;
  auto x = random_tokens(2 * B * T, cfg.vocab_size, 3), y = random_tokens(2 * B * T, cfg.vocab_size, 4);
  GPT big(cfg, *be), acc(cfg, *be);
  big.init_random(5);
  acc.init_random(5);
  big.zero_grad();
  acc.zero_grad();
  float lbig = big.forward_backward(x.data(), y.data(), 2 * B, T, 1.0f);
  float l0 = acc.forward_backward(x.data(), y.data(), B, T, 0.5f);
  float l1 = acc.forward_backward(x.data() + B * T, y.data() + B * T, B, T, 0.5f);
  // the mean of two half-batch means is the whole mean; FP32 summation order differs
  EXPECT_NEAR(lbig, 0.5f * (l0 + l1), 1e-5);
  std::vector<float> gb(big.num_params()), ga(acc.num_params());
  big.get_grads(gb.data());
  acc.get_grads(ga.data());
  // Same math, different FP32 summation order (two partial sums): relative error ~1e-6.
  EXPECT_LT(nmse(ga.data(), gb.data(), ga.size()), 1e-10);
  EXPECT_LT(max_abs_diff(ga.data(), gb.data(), ga.size()), 1e-6);
}

TEST(Model, GradsAccumulateUntilZeroed) {
  auto be = make_cpu_backend(1);
  GPTConfig cfg = tiny_config();
  GPT m(cfg, *be);
  m.init_random(9);
  const int B = 1, T = 8;
  auto x = random_tokens(B * T, cfg.vocab_size, 1), y = random_tokens(B * T, cfg.vocab_size, 2);
  m.zero_grad();
  m.forward_backward(x.data(), y.data(), B, T, 1.0f);
  std::vector<float> g1(m.num_params()), g2(m.num_params());
  m.get_grads(g1.data());
  m.forward_backward(x.data(), y.data(), B, T, 1.0f);
  m.get_grads(g2.data());
  for (size_t i = 0; i < g1.size(); i++) ASSERT_FLOAT_EQ(g2[i], 2 * g1[i]) << i;
}

static std::vector<float> train_losses(int threads, int steps) {
  auto be = make_cpu_backend(threads);
  GPTConfig cfg = tiny_config();
  GPT m(cfg, *be);
  m.init_random(11);
  AdamW opt(*be, m.layout(), AdamWConfig{});
  const int B = 2, T = 8;
  std::vector<float> losses;
  for (int s = 0; s < steps; s++) {
    auto x = random_tokens(B * T, cfg.vocab_size, 100 + s);
    auto y = random_tokens(B * T, cfg.vocab_size, 200 + s);
    m.zero_grad();
    losses.push_back(m.forward_backward(x.data(), y.data(), B, T, 1.0f));
    opt.step(m.params(), m.grads(), 1e-2f);
  }
  return losses;
}

TEST(Model, DeterministicForAFixedThreadCount) {
  auto a = train_losses(2, 5), b = train_losses(2, 5);
  for (size_t i = 0; i < a.size(); i++) ASSERT_EQ(a[i], b[i]) << "step " << i;
}

TEST(Model, SequenceLongerThanMaxSeqLenIsRefused) {
  auto be = make_cpu_backend(1);
  GPTConfig cfg = tiny_config();
  GPT m(cfg, *be);
  auto x = random_tokens(cfg.max_seq_len + 1, cfg.vocab_size, 1);
  EXPECT_THROW(m.forward(x.data(), nullptr, 1, cfg.max_seq_len + 1), Error);
}

TEST(AdamW, ClipsToTheGlobalNormAndDecaysOnlyMatrices) {
  auto be = make_cpu_backend(1);
  GPTConfig cfg = tiny_config();
  GPT m(cfg, *be);
  m.init_random(3);
  const auto& lay = m.layout();
  std::vector<float> p0(m.num_params()), g(m.num_params(), 0.0f), p1(m.num_params());
  m.get_params(p0.data());
  // Zero gradient: only weight decay moves parameters, and only decayed tensors.
  be->upload_f32(m.grads(), g.data(), g.size());
  AdamWConfig ac;
  ac.weight_decay = 0.5f;
  AdamW opt(*be, lay, ac);
  EXPECT_EQ(opt.step(m.params(), m.grads(), 0.1f), 0.0f);
  m.get_params(p1.data());
  for (int i = 0; i < kNumParamTensors; i++) {
    const size_t o = lay.offsets[i];
    const float expect = ParamLayout::decayed(i) ? (1 - 0.1f * 0.5f) : 1.0f;
    for (size_t j = 0; j < lay.sizes[i]; j += 97)
      ASSERT_NEAR(p1[o + j], p0[o + j] * expect, 1e-7) << ParamLayout::name(i);
  }
  // Gradient of norm 10 with clip 1: the reported norm is the unclipped one.
  for (size_t i = 0; i < g.size(); i++) g[i] = 0;
  g[0] = 6;
  g[1] = 8;
  be->upload_f32(m.grads(), g.data(), g.size());
  EXPECT_NEAR(opt.grad_norm(m.grads()), 10.0, 1e-6);
  EXPECT_NEAR(opt.step(m.params(), m.grads(), 0.1f), 10.0f, 1e-5);
}

TEST(LRSchedule, WarmupThenCosineToFinalFraction) {
  LRSchedule s;
  s.kind = LRSchedule::kCosine;
  s.lr = 1.0f;
  s.warmup = 10;
  s.total_steps = 110;
  s.final_fraction = 0.1f;
  EXPECT_FLOAT_EQ(s.at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.at(9), 1.0f);
  EXPECT_FLOAT_EQ(s.at(10), 1.0f);
  EXPECT_NEAR(s.at(10 + 99 / 2), 0.55f + 0.45f * std::cos(M_PI * 49 / 99.0), 1e-6);
  EXPECT_FLOAT_EQ(s.at(109), 0.1f);
  s.kind = LRSchedule::kLinear;
  EXPECT_NEAR(s.at(10 + 33), 1.0f - 0.9f * 33 / 99.0f, 1e-6);
  s.kind = LRSchedule::kConstant;
  EXPECT_FLOAT_EQ(s.at(100), 1.0f);
  EXPECT_THROW(LRSchedule::parse("exp"), Error);
}

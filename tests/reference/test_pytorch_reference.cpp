// The CPU backend against an independent float64 PyTorch implementation
// (tests/reference/gpt2_reference.py, run with Debian's python3-torch):
// logits, loss, every parameter gradient, and 10 AdamW steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "model/llmc_checkpoint.h"
#include "optim/adamw.h"
#include "testing/reference_output.h"
#include "testing/test_util.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

class PyTorchReference : public ::testing::Test {
 protected:
  // L=2, NH=4, C=32, V=61 (Vp=128), B=3, T=11: odd sizes, padded vocab, >1 head.
  GPTConfig cfg() { return tiny_config(2, 4, 32, 61, 16); }
};

TEST_F(PyTorchReference, LogitsLossGradsAndTenAdamWSteps) {
  TempDir d;
  const GPTConfig c = cfg();
  const int B = 3, T = 11, steps = 10;
  const float lr = 1e-3f, wd = 0.1f, clip = 1.0f;
  auto p0 = reference_params(c);
  save_llmc_checkpoint(d / "model.bin", c, p0);
  auto x = random_tokens(B * T, c.vocab_size, 5), y = random_tokens(B * T, c.vocab_size, 6);
  {
    std::ofstream f(d / "batch.bin", std::ios::binary);
    int32_t bt[2] = {B, T};
    f.write((const char*)bt, 8);
    f.write((const char*)x.data(), x.size() * 4);
    f.write((const char*)y.data(), y.size() * 4);
  }
  auto run = run_shell("/usr/bin/python3 " RATCHET_TESTS_DIR "/reference/gpt2_reference.py"
                       " --checkpoint " + (d / "model.bin") + " --batch " + (d / "batch.bin") +
                       " --out " + (d / "ref.bin") + " --steps 10 --lr 0.001 --weight-decay 0.1"
                       " --grad-clip 1.0");
  ASSERT_EQ(run.exit_code, 0) << "the PyTorch reference failed (python3-torch is installed by "
                                 "scripts/install-deps.sh):\n" << run.output;
  Reference ref = read_reference(d / "ref.bin");
  ASSERT_EQ(ref.P, (int)ParamLayout(c).total);

  auto be = make_cpu_backend(2);
  GPT m(c, *be);
  m.set_params(p0.data());

  // Forward. FP32 vs FP64 over sums of ~C=32 and 4C terms: relative error
  // ~1e-6 of logits of size ~1, so 1e-5 absolute has a 10x margin.
  float loss = m.forward(x.data(), y.data(), B, T);
  std::vector<float> logits((size_t)B * T * c.padded_vocab);
  m.get_logits(logits.data());
  double worst = 0;
  for (size_t i = 0; i < logits.size(); i++) worst = std::fmax(worst, std::fabs(logits[i] - ref.logits[i]));
  EXPECT_LT(worst, 1e-5) << "logits";
  // The loss is a mean of log-sum-exps of those logits: same order of error.
  EXPECT_NEAR(loss, ref.loss, 1e-5);

  // Backward: every tensor's gradient, and exact zeros on the padded wte rows.
  m.zero_grad();
  m.forward_backward(x.data(), y.data(), B, T, 1.0f);
  std::vector<float> g(m.num_params());
  m.get_grads(g.data());
  expect_grads_match(g, ref, c);
  const ParamLayout& lay = m.layout();

  // Ten AdamW steps on the same batch, with weight decay and clipping active.
  AdamWConfig ac;
  ac.weight_decay = wd;
  ac.grad_clip = clip;
  AdamW opt(*be, lay, ac);
  m.set_params(p0.data());
  for (int s = 0; s < steps; s++) {
    m.zero_grad();
    float l = m.forward_backward(x.data(), y.data(), B, T, 1.0f);
    // Each step moves parameters by ~lr; FP32 noise in tiny gradient entries can
    // change Adam's normalized update for those entries, so the loss drifts by at
    // most ~1e-5 over ten steps.
    EXPECT_NEAR(l, ref.losses[s], 2e-5) << "loss before update " << s + 1;
    opt.step(m.params(), m.grads(), lr);
  }
  std::vector<float> p(m.num_params());
  m.get_params(p.data());
  // The key bias (middle third of each layer's qkvb) has an exactly zero true
  // gradient: q·(k + b) shifts a whole softmax row by q·b, which the softmax
  // ignores. Both implementations feed rounding noise (|g| ~ 1e-17 in FP64,
  // ~1e-9 in FP32) into Adam, which normalizes it to updates of up to lr per
  // step, so those entries can only be compared to within steps·lr. Every
  // other entry is compared strictly.
  const int C = c.channels;
  for (int l = 0; l < c.num_layers; l++)
    for (int j = 0; j < C; j++) {
      const size_t k = lay.offsets[P_QKVB] + (size_t)l * 3 * C + C + j;
      EXPECT_LT(std::fabs(ref.grads[k]), 1e-12) << "key bias gradient should be zero";
      EXPECT_LE(std::fabs(p[k] - ref.final_params[k]), steps * lr * 1.001) << "key bias " << j;
      p[k] = (float)ref.final_params[k];  // checked above; keep it out of the NMSE below
    }
  for (int i = 0; i < kNumParamTensors; i++) {
    const size_t o = lay.offsets[i], n = lay.sizes[i];
    // Parameters are O(0.1-1) and moved by ~10·lr = 1e-2; FP32 state over ten
    // steps keeps the relative error ~1e-6.
    EXPECT_LT(nmse_d(p.data() + o, ref.final_params.data() + o, n), 1e-10) << ParamLayout::name(i);
  }
  EXPECT_LT(ref.losses[steps - 1], ref.losses[0]) << "the reference itself did not learn";
}

}  // namespace

// The CPU backend against an independent float64 PyTorch implementation
// (tests/reference/gpt2_reference.py, run with Debian's python3-torch):
// logits, loss, every parameter gradient, and 10 AdamW steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "model/llmc_checkpoint.h"
#include "testing/reference_output.h"
#include "testing/reference_run.h"
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
  write_token_batch(d / "batch.bin", x, y, B, T);
  auto run = run_shell("/usr/bin/python3 " RATCHET_TESTS_DIR "/reference/gpt2_reference.py"
                       " --checkpoint " + (d / "model.bin") + " --batch " + (d / "batch.bin") +
                       " --out " + (d / "ref.bin") + " --steps 10 --lr 0.001 --weight-decay 0.1"
                       " --grad-clip 1.0");
  ASSERT_EQ(run.exit_code, 0) << "the PyTorch reference failed (python3-torch is installed by "
                                 "scripts/install-deps.sh):\n" << run.output;
  Reference ref = read_reference(d / "ref.bin");
  ASSERT_EQ(ref.P, (int)ParamLayout(c).total);
  ASSERT_EQ(ref.steps, steps);

  auto be = make_cpu_backend(2);
  GPT m(c, *be);
  m.set_params(p0.data());

  // Forward: logits and loss (tolerances in reference_run.h).
  expect_forward_matches(m, x, y, B, T, ref);

  // Backward: every tensor's gradient, and exact zeros on the padded wte rows.
  expect_backward_matches(m, x, y, B, T, ref);

  // Ten AdamW steps on the same batch, with weight decay and clipping active.
  std::vector<float> p = adamw_steps_matching(m, *be, p0, x, y, B, T, lr, wd, clip, ref);
  const ParamLayout& lay = m.layout();
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
  expect_params_match(p, ref, lay);
  EXPECT_LT(ref.losses[steps - 1], ref.losses[0]) << "the reference itself did not learn";
}

}  // namespace

// What both PyTorch reference tests (tests/reference/test_pytorch_reference.cpp,
// test_llama_reference.cpp) run on the model and compare against the
// reference's output: the batch file the reference scripts read, the forward
// and backward passes, and the AdamW steps. The tolerances are the same for GPT-2 and Llama;
// each has its reason next to it.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "testing/reference_output.h"

namespace ratchet::testing {

// The token batch both reference scripts read (read_batch in
// gpt2_reference.py): int32 B, T, then inputs (B*T), then targets (B*T).
inline void write_token_batch(const std::string& path, const std::vector<int32_t>& x,
                              const std::vector<int32_t>& y, int B, int T) {
  std::ofstream f(path, std::ios::binary);
  int32_t bt[2] = {B, T};
  f.write((const char*)bt, 8);
  f.write((const char*)x.data(), x.size() * 4);
  f.write((const char*)y.data(), y.size() * 4);
}

// Forward on (x, y): logits and loss against the reference. FP32 against FP64
// through 2 layers of sums over ~C and 4C (or H) terms: logits of size ~1
// agree to ~1e-6, so 1e-5 absolute leaves a 10x margin; the loss is a mean of
// log-sum-exps of those logits, so the same order of error.
inline void expect_forward_matches(GPT& m, const std::vector<int32_t>& x,
                                   const std::vector<int32_t>& y, int B, int T,
                                   const Reference& ref) {
  const float loss = m.forward(x.data(), y.data(), B, T);
  std::vector<float> logits((size_t)B * T * m.config().padded_vocab);
  m.get_logits(logits.data());
  double worst = 0;
  for (size_t i = 0; i < logits.size(); i++)
    worst = std::fmax(worst, std::fabs(logits[i] - ref.logits[i]));
  EXPECT_LT(worst, 1e-5) << "logits";
  EXPECT_NEAR(loss, ref.loss, 1e-5);
}

// One forward + backward on (x, y): every gradient against the reference's,
// and exact zeros on the padded vocab rows (expect_grads_match).
inline void expect_backward_matches(GPT& m, const std::vector<int32_t>& x,
                                    const std::vector<int32_t>& y, int B, int T,
                                    const Reference& ref) {
  m.zero_grad();
  m.forward_backward(x.data(), y.data(), B, T, 1.0f);
  std::vector<float> g(m.num_params());
  m.get_grads(g.data());
  expect_grads_match(g, ref, m.config());
}

// ref.steps AdamW steps from p0 on the same batch (weight decay wd, clipping
// at clip), each step's loss before its update against the reference's;
// returns the final parameters.
inline std::vector<float> adamw_steps_matching(GPT& m, Backend& be, const std::vector<float>& p0,
                                               const std::vector<int32_t>& x,
                                               const std::vector<int32_t>& y, int B, int T,
                                               float lr, float wd, float clip,
                                               const Reference& ref) {
  AdamWConfig ac;
  ac.weight_decay = wd;
  ac.grad_clip = clip;
  AdamW opt(be, m.layout(), ac);
  m.set_params(p0.data());
  for (int s = 0; s < ref.steps; s++) {
    m.zero_grad();
    const float l = m.forward_backward(x.data(), y.data(), B, T, 1.0f);
    // Each step moves parameters by ~lr; FP32 noise in tiny gradient entries
    // can change Adam's normalized update for those entries, so the loss
    // drifts by at most ~1e-5 over ten steps.
    EXPECT_NEAR(l, ref.losses[s], 2e-5) << "loss before update " << s + 1;
    opt.step(m.params(), m.grads(), lr);
    // A MoE selection bias follows each step's counts, as the trainer does it.
    if (m.config().moe_selection_bias) m.moe_bias_update(m.moe_stats().counts);
  }
  std::vector<float> p(m.num_params());
  m.get_params(p.data());
  return p;
}

// The parameters after the AdamW steps (p, flat, ParamLayout order) against the
// reference's final ones, tensor by tensor. Parameters are O(0.1-1) and moved
// by ~10·lr = 1e-2; FP32 state over ten steps keeps the relative error ~1e-6,
// an NMSE ~1e-12: 1e-10 has margin, a wrong update is far above it.
inline void expect_params_match(const std::vector<float>& p, const Reference& ref,
                                const ParamLayout& lay) {
  for (int i = 0; i < kNumParamTensors; i++) {
    if (lay.sizes[i] == 0) continue;
    const size_t o = lay.offsets[i], n = lay.sizes[i];
    EXPECT_LT(nmse_d(p.data() + o, ref.final_params.data() + o, n), 1e-10) << ParamLayout::name(i);
  }
}

}  // namespace ratchet::testing

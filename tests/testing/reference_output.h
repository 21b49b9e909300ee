// The output file of the float64 PyTorch references (tests/reference/
// gpt2_reference.py, llama_reference.py; format in tests/reference/README.md)
// and the error measure the reference tests compare with.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/config.h"
#include "model/param_layout.h"

namespace ratchet::testing {

// The weights both references start from: larger than the init (std 0.1,
// norm gains 1 ± 0.1, non-zero biases where the arch has them), so every
// gradient is far from zero and every path is exercised; padded vocab rows
// (wte, and lmhead when untied) zero.
inline std::vector<float> reference_params(const GPTConfig& c) {
  ParamLayout lay(c);
  std::vector<float> p(lay.total);
  Rng rng(42);
  for (int i = 0; i < kNumParamTensors; i++)
    for (size_t j = 0; j < lay.sizes[i]; j++) {
      float n = 0.1f * rng.normal();
      p[lay.offsets[i] + j] = (i == P_LN1W || i == P_LN2W || i == P_LNFW) ? 1 + n : n;
    }
  for (int i : {P_WTE, P_LMHEAD})
    for (size_t j = (size_t)c.vocab_size * c.channels; j < lay.sizes[i]; j++)
      p[lay.offsets[i] + j] = 0;
  return p;
}

struct Reference {
  int B, T, Vp, P, steps;
  std::vector<double> logits, grads, losses, final_params;
  double loss;
};

inline Reference read_reference(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  int32_t h[6];
  f.read((char*)h, sizeof h);
  EXPECT_EQ(h[0], 20241122) << "bad reference output " << path;
  Reference r{h[1], h[2], h[3], h[4], h[5], {}, {}, {}, {}, 0};
  auto rd = [&](std::vector<double>& v, size_t n) {
    v.resize(n);
    f.read((char*)v.data(), n * 8);
  };
  rd(r.logits, (size_t)r.B * r.T * r.Vp);
  f.read((char*)&r.loss, 8);
  rd(r.grads, r.P);
  rd(r.losses, r.steps);
  rd(r.final_params, r.P);
  EXPECT_TRUE(f.good()) << "reference output " << path << " is short";
  return r;
}

// NMSE of a float tensor against a double reference.
inline double nmse_d(const float* a, const double* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

// Every parameter tensor's gradient g (flat, ParamLayout order) against the
// reference's. NMSE 1e-9 is a relative RMS error of 3e-5: far above FP32
// rounding through the network (~1e-6), far below a wrong term (~1e-2).
// Padded vocab rows (wte, and lmhead when untied) are outside the softmax:
// their gradient is exactly 0.
inline void expect_grads_match(const std::vector<float>& g, const Reference& ref,
                               const GPTConfig& c) {
  const ParamLayout lay(c);
  for (int i = 0; i < kNumParamTensors; i++) {
    if (lay.sizes[i] == 0) continue;
    const size_t o = lay.offsets[i], n = lay.sizes[i];
    EXPECT_LT(nmse_d(g.data() + o, ref.grads.data() + o, n), 1e-9) << ParamLayout::name(i);
  }
  for (int i : {P_WTE, P_LMHEAD})
    for (size_t j = (size_t)c.vocab_size * c.channels; j < lay.sizes[i]; j++)
      ASSERT_EQ(g[lay.offsets[i] + j], 0.0f) << ParamLayout::name(i) << " padded row " << j;
}

}  // namespace ratchet::testing

// One training step of a GPT under a recompute policy, for comparing policies
// on any backend: two micro-batches accumulated, then one AdamW update.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "model/recompute.h"
#include "optim/adamw.h"
#include "testing/tiny_model.h"

namespace ratchet::testing {

struct PolicyStep {
  std::vector<float> losses;  // one per micro-batch
  std::vector<float> grads;   // after both micro-batches (P)
  std::vector<float> params;  // after the AdamW step (P)
  size_t activation_bytes = 0;
};

inline PolicyStep run_policy_step(Backend& be, const GPTConfig& cfg, const Recompute& policy,
                                  int B, int T) {
  PolicyStep r;
  GPT model(cfg, be);
  model.set_recompute(policy);
  model.init_random(11);
  AdamW opt(be, model.layout(), AdamWConfig{});
  model.zero_grad();
  for (int mb = 0; mb < 2; mb++) {
    std::vector<int32_t> t = random_tokens((size_t)B * T + 1, cfg.vocab_size, 100 + mb);
    r.losses.push_back(model.forward_backward(t.data(), t.data() + 1, B, T, 0.5f));
  }
  r.grads.resize(model.num_params());
  model.get_grads(r.grads.data());
  opt.step(model.params(), model.grads(), 1e-3f);
  r.params.resize(model.num_params());
  model.get_params(r.params.data());
  r.activation_bytes = GPT::activation_bytes(cfg, B, T, be.storage_bytes(), policy);
  return r;
}

// Bitwise equality of two float vectors; "" when equal, else the first difference.
inline std::string first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return "sizes differ";
  for (size_t i = 0; i < a.size(); i++)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " +
             std::to_string(b[i]);
  return "";
}

// The policies the tests run: every kind, and blocks:2 (mixed kept and
// recomputed layers) — use with at least 3 layers.
inline std::vector<std::string> policies_to_test() {
  return {"gelu", "gelu+ln", "blocks", "blocks:2"};
}

// Every policy gives bitwise the losses, gradients and updated parameters of
// keeping everything, with less activation memory.
inline void expect_every_policy_bitwise_equal(Backend& be, const GPTConfig& cfg, int B, int T) {
  const PolicyStep ref = run_policy_step(be, cfg, Recompute(), B, T);
  for (const std::string& name : policies_to_test()) {
    const PolicyStep got = run_policy_step(be, cfg, parse_recompute(name), B, T);
    EXPECT_EQ(first_bit_difference(got.losses, ref.losses), "") << name << " losses";
    EXPECT_EQ(first_bit_difference(got.grads, ref.grads), "") << name << " gradients";
    EXPECT_EQ(first_bit_difference(got.params, ref.params), "") << name << " params";
    EXPECT_LT(got.activation_bytes, ref.activation_bytes) << name;
  }
}

}  // namespace ratchet::testing

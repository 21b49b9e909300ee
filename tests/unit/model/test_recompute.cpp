// Recompute policies (model/recompute.h) on the cpu backend: every policy
// gives bitwise the same losses, gradients and updated parameters as keeping
// everything, and saves exactly the activation bytes recompute.h states.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/gpt.h"
#include "model/recompute.h"
#include "testing/recompute_cases.h"
#include "testing/tiny_model.h"

using namespace ratchet;
using namespace ratchet::testing;

namespace {

size_t S(size_t elems, size_t sb) { return (elems * sb + 63) / 64 * 64; }
size_t F(size_t elems) { return (elems * 4 + 63) / 64 * 64; }

TEST(Recompute, NamesParseAndRoundTrip) {
  for (const char* n : {"none", "gelu", "gelu+ln", "blocks", "blocks:3"})
    EXPECT_EQ(parse_recompute(n).name(), n);
  EXPECT_EQ(parse_recompute("blocks:1"), parse_recompute("blocks"));
  EXPECT_EQ(parse_recompute("blocks:3").every, 3);
  for (const char* bad : {"most", "blocks:", "blocks:0", "blocks:x", "blocks:2x", "GELU"}) {
    try {
      parse_recompute(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--recompute"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(standard_recompute_policies().size(), 4u);
}

// Policy x shape: the bytes saved are the formulas of recompute.h, with every
// buffer size computed here independently (odd shapes: 64-byte rounding).
TEST(Recompute, SavesTheStatedActivationBytes) {
  for (AttentionImpl att : {AttentionImpl::flash, AttentionImpl::materialized}) {
  for (size_t sb : {4, 2}) {
    for (int L : {1, 2, 3, 5}) {
      for (auto [B, T] : {std::pair{3, 17}, std::pair{2, 16}}) {
        SCOPED_TRACE(attention_name(att));
        const GPTConfig c = tiny_config(L, 3, 36, 201, 32);
        const size_t BT = (size_t)B * T, C = 36, NH = 3;
        const size_t none = GPT::activation_bytes(c, B, T, sb, Recompute(), att);
        // what attention keeps: lse (B,NH,T) FP32, or the (B,NH,T,T) probabilities
        const size_t kept = att == AttentionImpl::materialized ? S((size_t)B * NH * T * T, sb)
                                                               : F((size_t)B * NH * T);
        // the block working set W: every per-layer buffer but r3
        const size_t W = 2 * S(BT * C, sb) + 4 * F(BT) + S(BT * 3 * C, sb) + S(BT * C, sb) +
                         kept + S(BT * C, sb) + 2 * S(BT * 4 * C, sb);
        // adding a layer adds exactly W + r3
        const GPTConfig c1 = tiny_config(L + 1, 3, 36, 201, 32);
        EXPECT_EQ(GPT::activation_bytes(c1, B, T, sb, Recompute(), att) - none,
                  W + S(BT * C, sb));

        auto acts = [&](const char* p) {
          return GPT::activation_bytes(c, B, T, sb, parse_recompute(p), att);
        };
        EXPECT_EQ(none - acts("gelu"), (L - 1) * S(BT * 4 * C, sb)) << "L " << L;
        EXPECT_EQ(none - acts("gelu+ln"),
                  (L - 1) * S(BT * 4 * C, sb) + (2 * L - 1) * S(BT * C, sb));
        for (int k : {1, 2, 3}) {
          const size_t n = (L + k - 1) / k;
          EXPECT_EQ(none - acts(("blocks:" + std::to_string(k)).c_str()), (n - 1) * W)
              << "L " << L << " k " << k;
        }
      }
    }
  }
  }
}

// The gradients do not depend on the policy: bitwise, with FP32 storage.
TEST(Recompute, CpuGradientsAreBitwiseTheSameUnderEveryPolicy) {
  auto be = make_cpu_backend(2);
  expect_every_policy_bitwise_equal(*be, tiny_config(3, 2, 16, 37, 16), 3, 16);
}

// Switching the policy of a live model re-lays out its activations.
TEST(Recompute, SwitchingPolicyKeepsGradients) {
  auto be = make_cpu_backend(2);
  const GPTConfig cfg = tiny_config(3, 2, 16, 37, 16);
  GPT m(cfg, *be);
  m.init_random(3);
  std::vector<int32_t> t = random_tokens(2 * 16 + 1, cfg.vocab_size, 5);
  std::vector<float> g0(m.num_params()), g1(m.num_params());
  m.zero_grad();
  const float l0 = m.forward_backward(t.data(), t.data() + 1, 2, 16, 1.0f);
  m.get_grads(g0.data());
  m.set_recompute(parse_recompute("blocks:2"));
  m.zero_grad();
  const float l1 = m.forward_backward(t.data(), t.data() + 1, 2, 16, 1.0f);
  m.get_grads(g1.data());
  EXPECT_EQ(l0, l1);
  EXPECT_EQ(first_bit_difference(g0, g1), "");
}

}  // namespace

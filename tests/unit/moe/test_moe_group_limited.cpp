// DeepSeek-V3's group-limited selection in the CPU router (src/moe/moe_ops.h:
// MoeShape::n_group / topk_group; transformers' DeepseekV3TopkRouter
// get_topk_indices): the group scores (sum of a group's two largest choice
// scores), the kept groups, the 0.0 mask, a choice the mask changes against
// plain top-k, the bias inside the group scores, the default's bits, and the
// shape checks naming the flag.
//
// The router runs on x = logits, gate = identity (C = E: an exact sgemm), with
// sigmoid scores, so every score is chosen here: sigmoid(logit(p)) is p to
// FP32 rounding, and the margins below (>= 0.05) are far above it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "moe/moe_ops.h"
#include "testing/expect_error.h"

namespace ratchet::moe {
namespace {

struct Routed {
  std::vector<float> probs, w;
  std::vector<int> idx;
};

// One token per row of p (N, E), scores p through sigmoid(logit(p)).
Routed route(const MoeShape& s0, const std::vector<float>& p, const float* bias = nullptr) {
  MoeShape s = s0;
  s.C = s.E;
  s.sigmoid = true;
  CpuBackend be(1);
  std::vector<float> x(p.size()), eye((size_t)s.E * s.E, 0.0f), logits(p.size());
  for (size_t i = 0; i < p.size(); i++) x[i] = (float)std::log(p[i] / (1.0 - p[i]));
  for (int e = 0; e < s.E; e++) eye[(size_t)e * s.E + e] = 1.0f;
  Routed r;
  r.probs.resize(p.size());
  r.idx.resize((size_t)s.N * s.k);
  r.w.resize((size_t)s.N * s.k);
  router_forward(be, s, x.data(), eye.data(), logits.data(), r.probs.data(), r.idx.data(),
                 r.w.data(), bias);
  return r;
}

MoeShape shape(int N, int E, int k, int n_group, int topk_group) {
  MoeShape s;
  s.N = N, s.C = E, s.E = E, s.k = k, s.I = 1;
  s.norm_topk_prob = true;
  s.n_group = n_group, s.topk_group = topk_group;
  return s;
}

// 8 experts in 4 groups of 2. Plain top 2 takes experts 0 (0.9) and 2 (0.6).
// Group scores: {0,1} 0.9 + 0.05 = 0.95, {2,3} 0.6 + 0.55 = 1.15,
// {4,5} 0.5 + 0.5 = 1.0, {6,7} 0.2 + 0.1 = 0.3. With 2 groups kept ({2,3}
// and {4,5}) the top 2 are 2 and 3: the best expert's group is dropped.
const std::vector<float> kRow = {0.9f, 0.05f, 0.6f, 0.55f, 0.5f, 0.5f, 0.2f, 0.1f};

TEST(MoeGroupLimited, GroupMaskChangesTheChoice) {
  const Routed plain = route(shape(1, 8, 2, 1, 1), kRow);
  EXPECT_EQ(plain.idx, (std::vector<int>{0, 2}));
  const Routed grouped = route(shape(1, 8, 2, 4, 2), kRow);
  EXPECT_EQ(grouped.idx, (std::vector<int>{2, 3}));
  // The weights are the chosen experts' scores, renormalised: 0.6 / 1.15, 0.55 / 1.15.
  EXPECT_NEAR(grouped.w[0], 0.6 / 1.15, 1e-6);  // FP32 rounding of sigmoid(logit(p)) and the division
  EXPECT_NEAR(grouped.w[1], 0.55 / 1.15, 1e-6);
  // Three groups kept ({0,1} back in): the plain choice again.
  EXPECT_EQ(route(shape(1, 8, 2, 4, 3), kRow).idx, (std::vector<int>{0, 2}));
  // One group kept, k = 2 = its size: both its experts, the better first.
  EXPECT_EQ(route(shape(1, 8, 2, 4, 1), kRow).idx, (std::vector<int>{2, 3}));
}

TEST(MoeGroupLimited, GroupScoreIsTheSumOfTheTopTwo) {
  MoeShape s = shape(1, 8, 2, 2, 1);  // groups {0..3}, {4..7}
  // Group 0's best single score is highest (0.95), but its top two sum to
  // 0.95 + 0.1 = 1.05 < group 1's 0.6 + 0.58 = 1.18: group 1 is kept.
  // (A max-score rule, DeepSeek's without a bias, would keep group 0.)
  const std::vector<float> c = {0.95f, 0.1f, 0.05f, 0.01f, 0.6f, 0.58f, 0.3f, 0.2f};
  unsigned char keep[2] = {9, 9};
  group_mask(s, c.data(), keep);
  EXPECT_EQ(keep[0], 0);
  EXPECT_EQ(keep[1], 1);
  // Equal group scores: the lower group index is kept.
  const std::vector<float> tie = {0.5f, 0.25f, 0.f, 0.f, 0.25f, 0.5f, 0.f, 0.f};
  group_mask(s, tie.data(), keep);
  EXPECT_EQ(keep[0], 1);
  EXPECT_EQ(keep[1], 0);
  // A group of one expert scores that expert.
  MoeShape one = shape(1, 4, 1, 4, 2);
  const std::vector<float> c1 = {0.1f, 0.7f, 0.3f, 0.5f};
  unsigned char k4[4];
  group_mask(one, c1.data(), k4);
  EXPECT_EQ(std::vector<int>(k4, k4 + 4), (std::vector<int>{0, 1, 0, 1}));
}

// The groups are scored on score + bias: a bias moves the kept group, and the
// weights stay the unbiased scores.
TEST(MoeGroupLimited, BiasEntersTheGroupScores) {
  // Without the bias {2,3} and {4,5} are kept (above); +0.3 on expert 0 makes
  // group {0,1} 1.25 and expert 0 1.2: groups {0,1} and {2,3}, top 2 = 0 and 2.
  const std::vector<float> bias = {0.3f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  const Routed r = route(shape(1, 8, 2, 4, 2), kRow, bias.data());
  EXPECT_EQ(r.idx, (std::vector<int>{0, 2}));
  EXPECT_NEAR(r.w[0], 0.9 / 1.5, 1e-6);  // unbiased 0.9 / (0.9 + 0.6); FP32 rounding
  // A bias of -0.3 on group {4,5} drops it for {0,1} (0.95 > 0.4): top 2 = 0, 2.
  const std::vector<float> down = {0.f, 0.f, 0.f, 0.f, -0.3f, -0.3f, 0.f, 0.f};
  EXPECT_EQ(route(shape(1, 8, 2, 4, 2), kRow, down.data()).idx, (std::vector<int>{0, 2}));
}

// HF masks the dropped groups' choice scores to 0.0, not -inf: a kept expert
// whose biased score is below 0 loses to a dropped one (expert 0 of the lowest
// dropped group index). ratchet follows transformers here (moe_ops.h).
TEST(MoeGroupLimited, DroppedGroupsScoreZeroAsInTransformers) {
  const std::vector<float> p = {0.3f, 0.2f, 0.1f, 0.05f};
  const std::vector<float> bias = {0.6f, -0.5f, 0.f, 0.f};
  // Group scores {0,1}: 0.9 + (-0.3) = 0.6; {2,3}: 0.15: {0,1} kept. Choice
  // scores: 0.9, -0.3, 0, 0: top 2 = 0, then 2 (a masked 0.0 beats -0.3).
  const Routed r = route(shape(1, 4, 2, 2, 1), p, bias.data());
  EXPECT_EQ(r.idx, (std::vector<int>{0, 2}));
}

// n_group 1 is the plain router, bit for bit, and n_group = topk_group keeps
// every group: the same choice as plain top-k.
TEST(MoeGroupLimited, OneGroupOrEveryGroupIsPlainTopK) {
  std::vector<float> p;
  for (int n = 0; n < 16; n++)
    for (int e = 0; e < 8; e++) p.push_back(0.05f + 0.9f * (float)((n * 5 + e * 3) % 17) / 17.0f);
  const Routed plain = route(shape(16, 8, 3, 1, 1), p);
  const Routed all = route(shape(16, 8, 3, 4, 4), p);
  EXPECT_EQ(all.idx, plain.idx);
  EXPECT_EQ(all.w, plain.w);
}

TEST(MoeGroupLimited, BadGroupShapesAreRefusedNamingTheFlag) {
  using ratchet::testing::expect_error;
  expect_error([] { check_shape(shape(1, 8, 2, 3, 1)); },
               {"n_group (--moe-n-group) is 3 with 8 experts", "divide num_experts"});
  expect_error([] { check_shape(shape(1, 8, 2, 0, 1)); }, {"n_group (--moe-n-group) is 0"});
  expect_error([] { check_shape(shape(1, 8, 2, 4, 5)); },
               {"topk_group (--moe-topk-group) is 5 with n_group 4", "between 1 and n_group"});
  expect_error([] { check_shape(shape(1, 8, 2, 4, 0)); }, {"topk_group (--moe-topk-group) is 0"});
  expect_error([] { check_shape(shape(1, 8, 3, 4, 1)); },
               {"top-k) 3 exceeds the 1 kept groups x 2 experts", "--moe-topk-group"});
  check_shape(shape(1, 8, 2, 4, 1));  // k = topk_group * E / n_group: accepted
}

}  // namespace
}  // namespace ratchet::moe

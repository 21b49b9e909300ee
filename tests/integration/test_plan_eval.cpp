// `ratchet plan --eval-every N --eval-tokens X` (issue 31): the evaluation's
// predicted time and its share of the time between evaluations, against the
// FLOP ratio computed here by hand (forward = 1/3 of a training token's FLOPs).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/test_util.h"

using namespace ratchet::testing;
using nlohmann::json;

TEST(PlanEval, ShareIsTheForwardFlopRatio) {
  // B=4 T=64: 256 tokens per step; 768 eval tokens at a third of the FLOPs
  // weigh 256 training tokens: one step's worth, against 10 steps -> 1/11.
  auto r = run_ratchet("plan --model d4 --batch-size 4 --seq-len 64 --steps 100 --device cpu "
                       "--eval-every 10 --eval-tokens 768 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(r.output);
  ASSERT_TRUE(j.contains("evaluation")) << r.output;
  EXPECT_NEAR(j["evaluation"]["share"].get<double>(), 1.0 / 11, 1e-12);
  EXPECT_NEAR(j["evaluation"]["seconds"].get<double>(), j["time"]["compute_s"].get<double>(), 1e-12);
  // default tokens: --eval-batches x B x T (the val loss's), 20 x 256
  r = run_ratchet("plan --model d4 --batch-size 4 --seq-len 64 --steps 100 --device cpu --eval-every 10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("evaluation"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("5120 tokens"), std::string::npos) << r.output;
  // without --eval-every: no evaluation line
  r = run_ratchet("plan --model d4 --batch-size 4 --seq-len 64 --steps 100 --device cpu --json");
  EXPECT_FALSE(json::parse(r.output).contains("evaluation"));
  for (const char* bad : {"--eval-every 0", "--eval-tokens -5", "--eval-batches 0"}) {
    r = run_ratchet(std::string("plan --model d4 --eval-every 10 ") + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << r.output;
  }
}

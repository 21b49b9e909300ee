// What a checkpoint records about reproducibility, and the resume warning
// when bit-identity is lost (src/train/reproducibility.h). Through the binary:
// tests/integration/test_resume.cpp (DeterministicSettingIsRecordedAndAResumeThatChangesItWarns).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "train/reproducibility.h"

namespace {

using namespace ratchet;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Reproducibility, OnlyCudnnWithDeterministicOffIsNotBitwise) {
  for (AttentionImpl a : {AttentionImpl::flash, AttentionImpl::cudnn, AttentionImpl::materialized})
    EXPECT_EQ(reproducibility_settings(a, true).at("reproducible"), "bitwise");
  EXPECT_EQ(reproducibility_settings(AttentionImpl::flash, false).at("reproducible"), "bitwise");
  const auto s = reproducibility_settings(AttentionImpl::cudnn, false);
  EXPECT_TRUE(has(s.at("reproducible"), "no (cuDNN attention with --deterministic off"));
  EXPECT_EQ(s.at("deterministic"), "off");
  EXPECT_EQ(s.at("attention"), "cudnn");
}

TEST(Reproducibility, ResumeWarnsWhenBitIdentityIsLost) {
  const auto det = reproducibility_settings(AttentionImpl::cudnn, true);
  const auto fast = reproducibility_settings(AttentionImpl::cudnn, false);
  const auto flash = reproducibility_settings(AttentionImpl::flash, true);
  EXPECT_EQ(resume_bit_identity_warning(det, det), "");
  EXPECT_EQ(resume_bit_identity_warning(flash, flash), "");
  // The saved run was nondeterministic (and the setting changed).
  std::string w = resume_bit_identity_warning(fast, det);
  EXPECT_TRUE(has(w, "this resume will not be bit-identical to an uninterrupted run")) << w;
  EXPECT_TRUE(has(w, "written by a run that was not bitwise reproducible")) << w;
  EXPECT_TRUE(has(w, "--deterministic changed from off to on")) << w;
  // This run is nondeterministic, even with the saved setting.
  w = resume_bit_identity_warning(fast, fast);
  EXPECT_TRUE(has(w, "this run is not bitwise reproducible")) << w;
  // Another attention computes other bits.
  w = resume_bit_identity_warning(flash, det);
  EXPECT_TRUE(has(w, "--attention changed from flash to cudnn")) << w;
  // A changed --deterministic is named even where it changes no bits (flash
  // has no nondeterministic path): the run was asked to be something else.
  w = resume_bit_identity_warning(reproducibility_settings(AttentionImpl::flash, false), flash);
  EXPECT_TRUE(has(w, "--deterministic changed from off to on")) << w;
  // Checkpoints from before these settings: nothing to compare, no warning.
  EXPECT_EQ(resume_bit_identity_warning({{"lr", "0.001"}}, fast).find("checkpoint was"),
            std::string::npos);
}

// The gradient's order: the recorded expressions (gradient_sum_tree) decide
// where both runs have one; the texts only for checkpoints without them.
TEST(Reproducibility, ResumeComparesTheGradientSumOrdersThemselves) {
  std::map<std::string, std::string> two = {{"gradient_sum", "2 ranks (a+b)"},
                                            {"gradient_sum_tree", "(g0+g1)"}};
  std::map<std::string, std::string> one = {
      {"gradient_sum", "for each micro-batch, then the 2 micro-batch sums added in order"},
      {"gradient_sum_tree", "(g0+g1)"}};
  EXPECT_EQ(resume_bit_identity_warning(two, one), "");
  EXPECT_EQ(resume_bit_identity_warning(one, two), "");
  auto acc = one;
  acc["gradient_sum"] = "2 micro-batches accumulated per rank";
  acc["gradient_sum_tree"] = "acc(g0,g1)";
  std::string w = resume_bit_identity_warning(two, acc);
  EXPECT_TRUE(has(w, "the gradient is summed in another order: 2 ranks (a+b) when saved, 2 "
                     "micro-batches accumulated per rank now")) << w;
  // A checkpoint from before the expressions: the texts are compared.
  w = resume_bit_identity_warning({{"gradient_sum", "2 ranks (a+b)"}}, one);
  EXPECT_TRUE(has(w, "the gradient is summed in another order")) << w;
  EXPECT_EQ(resume_bit_identity_warning({{"gradient_sum", "2 ranks (a+b)"}}, two), "");
}

// --expert-parallel sums the experts' gradients in another order: a change
// warns; absent (a dense model, an older checkpoint) reads as 1.
TEST(Reproducibility, ResumeWarnsWhenTheExpertParallelSizeChanges) {
  const std::map<std::string, std::string> one = {{"expert_parallel", "1"}},
                                           two = {{"expert_parallel", "2"}}, none;
  EXPECT_EQ(resume_bit_identity_warning(two, two), "");
  EXPECT_EQ(resume_bit_identity_warning(none, one), "");
  EXPECT_EQ(resume_bit_identity_warning(one, none), "");
  EXPECT_TRUE(has(resume_bit_identity_warning(two, one), "--expert-parallel changed from 2 to 1"));
  EXPECT_TRUE(has(resume_bit_identity_warning(none, two), "--expert-parallel changed from 1 to 2"));
}

}  // namespace
